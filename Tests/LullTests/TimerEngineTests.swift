import Glibc
import Synchronization
import Testing
@testable import Lull

/// The coalescing timer engine (Timers/TimerEngine.swift), its heap, and `asyncAfter` on it,
/// checked through the internal API: `.direct` entries run on the polling thread inside the
/// engine's `fire()`, so their timestamps show exactly when the engine woke and what it fired
/// together, with no queue latency in between.
///
/// Timing rules of these tests (the machine is a noisy 2-core one): nothing may fire before
/// its deadline (checked exactly); lateness gets generous slack; conditions are waited for
/// with generous timeouts. A property that only a quiet moment can show (a window still open
/// at a given instant) is checked over a few trials, of which one must show it: noise can
/// spoil a trial, but a broken rule spoils all of them.
extension LullSuite {
    @Suite struct TimerEngineTests {
        // MARK: The heap

        @Test func heapKeepsItsOrderAndFindsTheEarliestWindowEndUnderRandomInsertsAndRemovals() {
            var heap = TimerHeap()
            var random = TimerTestKit.Random(seed: 0x4EA9)
            var live: [TimerEntry] = []
            var sequence: UInt32 = .max - 1000  // wraps through 0 midway
            var misordered = 0
            var wrongEnds = 0
            var badSlots = 0
            for step in 0..<3_000 {
                if live.isEmpty || random.next() % 3 != 0 {
                    let entry = CallbackEntry({})
                    // Few distinct times: many ties, broken by the sequence. Some windows
                    // reach the end of the clock.
                    entry.deadline = UInt64.random(in: 0...200, using: &random)
                    entry.leeway = step % 97 == 0 ? .max : UInt64.random(in: 0...200, using: &random)
                    entry.sequence = sequence
                    sequence = TimerSequence.next(after: sequence)
                    heap.insert(entry)
                    live.append(entry)
                } else {
                    let entry = live.remove(at: Int.random(in: live.indices, using: &random))
                    heap.remove(entry)
                    if entry.slot != -1 { badSlots += 1 }
                }
                let smallest = live.min { TimerTestKit.key(of: $0) < TimerTestKit.key(of: $1) }
                if heap.count != live.count || heap.first !== smallest || heap.firstDeadline != smallest?.deadline {
                    misordered += 1
                }
                if heap.earliestWindowEnd() != live.map(\.latest).min() { wrongEnds += 1 }
            }
            #expect(misordered == 0, "the heap's first was not the smallest key \(misordered) times")
            #expect(wrongEnds == 0, "the earliest window end was wrong \(wrongEnds) times")
            #expect(badSlots == 0, "removed entries kept a slot")

            // Removing an entry the heap does not hold (even one whose slot points into
            // this heap's range) changes nothing.
            let stranger = CallbackEntry({})
            var other = TimerHeap()
            other.insert(stranger)
            let countBefore = heap.count
            heap.remove(stranger)
            #expect(heap.count == countBefore)
            #expect(stranger.slot == 0, "removing from the wrong heap touched the entry")

            // Draining gives the keys in order, ties in insertion order.
            var previous: (UInt64, UInt32)?
            var drained = 0
            while let first = heap.first {
                let key = TimerTestKit.key(of: first)
                if let previous { #expect(previous < key, "\(previous) came before \(key)") }
                previous = key
                heap.remove(first)
                drained += 1
            }
            #expect(drained == live.count)
            #expect(heap.earliestWindowEnd() == nil)

            let all = other.removeAll()
            #expect(all.count == 1 && other.count == 0 && other.first == nil)
            #expect(stranger.slot == -1)
        }

        @Test func leewaysKeepTheirNanosecondsUpTo2sAndRoundDownToMillisecondsAbove() {
            let entry = CallbackEntry({})
            for exact: UInt64 in [0, 1, 999, 1_000_000, 123_456_789, 2_147_483_647] {
                entry.leeway = exact
                #expect(entry.leeway == exact)
            }
            // Above 2^31 ns: whole milliseconds, rounded down (a narrower window, never a later fire).
            for (given, kept): (UInt64, UInt64) in [(2_147_483_648, 2_147_000_000), (2_500_000_000, 2_500_000_000),
                                                    (60_000_000_999, 60_000_000_000),
                                                    (86_400_000_000_000, 86_400_000_000_000)] {
                entry.leeway = given
                #expect(entry.leeway == kept, "\(given) ns")
            }
            // The widest finite leeway is about 24.8 days; anything wider (short of "no end")
            // keeps that; .max is "no end" and the window never closes.
            entry.leeway = .max - 1
            #expect(entry.leeway == 2_147_483_646 * 1_000_000)
            entry.leeway = .max
            #expect(entry.leeway == .max)
            entry.deadline = 5
            #expect(entry.latest == .max)
        }

        // MARK: Entries

        @Test func schedulingAddsOneEntryReschedulingReplacesItAndCancelRemovesIt() {
            let baseline = TimerTestKit.settledEngineCount()
            let far = monotonicNanoseconds() + 600_000_000_000
            let probes = (0..<10).map { _ in TimerTestKit.Probe() }
            for (index, probe) in probes.enumerated() {
                Runtime.shared.timers.schedule(probe.entry, deadline: far + UInt64(index), leeway: 0)
            }
            #expect(waitUntil { Runtime.shared.timers.count == baseline + 10 })
            // Rescheduling an entry replaces its window: still ten entries.
            Runtime.shared.timers.schedule(probes[0].entry, deadline: far + 100, leeway: 5_000_000)
            Runtime.shared.timers.schedule(probes[0].entry, deadline: far + 50, leeway: 0)
            #expect(waitUntil { Runtime.shared.timers.count == baseline + 10 })
            // Cancelling twice, or cancelling an entry never scheduled, is harmless.
            Runtime.shared.timers.cancel(probes[0].entry)
            Runtime.shared.timers.cancel(probes[0].entry)
            Runtime.shared.timers.cancel(CallbackEntry({}))
            #expect(waitUntil { Runtime.shared.timers.count == baseline + 9 })
            for probe in probes { probe.cancel() }
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
            #expect(probes.allSatisfy { $0.fires.count == 0 })
        }

        @Test(arguments: [0, 1, 10, 60])
        func entryFiresOnceInsideItsWindow(leewayMilliseconds: Int) {
            let baseline = TimerTestKit.settledEngineCount()
            let leeway = UInt64(leewayMilliseconds) * 1_000_000
            let probe = TimerTestKit.Probe()
            let deadline = monotonicNanoseconds() + 30_000_000
            Runtime.shared.timers.schedule(probe.entry, deadline: deadline, leeway: leeway)
            #expect(waitUntil { probe.fires.count == 1 })
            #expect(keepsHolding(for: .milliseconds(150)) { probe.fires.count == 1 })
            if let fired = probe.fires.values.first {
                #expect(fired >= deadline, "fired \(deadline - fired) ns before its deadline")
                #expect(fired <= deadline + leeway + TimerTestKit.lateSlack,
                        "fired \(fired - deadline - leeway) ns after its window closed")
            }
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
        }

