import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Every timer of the process — timer sources, `asyncAfter` blocks, runtime housekeeping —
/// in one engine that wakes the process as rarely as their windows allow.
///
/// Each fire has a window [deadline, deadline + leeway]. Choosing the fewest instants that
/// hit every window is interval stabbing, and the greedy choice is optimal: wake at the
/// earliest window *end*, fire every timer whose window has *opened*, repeat. The engine keeps
/// one heap by deadline (which windows are open) and finds the earliest window end (when to
/// wake) by walking its top, only when it may have changed (see `State.windowEndBound`),
/// and arms the reactor's single next-timer at that window end. The
/// price is lateness: a timer fires anywhere in its window, typically near its end when
/// nothing else wakes the process. Whenever the process is awake anyway (a descriptor event),
/// the poller also fires whatever is open (`fireIfDue`), so timers ride along for free.
final class TimerEngine: Sendable {
    static let shared = TimerEngine()

    private struct State {
        var timers = TimerHeap()
        /// At most the earliest window end of the entries (.max: none), and exactly it when
        /// `windowEndIsExact`. Scheduling lowers it; removing the entry that ends earliest
        /// only makes it inexact, and the walk that makes it exact again waits until arming
        /// needs it — cancelling a timer costs no walk.
        var windowEndBound: UInt64 = .max
        var windowEndIsExact = true
        /// Never 0, which means "no scheduling" (see `TimerSequence`).
        var nextSequence: UInt32 = 1
        /// Wall-clock entries and their CLOCK_REALTIME deadlines: the monotonic deadline is
        /// recomputed from it when the system clock is set.
        var wallEntries: [ObjectIdentifier: (entry: TimerEntry, wallDeadline: UInt64)] = [:]
        var clockWatch: (descriptor: Int32, registration: DescriptorRegistration)?
        /// The window end the reactor's timer is armed for, if armed.
        var armedAt: UInt64?
        /// How many of the entries are runtime housekeeping.
        var housekeeping = 0
        /// How many timers the last wake-up fired: the engine's measure of how dense its
        /// deadlines are, for how much of a window it lets the kernel choose (`wakeWindow`).
        var firedAtLastWake = 0
    }

    private let state = SpinFutexLock<State>(State())
    /// The earliest deadline (UInt64.max: none), for the poller's check without the lock.
    private let earliestDeadline = Atomic<UInt64>(.max)

    /// Schedules (or reschedules) `entry` for the window [deadline, deadline + leeway].
    /// `wallDeadline` makes it follow changes of the system clock. Returns the scheduling's
    /// sequence number, which its fire will carry.
    @discardableResult
    func schedule(_ entry: TimerEntry, deadline: UInt64, leeway: UInt64, wallDeadline: UInt64? = nil) -> UInt32 {
        state.locked { state in
            remove(entry, from: &state)
            entry.deadline = deadline
            entry.leeway = leeway
            entry.sequence = state.nextSequence
            state.nextSequence = TimerSequence.next(after: state.nextSequence)
            insert(entry, into: &state)
            if entry.isHousekeeping { state.housekeeping += 1 }
            if let wallDeadline {
                state.wallEntries[ObjectIdentifier(entry)] = (entry, wallDeadline)
                watchClock(&state)
            }
            rearm(&state)
            return entry.sequence
        }
    }

    /// Takes `entry` out of the engine; it will not fire (unless it is firing right now).
    ///
    /// The reactor stays armed as it was: if the entry was the earliest, the process wakes
    /// once at its time, finds nothing and re-arms. Disarming at every cancel would cost a
    /// reactor round trip (and a wake-up of the poller) per cancelled timer, which a program
    /// that creates and cancels many timers (timeouts that rarely expire) pays constantly.
    func cancel(_ entry: TimerEntry) {
        state.locked { state in
            guard entry.isScheduled else { return }
            remove(entry, from: &state)
            earliestDeadline.store(state.timers.firstDeadline ?? .max, ordering: .releasing)
        }
    }

    private func remove(_ entry: TimerEntry, from state: inout State) {
        guard entry.isScheduled else { return }
        take(entry, from: &state)
        if entry.isHousekeeping { state.housekeeping -= 1 }
        if !state.wallEntries.isEmpty { state.wallEntries[ObjectIdentifier(entry)] = nil }
    }

    /// Puts a scheduled entry in the heap, keeping the window-end bound.
    private func insert(_ entry: TimerEntry, into state: inout State) {
        state.timers.insert(entry)
        state.windowEndBound = min(state.windowEndBound, entry.latest)
    }

    /// Takes an entry out of the heap (before its window changes), keeping the bound.
    private func take(_ entry: TimerEntry, from state: inout State) {
        state.timers.remove(entry)
        if state.timers.count == 0 {
            state.windowEndBound = .max
            state.windowEndIsExact = true
        } else if entry.latest <= state.windowEndBound {
            state.windowEndIsExact = false
        }
    }

