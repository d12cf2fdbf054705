import Synchronization
import Testing
@testable import Lull

/// The timer engine on a manual clock, with the test as its reactor: every test owns its
/// engine and its time, so the results are exact (no lateness, no "one of a few trials")
/// and the suite runs in parallel with everything else.
@Suite struct DrivenTimerEngineTests {
    // MARK: Coalescing

    /// The engine wakes exactly as often as the greedy optimum for the same windows, fires
    /// every entry once, inside its window.
    @Test(arguments: [0xC0A1E5CE, 7, 2_026, 0xFEED] as [UInt64])
    func wakeUpsEqualTheOptimalStabbingOfTheWindows(seed: UInt64) {
        let driven = DrivenEngine()
        var random = TimerTestKit.Random(seed: seed)
        let count = 200
        let start = driven.now
        let windows = (0..<count).map { _ -> (deadline: UInt64, leeway: UInt64) in
            (start + UInt64.random(in: 1_000_000...2_000_000_000, using: &random),
             UInt64.random(in: 0...300_000_000, using: &random))
        }
        let fires = Recorder<(index: Int, time: UInt64)>()
        for (index, window) in windows.enumerated() {
            driven.engine.schedule(driven.entry { fires.append((index, driven.now)) },
                                   deadline: window.deadline, leeway: window.leeway)
        }
        let wakeUps = driven.runUntilIdle()
        let optimum = TimerTestKit.optimalWakeUps(windows.map { ($0.deadline, $0.deadline + $0.leeway) })
        #expect(wakeUps == optimum)
        #expect(optimum < count / 2, "the windows overlap too little to show coalescing")
        #expect(fires.values.map(\.index).sorted() == Array(0..<count), "an entry fired twice or never")
        for fire in fires.values {
            let window = windows[fire.index]
            #expect(fire.time >= window.deadline && fire.time <= window.deadline + window.leeway)
        }
        #expect(driven.engine.count == 0)
    }

    /// Fire-once entries (`scheduleOnce`, the `asyncAfter` path: a heap of their own) and
    /// indexed ones, mixed, with many equal deadlines and some indexed ones cancelled: the
    /// wake-ups still equal the greedy optimum for the live windows, each live entry fires
    /// once inside its window, a cancelled one never, and a wake-up fires its entries by
    /// deadline, then in scheduling order, across both heaps.
    @Test(arguments: [0x0_5EED, 11, 0xA5_A5A5] as [UInt64])
    func fireOnceAndIndexedEntriesShareTheWakeUpsAndTheOrder(seed: UInt64) {
        let driven = DrivenEngine()
        var random = TimerTestKit.Random(seed: seed)
        let count = 300
        let start = driven.now
        let windows = (0..<count).map { _ -> (deadline: UInt64, leeway: UInt64) in
            // Few distinct deadlines: ties, broken by scheduling order.
            (start + UInt64.random(in: 1...40, using: &random) * 25_000_000,
             UInt64.random(in: 0...4, using: &random) * 50_000_000)
        }
        let fires = Recorder<(index: Int, time: UInt64)>()
        var cancelled: Set<Int> = []
        var indexedEntries: [(Int, CallbackEntry)] = []
        for (index, window) in windows.enumerated() {
            let entry = driven.entry { fires.append((index, driven.now)) }
            if random.next() % 2 == 0 {
                driven.engine.scheduleOnce(entry, deadline: window.deadline, leeway: window.leeway)
            } else {
                driven.engine.schedule(entry, deadline: window.deadline, leeway: window.leeway)
                indexedEntries.append((index, entry))
            }
        }
        #expect(driven.engine.count == count)
        for (index, entry) in indexedEntries where random.next() % 5 == 0 {
            driven.engine.cancel(entry)
            cancelled.insert(index)
        }
        #expect(driven.engine.count == count - cancelled.count)
        let live = windows.indices.filter { !cancelled.contains($0) }
        let wakeUps = driven.runUntilIdle()
        let optimum = TimerTestKit.optimalWakeUps(live.map { (windows[$0].deadline, windows[$0].deadline + windows[$0].leeway) })
        #expect(wakeUps == optimum)
        #expect(fires.values.map(\.index).sorted() == live, "an entry fired twice, never, or after its cancel")
        #expect(driven.lateFires == 0)
        for fire in fires.values {
            #expect(fire.time >= windows[fire.index].deadline, "fired before its deadline")
        }
        let inOrder = zip(fires.values, fires.values.dropFirst()).allSatisfy { earlier, later in
            earlier.time != later.time
                || (windows[earlier.index].deadline, earlier.index) < (windows[later.index].deadline, later.index)
        }
        #expect(inOrder, "a wake-up fired its entries out of (deadline, scheduling) order")
        #expect(driven.engine.count == 0)
    }