        @Test func cancelledEntryNeverFires() {
            let baseline = TimerTestKit.settledEngineCount()
            let probe = TimerTestKit.Probe()
            Runtime.shared.timers.schedule(probe.entry, deadline: monotonicNanoseconds() + 30_000_000, leeway: 0)
            probe.cancel()
            #expect(Runtime.shared.timers.count <= baseline)
            #expect(keepsHolding(for: .milliseconds(150)) { probe.fires.count == 0 })
        }

        @Test func entriesDueInOneWakeUpRunInDeadlineThenSchedulingOrder() {
            let log = Recorder<Int>()
            let base = monotonicNanoseconds() + 40_000_000
            var deadlines: [UInt64] = []
            for index in 0..<12 {
                // Four distinct deadlines a microsecond apart, three entries each; all windows
                // share the instant base + 10 ms.
                let deadline = base + UInt64((11 - index) % 4) * 1_000
                deadlines.append(deadline)
                let entry = CallbackEntry({ log.append(index) })
                Runtime.shared.timers.schedule(entry, deadline: deadline, leeway: 10_000_000)
            }
            #expect(waitUntil { log.count == 12 })
            let expected = (0..<12).sorted { (deadlines[$0], $0) < (deadlines[$1], $1) }
            #expect(log.values == expected)
        }

