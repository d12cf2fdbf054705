import CLibevent
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The one place that talks to libevent: it owns the `event_base`, the single "next timer"
/// event that the timer engine arms, and the cross-thread wake-ups libevent provides.
///
/// Threading model: the base is created with libevent's pthread locking, so any thread may
/// add or remove events; only the leader worker (see `WorkerPool`) runs the loop, one
/// iteration at a time (`pollOnce`). Changing the timer from another thread wakes the
/// leader through libevent's own notification descriptor; nothing here wakes periodically.
/// The C callback of a reactor event: (descriptor, what happened, context).
typealias ReactorCallback = event_callback_fn

final class Reactor: Sendable {
    static let shared = Reactor(timerFired: { TimerEngine.shared.fire() })

    /// libevent's base and timer event. They are created once and never freed (the reactor
    /// lives as long as the process), and libevent serialises every call on them with the
    /// base's lock (`evthread_use_pthreads` runs before the base exists), so sharing the
    /// pointers between threads is safe.
    private nonisolated(unsafe) let base: OpaquePointer
    private nonisolated(unsafe) var timerEvent: OpaquePointer?

    private let timerFired: @Sendable () -> Void
    /// The deadline the next-timer is armed for, if armed.
    private let armedTimer = Mutex<UInt64?>(nil)
    /// Registered events plus an armed timer: while positive, someone must poll.
    private let interest = Atomic<Int>(0)

    private init(timerFired: @escaping @Sendable () -> Void) {
        self.timerFired = timerFired
        guard evthread_use_pthreads() == 0 else {
            fatalError("Lull: libevent's evthread_use_pthreads() failed: libevent_pthreads is unusable")
        }
        guard let config = event_config_new() else { fatalError("Lull: event_config_new() failed: out of memory") }
        defer { event_config_free(config) }
        // A precise monotonic clock: without it libevent reads CLOCK_MONOTONIC_COARSE and a
        // timer could be armed up to one kernel tick short of its deadline.
        event_config_set_flag(config, Int32(EVENT_BASE_FLAG_PRECISE_TIMER.rawValue))
        guard let base = event_base_new_with_config(config) else {
            fatalError("Lull: event_base_new_with_config() failed: libevent found no usable backend (epoll)")
        }
        self.base = base
        let context = Unmanaged.passUnretained(self).toOpaque()
        guard let timer = event_new(base, -1, 0, { _, _, context in
            Unmanaged<Reactor>.fromOpaque(context!).takeUnretainedValue().timerCallback()
        }, context) else {
            fatalError("Lull: event_new() for the reactor's timer failed: out of memory")
        }
        timerEvent = timer
        ControlSocket.listen(on: base)
    }

    /// A new libevent event on this base for a descriptor.
    func makeEvent(descriptor: Int32, what: Int16, callback: event_callback_fn,
                   context: UnsafeMutableRawPointer) -> OpaquePointer? {
        event_new(base, descriptor, what, callback, context)
    }

    /// True while there is something to poll for.
    var needsPoller: Bool {
        interest.load(ordering: .acquiring) > 0
    }

    /// Runs one iteration of the event loop on the calling (leader) thread: waits for at
    /// least one event and runs the callbacks of those that are ready.
    func pollOnce() {
        let watched = Diagnostics.pollWillStart()
        let result = event_base_loop(base, EVLOOP_ONCE)
        Diagnostics.pollDidEnd(watched, result: result)
        // 1 means nothing was registered when the loop started: the last event left while
        // this thread was on its way to poll. The caller looks at the interest again.
        if result < 0 {
            RuntimeLog.once("loop-error") { "event_base_loop failed (\(result)); errno \(errno)" }
        }
    }

    /// Arms the next-timer for `deadline` (monotonic ns), or disarms it with nil.
    func setTimer(_ deadline: UInt64?) {
        armedTimer.locked { armed in
            guard let timerEvent else { return }
            if let deadline {
                let now = SystemClock.monotonicNanoseconds()
                let delta = deadline > now ? deadline - now : 0
                // Round up to whole microseconds: never earlier than asked.
                let micros = (delta + 999) / 1000
                var timeout = timeval(tv_sec: Int(micros / 1_000_000), tv_usec: Int(micros % 1_000_000))
                let wasArmed = armed != nil
                armed = deadline
                Diagnostics.reactorWillChange()
                if event_add(timerEvent, &timeout) != 0 {
                    RuntimeLog.warning("event_add for the reactor timer failed; delayed work may run late")
                }
                // Counted after the add, so that a poller woken by the count finds the event.
                if !wasArmed {
                    addInterest()
                } else {
                    // The leader may be away running work: a new deadline needs a poller now.
                    WorkerPool.shared.ensurePoller()
                }
            } else if armed != nil {
                armed = nil
                // Uncounted first: the interest never counts an event libevent no longer has.
                removeInterest()
                // Never blocks: this runs on the polling thread (inside the timer callback)
                // or with no callback of the timer running.
                event_del_noblock(timerEvent)
            }
        }
    }

    private func timerCallback() {
        Diagnostics.reactorTimerExpired()
        let disarmed = armedTimer.locked { armed -> Bool in
            // Another thread may have re-armed the timer between its expiry and this
            // callback: then it is still pending and still counts.
            guard let timerEvent, armed != nil, event_pending(timerEvent, Int16(EV_TIMEOUT), nil) == 0 else {
                return false
            }
            armed = nil
            return true
        }
        if disarmed { removeInterest() }
        timerFired()
    }

    /// Counts one more thing to poll for, and makes sure a poller exists: the last leader
    /// may be away running work, and only libevent's own wake-up would reach a poller.
    func addInterest() {
        let (old, _) = interest.wrappingAdd(1, ordering: .acquiringAndReleasing)
        if old == 0 { ControlSocket.pollingMayHaveChanged(self) }
        WorkerPool.shared.ensurePoller()
    }

    func removeInterest() {
        let (_, new) = interest.subtract(1, ordering: .acquiringAndReleasing)
        if new == 0 { ControlSocket.pollingMayHaveChanged(self) }
    }
}
