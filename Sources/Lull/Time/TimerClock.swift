import Synchronization

/// The clocks the timer engine reads: the system's in a program, a `ManualClock` in a test
/// that drives time itself (as tokio's paused time or NIO's embedded loop do).
protocol TimerClock: Sendable {
    /// CLOCK_MONOTONIC, ns.
    func monotonicNanoseconds() -> UInt64
    /// CLOCK_REALTIME, ns since the epoch.
    func realtimeNanoseconds() -> UInt64
}

/// The kernel's clocks (`SystemClock`).
struct SystemTimerClock: TimerClock {
    func monotonicNanoseconds() -> UInt64 { SystemClock.monotonicNanoseconds() }
    func realtimeNanoseconds() -> UInt64 { SystemClock.realtimeNanoseconds() }
}

/// A clock that moves only when told to: both readings start where given and advance
/// together, except that `setRealtime` moves the wall clock alone (as setting the system
/// clock does).
final class ManualClock: TimerClock {
    private let readings: Mutex<(monotonic: UInt64, realtime: UInt64)>

    init(monotonic: UInt64 = 1_000_000_000, realtime: UInt64 = 1_700_000_000_000_000_000) {
        readings = Mutex((monotonic, realtime))
    }

    func monotonicNanoseconds() -> UInt64 { readings.locked { $0.monotonic } }
    func realtimeNanoseconds() -> UInt64 { readings.locked { $0.realtime } }

    /// Moves both clocks forward by `nanoseconds`.
    func advance(by nanoseconds: UInt64) {
        readings.locked {
            $0.monotonic += nanoseconds
            $0.realtime += nanoseconds
        }
    }

    /// Sets the wall clock (the monotonic clock does not move).
    func setRealtime(_ nanoseconds: UInt64) {
        readings.locked { $0.realtime = nanoseconds }
    }
}
