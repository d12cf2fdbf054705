import CLullShims
#if canImport(Glibc)
import Glibc
#endif

/// What this kernel and this process allow of the QoS energy policy (`EnergyPolicy`),
/// detected once when the runtime starts (the worker pool asks first) and said once through
/// swift-log: each missing piece is a line at `info` level, since the program runs correctly
/// without it.
struct EnergyCapabilities: Sendable {
    /// SCHED_IDLE for background work is wanted: `LULL_BACKGROUND_SCHED_IDLE` is not `0`,
    /// `off`, `no` or `false` (in any case).
    let schedIdleWanted: Bool
    /// The process may move a thread back out of SCHED_IDLE, which the kernel treats as nice
    /// 20: `CAP_SYS_NICE`, or an RLIMIT_NICE of at least 20 minus the background nice value.
    let schedIdleReversible: Bool
    /// Utilization clamping works (`sched_setattr` with the util-clamp flags, probed once on
    /// the calling thread with the values it already has); nil when it does, else why not.
    let utilClampFailure: SystemError?
    /// The calling thread's timer slack can be read (`PR_GET_TIMERSLACK`); nil when it can.
    let timerSlackFailure: SystemError?

    /// The name of the opt-out.
    static let schedIdleVariable = "LULL_BACKGROUND_SCHED_IDLE"

    /// Detected on first use, then logged.
    static let current: EnergyCapabilities = {
        let detected = detect()
        detected.report()
        return detected
    }()

    static func detect() -> EnergyCapabilities {
        EnergyCapabilities(schedIdleWanted: schedIdleWantedByEnvironment(),
                           schedIdleReversible: schedIdleIsReversible(),
                           utilClampFailure: probeUtilClamp(),
                           timerSlackFailure: Syscall.failure("prctl(PR_GET_TIMERSLACK)") { lull_get_timer_slack() })
    }

    static func schedIdleWantedByEnvironment() -> Bool {
        schedIdleWanted(environmentValue: getenv(schedIdleVariable).map { String(cString: $0) })
    }

    /// Wanted unless the variable says `0`, `off`, `no` or `false`.
    static func schedIdleWanted(environmentValue value: String?) -> Bool {
        guard let value else { return true }
        return !["0", "off", "no", "false"].contains(value.lowercased())
    }

    /// `can_nice(p, task_nice(p))` for a background worker: the kernel's rule for leaving
    /// SCHED_IDLE without `CAP_SYS_NICE` (sched_setscheduler(2)).
    static func schedIdleIsReversible() -> Bool {
        if lull_has_cap_sys_nice() == 1 { return true }
        var limit: UInt64 = 0
        guard lull_get_rlimit_nice(&limit) == 0 else { return false }
        let needed = 20 - ThreadPriority.allowedNiceValue(for: .background)
        return limit >= UInt64(max(0, needed))
    }

    /// Reads the calling thread's clamps and writes them back unchanged: a kernel without
    /// CONFIG_UCLAMP_TASK refuses (EOPNOTSUPP), one older than 5.3 does not know the flags.
    static func probeUtilClamp() -> SystemError? {
        var low: UInt32 = 0
        var high: UInt32 = 0
        let tid = lull_gettid()
        if let failure = Syscall.failure("sched_getattr", { lull_get_thread_util_clamp(tid, &low, &high) }) {
            return failure
        }
        return Syscall.failure("sched_setattr(SCHED_FLAG_UTIL_CLAMP)") { lull_set_thread_util_clamp(tid, low, high) }
    }

    /// Says once what is not available, and what the classes do instead.
    func report() {
        if schedIdleWanted && !schedIdleReversible {
            let needed = 20 - ThreadPriority.allowedNiceValue(for: .background)
            RuntimeLog.once("sched-idle-pinned", level: .info) {
                "background workers run under SCHED_IDLE and stay there when a wait raises them: leaving it needs CAP_SYS_NICE or RLIMIT_NICE >= \(needed) (\(EnergyCapabilities.schedIdleVariable)=0 keeps them under SCHED_OTHER at their nice value)"
            }
        }
        if let utilClampFailure {
            RuntimeLog.once("util-clamp", level: .info) {
                "\(utilClampFailure): utilization clamping is not available; QoS classes set no util_min or util_max"
            }
        }
        if let timerSlackFailure {
            RuntimeLog.once("class-timer-slack", level: .info) {
                "\(timerSlackFailure): utility and background threads keep the kernel's timer slack"
            }
        }
    }
}