    /// A = [T, T+100], B = [T+40, T+200], C = [T+60, T+160] (ms): one wake-up, at A's end.
    @Test func windowsThatOverlapFireInOneWakeUp() {
        let driven = DrivenEngine()
        let start = driven.now
        let fires = Recorder<UInt64>()
        for (offset, leeway) in [(0, 100), (40, 160), (60, 100)] as [(UInt64, UInt64)] {
            driven.engine.schedule(driven.entry { fires.append(driven.now) },
                                   deadline: start + offset * 1_000_000, leeway: leeway * 1_000_000)
        }
        #expect(driven.runUntilIdle() == 1)
        #expect(fires.values == [start + 100_000_000, start + 100_000_000, start + 100_000_000])
    }

    /// B's window opens exactly when A's closes: they share that instant, so one wake-up.
    @Test func windowsThatShareOnlyTheirBoundaryInstantFireInOneWakeUp() {
        let driven = DrivenEngine()
        let start = driven.now
        let fires = Recorder<UInt64>()
        driven.engine.schedule(driven.entry { fires.append(driven.now) }, deadline: start, leeway: 50_000_000)
        driven.engine.schedule(driven.entry { fires.append(driven.now) }, deadline: start + 50_000_000,
                               leeway: 100_000_000)
        #expect(driven.runUntilIdle() == 1)
        #expect(fires.values == [start + 50_000_000, start + 50_000_000])
    }

    /// Windows one nanosecond apart never share a wake-up.
    @Test func windowsThatDoNotMeetTakeOneWakeUpEach() {
        let driven = DrivenEngine()
        let start = driven.now
        driven.engine.schedule(driven.entry {}, deadline: start, leeway: 50_000_000)
        driven.engine.schedule(driven.entry {}, deadline: start + 50_000_001, leeway: 100_000_000)
        #expect(driven.runUntilIdle() == 2)
    }

    @Test func entriesDueInOneWakeUpRunInDeadlineThenSchedulingOrder() {
        let driven = DrivenEngine()
        let log = Recorder<Int>()
        var deadlines: [UInt64] = []
        for index in 0..<12 {
            let deadline = driven.now + 40_000_000 + UInt64((11 - index) % 4) * 1_000
            deadlines.append(deadline)
            driven.engine.schedule(driven.entry { log.append(index) }, deadline: deadline, leeway: 10_000_000)
        }
        #expect(driven.runUntilIdle() == 1)
        #expect(log.values == (0..<12).sorted { (deadlines[$0], $0) < (deadlines[$1], $1) })
    }

    // MARK: Entries and arming

    @Test func schedulingAddsOneEntryReschedulingReplacesItAndCancelRemovesIt() {
        let driven = DrivenEngine()
        let entries = (0..<10).map { _ in driven.entry {} }
        for (index, entry) in entries.enumerated() {
            driven.engine.schedule(entry, deadline: driven.now + 1_000_000 + UInt64(index), leeway: 0)
        }
        #expect(driven.engine.count == 10)
        driven.engine.schedule(entries[0], deadline: driven.now + 100, leeway: 5_000_000)
        driven.engine.schedule(entries[0], deadline: driven.now + 50, leeway: 0)
        #expect(driven.engine.count == 10)
        driven.engine.cancel(entries[0])
        driven.engine.cancel(entries[0])
        driven.engine.cancel(driven.entry {})
        #expect(driven.engine.count == 9)
        for entry in entries { driven.engine.cancel(entry) }
        #expect(driven.engine.count == 0)
        #expect(driven.fired == 0)
    }

    /// The engine arms the earliest window end, re-arms only for an earlier one (with a newer
    /// generation), keeps the reactor armed when an entry is cancelled (the wake-up then
    /// fires nothing and arms nothing), and arms for what is left after a fire.
    @Test func armsFollowTheEarliestWindowEnd() throws {
        let driven = DrivenEngine()
        let start = driven.now
        let late = driven.entry {}
        driven.engine.schedule(late, deadline: start + 200_000_000, leeway: 100_000_000)
        let first = try #require(driven.recorder.applied)
        #expect(first.window.latest == start + 300_000_000)
        driven.engine.schedule(driven.entry {}, deadline: start + 400_000_000, leeway: 0)
        #expect(driven.recorder.arms == 1, "a later window needs no new arm")
        let early = driven.entry {}
        driven.engine.schedule(early, deadline: start + 10_000_000, leeway: 5_000_000)
        let second = try #require(driven.recorder.applied)
        #expect(second.window.latest == start + 15_000_000)
        #expect(second.generation > first.generation)
        driven.engine.cancel(early)
        #expect(driven.recorder.applied?.window.latest == start + 15_000_000, "cancel keeps the arm")
        #expect(driven.wakeAtArmedEnd())
        #expect(driven.fired == 0)
        #expect(driven.recorder.applied?.window.latest == start + 300_000_000, "re-armed for what is left")
        #expect(driven.runUntilIdle() == 2)
        #expect(driven.fired == 2)
        #expect(!driven.wakeAtArmedEnd(), "nothing left armed")
    }