        @Test func directActionMayRescheduleItsOwnEntry() {
            let baseline = TimerTestKit.settledEngineCount()
            let times = Recorder<UInt64>()
            let deadlines = Recorder<UInt64>()
            let holder = Captured<TimerEntry>()
            let entry = CallbackEntry {
                times.append(monotonicNanoseconds())
                guard times.count < 5, let entry = holder.value else { return }
                let next = monotonicNanoseconds() + 5_000_000
                deadlines.append(next)
                Runtime.shared.timers.schedule(entry, deadline: next, leeway: 0)
            }
            holder.set(entry)
            let first = monotonicNanoseconds() + 5_000_000
            deadlines.append(first)
            Runtime.shared.timers.schedule(entry, deadline: first, leeway: 0)
            #expect(waitUntil { times.count == 5 })
            #expect(keepsHolding(for: .milliseconds(100)) { times.count == 5 })
            for (time, deadline) in zip(times.values, deadlines.values) {
                #expect(time >= deadline, "fired \(deadline - time) ns early")
            }
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
        }

        // MARK: Coalescing

        /// The key property: the engine wakes the process as rarely as the windows allow.
        /// Forty windows with fixed pseudo-random deadlines and leeways; the test counts the
        /// engine's wake-ups that fired them and compares with the optimum for the same
        /// windows (greedy interval stabbing, computed here independently).
        @Test func wakeUpsMatchTheOptimalStabbingOfTheWindows() throws {
            struct Fire: Sendable {
                let index: Int
                let time: UInt64
            }
            var random = TimerTestKit.Random(seed: 0xC0A1E5CE)
            let count = 40
            let offsets = (0..<count).map { _ in UInt64.random(in: 50_000_000...400_000_000, using: &random) }
            let leeways = (0..<count).map { _ in UInt64.random(in: 0...100_000_000, using: &random) }
            let optimum = TimerTestKit.optimalWakeUps(zip(offsets, leeways).map { ($0, $0 + $1) })

            let log = Recorder<Fire>()
            let base = monotonicNanoseconds()
            let deadlines = offsets.map { base + $0 }
            for index in 0..<count {
                let entry = CallbackEntry({ log.append(Fire(index: index, time: monotonicNanoseconds())) })
                Runtime.shared.timers.schedule(entry, deadline: deadlines[index], leeway: leeways[index])
            }
            let scheduled = monotonicNanoseconds()
            try #require(scheduled < base + 50_000_000, "scheduling took longer than the earliest deadline")
            #expect(waitUntil { log.count == count })
            #expect(keepsHolding(for: .milliseconds(100)) { log.count == count })

            let fires = log.values
            #expect(Set(fires.map(\.index)).count == count, "an entry fired twice or not at all")
            for fire in fires {
                let deadline = deadlines[fire.index]
                let end = deadline + leeways[fire.index]
                #expect(fire.time >= deadline, "entry \(fire.index) fired \(deadline - fire.time) ns before its deadline")
                #expect(fire.time <= end + TimerTestKit.lateSlack, "entry \(fire.index) fired \(fire.time - end) ns after its window")
            }

            // Wake-ups. One `fire()` removes every due entry first and then runs their
            // actions back to back, in deadline order; consecutive fires (in the order they
            // ran) belong to different wake-ups for certain when the second one's deadline
            // lies after the first one's fire time (it was not due yet when the first was
            // fired), and almost certainly when more than 1 ms lies between them.
            var certain = 1
            var wakeUps = 1
            for (previous, next) in zip(fires, fires.dropFirst()) {
                let notYetDue = deadlines[next.index] > previous.time
                if notYetDue { certain += 1 }
                if notYetDue || next.time - previous.time > 1_000_000 { wakeUps += 1 }
            }
            let summary = "wake-ups: \(wakeUps) (\(certain) certain) for \(count) windows; optimum \(optimum)"
            #expect(optimum < count / 2, "the windows do not overlap enough to test coalescing: \(summary)")
            #expect(certain <= wakeUps)
            // A late wake-up can only merge windows, never split them: the engine should
            // never need more wake-ups than the optimum. One extra is tolerated for an
            // unrelated wake-up of the process (which fires open windows early, for free).
            // The certain count is a lower bound of the real one; the estimate may also
            // count a batch split by a preemption of the polling thread, so it gets a
            // little more slack (an engine that fired windows one by one would need ~40).
            #expect(certain <= optimum + 1, "\(summary)")
            #expect(wakeUps <= optimum + 3, "\(summary)")
            print("TimerEngineTests.wakeUpsMatchTheOptimalStabbingOfTheWindows: \(summary)")
        }

