import CLullShims
#if canImport(Glibc)
import Glibc
#endif

/// How a QoS becomes Linux scheduling parameters.
///
/// | class | nice | I/O class |
/// |---|---|---|
/// | user-interactive | -10 | best effort |
/// | user-initiated | -5 | best effort |
/// | default | 0 | best effort |
/// | utility | +5 | best effort |
/// | background | +15 | idle |
///
/// Relative priority adds up to +4 inside the gap between two classes, so it orders work
/// inside a class without ever crossing into the class below. Negative nice values need
/// `CAP_SYS_NICE` or a raised `RLIMIT_NICE`; without them the thread runs at the nearest
/// allowed value and Lull says so once.
enum ThreadPriority {
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
        return min(19, base + step)
    }

    /// The lowest nice value this process may set on its threads, per RLIMIT_NICE and
    /// root. Computed once: capabilities do not change under a running runtime.
    static let lowestAllowedNice: Int32 = {
        if geteuid() == 0 { return -20 }
        var limit: UInt64 = 0
        guard lull_get_rlimit_nice(&limit) == 0 else { return 0 }
        // RLIMIT_NICE's ceiling is 20 - rlim_cur (see setrlimit(2)).
        return max(-20, 20 - Int32(clamping: min(limit, 40)))
    }()

    /// Applies `qos` to the calling thread. Returns the nice value actually in force.
    @discardableResult
    static func apply(_ qos: QoS, tid: Int32) -> Int32 {
        let wanted = niceValue(for: qos)
        var applied = max(wanted, lowestAllowedNice)
        var result = lull_set_thread_nice(tid, applied)
        if result == EACCES || result == EPERM {
            // The rlimit guess was wrong (a seccomp or LSM policy, say): keep what we have.
            var current: Int32 = 0
            if lull_get_thread_nice(tid, &current) == 0 { applied = current }
            result = 0
        }
        if applied != wanted {
            RuntimeLog.once("priority-degraded") {
                "cannot set nice \(wanted) for QoS \(qos) (needs CAP_SYS_NICE or RLIMIT_NICE); threads run at the nearest allowed nice value \(applied)"
            }
        }
        if result != 0 {
            RuntimeLog.once("priority-failed") { "setpriority failed with errno \(result); QoS priorities are not applied" }
        }
        if qos.qosClass == .background {
            let ioResult = lull_set_thread_io_idle(tid)
            if ioResult != 0 {
                RuntimeLog.once("ioprio-failed") { "ioprio_set(IOPRIO_CLASS_IDLE) failed with errno \(ioResult); background threads keep normal I/O priority" }
            }
        }
        return applied
    }

    /// True when this process can move a thread back up after lowering it, which is what
    /// per-block relative priorities and overrides need.
    static var canRaise: Bool { lowestAllowedNice <= niceValue(for: .userInteractive) }
}
