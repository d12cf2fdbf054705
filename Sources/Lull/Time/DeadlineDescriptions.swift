#if canImport(Glibc)
import Glibc
#endif

/// How deadlines print: readable in logs (`description`) and in the debugger, where the
/// distance from now is shown too (`debugDescription`, which reads the clock).
///
///     Deadline: "uptime 12.345678901 s"    debug: "Deadline(uptime 12.345678901 s, in 1.500000000 s)"
///     WallDeadline: "2001-09-09T01:46:40.123456789Z"
///                                          debug: "WallDeadline(2001-09-09T01:46:40.123456789Z, 0.250000000 s ago)"
///
/// `distantFuture` prints as `distantFuture`.
extension Deadline: CustomStringConvertible, CustomDebugStringConvertible {
    /// The instant as seconds since boot on the monotonic clock, to the nanosecond.
    public var description: String {
        if self == .distantFuture { return "distantFuture" }
        return "uptime \(TimeText.seconds(uptimeNanoseconds)) s"
    }

    /// The description and how far the instant is from now.
    public var debugDescription: String {
        if self == .distantFuture { return "Deadline(distantFuture)" }
        return "Deadline(\(description), \(TimeText.distance(from: SystemClock.monotonicNanoseconds(), to: uptimeNanoseconds)))"
    }
}

extension WallDeadline: CustomStringConvertible, CustomDebugStringConvertible {
    /// The instant in UTC, ISO 8601 with nanoseconds: `2001-09-09T01:46:40.123456789Z`.
    public var description: String {
        if self == .distantFuture { return "distantFuture" }
        return TimeText.utc(nanosecondsSinceEpoch)
    }

    /// The description and how far the instant is from now.
    public var debugDescription: String {
        if self == .distantFuture { return "WallDeadline(distantFuture)" }
        return "WallDeadline(\(description), \(TimeText.distance(from: SystemClock.realtimeNanoseconds(), to: nanosecondsSinceEpoch)))"
    }
}

/// Formatting of nanosecond counts, without Foundation.
enum TimeText {
    /// `12.000000345`: whole seconds, a point and nine digits.
    static func seconds(_ nanoseconds: UInt64) -> String {
        "\(nanoseconds / 1_000_000_000).\(nineDigits(nanoseconds % 1_000_000_000))"
    }

    /// `in 1.500000000 s`, `0.250000000 s ago` or `now`.
    static func distance(from now: UInt64, to instant: UInt64) -> String {
        if instant == now { return "now" }
        return instant > now ? "in \(seconds(instant - now)) s" : "\(seconds(now - instant)) s ago"
    }

    /// ISO 8601 in UTC with nanoseconds.
    static func utc(_ nanosecondsSinceEpoch: UInt64) -> String {
        var seconds = time_t(nanosecondsSinceEpoch / 1_000_000_000)
        var parts = tm()
        guard gmtime_r(&seconds, &parts) != nil else {
            return "\(TimeText.seconds(nanosecondsSinceEpoch)) s since 1970"
        }
        let date = "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))"
        let time = "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))"
        return "\(date)T\(time).\(nineDigits(nanosecondsSinceEpoch % 1_000_000_000))Z"
    }

    private static func two(_ value: Int32) -> String {
        value < 10 ? "0\(value)" : "\(value)"
    }

    private static func nineDigits(_ value: UInt64) -> String {
        let digits = "\(value)"
        return String(repeating: "0", count: max(0, 9 - digits.count)) + digits
    }
}
