/// A point in time on the monotonic clock (`CLOCK_MONOTONIC`), in nanoseconds.
///
/// The monotonic clock does not follow changes of the system date; use ``WallDeadline``
/// for that. Arithmetic saturates: adding a huge duration gives ``distantFuture``, and
/// nothing wraps around below zero.
public struct Deadline: Comparable, Hashable, Sendable {
    /// Nanoseconds on `CLOCK_MONOTONIC`.
    public let uptimeNanoseconds: UInt64

    /// The current time on the monotonic clock.
    public static func now() -> Deadline {
        Deadline(uptimeNanoseconds: SystemClock.monotonicNanoseconds())
    }

    /// A deadline that is never reached.
    public static let distantFuture = Deadline(uptimeNanoseconds: .max)

    /// The instant `uptimeNanoseconds` on `CLOCK_MONOTONIC`.
    public init(uptimeNanoseconds: UInt64) {
        self.uptimeNanoseconds = uptimeNanoseconds
    }

    /// Whether `lhs` comes before `rhs`.
    public static func < (lhs: Deadline, rhs: Deadline) -> Bool {
        lhs.uptimeNanoseconds < rhs.uptimeNanoseconds
    }

    /// `lhs` later by `rhs`, saturating at ``distantFuture``.
    public static func + (lhs: Deadline, rhs: Duration) -> Deadline {
        if lhs == .distantFuture { return .distantFuture }
        return Deadline(uptimeNanoseconds: lhs.uptimeNanoseconds.saturatingAdding(nanoseconds: rhs.nanoseconds128))
    }

    /// `lhs` earlier by `rhs`, saturating at zero.
    public static func - (lhs: Deadline, rhs: Duration) -> Deadline {
        if lhs == .distantFuture { return .distantFuture }
        return Deadline(uptimeNanoseconds: lhs.uptimeNanoseconds.saturatingAdding(nanoseconds: -rhs.nanoseconds128))
    }
}