    /// A cancel that leaves no timer disarms the reactor: the wake-up it was armed for
    /// would fire nothing.
    @Test func cancellingTheLastTimerDisarms() throws {
        let driven = DrivenEngine()
        let start = driven.now
        let entries = (0..<3).map { _ in driven.entry {} }
        for (index, entry) in entries.enumerated() {
            driven.engine.schedule(entry, deadline: start + 3_600_000_000_000 + UInt64(index), leeway: 1_000_000_000)
        }
        #expect(driven.recorder.applied != nil)
        driven.engine.cancel(entries[0])
        driven.engine.cancel(entries[1])
        #expect(driven.recorder.applied != nil, "a timer is left: the arm stays")
        #expect(driven.recorder.disarms == 0)
        driven.engine.cancel(entries[2])
        #expect(driven.recorder.applied == nil, "nothing left: disarmed")
        #expect(driven.recorder.disarms == 1)
        #expect(driven.engine.armedWindowEnd == nil)
        #expect(driven.runUntilIdle() == 0)
        // Scheduling again arms again, with a newer generation than the disarm's.
        driven.engine.schedule(driven.entry {}, deadline: start + 5_000_000, leeway: 0)
        #expect(driven.recorder.applied?.window.latest == start + 5_000_000)
        #expect(driven.runUntilIdle() == 1)
    }

    /// A cancel that leaves only fire-once entries (`asyncAfter` blocks, in their own heap)
    /// keeps a wake-up for them: "no timer left" counts both heaps.
    @Test func cancellingTheLastIndexedTimerKeepsTheFireOnceEntriesWakeUp() throws {
        let driven = DrivenEngine()
        let start = driven.now
        let fired = Counter()
        let cancelled = driven.entry {}
        driven.engine.schedule(cancelled, deadline: start + 5_000_000, leeway: 0)
        driven.engine.scheduleOnce(driven.entry { fired.increment() }, deadline: start + 20_000_000, leeway: 0)
        driven.engine.cancel(cancelled)
        #expect(driven.recorder.disarms == 0, "a fire-once entry is left: the reactor stays armed")
        #expect(driven.runUntilIdle() == 1)
        #expect(fired.value == 1)
        // Far behind the cancelled one, the fire-once entry gets an arm of its own.
        let soon = driven.entry {}
        driven.engine.schedule(soon, deadline: driven.now + 1_000_000, leeway: 0)
        driven.engine.scheduleOnce(driven.entry { fired.increment() },
                                   deadline: driven.now + 1_000_000 + TimerEngine.staleArmGap + 1, leeway: 0)
        driven.engine.cancel(soon)
        #expect(driven.recorder.disarms == 0)
        #expect(driven.runUntilIdle() == 1)
        #expect(fired.value == 2)
    }

    /// A cancel that leaves the earliest deadline `staleArmGap` or more after the armed
    /// window end arms for what is left; a nearer one keeps the arm (see
    /// `armsFollowTheEarliestWindowEnd`).
    @Test func cancellingTheEarliestLongBeforeTheRestReArms() throws {
        let driven = DrivenEngine()
        let start = driven.now
        let soon = driven.entry {}
        driven.engine.schedule(soon, deadline: start + 10_000_000, leeway: 0)
        driven.engine.schedule(driven.entry {}, deadline: start + 10_000_000 + TimerEngine.staleArmGap + 1, leeway: 0)
        #expect(driven.recorder.applied?.window.latest == start + 10_000_000)
        driven.engine.cancel(soon)
        #expect(driven.recorder.applied?.window.latest == start + 10_000_000 + TimerEngine.staleArmGap + 1)
        #expect(driven.runUntilIdle() == 1)
        #expect(driven.fired == 1)
    }

