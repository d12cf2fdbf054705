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

    /// CLOCK_MONOTONIC_COARSE: cheaper, with the resolution of the kernel's tick.
    static func coarseMonotonicNanoseconds() -> UInt64 {
        read(CLOCK_MONOTONIC_COARSE)
    }

    /// CPU time the calling thread has used: a system call (this clock has no vDSO fast
    /// path), for occasional checks only.
    static func threadCPUNanoseconds() -> UInt64 {
        read(CLOCK_THREAD_CPUTIME_ID)
    }

    private static func read(_ clock: clockid_t) -> UInt64 {
        var now = timespec()
        // Called directly, not through `Syscall`: every timer operation reads the clock, and
        // clock_gettime (a vDSO call) is never interrupted; its only failure is a clock the
        // kernel lacks.
        guard clock_gettime(clock, &now) == 0 else {
            lullFatal("cannot read clock \(clock)", error: SystemError("clock_gettime", code: errno),
                      remedy: "Lull needs the kernel's CLOCK_MONOTONIC, CLOCK_MONOTONIC_COARSE and CLOCK_THREAD_CPUTIME_ID")
        }
        return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
    }
}

extension Duration {
    /// The duration in nanoseconds, exact in 128 bits (a `Duration` may exceed what
    /// `components` can express without trapping).
    var nanoseconds128: Int128 {
        attoseconds / 1_000_000_000
    }
}

extension UInt64 {
    /// `self + delta`, clamped to `0...UInt64.max`: time arithmetic never wraps.
    func saturatingAdding(nanoseconds delta: Int128) -> UInt64 {
        let sum = Int128(self) + delta
        if sum <= 0 { return 0 }
        if sum >= Int128(UInt64.max) { return .max }
        return UInt64(sum)
    }

}