    /// Arms the reactor for the earliest window end if it is not armed at or before it
    /// (under the lock, so that arming follows the order of changes).
    private func rearm(_ state: inout State) {
        earliestDeadline.store(state.timers.firstDeadline ?? .max, ordering: .releasing)
        guard state.timers.count > 0 else { return }
        // Armed at or before a lower bound of the earliest end: armed early enough.
        if let armed = state.armedAt, armed <= state.windowEndBound { return }
        if !state.windowEndIsExact {
            state.windowEndBound = state.timers.earliestWindowEnd() ?? .max
            state.windowEndIsExact = true
        }
        let end = state.windowEndBound
        if let armed = state.armedAt, armed <= end { return }
        // At the window's end, or within its last part when the kernel may choose (see
        // `wakeWindow`): arming earlier would split windows that share only that instant into
        // two wake-ups. The kernel's wake-up latency (0.1-0.4 ms measured on a loaded 2-core
        // VM) comes on top, as for any timer.
        state.armedAt = end
        Reactor.shared.setTimer(TimerEngine.wakeWindow(deadline: state.timers.firstDeadline ?? end, latest: end,
                                                       firedAtLastWake: state.firedAtLastWake))
    }

    /// The part of the window [deadline, latest] — from the earliest deadline (before which a
    /// wake-up fires nothing) to the earliest window end — in which the reactor may let the
    /// kernel pick the wake-up (to line it up with other processes' wake-ups, see
    /// `TimerSlack`). Waking at t before `latest` fires only the timers due by t: those due in
    /// (t, latest] need a wake-up of their own, which the greedy optimum did not. So the part
    /// shrinks as deadlines get denser — with k timers fired per wake-up, about k deadlines
    /// fall in a window, and a quarter of the window divided by k holds about a quarter of
    /// one: a process firing many timers per wake-up keeps its optimum (the window is then
    /// too narrow for slack and wakes at its end), one with few lets the kernel align them.
    static func wakeWindow(deadline: UInt64, latest: UInt64, firedAtLastWake: Int) -> WakeWindow {
        let share = (latest - min(deadline, latest)) / (4 * UInt64(max(1, firedAtLastWake)))
        return WakeWindow(earliest: latest - share, latest: latest)
    }

    /// The reactor's timer fired: fire everything whose window has opened.
    func fire() {
        let now = SystemClock.monotonicNanoseconds()
        var due: [(entry: TimerEntry, sequence: UInt32, deadline: UInt64, leeway: UInt64)] = []
        state.locked { state in
            // Called for the reactor's timer or for another wake-up: either way, arm anew
            // for what is left (re-arming at the same time is harmless).
            state.armedAt = nil
            while let first = state.timers.first, first.deadline <= now {
                remove(first, from: &state)
                due.append((first, first.sequence, first.deadline, first.leeway))
            }
            if !due.isEmpty { state.firedAtLastWake = due.count }
            rearm(&state)
        }
        for (entry, sequence, deadline, leeway) in due {
            Diagnostics.timerWillFire(entry, deadline: deadline, leeway: leeway, now: now)
            entry.fired(sequence: sequence, deadline: deadline, now: now)
        }
    }

    /// Called by the poller after every wake-up: timers whose window is open fire now,
    /// in the wake-up the process has anyway.
    func fireIfDue() {
        let earliest = earliestDeadline.load(ordering: .acquiring)
        guard earliest != .max, earliest <= SystemClock.monotonicNanoseconds() else { return }
        fire()
    }

    // MARK: Wall clock

    /// Wall-clock timers need to hear about changes of the system clock: a CLOCK_REALTIME
    /// timerfd with TFD_TIMER_CANCEL_ON_SET, registered once, tells.
    private func watchClock(_ state: inout State) {
        guard state.clockWatch == nil else { return }
        let descriptor: Int32
        do throws(SystemError) {
            descriptor = try Syscall.shim("timerfd_create") { lull_clock_watch_create() }
        } catch {
            RuntimeLog.once("clock-watch") { "cannot watch for system clock changes (\(error)): wall-clock timers will not follow them" }
            return
        }
        do throws(ReactorError) {
            let registration = try Reactor.shared.register(descriptor: descriptor, forWriting: false,
                                                           handler: ClockChangeListener())
            state.clockWatch = (descriptor, registration)
        } catch {
            close(descriptor)
            RuntimeLog.once("clock-watch") { "cannot watch for system clock changes: \(error)" }
        }
    }

    /// On the polling thread: maybe the clock was set; if so, re-place wall-clock timers.
    func clockMayHaveChanged() {
        let descriptor = state.locked { $0.clockWatch?.descriptor }
        guard let descriptor, lull_clock_watch_check(descriptor) == 1 else { return }
        state.locked { state in
            let wallNow = SystemClock.realtimeNanoseconds()
            let monotonicNow = SystemClock.monotonicNanoseconds()
            for (entry, wall) in state.wallEntries.values {
                take(entry, from: &state)
                entry.deadline = monotonicDeadline(forWall: wall, wallNow: wallNow, monotonicNow: monotonicNow)
                insert(entry, into: &state)
            }
            rearm(&state)
        }
        fireIfDue()
    }

    /// Live timers of the program — timer sources and delayed blocks, not the runtime's own
    /// housekeeping (for diagnostics and tests).
    var count: Int { state.locked { $0.timers.count - $0.housekeeping } }
}

/// Converts a wall-clock instant to the monotonic clock, as of the given readings of both
/// clocks (by default, now). A past instant maps to the monotonic "now".
func monotonicDeadline(forWall wall: UInt64, wallNow: UInt64 = SystemClock.realtimeNanoseconds(),
                       monotonicNow: UInt64 = SystemClock.monotonicNanoseconds()) -> UInt64 {
    if wall == .max { return .max }
    return monotonicNow.saturatingAdding(nanoseconds: max(0, Int128(wall) - Int128(wallNow)))
}

final class ClockChangeListener: ReactorEventHandler {
    func reactorEvent(readable: Bool, writable: Bool) {
        TimerEngine.shared.clockMayHaveChanged()
    }
}