    /// Any wake-up of the process fires the windows that have opened, and nothing else.
    @Test func fireIfDueFiresOpenWindowsOnly() {
        let driven = DrivenEngine()
        let start = driven.now
        let open = Recorder<UInt64>()
        let closed = Recorder<UInt64>()
        driven.engine.schedule(driven.entry { open.append(driven.now) }, deadline: start + 30_000_000,
                               leeway: 60_000_000_000)
        driven.engine.schedule(driven.entry { closed.append(driven.now) }, deadline: start + 60_000_000_000, leeway: 0)
        driven.engine.fireIfDue()
        #expect(open.count == 0, "fired before its deadline")
        driven.clock.advance(by: 30_000_000)
        driven.engine.fireIfDue()
        #expect(open.values == [start + 30_000_000])
        #expect(closed.count == 0)
        #expect(driven.engine.count == 1)
    }

    /// An entry's action may reschedule the entry: it fires again at the new deadline.
    @Test func anActionMayRescheduleItsOwnEntry() {
        let driven = DrivenEngine()
        let times = Recorder<UInt64>()
        let holder = Captured<TimerEntry>()
        let entry = driven.entry {
            times.append(driven.now)
            guard times.count < 5, let entry = holder.value else { return }
            driven.engine.schedule(entry, deadline: driven.now + 5_000_000, leeway: 0)
        }
        holder.set(entry)
        let start = driven.now
        driven.engine.schedule(entry, deadline: start + 5_000_000, leeway: 0)
        #expect(driven.runUntilIdle() == 5)
        #expect(times.values == (1...5).map { start + UInt64($0) * 5_000_000 })
    }

    // MARK: Wall clock

    /// Setting the system clock re-places wall-clock entries: forward makes one due sooner,
    /// backward later; monotonic entries stay where they are.
    @Test func wallClockEntriesFollowTheSystemClockWhenItIsSet() {
        let driven = DrivenEngine()
        let start = driven.now
        let wallStart = driven.clock.realtimeNanoseconds()
        let forward = Recorder<UInt64>()
        let backward = Recorder<UInt64>()
        let monotonic = Recorder<UInt64>()
        let tenSeconds: UInt64 = 10_000_000_000
        driven.engine.schedule(driven.entry { forward.append(driven.now) }, deadline: start + tenSeconds, leeway: 0,
                               wallDeadline: wallStart + tenSeconds)
        driven.engine.schedule(driven.entry { backward.append(driven.now) }, deadline: start + 2 * tenSeconds, leeway: 0,
                               wallDeadline: wallStart + 2 * tenSeconds)
        driven.engine.schedule(driven.entry { monotonic.append(driven.now) }, deadline: start + 3 * tenSeconds, leeway: 0)
        #expect(driven.wallClockWatches == 1, "the clock is watched from the first wall-clock entry on")
        // The wall clock jumps 6 s ahead: the first entry is due 6 s sooner.
        driven.clock.setRealtime(wallStart + 6_000_000_000)
        driven.engine.wallClockChanged()
        #expect(driven.wakeAtArmedEnd())
        #expect(forward.values == [start + 4_000_000_000])
        // Then an hour back: the second entry moves an hour later, the monotonic one stays.
        driven.clock.setRealtime(driven.clock.realtimeNanoseconds() - 3_600_000_000_000)
        driven.engine.wallClockChanged()
        #expect(driven.runUntilIdle() == 2)
        #expect(monotonic.values == [start + 3 * tenSeconds])
        #expect(backward.values.count == 1)
        #expect(backward.values.first.map { $0 > start + 3_600_000_000_000 } == true)
        #expect(driven.wallClockWatches == 1)
    }

    // MARK: Arms that race

    /// Threads that schedule and cancel at once arm after the engine's lock, so their arms
    /// may reach the reactor out of order; applying only newer generations, the reactor always
    /// ends up armed at or before the earliest window end: no timer is left late.
    @Test func racingArmsLeaveTheReactorArmedEarlyEnough() async {
        let driven = DrivenEngine()
        let start = driven.now
        await withTaskGroup(of: Void.self) { group in
            for worker in 0..<8 {
                group.addTask {
                    var random = TimerTestKit.Random(seed: UInt64(worker) + 1)
                    var mine: [CallbackEntry] = []
                    for _ in 0..<2_000 {
                        if !mine.isEmpty && Bool.random(using: &random) {
                            driven.engine.cancel(mine.removeLast())
                        } else {
                            let entry = driven.entry {}
                            mine.append(entry)
                            driven.engine.schedule(entry, deadline: start + UInt64.random(in: 1...1_000_000_000, using: &random),
                                                   leeway: UInt64.random(in: 0...1_000_000, using: &random))
                        }
                    }
                }
            }
        }
        let remaining = driven.engine.count
        if remaining > 0 {
            let armed = driven.recorder.applied
            #expect(armed != nil)
            // Every entry fires by the end of its window when the wake-ups follow the arms.
            let fires = driven.runUntilIdle()
            #expect(fires > 0)
            #expect(driven.lateFires == 0)
        }
    }
}

