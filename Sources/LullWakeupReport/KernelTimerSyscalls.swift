/// The system calls that can arm a timer for the thread that makes them (a sleep, a wait
/// with a timeout, a timer descriptor), by number on this machine's architecture.
///
/// `timerfires` traces only these entries and exits (`raw_syscalls` with an `id` filter), so
/// that a busy system's other calls cost nothing; a timer armed in another call is reported
/// with the call unknown.
public enum KernelTimerSyscalls {
    /// Number to name, for this architecture (empty where the table is not known).
    public static let names: [Int: String] = {
        #if arch(x86_64)
        return [
            7: "poll", 23: "select", 35: "nanosleep", 37: "alarm", 38: "setitimer",
            128: "rt_sigtimedwait", 202: "futex", 208: "io_getevents", 220: "semtimedop",
            223: "timer_settime", 230: "clock_nanosleep", 232: "epoll_wait", 242: "mq_timedsend",
            243: "mq_timedreceive", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait",
            286: "timerfd_settime", 299: "recvmmsg", 333: "io_pgetevents", 426: "io_uring_enter",
            441: "epoll_pwait2", 449: "futex_waitv",
        ]
        #elseif arch(arm64)
        return [
            4: "io_getevents", 22: "epoll_pwait", 72: "pselect6", 73: "ppoll", 86: "timerfd_settime",
            98: "futex", 101: "nanosleep", 103: "setitimer", 110: "timer_settime",
            115: "clock_nanosleep", 137: "rt_sigtimedwait", 182: "mq_timedsend", 183: "mq_timedreceive",
            192: "semtimedop", 243: "recvmmsg", 292: "io_pgetevents", 426: "io_uring_enter",
            441: "epoll_pwait2", 449: "futex_waitv",
        ]
        #else
        return [:]
        #endif
    }()

    /// The tracefs filter that keeps only these calls (`id == 7 || id == 23 ...`), or nil
    /// when the table is empty for this architecture.
    public static var filter: String? {
        guard !names.isEmpty else { return nil }
        return names.keys.sorted().map { "id == \($0)" }.joined(separator: " || ")
    }

    /// The name of call `number`, or "syscall N".
    public static func name(_ number: Int) -> String {
        names[number] ?? "syscall \(number)"
    }
}