        /// Windows that share an instant fire in one wake-up: A = [T, T + 100 ms] overlaps
        /// B = [T + 40 ms, T + 200 ms] and C = [T + 60 ms, T + 160 ms] on [T + 60, T + 100];
        /// the engine wakes once, at A's end, and fires all three. Checked on the timestamps
        /// of the fires, which must lie within a millisecond of each other.
        @Test func windowsThatOverlapFireInOneWakeUp() {
            let coalesced = TimerTestKit.anyTrial { trial in
                let start = monotonicNanoseconds() + 50_000_000
                let probes = [(0, 100), (40, 160), (60, 100)].map { offset, leeway in
                    TimerTestKit.Probe(deadline: start + UInt64(offset) * 1_000_000, leeway: UInt64(leeway) * 1_000_000)
                }
                for probe in probes { probe.schedule() }
                #expect(waitUntil { probes.allSatisfy { $0.fires.count == 1 } })
                let times = probes.compactMap { $0.fires.values.first }
                for (probe, time) in zip(probes, times) {
                    #expect(time >= probe.deadline && time <= probe.deadline + probe.leeway + TimerTestKit.lateSlack)
                }
                guard let earliest = times.min(), let latest = times.max() else { return false }
                trial.note("spread \(latest - earliest) ns, first at +\(earliest - start) ns")
                return latest - earliest < 1_000_000
            }
            #expect(coalesced.succeeded, "\(coalesced.notes)")
        }

        /// The limiting case: B's window opens exactly when A's closes. They share that one
        /// instant, so they fire in one wake-up (API.md: "timers whose windows share an
        /// instant fire in one wake-up"). B fired alone would be at its own end, 100 ms later.
        @Test func windowsThatShareOnlyTheirBoundaryInstantFireInOneWakeUp() {
            let coalesced = TimerTestKit.anyTrial { trial in
                let start = monotonicNanoseconds() + 50_000_000
                let first = TimerTestKit.Probe(deadline: start, leeway: 50_000_000)
                let second = TimerTestKit.Probe(deadline: start + 50_000_000, leeway: 100_000_000)
                first.schedule()
                second.schedule()
                #expect(waitUntil { first.fires.count == 1 && second.fires.count == 1 })
                guard let a = first.fires.values.first, let b = second.fires.values.first else { return false }
                #expect(a >= first.deadline && b >= second.deadline)
                trial.note("A at +\(Int64(a) - Int64(start)) ns, B at +\(Int64(b) - Int64(start)) ns")
                return b >= a && b - a < 1_000_000
            }
            #expect(coalesced.succeeded, "\(coalesced.notes)")
        }

