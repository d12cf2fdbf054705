/// A point in time on the wall clock (`CLOCK_REALTIME`), in nanoseconds since the epoch.
///
/// Timers scheduled on a wall deadline follow changes of the system clock.
public struct WallDeadline: Comparable, Hashable, Sendable {
    /// Nanoseconds since 1970-01-01 00:00:00 UTC on `CLOCK_REALTIME`.
    let nanosecondsSinceEpoch: UInt64

    /// The current time on the wall clock.
    public static func now() -> WallDeadline {
        WallDeadline(nanosecondsSinceEpoch: SystemClock.realtimeNanoseconds())
    }

    /// A wall deadline that is never reached.
    public static let distantFuture = WallDeadline(nanosecondsSinceEpoch: .max)

    init(nanosecondsSinceEpoch: UInt64) {
        self.nanosecondsSinceEpoch = nanosecondsSinceEpoch
    }

    /// Whether `lhs` comes before `rhs`.
    public static func < (lhs: WallDeadline, rhs: WallDeadline) -> Bool {
        lhs.nanosecondsSinceEpoch < rhs.nanosecondsSinceEpoch
    }

    /// `lhs` later by `rhs`, saturating at ``distantFuture``.
    public static func + (lhs: WallDeadline, rhs: Duration) -> WallDeadline {
        if lhs == .distantFuture { return .distantFuture }
        return WallDeadline(nanosecondsSinceEpoch: lhs.nanosecondsSinceEpoch.saturatingAdding(nanoseconds: rhs.nanoseconds128))
    }
}

/// The result of a wait with a timeout.
public enum WaitResult: Sendable {
    /// What was waited for happened before the timeout.
    case success
    /// The timeout passed first.
    case timedOut
}