/// The reactor applies a window only if its generation is newer than the last one applied.
@Suite struct ReactorArmOrderTests {
    @Test func aStaleArmIsDropped() {
        let reactor = Reactor()
        let now = monotonicNanoseconds()
        let newer = WakeWindow(earliest: now + 5_000_000_000, latest: now + 6_000_000_000)
        let older = WakeWindow(earliest: now + 1_000_000_000, latest: now + 2_000_000_000)
        reactor.setTimer(newer, generation: 2)
        reactor.setTimer(older, generation: 1)
        #expect(reactor.armedWindow == newer)
        reactor.setTimer(older, generation: 3)
        #expect(reactor.armedWindow == older)
        reactor.setTimer(nil, generation: 4)
        #expect(reactor.armedWindow == nil)
        #expect(!reactor.needsPoller)
    }
}

/// A timer engine on a `ManualClock` whose "reactor" is the test: it records the arms (the
/// newest generation wins, as in `Reactor.setTimer`) and wakes the engine at the end of the
/// armed window, as the reactor's timer would.
final class DrivenEngine: Sendable {
    let clock = ManualClock()
    let recorder = ArmRecorder()
    let engine: TimerEngine
    private let fires = Atomic<Int>(0)
    private let late = Atomic<Int>(0)

    init() {
        let recorder = recorder
        engine = TimerEngine(clock: clock, arm: { recorder.arm($0, generation: $1) },
                             disarm: { recorder.disarm(generation: $0) },
                             watchWallClock: { recorder.noteWatch() })
    }

    var now: UInt64 { clock.monotonicNanoseconds() }
    var fired: Int { fires.load(ordering: .relaxed) }
    var lateFires: Int { late.load(ordering: .relaxed) }
    var wallClockWatches: Int { recorder.watches }

    /// An entry that counts its fires (and whether it fired after its window) and runs `action`.
    func entry(_ action: @escaping @Sendable () -> Void) -> CallbackEntry {
        let holder = Captured<TimerEntry>()
        let entry = CallbackEntry { [self] in
            fires.add(1, ordering: .relaxed)
            if let entry = holder.value, now > entry.latest { late.add(1, ordering: .relaxed) }
            action()
        }
        holder.set(entry)
        return entry
    }

    /// Moves the clock to the armed window's end (never back) and fires, as the reactor's
    /// timer does; false when nothing is armed.
    func wakeAtArmedEnd() -> Bool {
        guard let window = recorder.take() else { return false }
        let now = now
        if window.latest > now { clock.advance(by: window.latest - now) }
        engine.fire()
        return true
    }

    /// Wakes at each armed end until nothing is armed; returns the wake-ups that fired
    /// something.
    func runUntilIdle() -> Int {
        var wakeUps = 0
        while true {
            let before = fired
            guard wakeAtArmedEnd() else { return wakeUps }
            if fired > before { wakeUps += 1 }
        }
    }
}

/// What the engine armed: the window of the newest generation, and how many arms applied.
final class ArmRecorder: Sendable {
    private let state = Mutex<(applied: (window: WakeWindow, generation: UInt64)?, generation: UInt64, arms: Int,
                               watches: Int, disarms: Int)>((nil, 0, 0, 0, 0))

    func arm(_ window: WakeWindow, generation: UInt64) {
        state.locked { state in
            guard generation > state.generation else { return }
            state.generation = generation
            state.applied = (window, generation)
            state.arms += 1
        }
    }

    /// The engine took the armed window back (a cancel left nothing to fire).
    func disarm(generation: UInt64) {
        state.locked { state in
            guard generation > state.generation else { return }
            state.generation = generation
            state.applied = nil
            state.disarms += 1
        }
    }

    func noteWatch() {
        state.locked { $0.watches += 1 }
    }

    var applied: (window: WakeWindow, generation: UInt64)? { state.locked { $0.applied } }
    var arms: Int { state.locked { $0.arms } }
    var watches: Int { state.locked { $0.watches } }
    var disarms: Int { state.locked { $0.disarms } }

    /// The armed window, disarmed (the reactor's timer expired).
    func take() -> WakeWindow? {
        state.locked { state in
            defer { state.applied = nil }
            return state.applied?.window
        }
    }
}
