import CLullShims
#if canImport(Glibc)
import Glibc
#endif

/// Why the reactor's precise timer (a timerfd) failed.
struct PreciseTimerError: Error, Equatable, CustomStringConvertible {
    enum Operation: String {
        case create = "timerfd_create"
        case arm = "timerfd_settime (arm)"
        case disarm = "timerfd_settime (disarm)"
    }

    let operation: Operation
    let errno: Int32

    var description: String {
        "the reactor's timerfd: \(operation.rawValue) failed: \(SystemError.describe(errno))"
    }
}

/// The reactor's own CLOCK_MONOTONIC timerfd, armed at absolute instants: the wake-up for
/// windows that must not wait for libevent's millisecond rounding on its coarse clock (see
/// `TimerSlack`), and the backstop at the end of every other window.
///
/// A timerfd ignores the thread's timer slack (the kernel arms it with none), which is what
/// narrow windows want. Its descriptor is opened once with TFD_CLOEXEC | TFD_NONBLOCK by the
/// reactor, which lives as long as the process, and is therefore never closed: there is no
/// second owner and no point at which closing it would be safe while the runtime runs.
struct PreciseTimer: Sendable {
    let descriptor: Int32

    /// Opens the timerfd.
    static func open() throws(PreciseTimerError) -> PreciseTimer {
        do throws(SystemError) {
            return PreciseTimer(descriptor: try Syscall.shim("timerfd_create") { lull_timerfd_create() })
        } catch {
            throw PreciseTimerError(operation: .create, errno: error.code)
        }
    }

    /// Wraps an existing descriptor (the reactor's, or one a test makes invalid).
    init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    /// Arms it for `deadline` (absolute CLOCK_MONOTONIC ns); a past instant expires at once.
    /// Re-arming replaces the previous instant and discards an expiration not yet taken.
    func arm(at deadline: UInt64) throws(PreciseTimerError) {
        if let failure = Syscall.failure("timerfd_settime", { lull_timerfd_arm(descriptor, deadline) }) {
            throw PreciseTimerError(operation: .arm, errno: failure.code)
        }
    }

    func disarm() throws(PreciseTimerError) {
        if let failure = Syscall.failure("timerfd_settime", { lull_timerfd_disarm(descriptor) }) {
            throw PreciseTimerError(operation: .disarm, errno: failure.code)
        }
    }
}
