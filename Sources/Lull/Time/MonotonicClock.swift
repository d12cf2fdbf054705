#if canImport(Glibc)
import Glibc
#endif

/// Reads the kernel clocks that Lull's time types are defined on.
///
/// `clock_gettime` cannot fail for these clock ids on Linux (they exist since 2.6 and the
/// argument is a valid pointer), so a failure is a broken system and stops the program.
enum SystemClock {
    static func monotonicNanoseconds() -> UInt64 {
        read(CLOCK_MONOTONIC)
    }

    static func realtimeNanoseconds() -> UInt64 {
        read(CLOCK_REALTIME)
    }

    private static func read(_ clock: clockid_t) -> UInt64 {
        var now = timespec()
        guard clock_gettime(clock, &now) == 0 else {
            fatalError("Lull: clock_gettime(\(clock)) failed with errno \(errno)")
        }
        return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
    }
}

extension Duration {
    /// The duration in nanoseconds, saturated to the range of `Int64` (negative durations
    /// stay negative). Lull's clocks are 64-bit nanosecond counters, so nothing finer or
    /// longer can be represented.
    var saturatingNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (secondsInNanos, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (total, overflow2) = secondsInNanos.addingReportingOverflow(attoseconds / 1_000_000_000)
        if overflow2 { return seconds < 0 ? .min : .max }
        return total
    }
}

extension UInt64 {
    /// `self + delta`, clamped to `0...UInt64.max`: time arithmetic never wraps.
    func saturatingAdding(nanoseconds delta: Int64) -> UInt64 {
        if delta >= 0 {
            let (sum, overflow) = addingReportingOverflow(UInt64(delta))
            return overflow ? .max : sum
        }
        let magnitude = delta.magnitude
        return magnitude > self ? 0 : self - magnitude
    }
}
