#if canImport(Glibc)
import Glibc
#endif
import CLullShims
import Synchronization

/// Tells when the system clock is set: a CLOCK_REALTIME timerfd with
/// TFD_TIMER_CANCEL_ON_SET, registered with the reactor once, on the first wall-clock timer.
/// On a change it calls `onChange` on the polling thread (the timer engine re-places its
/// wall-clock timers). Without it (no descriptor to spare, or the reactor refused it),
/// wall-clock timers keep the monotonic deadline they were given; that is logged once.
final class WallClockWatch: ReactorEventHandler {
    private let reactor: Reactor
    private let onChange: @Sendable () -> Void
    /// The timerfd and its registration, set once by `start()`; they live as long as the
    /// runtime.
    private let watch = Mutex<(descriptor: Int32, registration: DescriptorRegistration?)?>(nil)
    private let started = Atomic<Bool>(false)

    init(reactor: Reactor, onChange: @escaping @Sendable () -> Void) {
        self.reactor = reactor
        self.onChange = onChange
    }

    /// Starts watching (idempotent; the system calls run on the calling thread, under no lock).
    func start() {
        guard !started.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let descriptor: Int32
        do throws(SystemError) {
            descriptor = try Syscall.shim("timerfd_create") { lull_clock_watch_create() }
        } catch {
            RuntimeLog.once("clock-watch") { "cannot watch for system clock changes (\(error)): wall-clock timers will not follow them" }
            return
        }
        // Stored before the registration so that an event that arrives at once finds it.
        watch.locked { $0 = (descriptor, nil) }
        do throws(ReactorError) {
            let registration = try reactor.register(descriptor: descriptor, forWriting: false, handler: self)
            watch.locked { $0?.registration = registration }
        } catch {
            watch.locked { $0 = nil }
            close(descriptor)
            RuntimeLog.once("clock-watch") { "cannot watch for system clock changes: \(error)" }
        }
    }

    /// On the polling thread: maybe the clock was set.
    func reactorEvent(readable: Bool, writable: Bool) {
        guard let descriptor = watch.locked({ $0?.descriptor }),
              lull_clock_watch_check(descriptor) == 1 else { return }
        onChange()
    }
}
