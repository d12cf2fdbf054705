import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What a QoS class means for Linux's energy controls, beyond the nice value and the I/O
/// class (`ThreadPriority`): the scheduling policy and the utilization clamps. (Each class's
/// timer slack is set by the thread itself, in the execution layer: `prctl` reaches only
/// the calling thread.)
///
/// | class | policy | util_min | util_max |
/// |---|---|---|---|
/// | user-interactive | SCHED_OTHER | 512 | 1024 |
/// | user-initiated, default | SCHED_OTHER | 0 | 1024 |
/// | utility | SCHED_OTHER | 0 | 512 |
/// | background | SCHED_IDLE | 0 | 256 |
///
/// Background runs under SCHED_IDLE because nice +15 still takes about 3% of a core from a
/// nice-0 hog (load weight 36 against 1024); SCHED_IDLE's weight is 3, about 0.3%.
/// Clamps are on a 0...1024 scale of the biggest CPU's capacity; schedutil and energy-aware
/// placement read them: a background ceiling of a quarter keeps such work on the small cores
/// at low frequencies, utility's half leaves it mid-range, and user-interactive's floor of
/// half starts a burst at a middle frequency instead of ramping up from idle (a floor of
/// 1024 would hold the top frequency for every interactive thread).
///
/// The policy is applied where the nice value is (`ThreadPriorityControl`): when a worker
/// starts, and whenever its own QoS or an override moves its class. A move out of SCHED_IDLE
/// needs the right `EnergyCapabilities.schedIdleReversible` checks; without it threads are
/// `pinned`: background workers enter SCHED_IDLE when they start and no thread moves in or
/// out afterwards (a wait on background work does not lift it, as it does not lift its nice
/// value in such a process).
enum EnergyPolicy {
    /// A thread's requested utilization clamps.
    struct UtilClamp: Equatable, Sendable, CustomStringConvertible {
        let min: UInt32
        let max: UInt32

        /// The kernel's default request: no clamp.
        static let unclamped = UtilClamp(min: 0, max: 1024)

        var description: String { "util_min \(min), util_max \(max)" }
    }

    static func utilClamp(for qosClass: QoS.QoSClass) -> UtilClamp {
        switch qosClass {
        case .background: UtilClamp(min: 0, max: 256)
        case .utility: UtilClamp(min: 0, max: 512)
        case .unspecified, .default, .userInitiated: .unclamped
        case .userInteractive: UtilClamp(min: 512, max: 1024)
        }
    }

    /// How SCHED_IDLE is used.
    enum IdleMode: UInt8, Sendable {
        /// Never (the opt-out): background threads run under SCHED_OTHER at their nice value.
        case off
        /// Background workers enter it when they start; no thread moves in or out later.
        case pinned
        /// Threads enter and leave it with their class (own QoS and overrides).
        case movable
    }

    private static let mode = Atomic<UInt8>({
        let capabilities = EnergyCapabilities.current
        let mode: IdleMode = !capabilities.schedIdleWanted ? .off : capabilities.schedIdleReversible ? .movable : .pinned
        return mode.rawValue
    }())

    /// The mode in force. Internal code (tests) may switch it.
    static var idleMode: IdleMode {
        get { IdleMode(rawValue: mode.load(ordering: .relaxed)) ?? .off }
        set { mode.store(newValue.rawValue, ordering: .relaxed) }
    }

    private static let clampsWork = Atomic<Bool>(EnergyCapabilities.current.utilClampFailure == nil)

    /// Utilization clamps are set: the kernel has them, and no request has failed.
    static var utilClampUsable: Bool { clampsWork.load(ordering: .relaxed) }

    /// Puts `tid` under SCHED_IDLE or back under SCHED_OTHER; true when that is in force.
    ///
    /// A refused move out of SCHED_IDLE (EPERM: a capability or limit the start-up check
    /// could not see, such as a seccomp or LSM policy) pins the mode: the thread stays under
    /// SCHED_IDLE, no thread enters it on a move any more, and Lull says so once.
    static func setIdle(_ idle: Bool, tid: Int32) -> Bool {
        guard let failure = Syscall.failure("sched_setscheduler", { lull_set_thread_sched_idle(tid, idle ? 1 : 0) }) else {
            return true
        }
        if !idle && (failure.code == EPERM || failure.code == EACCES) {
            _ = mode.compareExchange(expected: IdleMode.movable.rawValue, desired: IdleMode.pinned.rawValue, ordering: .relaxed)
            RuntimeLog.once("sched-idle-leave") {
                "\(failure) (SCHED_IDLE to SCHED_OTHER): a thread stays under SCHED_IDLE, and threads no longer move into it when their work becomes background"
            }
        } else {
            RuntimeLog.once("sched-idle") {
                "\(failure) (\(idle ? "SCHED_IDLE" : "SCHED_OTHER")): background threads run at their nice value only"
            }
            if idle { idleMode = .off }
        }
        return false
    }

    /// Sets `tid`'s clamps; true when they are in force. A failure turns clamping off for
    /// the process (said once).
    static func setUtilClamp(_ clamp: UtilClamp, tid: Int32) -> Bool {
        guard utilClampUsable else { return false }
        guard let failure = Syscall.failure("sched_setattr(SCHED_FLAG_UTIL_CLAMP)", {
            lull_set_thread_util_clamp(tid, clamp.min, clamp.max)
        }) else { return true }
        clampsWork.store(false, ordering: .relaxed)
        RuntimeLog.once("util-clamp-failed") { "\(failure) (\(clamp)): QoS classes set no utilization clamps any more" }
        return false
    }

    /// The policy a thread of `qosClass` should have when it *moves* there (own QoS or an
    /// override): SCHED_IDLE only for background in `movable` mode.
    static func movesIntoIdle(_ qosClass: QoS.QoSClass) -> Bool {
        qosClass == .background && idleMode == .movable
    }

    /// Whether a worker of `qosClass` starts under SCHED_IDLE.
    static func startsIdle(_ qosClass: QoS.QoSClass) -> Bool {
        qosClass == .background && idleMode != .off
    }
}
