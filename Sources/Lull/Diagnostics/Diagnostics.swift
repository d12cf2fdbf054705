import CLullShims
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
        guard watched, result == 0 else { return }
        recorder.pollDidEnd()
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

    /// Before the reactor's events change: from a thread other than the poller's, libevent
    /// wakes the poller (through its notification descriptor) to look at the change.
    @inline(__always)
    static func reactorWillChange() {
        guard isOn else { return }
        let poller = Runtime.shared.pool.pollerThreadID.load(ordering: .relaxed)
        if poller != 0 && poller != lull_gettid() { recorder.crossThreadNotification() }
    }

    // MARK: Timers

    /// The timer engine is about to perform `entry`, due at `now`.
    @inline(__always)
    static func timerWillFire(_ entry: TimerEntry, deadline: UInt64, leeway: UInt64, now: UInt64) {
        guard isOn else { return }
        recordFire(entry, deadline: deadline, leeway: leeway, now: now)
    }

    /// `deadline` and `leeway` are the fired window's, as the engine read them under its lock.
    private static func recordFire(_ entry: TimerEntry, deadline: UInt64, leeway: UInt64, now: UInt64) {
        let origin: TimerFireOrigin
        var fires: UInt64 = 1
        switch entry {
        case let delayed as DelayedEntry:
            let qos = delayed.job.qos.qosClass != .unspecified ? delayed.job.qos.qosClass : delayed.queue.qos.qosClass
            origin = TimerFireOrigin(identity: delayed.origin?.site.description ?? "asyncAfter (scheduled before recording)",
                                     queue: delayed.queue.label, qos: qos == .unspecified ? .default : qos, instance: 0)
        case let timer as TimerCore:
            let (source, interval) = timer.diagnosticsOrigin()
            origin = source
            if let interval, interval > 0, now > deadline { fires += (now - deadline) / interval }
        default:
            origin = TimerFireOrigin(identity: "lull.housekeeping", queue: "(reactor)", qos: .default, instance: 0)
        }
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

/// Where an `asyncAfter` block was scheduled from, kept by its timer entry (boxed: an
/// entry pays one pointer for it, nil while diagnostics are off).
final class DelayedWorkOrigin: Sendable {
    let site: TimerSite

    init(site: TimerSite) {
        self.site = site
    }
}
