import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The hooks through which the runtime reports to the wake-up recorder.
///
/// Each hook in the runtime is one call here, and each starts with one relaxed atomic load
/// of the switch: while diagnostics are off that load is the whole cost (the timer churn
/// benchmark measures it). The switch is turned on only while `recorder` has a trace.
enum Diagnostics {
    static let switchedOn = Atomic<Bool>(false)
    static let recorder = WakeupRecorder()
    private static let timerSerials = Atomic<UInt64>(0)

    /// A number for a timer source, unique in the process (addresses are reused).
    static func nextTimerSerial() -> UInt64 {
        timerSerials.wrappingAdd(1, ordering: .relaxed).newValue
    }

    @inline(__always)
    static var isOn: Bool { switchedOn.load(ordering: .relaxed) }

    // MARK: Reactor

    /// Before the poller enters libevent's loop; the result goes to `pollDidEnd`.
    @inline(__always)
    static func pollWillStart() -> Bool {
        guard isOn else { return false }
        recorder.pollWillStart()
        return true
    }

    /// After libevent's loop returned `result` (1: it had nothing to wait for).
    @inline(__always)
    static func pollDidEnd(_ watched: Bool, result: Int32) {
        guard watched else { return }
        recorder.pollDidEnd(waited: result == 0)
    }

    /// In the reactor's timer callback (on the poller).
    @inline(__always)
    static func reactorTimerExpired() {
        guard isOn else { return }
        recorder.reactorTimerExpired()
    }

    /// In a descriptor callback (on the poller).
    @inline(__always)
    static func descriptorEventArrived() {
        guard isOn else { return }
        recorder.descriptorEventArrived()
    }

    /// Before the reactor's events change: from a thread other than the one in libevent's
    /// loop, libevent wakes that thread (through its notification descriptor) to look at
    /// the change. The recorder knows the looping thread from `pollWillStart`.
    @inline(__always)
    static func reactorWillChange() {
        guard isOn else { return }
        recorder.reactorWillChange(on: pthread_self())
    }

    // MARK: Timers

    /// The timer engine is about to perform `timer` (one of its entries), whose window
    /// [`deadline`, `deadline + leeway`] it read under its lock, at `now`. A timer that is
    /// not a `DiagnosedTimer` is the runtime's own.
    @inline(__always)
    static func timerWillFire(_ timer: AnyObject, deadline: UInt64, leeway: UInt64, now: UInt64) {
        guard isOn else { return }
        recordFire(timer, deadline: deadline, leeway: leeway, now: now)
    }

    private static func recordFire(_ timer: AnyObject, deadline: UInt64, leeway: UInt64, now: UInt64) {
        guard let diagnosed = timer as? DiagnosedTimer else {
            let housekeeping = TimerFireOrigin(identity: "lull.housekeeping", queue: "(reactor)", qos: .default, instance: 0)
            recorder.timerFired(housekeeping, deadline: deadline, leeway: leeway, fires: 1, now: now)
            return
        }
        let (origin, interval) = diagnosed.diagnosticsOrigin()
        var fires: UInt64 = 1
        // A late repeating timer delivers the fires it missed with this one.
        if let interval, interval > 0, now > deadline { fires += (now - deadline) / interval }
        recorder.timerFired(origin, deadline: deadline, leeway: leeway, fires: fires, now: now)
    }

    /// What an `asyncAfter` entry records about itself (only while diagnostics are on).
    @inline(__always)
    static func delayedOrigin(_ site: TimerSite) -> DelayedWorkOrigin? {
        guard isOn else { return nil }
        return DelayedWorkOrigin(site: site)
    }

    // MARK: CPU time

    /// The calling thread's CPU clock if diagnostics are on, else 0 (nothing to charge).
    @inline(__always)
    static func cpuClock() -> UInt64 {
        guard isOn else { return 0 }
        return threadCPUNanoseconds()
    }

    /// Charges the CPU time since `start` (from `cpuClock`) to `qos`.
    @inline(__always)
    static func chargeCPU(since start: UInt64, to qos: QoS) {
        guard start != 0 else { return }
        let now = threadCPUNanoseconds()
        recorder.addCPU(now > start ? now - start : 0, qos: qos.qosClass == .unspecified ? .default : qos.qosClass)
    }

    /// The thread's CPU clock, never 0 (which means "off" to `chargeCPU`).
    static func threadCPUNanoseconds() -> UInt64 {
        max(1, SystemClock.threadCPUNanoseconds())
    }
}

/// A timer that names its fires in wake-up diagnostics: a timer source or an `asyncAfter`
/// block (the timer engine's other entries are the runtime's own).
protocol DiagnosedTimer: AnyObject {
    /// Who its fires belong to, and its interval (nil: a one-shot), which tells how many
    /// fires a late fire stands for. Called only while diagnostics are on.
    func diagnosticsOrigin() -> (TimerFireOrigin, interval: UInt64?)
}

/// Where an `asyncAfter` block was scheduled from, kept by its timer entry (boxed: an
/// entry pays one pointer for it, nil while diagnostics are off).
final class DelayedWorkOrigin: Sendable {
    let site: TimerSite

    init(site: TimerSite) {
        self.site = site
    }
}