        /// Whenever the process is awake anyway, windows that have opened fire in that
        /// wake-up (`fireIfDue`), and nothing whose window has not opened.
        @Test func fireIfDueFiresOpenWindowsOnly() {
            let baseline = TimerTestKit.settledEngineCount()
            let open = TimerTestKit.Probe(deadline: monotonicNanoseconds() + 30_000_000, leeway: 60_000_000_000)
            let closed = TimerTestKit.Probe(deadline: monotonicNanoseconds() + 60_000_000_000, leeway: 0)
            open.schedule()
            closed.schedule()
            Runtime.shared.timers.fireIfDue()
            Runtime.shared.timers.fire()
            if monotonicNanoseconds() < open.deadline {
                #expect(open.fires.count == 0, "fired before its deadline")
            }
            TimerTestKit.sleep(until: open.deadline + 1_000_000)
            // Its window is open (and stays open for a minute): the engine itself would wait,
            // but any wake-up fires it.
            Runtime.shared.timers.fireIfDue()
            #expect(waitUntil { open.fires.count == 1 })
            if let fired = open.fires.values.first { #expect(fired >= open.deadline) }
            #expect(closed.fires.count == 0)
            #expect(waitUntil { Runtime.shared.timers.count == baseline + 1 })
            closed.cancel()
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
        }

        // MARK: Wall clock

        /// Setting the system clock in a test is not acceptable (it would disturb the whole
        /// machine), so only the path without a clock change is exercised: a check that finds
        /// no change leaves wall-clock entries where they are. Re-placing entries after a real
        /// clock change is not tested.
        @Test func clockCheckWithoutAClockChangeLeavesWallEntriesAlone() {
            let baseline = TimerTestKit.settledEngineCount()
            let wallDeadline = realtimeNanoseconds() + 80_000_000
            let firedAtWall = Recorder<UInt64>()
            let entry = CallbackEntry({ firedAtWall.append(realtimeNanoseconds()) })
            Runtime.shared.timers.schedule(entry, deadline: monotonicDeadline(forWall: wallDeadline), leeway: 0,
                                        wallDeadline: wallDeadline)
            for _ in 0..<3 { Runtime.shared.timers.wallClockChanged() }
            if realtimeNanoseconds() < wallDeadline {
                #expect(firedAtWall.count == 0)
            }
            #expect(waitUntil { firedAtWall.count == 1 })
            #expect(keepsHolding(for: .milliseconds(100)) { firedAtWall.count == 1 })
            if let fired = firedAtWall.values.first {
                #expect(fired >= wallDeadline, "fired \(wallDeadline - fired) ns before its wall deadline")
            }
            Runtime.shared.timers.wallClockChanged()
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
        }

        @Test func wallDeadlinesConvertToTheMonotonicClockWithoutOverflow() {
            let wallNow = realtimeNanoseconds()
            let monotonicNow = monotonicNanoseconds()
            let converted = monotonicDeadline(forWall: wallNow + 1_000_000_000)
            #expect(converted >= monotonicNow + 900_000_000 && converted <= monotonicNanoseconds() + 1_000_000_000)
            #expect(monotonicDeadline(forWall: 0) <= monotonicNanoseconds(), "a wall deadline in the past is due now")
            #expect(monotonicDeadline(forWall: .max) == .max)
            #expect(monotonicDeadline(forWall: .max - 1) >= UInt64.max - 1 - wallNow)
        }

        // MARK: asyncAfter on the engine

        @Test func asyncAfterLeewayIsTenPercentClampedBetween1msAnd60s() {
            let millisecond: UInt64 = 1_000_000
            let second: UInt64 = 1_000_000_000
            let table: [(delay: UInt64, leeway: UInt64)] = [
                (0, millisecond), (1, millisecond), (5 * millisecond, millisecond),
                (10 * millisecond, millisecond), (10 * millisecond + 9, millisecond),
                (10 * millisecond + 10, millisecond + 1), (20 * millisecond, 2 * millisecond),
                (250 * millisecond, 25 * millisecond), (second, 100 * millisecond),
                (599 * second, 59_900 * millisecond), (600 * second, 60 * second),
                (601 * second, 60 * second), (3_600 * second, 60 * second), (.max, 60 * second),
            ]
            for (delay, leeway) in table {
                #expect(DelayedWork.leeway(forDelay: delay) == leeway, "delay \(delay) ns")
            }
            // And against the rule itself, over a range of delays.
            var random = TimerTestKit.Random(seed: 10)
            for _ in 0..<2_000 {
                let delay = UInt64.random(in: 0...(2_000 * second), using: &random)
                let expected = delay <= 10 * millisecond ? millisecond : (delay >= 600 * second ? 60 * second : delay / 10)
                #expect(DelayedWork.leeway(forDelay: delay) == expected, "delay \(delay) ns")
            }
        }

        /// asyncAfter blocks get their 10 % window on the engine and share wake-ups:
        /// A = [T, T + 30 ms] (delay 300 ms), B = [T + 20 ms, T + 52 ms] (delay 320 ms).
        /// At T + 25 ms both are still waiting (A's window is wider than 25 ms); by T + 45 ms
        /// both have fired (B rode along with A's wake-up at T + 30 ms, before its own end).
        @Test func asyncAfterBlocksGetTheirWindowAndShareWakeUps() {
            let queue = WorkQueue(label: "lull.test.timer.after-window", attributes: .concurrent)
            let shared = TimerTestKit.anyTrial { trial in
                let baseline = TimerTestKit.settledEngineCount()
                let start = Deadline.now() + .milliseconds(300)
                let ranA = Captured<UInt64>()
                let ranB = Captured<UInt64>()
                queue.asyncAfter(deadline: start) { ranA.set(monotonicNanoseconds()) }
                queue.asyncAfter(deadline: start + .milliseconds(20)) { ranB.set(monotonicNanoseconds()) }
                let t = start.uptimeNanoseconds
                let open = TimerTestKit.sample(at: t + 25_000_000, validUntil: t + 29_000_000) {
                    Runtime.shared.timers.count == baseline + 2
                }
                let closed = TimerTestKit.sample(at: t + 45_000_000, validUntil: t + 51_000_000) {
                    Runtime.shared.timers.count == baseline
                }
                #expect(waitUntil { ranA.value != nil && ranB.value != nil })
                if let a = ranA.value { #expect(a >= t) }
                if let b = ranB.value { #expect(b >= t + 20_000_000) }
                trial.note("both waiting at +25 ms: \(open.map(String.init(describing:)) ?? "missed"), both fired by +45 ms: \(closed.map(String.init(describing:)) ?? "missed")")
                return open == true && closed == true
            }
            #expect(shared.succeeded, "\(shared.notes)")
        }

        @Test func asyncAfterAtTheDistantFutureKeepsNoEntry() {
            let baseline = TimerTestKit.settledEngineCount()
            let ran = Flag()
            WorkQueue.global().asyncAfter(deadline: .distantFuture) { ran.set() }
            WorkQueue.global().asyncAfter(wallDeadline: .distantFuture) { ran.set() }
            WorkQueue.global().asyncAfter(deadline: .now() + .seconds(Int64.max)) { ran.set() }
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
            #expect(keepsHolding(for: .milliseconds(150)) { !ran.isSet && Runtime.shared.timers.count == baseline })
        }

        @Test func asyncAfterLeavesTheEngineOnceItRan() {
            let baseline = TimerTestKit.settledEngineCount()
            let ranAt = Captured<UInt64>()
            let deadline = Deadline.now() + .milliseconds(60)
            WorkQueue(label: "lull.test.timer.after-entry").asyncAfter(deadline: deadline) { ranAt.set(monotonicNanoseconds()) }
            if monotonicNanoseconds() < deadline.uptimeNanoseconds {
                #expect(Runtime.shared.timers.count >= baseline + 1)
            }
            #expect(ranAt.await().map { $0 >= deadline.uptimeNanoseconds } == true)
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
        }
    }
}

// MARK: - Helpers shared by the timer tests

/// Entries, clocks, windows and trials for TimerEngineTests and TimerSourceTests.
enum TimerTestKit {
    /// How late a fire may be, beyond its window, before a test calls it wrong: generous,
    /// since a loaded machine can keep the polling thread off a CPU for a while.
    static let lateSlack: UInt64 = 1_000_000_000

    /// SplitMix64: a seeded generator, so that "random" windows are the same on every run.
    struct Random: RandomNumberGenerator {
        var state: UInt64

        init(seed: UInt64) { state = seed }

        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// An engine entry whose action runs on the polling thread (inside `fire()`) and records
    /// the monotonic time it ran at.
    final class Probe: Sendable {
        let entry: TimerEntry
        let deadline: UInt64
        let leeway: UInt64
        let fires: Recorder<UInt64>

        init(deadline: UInt64 = 0, leeway: UInt64 = 0) {
            let fires = Recorder<UInt64>()
            self.fires = fires
            entry = CallbackEntry({ fires.append(monotonicNanoseconds()) })
            self.deadline = deadline
            self.leeway = leeway
        }

        func schedule() {
            Runtime.shared.timers.schedule(entry, deadline: deadline, leeway: leeway)
        }

        func cancel() {
            Runtime.shared.timers.cancel(entry)
        }
    }

    /// The heap's order: deadline, then scheduling number (which may wrap: compared as the
    /// heap does, relative to the first one the test used).
    static func key(of entry: TimerEntry) -> (UInt64, UInt32) {
        (entry.deadline, entry.sequence &- (UInt32.max - 1000))
    }

    /// The fewest instants that hit every window [start, end]: sort by end, stab at the
    /// earliest end not yet hit, skip every window that contains it, repeat.
    static func optimalWakeUps(_ windows: [(start: UInt64, end: UInt64)]) -> Int {
        var stabs = 0
        var last: UInt64?
        for window in windows.sorted(by: { $0.end < $1.end }) {
            if let last, window.start <= last { continue }  // its end is ≥ last, so it holds last
            last = window.end
            stabs += 1
        }
        return stabs
    }

    /// The engine's entry count once it holds still (an earlier test's timers may still be
    /// leaving): two equal readings 20 ms apart.
    static func settledEngineCount() -> Int {
        var last = Runtime.shared.timers.count
        for _ in 0..<100 {
            usleep(20_000)
            let now = Runtime.shared.timers.count
            if now == last { return now }
            last = now
        }
        return last
    }

    /// Sleeps until `deadline` (monotonic ns); the last 1.5 ms are spent spinning, so that
    /// the thread is already on a CPU when the instant comes (a sample taken right after a
    /// deadline should not depend on how fast a sleeping thread is woken).
    static func sleep(until deadline: UInt64) {
        while true {
            let now = monotonicNanoseconds()
            if now >= deadline { return }
            let remaining = deadline - now
            if remaining <= 1_500_000 {
                while monotonicNanoseconds() < deadline {}
                return
            }
            usleep(UInt32(min((remaining - 1_500_000) / 1_000, 200_000)))
        }
    }

    /// Sleeps until `time` and evaluates `condition` there; nil when the test thread woke
    /// too late (after `validUntil`) for the sample to mean anything.
    static func sample(at time: UInt64, validUntil: UInt64, _ condition: () -> Bool) -> Bool? {
        sleep(until: time)
        let result = condition()
        return monotonicNanoseconds() <= validUntil ? result : nil
    }

    /// The grid points start + k × interval (k ≥ 0) that lie at or before `time`.
    static func gridPoints(start: UInt64, interval: UInt64, by time: UInt64) -> UInt64 {
        time < start ? 0 : (time - start) / interval + 1
    }

    final class Trial {
        private(set) var notes: [String] = []
        func note(_ text: String) { notes.append(text) }
    }

    struct TrialOutcome {
        let succeeded: Bool
        let notes: [String]
    }

    /// Runs `trial` until one reports true, at most `attempts` times.
    static func anyTrial(attempts: Int = 8, _ trial: (Trial) -> Bool) -> TrialOutcome {
        let log = Trial()
        for attempt in 1...attempts {
            log.note("trial \(attempt):")
            if trial(log) { return TrialOutcome(succeeded: true, notes: log.notes) }
        }
        return TrialOutcome(succeeded: false, notes: log.notes)
    }
}
