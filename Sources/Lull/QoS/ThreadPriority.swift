import CLullShims
#if canImport(Glibc)
import Glibc
#endif

/// How a QoS becomes Linux scheduling parameters.
///
/// | class | nice | I/O class |
/// |---|---|---|
/// | user-interactive | p - 10 | best effort |
/// | user-initiated | p - 5 | best effort |
/// | default | p | best effort |
/// | utility | p + 5 | best effort |
/// | background | p + 15 | idle |
///
/// The scheduling policy (SCHED_IDLE for background), timer slack and utilization clamps
/// of each class are `EnergyPolicy`'s (docs/EnergyPolicy.md).
///
/// `p` is the process's nice value when the runtime starts (`processNice`, 0 unless the
/// program was started with `nice`), and every value stays in -20...19. Relative priority
/// adds up to +4 inside the gap between two classes, so it orders work inside a class
/// without ever crossing into the class below.
///
/// What the kernel allows (`set_one_prio` and `can_nice`): a thread may always keep its nice
/// value or raise it; lowering it (raising priority) needs `CAP_SYS_NICE`, or is allowed down
/// to 20 - RLIMIT_NICE. A worker starts with the nice value of the thread that created it
/// (the process's, or the thread starter's: see `ThreadStarter`), so each class gets its
/// value, but never below `lowestAllowedNice`:
/// without privilege, the classes from default up keep the process's nice value and the
/// classes below it still get higher values. Lull says so once.
enum ThreadPriority {
    /// The process's nice value when the runtime starts: its main thread's (Linux nice
    /// values are per thread; the main thread's tid is the process id).
    static let processNice: Int32 = {
        var nice: Int32 = 0
        return lull_get_thread_nice(getpid(), &nice) == 0 ? nice : 0
    }()

    static func niceValue(for qos: QoS) -> Int32 {
        let base: Int32 = switch qos.qosClass {
        case .userInteractive: -10
        case .userInitiated: -5
        case .default, .unspecified: 0
        case .utility: 5
        case .background: 15
        }
        // -15 ... 0 maps to +4 ... 0: inside the 5-step gap between classes.
        let step = Int32((-qos.relativePriority * 4 + 14) / 15)
        return min(19, max(-20, base + processNice + step))
    }

    /// The lowest nice value this process may move a thread to and back from at any time:
    /// -20 for root (`CAP_SYS_NICE`), otherwise 20 - RLIMIT_NICE (which may be 20: none).
    /// Computed once: capabilities do not change under a running runtime.
    static let lowestReversibleNice: Int32 = {
        if geteuid() == 0 { return -20 }
        var limit: UInt64 = 0
        guard lull_get_rlimit_nice(&limit) == 0 else { return 20 }
        return max(-20, 20 - Int32(clamping: min(limit, 40)))
    }()

    /// The lowest nice value a worker gets for its class: the reversible limit, or the
    /// process's own value if that is lower (a thread may always keep its nice value).
    static let lowestAllowedNice: Int32 = min(processNice, lowestReversibleNice)

    /// The nice value a worker of `qos` runs at in this process.
    static func allowedNiceValue(for qos: QoS) -> Int32 {
        max(niceValue(for: qos), lowestAllowedNice)
    }

    /// Applies `qos` to the calling thread. Returns the nice value actually in force.
    @discardableResult
    static func apply(_ qos: QoS, tid: Int32) -> Int32 {
        let wanted = niceValue(for: qos)
        var applied = allowedNiceValue(for: qos)
        var failure = Syscall.failure("setpriority") { lull_set_thread_nice(tid, applied) }
        if failure?.code == EACCES || failure?.code == EPERM {
            // Below this thread's nice value (inherited from a thread that runs at a higher
            // one) without the right to lower it, or a seccomp or LSM policy: keep it.
            var current: Int32 = 0
            if lull_get_thread_nice(tid, &current) == 0 { applied = current }
            failure = nil
        }
        if applied != wanted {
            RuntimeLog.once("priority-degraded") {
                "cannot set nice \(wanted) for QoS \(qos) (needs CAP_SYS_NICE or RLIMIT_NICE); threads run at the nearest allowed nice value \(applied)"
            }
        }
        if let failure {
            RuntimeLog.once("priority-failed") { "\(failure); QoS priorities are not applied" }
        }
        if qos.qosClass == .background, let ioFailure = Syscall.failure("ioprio_set", { lull_set_thread_io_idle(tid) }) {
            RuntimeLog.once("ioprio-failed") { "\(ioFailure) (IOPRIO_CLASS_IDLE); background threads keep normal I/O priority" }
        }
        return applied
    }

    /// True when this process can move a thread back up after lowering it, which is what
    /// per-block relative priorities and overrides need.
    static var canRaise: Bool { lowestReversibleNice <= niceValue(for: .userInteractive) }
}
