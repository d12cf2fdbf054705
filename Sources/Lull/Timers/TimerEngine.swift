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
///
/// The engine owns no device: it receives a clock and an `arm` capability (the reactor's
/// `setTimer` in a program, a recorder in a test that drives a `ManualClock`). It decides
/// under its spin lock and acts after it: a change that needs the reactor armed anew returns
/// an `ArmRequest` from the locked section, carrying a generation so that the reactor can
/// drop one that arrives after a newer one; the first wall-clock timer asks, after the lock,
/// for the system clock to be watched (`watchWallClock`).
final class TimerEngine: Sendable {
    /// Arms the reactor's next wake-up: the window and its generation (see `ArmRequest`).
    typealias Arm = @Sendable (WakeWindow, UInt64) -> Void

    /// Disarms the reactor's next wake-up, as of a generation (see `ArmRequest`).
    typealias Disarm = @Sendable (UInt64) -> Void

    private let clock: any TimerClock
    private let arm: Arm
    private let disarm: Disarm
    private let watchWallClock: @Sendable () -> Void

    /// - Parameters:
    ///   - clock: what "now" is when the engine fires.
    ///   - arm: arms the next wake-up; called outside the engine's lock.
    ///   - disarm: takes the armed wake-up back (a cancel left nothing to fire); called
    ///     outside the engine's lock, ordered with `arm` by the generation.
    ///   - watchWallClock: starts reporting changes of the system clock to
    ///     `wallClockChanged()`; called once, outside the lock, for the first wall-clock timer.
    init(clock: any TimerClock = SystemTimerClock(), arm: @escaping Arm, disarm: @escaping Disarm = { _ in },
         watchWallClock: @escaping @Sendable () -> Void = {}) {
        self.clock = clock
        self.arm = arm
        self.disarm = disarm
        self.watchWallClock = watchWallClock
    }

    /// A window to arm, decided under the lock and carried out after it. Generations grow
    /// with every decision, so the reactor applies only the newest of two that race.
    struct ArmRequest {
        let window: WakeWindow
        let generation: UInt64
    }

    private struct State {
        var timers = TimerHeap()
        /// Entries scheduled once and never cancelled nor rescheduled (`asyncAfter`).
        var onceTimers = FireOnceHeap()
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
        /// The system clock is watched (asked for once, with the first wall-clock entry).
        var watchesWallClock = false
        /// The window end the reactor's timer is armed for (or is being armed for, by the
        /// thread that decided it), if armed.
        var armedAt: UInt64?
        /// The generation of the last arm decided.
        var armGeneration: UInt64 = 0
        /// How many of the entries are runtime housekeeping.
        var housekeeping = 0
        /// How many timers the last wake-up fired: the engine's measure of how dense its
        /// deadlines are, for how much of a window it lets the kernel choose (`wakeWindow`).
        var firedAtLastWake = 0

        var isEmpty: Bool { timers.count == 0 && onceTimers.count == 0 }

        /// The earliest deadline of both heaps (nil: none).
        var firstDeadline: UInt64? {
            switch (timers.firstDeadline, onceTimers.firstDeadline) {
            case let (indexed?, once?): min(indexed, once)
            case let (indexed, once): indexed ?? once
            }
        }

        /// The earliest window end of both heaps (nil: none).
        mutating func earliestWindowEnd() -> UInt64? {
            switch (timers.earliestWindowEnd(), onceTimers.earliestWindowEnd()) {
            case let (indexed?, once?): min(indexed, once)
            case let (indexed, once): indexed ?? once
            }
        }
    }

    private let state = SpinFutexLock<State>(State(), rank: .timerEngine)

    /// Now on the engine's clock (monotonic ns): what a deadline given to this engine counts
    /// from.
    var now: UInt64 { clock.monotonicNanoseconds() }
    /// The earliest deadline (UInt64.max: none), for the poller's check without the lock.
    private let earliestDeadline = Atomic<UInt64>(.max)

    /// Schedules (or reschedules) `entry` for the window [deadline, deadline + leeway].
    /// `wallDeadline` makes it follow changes of the system clock. Returns the scheduling's
    /// sequence number, which its fire will carry.
    @discardableResult
    func schedule(_ entry: TimerEntry, deadline: UInt64, leeway: UInt64, wallDeadline: UInt64? = nil) -> UInt32 {
        let (sequence, request, watchClock) = state.locked { state -> (UInt32, ArmRequest?, Bool) in
            remove(entry, from: &state)
            entry.deadline = deadline
            entry.leeway = leeway
            entry.sequence = state.nextSequence
            state.nextSequence = TimerSequence.next(after: state.nextSequence)
            insert(entry, into: &state)
            if entry.isHousekeeping { state.housekeeping += 1 }
            var watchClock = false
            if let wallDeadline {
                state.wallEntries[ObjectIdentifier(entry)] = (entry, wallDeadline)
                watchClock = !state.watchesWallClock
                state.watchesWallClock = true
            }
            return (entry.sequence, rearm(&state), watchClock)
        }
        if let request { arm(request.window, request.generation) }
        if watchClock { watchWallClock() }
        return sequence
    }

