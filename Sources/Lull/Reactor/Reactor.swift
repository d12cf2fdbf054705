import CLibevent
import CLullShims
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

    /// libevent's base, the next-timer's timeout event (wide windows, see `TimerSlack`) and
    /// the event of the precise timerfd. They are created once and never freed (the reactor
    /// lives as long as the process), and libevent serialises every call on them with the
    /// base's lock (`evthread_use_pthreads` runs before the base exists), so sharing the
    /// pointers between threads is safe.
    private nonisolated(unsafe) let base: OpaquePointer
    private nonisolated(unsafe) var timerEvent: OpaquePointer?
    private nonisolated(unsafe) var preciseEvent: OpaquePointer?
    /// The reactor's timerfd, used with `preciseEvent` (without either, every window is
    /// armed on libevent's timeout, late by up to a tick plus a millisecond).
    private let preciseTimer: PreciseTimer?

    /// How the reactor asks for a poller, connected once by the composition root (`Runtime`)
    /// after the worker pool exists; nothing registers before that.
    private let pollers = AtomicLazyReference<PollerDemand>()
    /// This reactor carries the diagnostics socket (see `listenForDiagnostics`).
    private let listensForDiagnostics = Atomic<Bool>(false)

    private struct TimerState {
        /// The window armed, if any (nil: disarmed, or expired and not yet re-armed).
        var armed: WakeWindow?
        /// libevent's timeout event is pending.
        var coarseAdded = false
        /// The timerfd's event is in libevent's set.
        var preciseAdded = false
        /// A one-shot libevent timeout (`event_base_once`) carries the window because
        /// libevent refused both events; only the one of `fallbackGeneration` counts.
        var fallbackAdded = false
        var fallbackGeneration: UInt = 0

        /// The generation of the last window applied (see `setTimer`).
        var appliedGeneration: UInt64 = 0

        /// Any of the three in libevent's set counts one in `interest`.
        var counted: Bool { coarseAdded || preciseAdded || fallbackAdded }
    }

    private let timer = Mutex<TimerState>(TimerState())
    /// Counts the poller's iterations (`pollOnce`), bumped before each one waits: readiness
    /// reported by a callback of iteration `k` was checked by the kernel after `k` was
    /// stored. Descriptor sources compare it with the iteration their last handler ended in
    /// (docs/EventSources.md, "Read sources: a delivery's `data`"). Starts at 2, so that
    /// every reported iteration is above 1, the value of a readiness nobody checked.
    private let iterations = Atomic<UInt>(2)
    /// The timer slack the poller sleeps with (ns; 0: its default), for the armed window.
    private let sleepSlack = Atomic<UInt64>(0)
    /// The timer expired in the current poll (set by the timer callbacks, under the timer
    /// lock, on the polling thread): the poller fires the timer engine after the loop returns
    /// (`pollOnce`), then `timerFireHandled` disarms unless re-armed. Atomic, so that the
    /// poller reads it without the timer lock, which other threads' arms take.
    private let expiredInPoll = Atomic<Bool>(false)
    /// Registered events plus an armed timer: while positive, someone must poll.
    private let interest = Atomic<Int>(0)

    /// Creates the event base and the reactor's timers. Stops the program with a message when
    /// libevent cannot start (see `LibeventLog`).
    init() {
        lull_fork_guard_install()
        LibeventLog.startupBegins()
        defer { LibeventLog.startupEnded() }
        guard evthread_use_pthreads() == 0 else {
            lullFatal("libevent's evthread_use_pthreads() failed: libevent_pthreads is unusable")
        }
        guard let config = event_config_new() else { lullFatal("event_config_new() failed: out of memory") }
        defer { event_config_free(config) }
        // Not EVENT_BASE_FLAG_PRECISE_TIMER: with it libevent sleeps on a timerfd of its own,
        // which the thread's timer slack does not reach. Precision comes from our timerfd;
        // libevent's timeout (on CLOCK_MONOTONIC_COARSE, in ms) only serves wide windows.
        // No time cache: a timeout added from a callback must count from the clock, not from
        // the time the loop woke.
        event_config_set_flag(config, Int32(EVENT_BASE_FLAG_NO_CACHE_TIME.rawValue))
        // Only epoll: without descriptors to spare, libevent would fall back to poll, which
        // has no edge-triggered events; a start-up that fails says why (`LibeventLog`).
        event_config_avoid_method(config, "poll")
        event_config_avoid_method(config, "select")
        guard let base = event_base_new_with_config(config) else {
            LibeventLog.startupFailed("event_base_new_with_config() failed")
        }
        self.base = base
        var precise: PreciseTimer?
        do throws(PreciseTimerError) {
            precise = try PreciseTimer.open()
        } catch {
            RuntimeLog.warning("\(error): timers wake on libevent's coarse clock, up to \(TimerSlack.coarseResolution / 1_000_000 + 1) ms late")
        }
        preciseTimer = precise
        let context = Unmanaged.passUnretained(self).toOpaque()
        guard let timer = event_new(base, -1, 0, { _, _, context in
            Unmanaged<Reactor>.fromOpaque(context!).takeUnretainedValue().coarseTimerCallback()
        }, context) else {
            lullFatal("event_new() for the reactor's timer failed: out of memory")
        }
        timerEvent = timer
        if let descriptor = precise?.descriptor {
            // Edge-triggered: each expiry reports once, and its count is never read (a
            // re-arm resets it); the callback tells an expiry by the clock, not by a read.
            preciseEvent = event_new(base, descriptor, Int16(EV_READ | EV_PERSIST | EV_ET), { _, _, context in
                Unmanaged<Reactor>.fromOpaque(context!).takeUnretainedValue().preciseTimerCallback()
            }, context)
            if preciseEvent == nil {
                // Never used without its event (`arm` needs both): closed here, its only owner.
                RuntimeLog.warning("event_new() for the reactor's timerfd failed: timers wake on libevent's coarse clock")
                close(descriptor)
            }
        }
    }

    /// Connects the worker pool's poller requests (once, from the composition root).
    func connect(_ demand: PollerDemand) {
        let stored = pollers.storeIfNil(demand)
        precondition(stored === demand, "Lull: the reactor's pollers are connected twice")
    }

    /// Asks the pool for a poller: the leader may be away running work.
    private func requestPoller() {
        pollers.load()?.request()
    }

    /// The diagnostics socket's listener joins this base (from the composition root; one
    /// reactor per process listens).
    func listenForDiagnostics() {
        listensForDiagnostics.store(true, ordering: .releasing)
        ControlSocket.listen(on: base, watch: { self.watchReadable($0, $1) })
    }

    /// A new libevent event on this base for a descriptor.
    func makeEvent(descriptor: Int32, what: Int16, callback: event_callback_fn,
                   context: UnsafeMutableRawPointer) -> OpaquePointer? {
        event_new(base, descriptor, what, callback, context)
    }

    /// True while there is something to poll for.
    /// Sequentially consistent, as `addInterest` is: a worker answering a poller request
    /// clears it and then reads this (see `WorkerPool.ensurePoller`).
    var needsPoller: Bool {
        interest.load(ordering: .sequentiallyConsistent) > 0
    }

    /// The window armed now, if any (for tests and diagnostics).
    var armedWindow: WakeWindow? {
        timer.locked(ranked: .reactorTimer) { $0.armed }
    }

    /// The timer slack (ns; 0: the thread's default) the poller sleeps with for the armed
    /// window: the poller applies it around `pollOnce` and goes back to its default after
    /// (the work it runs next must not sleep with the reactor's slack).
    var sleepSlackForPoll: UInt64 { sleepSlack.load(ordering: .acquiring) }

    /// Runs one iteration of the event loop on the calling (leader) thread: waits for at
    /// least one event and runs the callbacks of those that are ready. Returns whether the
    /// reactor's timer expired: the caller then fires the timer engine and calls
    /// `timerFireHandled()`.
    func pollOnce() -> Bool {
        // Before the wait: sequentially consistent, as the loads in `pollIteration` are, so
        // that a thread that read the old count did so before this wait began.
        iterations.wrappingAdd(1, ordering: .sequentiallyConsistent)
        let watched = Diagnostics.pollWillStart()
        let result = event_base_loop(base, EVLOOP_ONCE)
        Diagnostics.pollDidEnd(watched, result: result)
        // 1 means nothing was registered when the loop started: the last event left while
        // this thread was on its way to poll. The caller looks at the interest again.
        if result < 0 {
            let failure = SystemError("event_base_loop", code: errno)
            RuntimeLog.once("loop-error") { "\(failure) (\(result))" }
        }
        return expiredInPoll.exchange(false, ordering: .acquiringAndReleasing)
    }

    /// The poller's current iteration (see `iterations`): inside a callback, the one that
    /// reported the event; elsewhere, one no earlier than any iteration already waiting.
    var pollIteration: UInt { iterations.load(ordering: .sequentiallyConsistent) }

    /// Arms the next wake-up for `window` (monotonic ns), or disarms it with nil. See
    /// `WakePlan` for how a window becomes a timerfd instant and perhaps an `epoll_wait`
    /// timeout with timer slack.
    ///
    /// `generation` orders the arms: the timer engine decides a window under its own lock and
    /// arms it after releasing that lock, so two threads' arms may arrive here out of order; a
    /// window whose generation is not newer than the last one applied is dropped (the newer
    /// one was decided knowing it). The timer lock is held across `timerfd_settime` and
    /// `event_add`: it is a sleeping lock (never a spin lock), it is what keeps the armed
    /// window and the kernel's timer in step, and it is the innermost lock of the runtime
    /// (libevent's base lock, taken inside `event_add`, is the only one below it). The poller
    /// request and the diagnostics socket's update happen after it is released.
    func setTimer(_ window: WakeWindow?, generation: UInt64) {
        ForkGuard.check()
        let change = timer.locked(ranked: .reactorTimer) { state -> InterestChange? in
            guard generation > state.appliedGeneration else { return nil }
            state.appliedGeneration = generation
            guard let window else {
                state.armed = nil
                return disarm(&state)
            }
            let wasCounted = state.counted
            state.armed = window
            arm(window, &state)
            // Counted after the add, so that a poller woken by the count finds the event.
            if !wasCounted && state.counted { return countInterest() }
            // The leader may be away running work: a new deadline needs a poller now.
            return .unchanged
        }
        if let change { interestChanged(change, requestsPoller: true) }
    }

    /// Under the timer lock.
    private func arm(_ window: WakeWindow, _ state: inout TimerState) {
        let now = SystemClock.monotonicNanoseconds()
        let coarseNow = SystemClock.coarseMonotonicNanoseconds()
        var plan = TimerSlack.plan(window, now: now, coarseNow: coarseNow)
        var armedPrecisely = false
        if let preciseTimer, let preciseEvent {
            do throws(PreciseTimerError) {
                // A system call of its own: a sleeping leader needs no libevent notification.
                try preciseTimer.arm(at: plan.precise)
                if !state.preciseAdded {
                    Diagnostics.reactorWillChange()
                    if lull_event_add(LULL_CALL_EVENT_ADD_TIMER, preciseEvent, nil) == 0 {
                        state.preciseAdded = true
                    } else {
                        RuntimeLog.once("timerfd-add") { "event_add for the reactor's timerfd failed; timers wake on libevent's coarse clock" }
                    }
                }
                armedPrecisely = state.preciseAdded
            } catch {
                RuntimeLog.once("timerfd-arm") { "\(error); timers wake on libevent's coarse clock" }
            }
        }
        if !armedPrecisely {
            // Without the timerfd, libevent's timeout carries the window's end itself.
            plan = WakePlan(precise: plan.precise, coarse: .init(
                delayMicroseconds: TimerSlack.coarseDelay(until: window.latest, coarseNow: coarseNow), slack: 0))
        }
        let slack = plan.coarse?.slack ?? 0
        let previousSlack = sleepSlack.exchange(slack, ordering: .acquiringAndReleasing)
        var heldByEvent = armedPrecisely
        if let coarse = plan.coarse, let timerEvent {
            var timeout = timeval(tv_sec: Int(coarse.delayMicroseconds / 1_000_000),
                                  tv_usec: Int(coarse.delayMicroseconds % 1_000_000))
            Diagnostics.reactorWillChange()
            if let refused = Syscall.failure("event_add", { lull_event_add(LULL_CALL_EVENT_ADD_TIMER, timerEvent, &timeout) }) {
                if !heldByEvent {
                    armFallback(timeout, refused: refused, &state)
                } else {
                    RuntimeLog.once("timer-add") { "event_add for the reactor timer failed (\(refused)); windows end on the timerfd" }
                }
            } else {
                state.coarseAdded = true
                heldByEvent = true
            }
        } else if state.coarseAdded, let timerEvent {
            Diagnostics.reactorWillChange()
            event_del_noblock(timerEvent)
            state.coarseAdded = false
        }
        // A window held by one of the two events leaves an older fallback stale.
        if heldByEvent { state.fallbackAdded = false }
        assert(!state.fallbackAdded || (!armedPrecisely && !heldByEvent), "a fallback timeout while an event holds the window")
        // A leader asleep on another thread sleeps with the slack it read before the loop:
        // it comes back out (and re-reads it) when the slack changes. On the poller itself
        // (in a callback) the loop returns after the callbacks anyway.
        if slack != previousSlack {
            let poller = pollers.load()?.pollingThread() ?? 0
            if poller != 0 && poller != lull_gettid() {
                Diagnostics.reactorWillChange()
                event_base_loopbreak(base)
            }
        }
    }

    /// Under the timer lock, when libevent refused both the timerfd's event and its timeout:
    /// the window is carried by a one-shot libevent timeout, which needs no event of ours.
    /// Each gets a new generation (its callback's context, with the reactor), so that one made
    /// stale by a later arm or a disarm fires nothing (libevent cannot take it back; it only
    /// ends one loop iteration early).
    private func armFallback(_ timeout: timeval, refused: SystemError, _ state: inout TimerState) {
        state.fallbackGeneration = state.fallbackGeneration == .max ? 1 : state.fallbackGeneration + 1
        var timeout = timeout
        // Released by the callback, which libevent runs exactly once for an added one-shot.
        let context = Unmanaged.passRetained(FallbackTimeout(reactor: self, generation: state.fallbackGeneration))
        Diagnostics.reactorWillChange()
        let result = event_base_once(base, -1, Int16(EV_TIMEOUT), { _, _, context in
            let timeout = Unmanaged<FallbackTimeout>.fromOpaque(context!).takeRetainedValue()
            timeout.reactor.fallbackTimerCallback(generation: timeout.generation)
        }, context.toOpaque(), &timeout)
        if result != 0 { context.release() }
        state.fallbackAdded = result == 0
        if state.fallbackAdded {
            RuntimeLog.once("timer-fallback") { "event_add for the reactor timer failed (\(refused)); timers wake through a one-shot libevent timeout" }
        } else {
            RuntimeLog.warning("event_add for the reactor timer failed and no one-shot timeout could be added either; delayed work waits for the next wake-up")
        }
    }

    /// Under the timer lock: disarms both timers and takes them out of libevent's set.
    /// Returns how the interest changed, for the caller to act on after the lock.
    private func disarm(_ state: inout TimerState) -> InterestChange {
        sleepSlack.store(0, ordering: .releasing)
        if let preciseTimer, state.preciseAdded {
            do throws(PreciseTimerError) {
                try preciseTimer.disarm()
            } catch {
                RuntimeLog.once("timerfd-disarm") { "\(error)" }
            }
        }
        guard state.counted else { return .unchanged }
        // Uncounted first: the interest never counts an event libevent no longer has.
        let change = uncountInterest()
        Diagnostics.reactorWillChange()
        // Never blocks: this runs on the polling thread (inside a timer callback) or with
        // no callback of the timers running.
        if state.coarseAdded, let timerEvent {
            event_del_noblock(timerEvent)
            state.coarseAdded = false
        }
        if state.preciseAdded, let preciseEvent {
            event_del_noblock(preciseEvent)
            state.preciseAdded = false
        }
        state.fallbackAdded = false
        return change
    }

    /// libevent's timeout expired (by its coarse clock, which never runs ahead of ours).
    private func coarseTimerCallback() {
        let change = timer.locked(ranked: .reactorTimer) { state -> InterestChange in
            // Another thread may have re-armed it between its expiry and this callback.
            guard let timerEvent, state.coarseAdded, event_pending(timerEvent, Int16(EV_TIMEOUT), nil) == 0 else {
                return .unchanged
            }
            state.coarseAdded = false
            return expire(&state)
        }
        interestChanged(change, requestsPoller: false)
    }

    /// The fallback timeout of `generation` expired (see `armFallback`).
    private func fallbackTimerCallback(generation: UInt) {
        let change = timer.locked(ranked: .reactorTimer) { state -> InterestChange in
            guard state.fallbackAdded, state.fallbackGeneration == generation else { return .unchanged }
            state.fallbackAdded = false
            return expire(&state)
        }
        interestChanged(change, requestsPoller: false)
    }

    /// Under the timer lock, after a one-shot event (libevent's timeout or the fallback) left
    /// libevent's set: uncounts the timer if nothing else holds it, and takes the armed
    /// window, which expires now (`expiredInPoll`) if it was armed.
    private func expire(_ state: inout TimerState) -> InterestChange {
        let change = state.counted ? InterestChange.unchanged : uncountInterest()
        if state.armed != nil {
            state.armed = nil
            expiredInPoll.store(true, ordering: .releasing)
            Diagnostics.reactorTimerExpired()
        }
        return change
    }

    /// The timerfd expired: the window's end has come, unless another thread re-armed it
    /// for later between the expiry and this callback.
    private func preciseTimerCallback() {
        timer.locked(ranked: .reactorTimer) { state in
            guard let armed = state.armed, armed.latest <= SystemClock.monotonicNanoseconds() else { return }
            state.armed = nil
            expiredInPoll.store(true, ordering: .releasing)
            Diagnostics.reactorTimerExpired()
        }
    }

    /// On the poller, after it fired the timer engine for an expiry `pollOnce` reported:
    /// takes the reactor's timers out of the poll set unless the engine armed them again
    /// (which it does while any timer is left).
    func timerFireHandled() {
        let change = timer.locked(ranked: .reactorTimer) { state -> InterestChange in
            guard state.armed == nil else { return .unchanged }
            return disarm(&state)
        }
        interestChanged(change, requestsPoller: false)
    }

    // MARK: Interest

    /// How a change of the interest counter must be followed up, after the lock under which
    /// it was counted.
    enum InterestChange {
        case unchanged
        case raisedFromZero
        case raised
        case droppedToZero
        case dropped
    }

    /// Counts one more thing to poll for (the follow-up is `interestChanged`).
    private func countInterest() -> InterestChange {
        let (old, _) = interest.wrappingAdd(1, ordering: .sequentiallyConsistent)
        return old == 0 ? .raisedFromZero : .raised
    }

    private func uncountInterest() -> InterestChange {
        let (_, new) = interest.subtract(1, ordering: .acquiringAndReleasing)
        return new == 0 ? .droppedToZero : .dropped
    }

    /// Acts on an interest change after the lock: the diagnostics listener follows whether
    /// anything is polled, and a raised interest (or a new deadline, `requestsPoller`) makes
    /// sure a poller exists — the last leader may be away running work, and only libevent's
    /// own wake-up would reach a poller.
    private func interestChanged(_ change: InterestChange, requestsPoller: Bool) {
        switch change {
        case .raisedFromZero, .droppedToZero:
            if listensForDiagnostics.load(ordering: .acquiring) {
                ControlSocket.pollingMayHaveChanged(isPolled: { needsPoller })
            }
        case .raised, .dropped, .unchanged: break
        }
        switch change {
        case .raisedFromZero, .raised: requestPoller()
        case .unchanged: if requestsPoller { requestPoller() }
        case .droppedToZero, .dropped: break
        }
    }

    /// Counts one more thing to poll for, and makes sure a poller exists.
    func addInterest() {
        ForkGuard.check()
        interestChanged(countInterest(), requestsPoller: true)
    }

    func removeInterest() {
        interestChanged(uncountInterest(), requestsPoller: false)
    }
}

/// The context of a one-shot fallback timeout (see `Reactor.armFallback`).
private final class FallbackTimeout: Sendable {
    let reactor: Reactor
    let generation: UInt

    init(reactor: Reactor, generation: UInt) {
        self.reactor = reactor
        self.generation = generation
    }
}

/// What the reactor needs from the worker pool: a poller on demand (`ensurePoller`), and the
/// tid of the thread that polls now (0: none), to break a sleeping poller out of the loop
/// when the armed window's slack changes. The composition root connects it.
final class PollerDemand: Sendable {
    let request: @Sendable () -> Void
    let pollingThread: @Sendable () -> Int32

    init(request: @escaping @Sendable () -> Void, pollingThread: @escaping @Sendable () -> Int32) {
        self.request = request
        self.pollingThread = pollingThread
    }
}
