import Glibc
import Synchronization
import Testing
@testable import Lull

/// The timer engine on the process's runtime, with real time: an entry firing on the real
/// reactor, and `asyncAfter` on it (the engine's pure rules are in `TimerEngineRuleTests`). The coalescing rules themselves (wake-ups equal
/// to the optimum, shared instants, arming, wall-clock changes) are checked exactly on a
/// manual clock in DrivenTimerEngineTests.
///
/// Timing rules of these tests (the machine is a noisy 2-core one): nothing may fire before
/// its deadline (checked exactly); lateness gets generous slack; conditions are waited for
/// with generous timeouts.
extension LullSuite {
    @Suite struct TimerEngineTests {
        // MARK: Entries

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

        // MARK: asyncAfter on the engine

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

/// The engine's pure rules (the heap, leeway rounding, wall-to-monotonic conversion, the
/// asyncAfter leeway): no runtime state, so they run alongside `LullSuite`.
extension IndependentSuite {
    @Suite(.serialized) struct TimerEngineRuleTests {
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

        @Test func wallDeadlinesConvertToTheMonotonicClockWithoutOverflow() {
            let wallNow = realtimeNanoseconds()
            let monotonicNow = monotonicNanoseconds()
            let converted = monotonicDeadline(forWall: wallNow + 1_000_000_000)
            #expect(converted >= monotonicNow + 900_000_000 && converted <= monotonicNanoseconds() + 1_000_000_000)
            #expect(monotonicDeadline(forWall: 0) <= monotonicNanoseconds(), "a wall deadline in the past is due now")
            #expect(monotonicDeadline(forWall: .max) == .max)
            #expect(monotonicDeadline(forWall: .max - 1) >= UInt64.max - 1 - wallNow)
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
    }
}