    /// Schedules `entry` for the window [deadline, deadline + leeway], for good: it fires
    /// once and is never cancelled nor rescheduled (an `asyncAfter` block). Such entries live
    /// in a heap of their own whose sifts never touch an entry (`FireOnceHeap`); the entry
    /// stays "not scheduled" for `cancel` and `schedule`, which must not be called on it.
    func scheduleOnce(_ entry: TimerEntry, deadline: UInt64, leeway: UInt64) {
        // The entry is the caller's new object: its fields are set here, outside the lock,
        // and read back rounded as every entry's are (`TimerHeapFields.leeway`).
        entry.deadline = deadline
        entry.leeway = leeway
        let latest = entry.latest
        let request = state.locked { state -> ArmRequest? in
            let sequence = state.nextSequence
            state.nextSequence = TimerSequence.next(after: sequence)
            state.onceTimers.insert(FireOnceHeap.Item(deadline: deadline, latest: latest, sequence: sequence, entry: entry))
            state.windowEndBound = min(state.windowEndBound, latest)
            return rearm(&state)
        }
        if let request { arm(request.window, request.generation) }
    }

    /// Takes `entry` out of the engine; it will not fire (unless it is firing right now).
    ///
    /// The reactor mostly stays armed as it was: if the entry was the earliest, the process
    /// wakes once at its time, finds nothing and re-arms. Re-arming at every cancel would
    /// cost a reactor round trip per cancelled timer, which a program that creates and
    /// cancels many timers (timeouts that rarely expire) pays constantly; there the next
    /// timer is due soon after the armed instant, so the wake-up fires it or is close to one
    /// that does. Two cases do not wait: a cancel that leaves no timer disarms the reactor
    /// (a cancelled sleep of an otherwise idle process costs no wake-up), and one that
    /// leaves the earliest deadline more than `staleArmGap` after the armed instant arms it
    /// anew (that wake-up would be a lone one, fire nothing, and come long before any other).
    ///
    /// `reclaimingWakeUp` moves the armed wake-up whenever it would now fire nothing, however
    /// close the next deadline: for an entry that is cancelled rarely and whose own wake-up
    /// is the one to save (the stall check's look, taken back when a burst drained).
    func cancel(_ entry: TimerEntry, reclaimingWakeUp: Bool = false) {
        let change = state.locked { state -> ArmChange? in
            guard entry.isScheduled else { return nil }
            remove(entry, from: &state)
            earliestDeadline.store(state.firstDeadline ?? .max, ordering: .releasing)
            return staleArmChange(&state, gap: reclaimingWakeUp ? 1 : TimerEngine.staleArmGap)
        }
        switch change {
        case nil: break
        case .arm(let request): arm(request.window, request.generation)
        case .disarm(let generation): disarm(generation)
        }
    }

    /// How far after the armed wake-up the earliest deadline left by a cancel must be for
    /// the cancel to re-arm (see `cancel`).
    static let staleArmGap: UInt64 = 1_000_000_000

    /// What a cancel does to the reactor's timer.
    private enum ArmChange {
        case arm(ArmRequest)
        case disarm(UInt64)
    }

    /// After a removal: the armed wake-up taken back when nothing is left, or moved when
    /// it would fire nothing and the earliest deadline is `staleArmGap` or more after it.
    private func staleArmChange(_ state: inout State, gap: UInt64) -> ArmChange? {
        guard let armed = state.armedAt else { return nil }
        // Both heaps: an `asyncAfter` block left alone still needs its wake-up.
        guard let first = state.firstDeadline else {
            state.armedAt = nil
            state.armGeneration += 1
            return .disarm(state.armGeneration)
        }
        guard first > armed, first - armed >= gap else { return nil }
        state.armedAt = nil
        return rearm(&state).map(ArmChange.arm)
    }

