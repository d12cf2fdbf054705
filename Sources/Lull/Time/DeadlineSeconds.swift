/// Deadlines moved by a number of seconds, as Dispatch writes them: `.now() + 1.5`.
///
/// The seconds are rounded to the nanosecond and the result saturates like the `Duration`
/// operators (at `distantFuture` above, at zero below). A NaN or infinite delay is no time
/// Lull can wait for: `+ .nan`, `+ .infinity` and `- (-.infinity)` give `distantFuture`
/// (Dispatch clamps them to "forever" too), `- .infinity` and `+ (-.infinity)` give zero.
extension Deadline {
    /// `lhs` later by `seconds` (earlier when negative).
    public static func + (lhs: Deadline, seconds: Double) -> Deadline {
        if lhs == .distantFuture { return .distantFuture }
        guard let delta = SecondsDelta.nanoseconds(seconds) else { return .distantFuture }
        return Deadline(uptimeNanoseconds: lhs.uptimeNanoseconds.saturatingAdding(nanoseconds: delta))
    }

    /// `lhs` earlier by `seconds` (later when negative).
    public static func - (lhs: Deadline, seconds: Double) -> Deadline {
        lhs + (seconds.isNaN ? seconds : -seconds)
    }
}

extension WallDeadline {
    /// `lhs` later by `seconds` (earlier when negative).
    public static func + (lhs: WallDeadline, seconds: Double) -> WallDeadline {
        if lhs == .distantFuture { return .distantFuture }
        guard let delta = SecondsDelta.nanoseconds(seconds) else { return .distantFuture }
        return WallDeadline(nanosecondsSinceEpoch: lhs.nanosecondsSinceEpoch.saturatingAdding(nanoseconds: delta))
    }

    /// `lhs` earlier by `seconds` (later when negative).
    public static func - (lhs: WallDeadline, seconds: Double) -> WallDeadline {
        lhs + (seconds.isNaN ? seconds : -seconds)
    }
}

enum SecondsDelta {
    /// `seconds` in whole nanoseconds, clamped far beyond any clock's range; nil for NaN
    /// and +infinity (never).
    static func nanoseconds(_ seconds: Double) -> Int128? {
        if seconds.isNaN || seconds == .infinity { return nil }
        let nanoseconds = (seconds * 1_000_000_000).rounded()
        // ±2^100 ns is beyond any UInt64 instant; clamping first keeps the conversion exact.
        let limit = 0x1p100
        return Int128(max(-limit, min(limit, nanoseconds)))
    }
}
