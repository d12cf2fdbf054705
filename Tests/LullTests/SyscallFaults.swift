import CLullShims
import CLullTestSupport
import Glibc

/// Fault injection at the runtime's system-call seam: the fault table in the shims
/// (`Sources/CLullShims/faults.c`) makes chosen calls fail with a chosen errno, exactly where
/// the real call would have failed. docs/Failures.md says what a program sees for each.
///
/// The table is process-wide: a fault armed here is seen by every thread of the process, so
/// the tests that use it rely on the suite running one test at a time (`LullSuite` is
/// serialized). A call that the runtime makes once per process (the reactor's timerfd, the
/// signal hub's eventfd, the first worker thread) is armed in a child process (an exit
/// test), where Lull starts fresh; so is a call that housekeeping may make at any time
/// (`event_add`).
enum SyscallFault {
    /// The calls of the seam, one per `lull_call`.
    enum Call: CaseIterable, CustomStringConvertible {
        case eventAdd
        case eventAddTimer
        case eventAddDiagnostics
        case eventfd
        case eventfdRead
        case timerfdCreate
        case timerfdSettime
        case pidfdOpen
        case inotifyInit
        case inotifyAddWatch
        case inotifyRead
        case threadCreate
        case socket

        var raw: lull_call {
            switch self {
            case .eventAdd: LULL_CALL_EVENT_ADD
            case .eventAddTimer: LULL_CALL_EVENT_ADD_TIMER
            case .eventAddDiagnostics: LULL_CALL_EVENT_ADD_DIAGNOSTICS
            case .eventfd: LULL_CALL_EVENTFD
            case .eventfdRead: LULL_CALL_EVENTFD_READ
            case .timerfdCreate: LULL_CALL_TIMERFD_CREATE
            case .timerfdSettime: LULL_CALL_TIMERFD_SETTIME
            case .pidfdOpen: LULL_CALL_PIDFD_OPEN
            case .inotifyInit: LULL_CALL_INOTIFY_INIT
            case .inotifyAddWatch: LULL_CALL_INOTIFY_ADD_WATCH
            case .inotifyRead: LULL_CALL_INOTIFY_READ
            case .threadCreate: LULL_CALL_PTHREAD_CREATE
            case .socket: LULL_CALL_SOCKET
            }
        }

        var description: String {
            switch self {
            case .eventAdd: "event_add"
            case .eventAddTimer: "event_add (reactor timer)"
            case .eventAddDiagnostics: "event_add (diagnostics socket)"
            case .eventfd: "eventfd"
            case .eventfdRead: "read(eventfd)"
            case .timerfdCreate: "timerfd_create"
            case .timerfdSettime: "timerfd_settime"
            case .pidfdOpen: "pidfd_open"
            case .inotifyInit: "inotify_init"
            case .inotifyAddWatch: "inotify_add_watch"
            case .inotifyRead: "read(inotify)"
            case .threadCreate: "pthread_create"
            case .socket: "socket"
            }
        }
    }

    /// Every call: fail until disarmed.
    static let always: Int32 = -1

    /// Makes the next `count` calls of `call` (`always`: every call) fail with `errno`.
    static func arm(_ call: Call, errno: Int32, count: Int32 = 1) {
        lull_fault_arm(call.raw, errno, count)
    }

    /// Disarms every fault and resets the hit counts.
    static func disarmAll() {
        lull_fault_disarm_all()
    }

    /// How many calls of `call` failed by injection since the last `disarmAll`.
    static func hits(_ call: Call) -> Int {
        Int(lull_fault_hits(call.raw))
    }
}

/// Runs `body` with the next `count` calls of `call` failing with `errno`, and disarms every
/// fault afterwards (also when `body` throws). Returns what `body` returns.
func withSyscallFault<Result>(_ call: SyscallFault.Call, errno: Int32, count: Int32 = 1,
                              _ body: () throws -> Result) rethrows -> Result {
    SyscallFault.arm(call, errno: errno, count: count)
    defer { SyscallFault.disarmAll() }
    return try body()
}

/// In a child process (exit test): stops it with a message on standard error, for the parent
/// to show, when `condition` does not hold.
func childRequire(_ condition: Bool, _ message: @autoclosure () -> String, code: Int32 = 2) {
    guard !condition else { return }
    printToStandardError("requirement failed: \(message())")
    exit(code)
}
