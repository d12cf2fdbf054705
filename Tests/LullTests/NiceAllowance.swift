import CLullShims
import Glibc
@testable import Lull

/// The nice values a worker of this process can take, by the kernel's rule (setpriority(2),
/// getrlimit(2)): a thread may always raise its nice value (lower its priority), and may
/// lower it only with `CAP_SYS_NICE`, or down to `20 - RLIMIT_NICE` (soft limit).
///
/// The runtime's mapping (`ThreadPriority`) gives each class its nice value where it may,
/// and otherwise the nearest value it may take: an unprivileged process whose RLIMIT_NICE
/// is 0 (the usual case) keeps the nice value it started at for default and more
/// important work, and gives utility and background work their higher values.
struct NiceAllowance: Equatable, Sendable {
    /// `CAP_SYS_NICE` in the effective set: any nice value may be set.
    let privileged: Bool
    /// RLIMIT_NICE's soft limit (RLIM_INFINITY as `.max`).
    let niceLimit: UInt64
    /// The nice value of the process's main thread: where every thread starts.
    let processNice: Int32

    /// The lowest nice value a thread now at `current` may take.
    func floor(from current: Int32) -> Int32 {
        if privileged { return -20 }
        return min(current, 20 - Int32(clamping: min(niceLimit, 40)))
    }

    /// The nice value a worker of `qosClass` (relative priority 0) runs at; or, with
    /// `workerClass`, a worker of that class while it runs `qosClass` work (a raise below
    /// the worker's own nice value needs the privilege or the limit).
    func nice(for qosClass: QoS.QoSClass, onAWorkerOf workerClass: QoS.QoSClass? = nil) -> Int32 {
        let wanted: Int32 = switch qosClass {
        case .userInteractive: -10
        case .userInitiated: -5
        case .default, .unspecified: 0
        case .utility: 5
        case .background: 15
        }
        let current = workerClass.map { nice(for: $0) } ?? processNice
        return min(19, max(wanted, floor(from: current)))
    }

    /// This process's allowance, read once (capabilities and limits do not change under a
    /// running test process).
    static let current = NiceAllowance(privileged: hasEffectiveCapability(sysNice), niceLimit: niceSoftLimit(),
                                       processNice: mainThreadNice())

    static let sysNice = 23  // CAP_SYS_NICE

    /// Whether bit `capability` is set in /proc/self/status's `CapEff` mask.
    static func hasEffectiveCapability(_ capability: Int) -> Bool {
        var length: UInt = 0
        var text: UnsafeMutablePointer<CChar>?
        guard lull_read_small_file("/proc/self/status", &text, &length) == 0, let text else { return geteuid() == 0 }
        defer { lull_free(text) }
        let status = String(decoding: UnsafeRawBufferPointer(start: text, count: Int(length)), as: UTF8.self)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("CapEff:") }),
              let mask = UInt64(String(line.dropFirst("CapEff:".count).filter(\.isHexDigit)), radix: 16)
        else { return geteuid() == 0 }
        return mask & (1 << UInt64(capability)) != 0
    }

    static func niceSoftLimit() -> UInt64 {
        var limit: UInt64 = 0
        return lull_get_rlimit_nice(&limit) == 0 ? limit : 0
    }

    /// getpriority(PRIO_PROCESS, pid) names the thread whose id is the pid: the main thread.
    static func mainThreadNice() -> Int32 {
        getpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(getpid()))
    }
}

/// The nice value a worker of `qosClass` runs at in this process (see `NiceAllowance`).
func expectedNice(_ qosClass: QoS.QoSClass, onAWorkerOf workerClass: QoS.QoSClass? = nil) -> Int32 {
    NiceAllowance.current.nice(for: qosClass, onAWorkerOf: workerClass)
}