    /// The window end the reactor's timer is armed for; nil: not armed (tests).
    var armedWindowEnd: UInt64? { state.locked { $0.armedAt } }

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
        if state.isEmpty {
            state.windowEndBound = .max
            state.windowEndIsExact = true
        } else if entry.latest <= state.windowEndBound {
            state.windowEndIsExact = false
        }
    }

    /// Takes the earliest fire-once entry out, keeping the bound (as `take` does).
    private func takeFirstOnce(from state: inout State) {
        guard let first = state.onceTimers.popFirst() else { return }
        if state.isEmpty {
            state.windowEndBound = .max
            state.windowEndIsExact = true
        } else if first.latest <= state.windowEndBound {
            state.windowEndIsExact = false
        }
    }

    /// Whether a fire-once entry comes before an indexed one: by deadline, then scheduling.
    private static func goesFirst(_ once: FireOnceHeap.Item, before entry: TimerEntry) -> Bool {
        once.deadline != entry.deadline ? once.deadline < entry.deadline
            : TimerSequence.isEarlier(once.sequence, than: entry.sequence)
    }

    /// Decides whether the reactor must be armed for the earliest window end: not when it is
    /// armed at or before it. The caller arms after the lock; the generation keeps the order
    /// of the decisions.
    private func rearm(_ state: inout State) -> ArmRequest? {
        earliestDeadline.store(state.firstDeadline ?? .max, ordering: .releasing)
        guard !state.isEmpty else { return nil }
        // Armed at or before a lower bound of the earliest end: armed early enough.
        if let armed = state.armedAt, armed <= state.windowEndBound { return nil }
        if !state.windowEndIsExact {
            state.windowEndBound = state.earliestWindowEnd() ?? .max
            state.windowEndIsExact = true
        }
        let end = state.windowEndBound
        if let armed = state.armedAt, armed <= end { return nil }
        // At the window's end, or within its last part when the kernel may choose (see
        // `wakeWindow`): arming earlier would split windows that share only that instant into
        // two wake-ups. The kernel's wake-up latency comes on top, as for any timer.
        state.armedAt = end
        state.armGeneration += 1
        return ArmRequest(window: TimerEngine.wakeWindow(deadline: state.firstDeadline ?? end, latest: end,
                                                         firedAtLastWake: state.firedAtLastWake),
                          generation: state.armGeneration)
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
        let now = clock.monotonicNanoseconds()
        var due: [(entry: TimerEntry, sequence: UInt32, deadline: UInt64, leeway: UInt64)] = []
        let request = state.locked { state -> ArmRequest? in
            // Called for the reactor's timer or for another wake-up: either way, arm anew
            // for what is left (re-arming at the same time is harmless).
            state.armedAt = nil
            // Both heaps in one order: by deadline, then scheduling.
            while true {
                let indexed = state.timers.first.flatMap { $0.deadline <= now ? $0 : nil }
                let once = state.onceTimers.first.flatMap { $0.deadline <= now ? $0 : nil }
                if let once, indexed.map({ TimerEngine.goesFirst(once, before: $0) }) ?? true {
                    takeFirstOnce(from: &state)
                    due.append((once.entry, once.sequence, once.deadline, once.latest &- once.deadline))
                } else if let indexed {
                    remove(indexed, from: &state)
                    due.append((indexed, indexed.sequence, indexed.deadline, indexed.leeway))
                } else {
                    break
                }
            }
            if !due.isEmpty { state.firedAtLastWake = due.count }
            return rearm(&state)
        }
        if let request { arm(request.window, request.generation) }
        for (entry, sequence, deadline, leeway) in due {
            Diagnostics.timerWillFire(entry, deadline: deadline, leeway: leeway, now: now)
            entry.fired(sequence: sequence, deadline: deadline, now: now)
        }
    }

    /// Called by the poller after every wake-up: timers whose window is open fire now,
    /// in the wake-up the process has anyway.
    func fireIfDue() {
        let earliest = earliestDeadline.load(ordering: .acquiring)
        guard earliest != .max, earliest <= clock.monotonicNanoseconds() else { return }
        fire()
    }

    // MARK: Wall clock

    /// The system clock was set (reported by whatever `watchWallClock` started): re-places
    /// the wall-clock timers and fires those now due.
    func wallClockChanged() {
        let request = state.locked { state -> ArmRequest? in
            let wallNow = clock.realtimeNanoseconds()
            let monotonicNow = clock.monotonicNanoseconds()
            for (entry, wall) in state.wallEntries.values {
                take(entry, from: &state)
                entry.deadline = Lull.monotonicDeadline(forWall: wall, wallNow: wallNow, monotonicNow: monotonicNow)
                insert(entry, into: &state)
            }
            return rearm(&state)
        }
        if let request { arm(request.window, request.generation) }
        fireIfDue()
    }

    /// The wall-clock instant `wall` on the monotonic clock, as of now on this engine's clock.
    func monotonicDeadline(forWall wall: UInt64) -> UInt64 {
        Lull.monotonicDeadline(forWall: wall, wallNow: clock.realtimeNanoseconds(),
                               monotonicNow: clock.monotonicNanoseconds())
    }

    /// Live timers of the program — timer sources and delayed blocks, not the runtime's own
    /// housekeeping (for diagnostics and tests).
    var count: Int { state.locked { $0.timers.count + $0.onceTimers.count - $0.housekeeping } }
}

/// Converts a wall-clock instant to the monotonic clock, as of the given readings of both
/// clocks (by default, now). A past instant maps to the monotonic "now".
func monotonicDeadline(forWall wall: UInt64, wallNow: UInt64 = SystemClock.realtimeNanoseconds(),
                       monotonicNow: UInt64 = SystemClock.monotonicNanoseconds()) -> UInt64 {
    if wall == .max { return .max }
    return monotonicNow.saturatingAdding(nanoseconds: max(0, Int128(wall) - Int128(wallNow)))
}
