import Glibc
import Synchronization
import Testing
@testable import Lull

/// Timer sources (API.md, "Source behaviour", the Timers bullet; `TimerSource`, `TimerFlags`).
///
/// Every fire time is checked exactly against its deadline (never early) and with generous
/// slack against the end of its window (late is allowed on a loaded machine). Where a test
/// must see a window still open at some instant, it samples the timer engine's entry count
/// there, in trials: an unrelated wake-up of the process may fire an open window early (the
/// engine lets open windows ride along for free), so one trial out of a few must show it.
extension LullSuite {
    @Suite struct TimerSourceTests {
        // MARK: One-shot

        @Test(arguments: [0, 5, 50])
        func oneShotFiresOnceNeverEarlyAndStaysIdleUntilRescheduled(milliseconds: Int) throws {
            let baseline = TimerTestKit.settledEngineCount()
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.one-shot", log: log)
            let deadline = Deadline.now() + .milliseconds(milliseconds)
            timer.schedule(deadline: deadline)
            timer.activate()
            #expect(waitUntil { log.count == 1 })
            let first = try #require(log.values.first)
            #expect(first.time >= deadline.uptimeNanoseconds, "fired \(deadline.uptimeNanoseconds - first.time) ns early")
            #expect(first.data == 1)
            // Idle: no second fire, nothing left in the engine, not cancelled.
            #expect(keepsHolding(for: .milliseconds(300)) { log.count == 1 })
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
            #expect(!timer.isCancelled)
            // Rescheduled, it fires once more.
            let again = Deadline.now() + .milliseconds(20)
            timer.schedule(deadline: again)
            #expect(waitUntil { log.count == 2 })
            let second = try #require(log.values.last)
            #expect(second.time >= again.uptimeNanoseconds)
            #expect(second.data == 1)
            #expect(keepsHolding(for: .milliseconds(150)) { log.count == 2 })
            #expect(TimerTestKit.cancel(timer))
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
        }

        @Test func reschedulingReplacesAFarDeadlineWithANearOne() throws {
            let baseline = TimerTestKit.settledEngineCount()
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.far-near", log: log)
            timer.schedule(deadline: .now() + .seconds(60))
            timer.activate()
            #expect(waitUntil { Runtime.shared.timers.count == baseline + 1 })
            let near = Deadline.now() + .milliseconds(40)
            timer.schedule(deadline: near)
            // Replaced, not added.
            #expect(Runtime.shared.timers.count <= baseline + 1)
            #expect(waitUntil { log.count == 1 })
            let fire = try #require(log.values.first)
            #expect(fire.time >= near.uptimeNanoseconds)
            #expect(fire.data == 1)
            #expect(keepsHolding(for: .milliseconds(300)) { log.count == 1 })
            // The far schedule is gone with it.
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
            #expect(TimerTestKit.cancel(timer))
        }

        @Test func reschedulingReplacesANearDeadlineWithAFarOne() throws {
            let baseline = TimerTestKit.settledEngineCount()
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.near-far", log: log)
            timer.activate()
            let near = Deadline.now() + .milliseconds(150)
            timer.schedule(deadline: near)
            timer.schedule(deadline: .now() + .seconds(60))
            if monotonicNanoseconds() < near.uptimeNanoseconds {
                // Replaced before it was due: the near deadline passes without a fire.
                TimerTestKit.sleep(until: near.uptimeNanoseconds)
                #expect(keepsHolding(for: .milliseconds(200)) { log.count == 0 })
                #expect(Runtime.shared.timers.count == baseline + 1)
            }
            // Still alive: a new schedule fires.
            let again = Deadline.now() + .milliseconds(10)
            timer.schedule(deadline: again)
            #expect(waitUntil { log.count >= 1 })
            let fire = try #require(log.values.last)
            #expect(fire.time >= again.uptimeNanoseconds)
            #expect(TimerTestKit.cancel(timer))
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
        }

        @Test func reschedulingFromInsideTheHandler() {
            let log = TimerTestKit.FireLog()
            let requested = Recorder<UInt64>()
            let timer = EventSource.makeTimerSource(queue: WorkQueue(label: "lull.test.timer.from-handler"))
            timer.setEventHandler { [weak timer] in
                log.record(timer?.data ?? 0)
                guard log.count < 4 else { return }
                let next = Deadline.now() + .milliseconds(15)
                requested.append(next.uptimeNanoseconds)
                timer?.schedule(deadline: next)
            }
            let first = Deadline.now() + .milliseconds(10)
            requested.append(first.uptimeNanoseconds)
            timer.schedule(deadline: first)
            timer.activate()
            #expect(waitUntil { log.count == 4 })
            #expect(keepsHolding(for: .milliseconds(200)) { log.count == 4 })
            let calls = log.values
            #expect(requested.count == 4)
            for (call, deadline) in zip(calls, requested.values) {
                #expect(call.time >= deadline, "fired \(deadline - call.time) ns early")
                #expect(call.data == 1)
            }
            #expect(TimerTestKit.cancel(timer))
        }

        @Test func repeatingTimerRescheduledAsAOneShotFromItsHandlerStopsRepeating() throws {
            let log = TimerTestKit.FireLog()
            let oneShot = Captured<UInt64>()
            let timer = EventSource.makeTimerSource(queue: WorkQueue(label: "lull.test.timer.repeat-to-once"))
            timer.setEventHandler { [weak timer] in
                log.record(timer?.data ?? 0)
                guard log.count == 3 else { return }
                let deadline = Deadline.now() + .milliseconds(40)
                oneShot.set(deadline.uptimeNanoseconds)
                timer?.schedule(deadline: deadline)
            }
            timer.schedule(deadline: .now() + .milliseconds(10), repeating: .milliseconds(10))
            timer.activate()
            #expect(waitUntil { log.count == 4 })
            #expect(keepsHolding(for: .milliseconds(300)) { log.count == 4 })
            let last = try #require(log.values.last)
            let deadline = try #require(oneShot.value)
            #expect(last.time >= deadline, "the 4th call came \(deadline - last.time) ns before the one-shot deadline")
            #expect(last.data == 1)
            #expect(TimerTestKit.cancel(timer))
        }

        @Test func scheduleBeforeActivationFiresOnlyOnceActivated() throws {
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.inactive", log: log)
            timer.schedule(deadline: .now() + .milliseconds(5))
            // Created inactive: the deadline passes without a fire.
            #expect(keepsHolding(for: .milliseconds(100)) { log.count == 0 })
            let activatedAt = monotonicNanoseconds()
            timer.activate()
            #expect(waitUntil { log.count == 1 })
            let call = try #require(log.values.first)
            #expect(call.time >= activatedAt)
            #expect(call.data == 1)
            #expect(keepsHolding(for: .milliseconds(100)) { log.count == 1 })
            #expect(TimerTestKit.cancel(timer))
        }

        @Test func thousandsOfReschedulesLeaveOneEntryAndTheLastScheduleWins() throws {
            let baseline = TimerTestKit.settledEngineCount()
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.reschedules", log: log)
            timer.activate()
            var random = TimerTestKit.Random(seed: 0x5C4E)
            for _ in 0..<10_000 {
                let offset = Int64.random(in: 500...10_000, using: &random)
                let repeating: Duration? = random.next() % 2 == 0 ? nil : .milliseconds(Int64.random(in: 1...50, using: &random))
                timer.schedule(deadline: .now() + .milliseconds(offset), repeating: repeating)
            }
            #expect(Runtime.shared.timers.count == baseline + 1)
            let last = Deadline.now() + .milliseconds(20)
            timer.schedule(deadline: last)
            #expect(waitUntil { log.count == 1 })
            let call = try #require(log.values.first)
            #expect(call.time >= last.uptimeNanoseconds)
            #expect(keepsHolding(for: .milliseconds(200)) { log.count == 1 })
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
            #expect(TimerTestKit.cancel(timer))
        }

        @Test func concurrentReschedulingWhileFiringLeavesOneEntry() {
            let baseline = TimerTestKit.settledEngineCount()
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.concurrent-schedule", log: log)
            timer.schedule(deadline: .now(), repeating: .microseconds(500))
            timer.activate()
            WorkQueue.concurrentPerform(iterations: 4) { worker in
                var random = TimerTestKit.Random(seed: UInt64(worker) + 1)
                for _ in 0..<2_000 {
                    let offset = Int64.random(in: 0...2_000, using: &random)
                    let repeating: Duration? = random.next() % 2 == 0 ? nil : .microseconds(Int64.random(in: 200...2_000, using: &random))
                    timer.schedule(deadline: .now() + .microseconds(offset), repeating: repeating,
                                   leeway: .microseconds(Int64.random(in: 0...500, using: &random)))
                }
            }
            #expect(Runtime.shared.timers.count <= baseline + 1)
            #expect(!log.values.contains { $0.data == 0 })
            timer.schedule(deadline: .distantFuture)
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
            #expect(TimerTestKit.cancel(timer))
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
        }

        @Test func maskReportsTheFlagsAndHandleIsZero() {
            let plain = EventSource.makeTimerSource()
            let strict = EventSource.makeTimerSource(flags: .strict)
            #expect(plain.mask == 0)
            #expect(strict.mask == TimerFlags.strict.rawValue)
            #expect(plain.handle == 0 && strict.handle == 0)
            #expect(TimerFlags.strict.rawValue == 1, "Darwin's DISPATCH_TIMER_STRICT")
        }

        /// Darwin clears the fires a timer accumulated under its old schedule when it is
        /// rescheduled (libdispatch `_dispatch_timer_unote_configure`: "Clear any pending data
        /// that might have accumulated on older timer params"): the new schedule replaces the
        /// old one entirely.
        @Test func reschedulingDiscardsFiresPendingFromThePreviousSchedule() {
            let baseline = TimerTestKit.settledEngineCount()
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.reschedule-pending", log: log)
            let registered = Flag()
            timer.setRegistrationHandler { registered.set() }
            timer.activate()
            #expect(registered.await())
            timer.suspend()
            let deadline = Deadline.now() + .milliseconds(10)
            timer.schedule(deadline: deadline)
            // It fires while the source is suspended: the engine lets go of it and the fire
            // waits in the source.
            TimerTestKit.sleep(until: deadline.uptimeNanoseconds)
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
            timer.schedule(deadline: .now() + .seconds(60))
            timer.resume()
            #expect(keepsHolding(for: .milliseconds(300)) { log.count == 0 },
                    "a fire of the replaced schedule was delivered after the reschedule: \(log.values.map(\.data))")
            #expect(TimerTestKit.cancel(timer))
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
        }

        /// The same rule under a stream of fires: a suspended timer fires every 50 µs; each
        /// reschedule to the distant future must leave nothing of the old schedule to
        /// deliver, even for a fire that was being merged while the reschedule ran.
        @Test func reschedulingNeverDeliversAFireOfTheReplacedScheduleUnderAStreamOfFires() {
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.reschedule-race", flags: .strict, log: log)
            let registered = Flag()
            timer.setRegistrationHandler { registered.set() }
            timer.activate()
            #expect(registered.await())
            var iterations = 0
            let end = monotonicNanoseconds() + 1_500_000_000
            while iterations < 300 && monotonicNanoseconds() < end {
                iterations += 1
                timer.suspend()
                timer.schedule(deadline: .now(), repeating: .microseconds(50))
                spin(microseconds: 300)
                timer.schedule(deadline: .distantFuture)
                timer.resume()
                usleep(1_000)
            }
            #expect(keepsHolding(for: .milliseconds(200)) { log.count == 0 },
                    "\(log.count) deliveries of replaced schedules in \(iterations) reschedules: data \(log.values.map(\.data))")
            #expect(TimerTestKit.cancel(timer))
        }

        @Test func oneShotThatFiresWhileSuspendedIsDeliveredOnResume() throws {
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.suspended-one-shot", log: log)
            let registered = Flag()
            timer.setRegistrationHandler { registered.set() }
            timer.activate()
            #expect(registered.await())
            timer.suspend()
            let deadline = Deadline.now() + .milliseconds(10)
            timer.schedule(deadline: deadline)
            TimerTestKit.sleep(until: deadline.uptimeNanoseconds + 50_000_000)
            #expect(log.count == 0)
            timer.resume()
            #expect(waitUntil { log.count == 1 })
            let call = try #require(log.values.first)
            #expect(call.data == 1)
            #expect(keepsHolding(for: .milliseconds(150)) { log.count == 1 })
            #expect(TimerTestKit.cancel(timer))
        }

        // MARK: Repeating

        @Test func repeatingFiresNeverBeforeItsGridAndDoesNotDrift() throws {
            let interval: UInt64 = 20_000_000
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.grid", log: log)
            let start = Deadline.now() + .milliseconds(30)
            // A wide leeway (half the interval): a timer that computed each fire from the
            // previous one would drift by up to that much per period.
            timer.schedule(deadline: start, repeating: .nanoseconds(Int64(interval)), leeway: .milliseconds(10))
            timer.activate()
            #expect(waitUntil { log.total >= 40 })
            #expect(TimerTestKit.cancel(timer))
            let calls = log.values
            let startTime = start.uptimeNanoseconds
            #expect(calls.allSatisfy { $0.data >= 1 }, "a handler ran with data 0")
            let early = TimerTestKit.earlyCalls(calls, start: startTime, interval: interval)
            #expect(early.isEmpty, "fires before their grid point start + k × interval: \(early)")
            // No drift: the fires stay on the grid, so the mean period between the first
            // call and the last one is the interval.
            let first = try #require(calls.first)
            let last = try #require(calls.last)
            let firstCount = UInt64(first.data)
            let lastCount = UInt64(calls.reduce(0) { $0 + $1.data })
            try #require(lastCount > firstCount + 10)
            #expect(last.time >= startTime + (lastCount - 1) * interval)
            let period = Double(last.time - first.time) / Double(lastCount - firstCount)
            #expect(period >= 0.8 * Double(interval) && period <= 1.2 * Double(interval),
                    "mean period \(period) ns for an interval of \(interval) ns")
        }

        @Test func reschedulingARepeatingTimerFromItsHandlerRestartsItsGrid() throws {
            let log = TimerTestKit.FireLog()
            let newStart = Captured<UInt64>()
            let newInterval: UInt64 = 30_000_000
            let timer = EventSource.makeTimerSource(queue: WorkQueue(label: "lull.test.timer.regrid"))
            timer.setEventHandler { [weak timer] in
                log.record(timer?.data ?? 0)
                guard log.count == 3 else { return }
                let start = Deadline.now() + .milliseconds(55)
                newStart.set(start.uptimeNanoseconds)
                timer?.schedule(deadline: start, repeating: .nanoseconds(Int64(newInterval)))
            }
            timer.schedule(deadline: .now() + .milliseconds(10), repeating: .milliseconds(10))
            timer.activate()
            #expect(waitUntil { log.count >= 3 && log.values.dropFirst(3).reduce(0) { $0 + $1.data } >= 8 })
            #expect(TimerTestKit.cancel(timer))
            let start = try #require(newStart.value)
            let after = Array(log.values.dropFirst(3))
            let early = TimerTestKit.earlyCalls(after, start: start, interval: newInterval)
            #expect(early.isEmpty, "fires before the new grid start + k × 30 ms: \(early)")
        }

        @Test func dataCountsTheFiresMissedWhileSuspended() throws {
            let interval: UInt64 = 10_000_000
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.suspended", log: log)
            let start = Deadline.now() + .milliseconds(10)
            let startTime = start.uptimeNanoseconds
            timer.schedule(deadline: start, repeating: .nanoseconds(Int64(interval)))
            timer.activate()
            #expect(waitUntil { log.count >= 1 })
            timer.suspend()
            // Suspended for 50 intervals; a handler that was running finishes meanwhile.
            sleep(milliseconds: 500)
            let callsBefore = log.count
            let totalBefore = UInt64(log.total)
            let resumedAt = monotonicNanoseconds()
            timer.resume()
            #expect(waitUntil { log.count >= callsBefore + 10 })
            #expect(TimerTestKit.cancel(timer))
            let calls = log.values
            let next = try #require(calls.dropFirst(callsBefore).first)
            #expect(next.data >= 2, "the first call after the suspension saw \(next.data) fire(s)")
            // Every grid point passed before the resume is counted (one may still be in
            // flight; 100 ms of lateness are allowed for the polling thread to get a CPU).
            let counted = totalBefore + UInt64(next.data)
            let dueAtResume = TimerTestKit.gridPoints(start: startTime, interval: interval, by: resumedAt - 100_000_000)
            #expect(counted + 1 >= dueAtResume, "\(counted) fires counted after the suspension, \(dueAtResume) were due")
            // Never more than the grid points passed.
            let early = TimerTestKit.earlyCalls(calls, start: startTime, interval: interval)
            #expect(early.isEmpty, "\(early)")
            // The total over all calls follows the grid: at some of the last calls it is
            // within one of the grid points passed (a lost fire would leave every later
            // call further behind).
            var cumulative: UInt64 = 0
            var deficits: [Int64] = []
            for call in calls {
                cumulative += UInt64(call.data)
                deficits.append(Int64(TimerTestKit.gridPoints(start: startTime, interval: interval, by: call.time)) - Int64(cumulative))
            }
            let recent = deficits.suffix(8)
            #expect((recent.min() ?? .max) <= 1, "grid points passed minus fires counted, last calls: \(Array(recent))")
        }

        /// Fires missed while the process could not fire them (here the polling thread is
        /// held up for 60 ms by an engine entry, as a stopped process would be) are counted
        /// in `data` when the engine gets to the timer again, and the next fire is back on
        /// the grid.
        @Test func firesMissedWhileTheEngineWasHeldUpAreCounted() throws {
            let interval: UInt64 = 5_000_000
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.held-up", flags: .strict, log: log)
            let start = Deadline.now() + .milliseconds(5)
            let startTime = start.uptimeNanoseconds
            timer.schedule(deadline: start, repeating: .nanoseconds(Int64(interval)))
            timer.activate()
            #expect(waitUntil { log.count >= 3 })
            let stall = CallbackEntry({ usleep(60_000) })
            Runtime.shared.timers.schedule(stall, deadline: monotonicNanoseconds() + 2_000_000, leeway: 0)
            let callsBefore = log.count
            #expect(waitUntil { log.count >= callsBefore + 10 })
            #expect(TimerTestKit.cancel(timer))
            let calls = log.values
            #expect(calls.dropFirst(callsBefore).contains { $0.data >= 6 },
                    "no call counted the ~12 fires missed during the 60 ms stall: \(calls.dropFirst(callsBefore).map(\.data))")
            let early = TimerTestKit.earlyCalls(calls, start: startTime, interval: interval)
            #expect(early.isEmpty, "\(early)")
        }

        @Test func handlerNeverOverlapsAndDataCountsTheFiresWhileItRuns() {
            let queue = WorkQueue(label: "lull.test.timer.busy", attributes: .concurrent)
            let timer = EventSource.makeTimerSource(queue: queue)
            let overlap = OverlapTracker()
            let seen = Recorder<UInt>()
            let interval: UInt64 = 4_000_000
            let start = Deadline.now() + .milliseconds(5)
            timer.setEventHandler { [weak timer] in
                overlap.enter()
                seen.append(timer?.data ?? 0)
                usleep(12_000)  // three intervals
                overlap.exit()
            }
            timer.schedule(deadline: start, repeating: .nanoseconds(Int64(interval)))
            timer.activate()
            #expect(waitUntil { seen.count >= 10 })
            #expect(TimerTestKit.cancel(timer))
            #expect(overlap.maximum == 1, "the event handler ran concurrently with itself")
            #expect(seen.values.dropFirst().contains { $0 >= 2 }, "data never counted more than one fire: \(seen.values)")
            #expect(!seen.values.contains(0))
        }

        @Test func repeatingTimerStartedInThePastCountsTheGridPointsAlreadyPassed() throws {
            let interval: UInt64 = 10_000_000
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.past-start", log: log)
            let start = Deadline.now() - .milliseconds(95)
            let startTime = start.uptimeNanoseconds
            timer.schedule(deadline: start, repeating: .nanoseconds(Int64(interval)))
            let activatedAt = monotonicNanoseconds()
            timer.activate()
            #expect(waitUntil { log.count >= 1 })
            #expect(TimerTestKit.cancel(timer))
            let first = try #require(log.values.first)
            let passed = TimerTestKit.gridPoints(start: startTime, interval: interval, by: activatedAt)
            #expect(UInt64(first.data) >= passed, "first call saw \(first.data) fires; \(passed) grid points had passed")
            #expect(UInt64(first.data) <= TimerTestKit.gridPoints(start: startTime, interval: interval, by: first.time))
            #expect(TimerTestKit.earlyCalls(log.values, start: startTime, interval: interval).isEmpty)
        }

        @Test func timersWhoseWindowsShareAnInstantFireInOneWakeUp() {
            // [T, T + 100], [T + 40, T + 200], [T + 60, T + 160] (ms) share [T + 60, T + 100]:
            // the process wakes once, at T + 100, and all three fire. Sampled: at T + 70 all
            // three still wait; at T + 125 all three have fired (two before their own end).
            let logs = (0..<3).map { _ in TimerTestKit.FireLog() }
            let timers = logs.enumerated().map { index, log in
                TimerTestKit.makeTimer("lull.test.timer.shared-instant.\(index)", flags: .strict, log: log)
            }
            for timer in timers { timer.activate() }
            let windows: [(offset: UInt64, leeway: UInt64)] = [(0, 100), (40, 160), (60, 100)]
            let outcome = TimerTestKit.anyTrial { trial in
                let before = logs.map(\.count)
                let baseline = TimerTestKit.settledEngineCount()
                let start = monotonicNanoseconds() + 50_000_000
                var deadlines: [UInt64] = []
                for (timer, window) in zip(timers, windows) {
                    let deadline = start + window.offset * 1_000_000
                    deadlines.append(deadline)
                    timer.schedule(deadline: Deadline(uptimeNanoseconds: deadline),
                                   leeway: .milliseconds(Int64(window.leeway)))
                }
                let waiting = TimerTestKit.sample(at: start + 70_000_000, validUntil: start + 95_000_000) {
                    Runtime.shared.timers.count == baseline + 3
                }
                let fired = TimerTestKit.sample(at: start + 125_000_000, validUntil: start + 155_000_000) {
                    Runtime.shared.timers.count == baseline
                }
                #expect(waitUntil { zip(logs, before).allSatisfy { $0.count == $1 + 1 } })
                for (log, deadline) in zip(logs, deadlines) {
                    if let call = log.values.last {
                        #expect(call.time >= deadline, "fired \(deadline - call.time) ns early")
                        #expect(call.data == 1)
                    }
                }
                trial.note("all waiting at +70 ms: \(waiting.map { "\($0)" } ?? "missed"); all fired by +125 ms: \(fired.map { "\($0)" } ?? "missed")")
                return waiting == true && fired == true
            }
            #expect(outcome.succeeded, "\(outcome.notes)")
            for timer in timers { #expect(TimerTestKit.cancel(timer)) }
        }

        // MARK: Leeway

        @Test(arguments: QoS.QoSClass.allCases)
        func defaultLeewayFollowsItsDocumentedTable(qosClass: QoS.QoSClass) {
            let millisecond: UInt64 = 1_000_000
            let delays: [UInt64] = [0, 1, 7, 8, 9, 1_000, 3_124_999, 3_125_000, 3_125_001, 4 * millisecond,
                                    8 * millisecond - 1, 8 * millisecond, 8 * millisecond + 1, 40 * millisecond,
                                    200 * millisecond, 1_000 * millisecond, 60_000 * millisecond,
                                    UInt64.max / 32, UInt64.max / 32 + 1, UInt64.max - 1, UInt64.max]
            for delay in delays {
                let expected: UInt64
                switch qosClass {
                case .userInteractive, .userInitiated, .default, .unspecified:
                    expected = delay >= 8 * millisecond ? millisecond : delay / 8
                case .utility:
                    expected = delay >= 40 * millisecond ? 10 * millisecond : delay / 4
                case .background:
                    expected = delay >= 3_125_000 ? 100 * millisecond : delay * 32
                }
                #expect(DefaultLeeway.nanoseconds(for: qosClass, delay: delay) == expected, "\(qosClass), delay \(delay) ns")
            }
            // Some rows spelled out.
            switch qosClass {
            case .userInteractive, .userInitiated, .default, .unspecified:
                #expect(DefaultLeeway.nanoseconds(for: qosClass, delay: 4 * millisecond) == 500_000)
                #expect(DefaultLeeway.nanoseconds(for: qosClass, delay: 1_000 * millisecond) == millisecond)
            case .utility:
                #expect(DefaultLeeway.nanoseconds(for: qosClass, delay: 4 * millisecond) == millisecond)
                #expect(DefaultLeeway.nanoseconds(for: qosClass, delay: 1_000 * millisecond) == 10 * millisecond)
            case .background:
                #expect(DefaultLeeway.nanoseconds(for: qosClass, delay: millisecond) == 32 * millisecond)
                #expect(DefaultLeeway.nanoseconds(for: qosClass, delay: 1_000 * millisecond) == 100 * millisecond)
            }
            // Scheduling reads only the coarse clock for deadlines past `saturatingDelay`:
            // from there (less a 10 ms tick) on, the default must already be at its cap.
            #expect(DefaultLeeway.nanoseconds(for: qosClass, delay: DefaultLeeway.saturatingDelay - 10 * millisecond)
                    == DefaultLeeway.nanoseconds(for: qosClass, delay: .max))
        }

        @Test func defaultLeewayGrowsAsQoSFallsAndStaysWithin1msAtDefaultAndAbove() {
            var random = TimerTestKit.Random(seed: 0x1EE)
            var delays: [UInt64] = [0, 1, 1_000_000, 8_000_000, .max]
            for _ in 0..<1_000 { delays.append(UInt64.random(in: 0...(UInt64(1) << UInt64.random(in: 1...63, using: &random)), using: &random)) }
            let falling: [QoS.QoSClass] = [.userInteractive, .userInitiated, .default, .utility, .background]
            for delay in delays {
                let leeways = falling.map { DefaultLeeway.nanoseconds(for: $0, delay: delay) }
                #expect(zip(leeways, leeways.dropFirst()).allSatisfy { $0 <= $1 }, "delay \(delay): \(leeways)")
                for qosClass in [QoS.QoSClass.default, .userInitiated, .userInteractive, .unspecified] {
                    #expect(DefaultLeeway.nanoseconds(for: qosClass, delay: delay) <= 1_000_000)
                }
            }
        }

        /// The effective window of a timer source, observed: sampled just after its deadline
        /// the timer must still wait when its effective leeway is wider (`openAt`), and must
        /// have fired when it is narrower (`firedBy`, sampled before the window a wrong
        /// default would give had closed).
        @Test(arguments: DefaultLeewayCase.all)
        func timerSourceGetsTheDefaultLeewayOfItsQueuesQoSUnlessStrict(_ testCase: DefaultLeewayCase) {
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.default-leeway", flags: testCase.strict ? .strict : [],
                                               qos: testCase.qos, log: log)
            timer.activate()
            let outcome = TimerTestKit.anyTrial { trial in
                let before = log.count
                let baseline = TimerTestKit.settledEngineCount()
                let deadline = monotonicNanoseconds() + 200_000_000
                timer.schedule(deadline: Deadline(uptimeNanoseconds: deadline))
                var waiting: Bool? = true
                if let open = testCase.openAt {
                    waiting = TimerTestKit.sample(at: deadline + open.at, validUntil: deadline + open.validUntil) {
                        Runtime.shared.timers.count == baseline + 1 && log.count == before
                    }
                }
                let fired = TimerTestKit.sample(at: deadline + testCase.firedBy.at, validUntil: deadline + testCase.firedBy.validUntil) {
                    Runtime.shared.timers.count == baseline
                }
                #expect(waitUntil { log.count == before + 1 })
                if let call = log.values.last { #expect(call.time >= deadline, "fired \(deadline - call.time) ns early") }
                trial.note("waiting: \(waiting.map { "\($0)" } ?? "missed"), fired: \(fired.map { "\($0)" } ?? "missed")")
                return waiting == true && fired == true
            }
            #expect(outcome.succeeded, "\(outcome.notes)")
            #expect(TimerTestKit.cancel(timer))
        }

        /// Whatever the flags and the QoS, the window is at least the requested leeway: a
        /// timer asked for [T, T + 150 ms] still waits at T + 100 ms.
        @Test(arguments: RequestedLeewayCase.all)
        func effectiveWindowIsNeverShorterThanRequested(_ testCase: RequestedLeewayCase) {
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.requested-leeway", flags: testCase.strict ? .strict : [],
                                               qos: testCase.qos, log: log)
            timer.activate()
            let outcome = TimerTestKit.anyTrial { trial in
                let before = log.count
                let baseline = TimerTestKit.settledEngineCount()
                // The deadline's distance only delays the check: 20 ms out, the default leeway
                // (a share of the delay) stays below the requested one, which alone must
                // keep the timer waiting.
                let deadline = monotonicNanoseconds() + 20_000_000
                timer.schedule(deadline: Deadline(uptimeNanoseconds: deadline),
                               repeating: testCase.repeating ? .milliseconds(300) : nil, leeway: .milliseconds(150))
                let waiting = TimerTestKit.sample(at: deadline + 100_000_000, validUntil: deadline + 140_000_000) {
                    Runtime.shared.timers.count == baseline + 1 && log.count == before
                }
                #expect(waitUntil { log.count > before })
                if let call = log.values.dropFirst(before).first {
                    #expect(call.time >= deadline, "fired \(deadline - call.time) ns early")
                }
                // Stop a repeating one; the next trial reschedules it.
                timer.schedule(deadline: .distantFuture)
                trial.note("waiting at +100 ms: \(waiting.map { "\($0)" } ?? "missed")")
                return waiting == true
            }
            #expect(outcome.succeeded, "\(outcome.notes)")
            #expect(TimerTestKit.cancel(timer))
        }

        // MARK: Wall clock

        @Test(arguments: [0, 20, 100])
        func wallClockTimerFiresNeverBeforeItsWallDeadline(milliseconds: Int) throws {
            let baseline = TimerTestKit.settledEngineCount()
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.wall", log: log)
            let deadline = WallDeadline.now() + .milliseconds(milliseconds)
            timer.schedule(wallDeadline: deadline)
            timer.activate()
            #expect(waitUntil { log.count == 1 })
            let call = try #require(log.values.first)
            #expect(call.wallTime >= deadline.nanosecondsSinceEpoch,
                    "fired \(deadline.nanosecondsSinceEpoch - call.wallTime) ns before its wall deadline")
            #expect(call.data == 1)
            #expect(keepsHolding(for: .milliseconds(150)) { log.count == 1 })
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
            #expect(TimerTestKit.cancel(timer))
        }

        @Test func repeatingWallClockTimerFiresNeverBeforeItsGrid() {
            let interval: UInt64 = 15_000_000
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.wall-grid", log: log)
            let start = WallDeadline.now() + .milliseconds(20)
            timer.schedule(wallDeadline: start, repeating: .nanoseconds(Int64(interval)))
            timer.activate()
            #expect(waitUntil { log.total >= 12 })
            #expect(TimerTestKit.cancel(timer))
            let early = TimerTestKit.earlyCalls(log.values, start: start.nanosecondsSinceEpoch, interval: interval, useWall: true)
            #expect(early.isEmpty, "\(early)")
        }

        /// A clock check that finds no change (the system clock is never set by a test)
        /// leaves a wall-clock timer source alone.
        @Test func clockCheckWithoutAChangeLeavesWallClockTimersAlone() throws {
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.wall-check", log: log)
            let deadline = WallDeadline.now() + .milliseconds(80)
            timer.schedule(wallDeadline: deadline)
            timer.activate()
            Runtime.shared.timers.wallClockChanged()
            #expect(waitUntil { log.count == 1 })
            let call = try #require(log.values.first)
            #expect(call.wallTime >= deadline.nanosecondsSinceEpoch)
            #expect(keepsHolding(for: .milliseconds(100)) { log.count == 1 })
            #expect(TimerTestKit.cancel(timer))
        }

        /// A repeating wall-clock timer whose start is years in the past fires once for all
        /// the missed fires (`data` counts them), as a monotonic one does, and then stays
        /// on its grid: no replay of every missed fire.
        @Test func repeatingWallClockTimerStartedInThePastMergesTheMissedFires() throws {
            let interval: UInt64 = 1_000_000_000
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.wall-catch-up", log: log)
            let tenYears = Int64(10 * 365 * 24 * 3_600)
            let start = WallDeadline.now() + .seconds(-tenYears)
            timer.schedule(wallDeadline: start, repeating: .nanoseconds(Int64(interval)))
            timer.activate()
            #expect(waitUntil { log.count >= 1 })
            // The next fire is due within a second; 300 ms leaves it out on most runs and
            // would count a replay's hundreds of calls on every run.
            #expect(keepsHolding(for: .milliseconds(300)) { log.count <= 2 }, "\(log.count) handler calls")
            let first = try #require(log.values.first)
            let missed = (first.wallTime - start.nanosecondsSinceEpoch) / interval
            #expect(UInt64(first.data) + 2 >= missed && UInt64(first.data) <= missed + 1,
                    "the first call counted \(first.data) fires; \(missed) intervals had passed")
            #expect(TimerTestKit.cancel(timer))
            let early = TimerTestKit.earlyCalls(log.values, start: start.nanosecondsSinceEpoch, interval: interval, useWall: true)
            #expect(early.isEmpty, "\(early)")
        }

        // MARK: Bad input

        @Test(arguments: PastDeadlineCase.allCases)
        func deadlineInThePastFiresAtOnce(_ testCase: PastDeadlineCase) throws {
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.past", qos: testCase == .backgroundQueue ? .background : .unspecified, log: log)
            timer.activate()
            let scheduledAt = monotonicNanoseconds()
            switch testCase {
            case .oneSecondAgo, .backgroundQueue: timer.schedule(deadline: .now() - .seconds(1))
            case .zero: timer.schedule(deadline: Deadline(uptimeNanoseconds: 0))
            case .wallFiveSecondsAgo: timer.schedule(wallDeadline: .now() + .seconds(-5))
            case .wallZero: timer.schedule(wallDeadline: WallDeadline(nanosecondsSinceEpoch: 0))
            }
            #expect(waitUntil { log.count == 1 })
            let call = try #require(log.values.first)
            #expect(call.data == 1)
            #expect(call.time - scheduledAt < 2_000_000_000, "a past deadline fired only after \(call.time - scheduledAt) ns")
            #expect(keepsHolding(for: .milliseconds(150)) { log.count == 1 })
            #expect(TimerTestKit.cancel(timer))
        }

        @Test(arguments: FarDeadlineCase.allCases)
        func distantFutureNeverFiresAndKeepsNoEntry(_ testCase: FarDeadlineCase) {
            let baseline = TimerTestKit.settledEngineCount()
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.distant", log: log)
            timer.activate()
            // A near schedule first: the distant one must replace it.
            timer.schedule(deadline: .now() + .milliseconds(50))
            switch testCase {
            case .oneShot: timer.schedule(deadline: .distantFuture)
            case .repeating: timer.schedule(deadline: .distantFuture, repeating: .milliseconds(1))
            case .saturatedSum: timer.schedule(deadline: .now() + .seconds(Int64.max), leeway: .milliseconds(1))
            case .wallOneShot: timer.schedule(wallDeadline: .distantFuture)
            case .wallRepeating: timer.schedule(wallDeadline: .distantFuture, repeating: .milliseconds(1))
            }
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
            #expect(keepsHolding(for: .milliseconds(200)) { log.count == 0 && Runtime.shared.timers.count == baseline })
            #expect(TimerTestKit.cancel(timer))
        }

        @Test(arguments: [Duration.zero, .nanoseconds(-1), .milliseconds(-5), .seconds(-Int64.max), .seconds(Int64.min)])
        func intervalOfZeroOrLessMakesAOneShot(interval: Duration) throws {
            let baseline = TimerTestKit.settledEngineCount()
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.non-positive", log: log)
            let deadline = Deadline.now() + .milliseconds(10)
            timer.schedule(deadline: deadline, repeating: interval)
            timer.activate()
            #expect(waitUntil { log.count == 1 })
            let call = try #require(log.values.first)
            #expect(call.time >= deadline.uptimeNanoseconds)
            #expect(call.data == 1)
            #expect(keepsHolding(for: .milliseconds(200)) { log.count == 1 })
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
            #expect(TimerTestKit.cancel(timer))
        }

        /// The leeway of a repeating timer is capped at its interval: asked for 10 s (or an
        /// absurd leeway) with a 20 ms interval, it still fires about every 20 ms, where an
        /// uncapped window would make it wait 10 s (or forever).
        @Test(arguments: OversizedLeewayCase.all)
        func leewayLargerThanTheIntervalIsCappedAtTheInterval(_ testCase: OversizedLeewayCase) {
            let interval: UInt64 = 20_000_000
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.capped", flags: testCase.strict ? .strict : [], log: log)
            let start = Deadline.now() + .milliseconds(20)
            timer.schedule(deadline: start, repeating: .nanoseconds(Int64(interval)), leeway: testCase.leeway)
            timer.activate()
            // 10 fires take about 220 ms here.
            #expect(waitUntil(timeout: .seconds(5)) { log.total >= 10 }, "only \(log.total) fires after 5 s")
            #expect(TimerTestKit.cancel(timer))
            let early = TimerTestKit.earlyCalls(log.values, start: start.uptimeNanoseconds, interval: interval)
            #expect(early.isEmpty, "\(early)")
        }

        /// An absurd leeway on a one-shot: no crash, no early fire; the window never closes, so
        /// the timer fires in the next wake-up after its deadline, here a strict engine entry's.
        @Test(arguments: [false, true])
        func absurdLeewayOnAOneShotFiresWithTheNextWakeUp(strict: Bool) throws {
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.absurd", flags: strict ? .strict : [], log: log)
            let deadline = Deadline.now() + .milliseconds(30)
            timer.schedule(deadline: deadline, leeway: .seconds(Int64.max))
            timer.activate()
            timer.schedule(deadline: deadline, leeway: Duration(secondsComponent: .max, attosecondsComponent: 999_999_999_999_999_999))
            let partner = TimerTestKit.Probe(deadline: deadline.uptimeNanoseconds + 50_000_000, leeway: 0)
            partner.schedule()
            #expect(waitUntil { partner.fires.count == 1 })
            #expect(waitUntil { log.count == 1 })
            let call = try #require(log.values.first)
            #expect(call.time >= deadline.uptimeNanoseconds)
            #expect(call.data == 1)
            #expect(TimerTestKit.cancel(timer))
        }

        /// Deadlines, intervals and leeways at the ends of the clock: nothing traps, nothing
        /// fires (the deadlines are centuries away), and cancelling leaves nothing behind.
        @Test func schedulesAtTheEndOfTheClockDoNotOverflow() throws {
            let baseline = TimerTestKit.settledEngineCount()
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.clock-end", log: log)
            timer.activate()
            let ends = [Deadline(uptimeNanoseconds: .max - 1), Deadline(uptimeNanoseconds: .max - 1_000_000_000)]
            let intervals: [Duration?] = [nil, .nanoseconds(1), .seconds(1), .seconds(Int64.max)]
            let leeways: [Duration] = [.zero, .milliseconds(1), .seconds(Int64.max)]
            for end in ends {
                for interval in intervals {
                    for leeway in leeways {
                        timer.schedule(deadline: end, repeating: interval, leeway: leeway)
                        #expect(Runtime.shared.timers.count <= baseline + 1)
                    }
                }
            }
            timer.schedule(wallDeadline: WallDeadline(nanosecondsSinceEpoch: .max - 1), repeating: .seconds(1),
                           leeway: .seconds(Int64.max))
            #expect(keepsHolding(for: .milliseconds(100)) { log.count == 0 })
            // A huge interval from a start just passed: one fire, and the next grid point lies
            // beyond the end of the clock.
            timer.schedule(deadline: .now() - .milliseconds(1), repeating: .seconds(Int64.max))
            #expect(waitUntil { log.count == 1 })
            let call = try #require(log.values.first)
            #expect(call.data == 1)
            #expect(keepsHolding(for: .milliseconds(100)) { log.count == 1 })
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
            #expect(TimerTestKit.cancel(timer))
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
        }

        @Test func scheduleAfterCancelDoesNothing() {
            let baseline = TimerTestKit.settledEngineCount()
            let log = TimerTestKit.FireLog()
            let timer = TimerTestKit.makeTimer("lull.test.timer.after-cancel", log: log)
            timer.activate()
            #expect(TimerTestKit.cancel(timer))
            timer.schedule(deadline: .now())
            timer.schedule(deadline: .now() + .milliseconds(5), repeating: .milliseconds(5))
            #expect(keepsHolding(for: .milliseconds(150)) { log.count == 0 && Runtime.shared.timers.count == baseline })
        }

        // MARK: Cancel

        @Test func noFireAfterTheCancelHandlerRanAndTheEngineLetsGo() {
            let baseline = TimerTestKit.settledEngineCount()
            let queue = WorkQueue(label: "lull.test.timer.cancel", attributes: .concurrent)
            let timer = EventSource.makeTimerSource(flags: .strict, queue: queue)
            let fires = Counter()
            let cancelRan = Flag()
            let afterCancel = Counter()
            timer.setEventHandler {
                if cancelRan.isSet { afterCancel.increment() }
                fires.increment()
            }
            timer.setCancelHandler { cancelRan.set() }
            timer.schedule(deadline: .now(), repeating: .milliseconds(2))
            timer.activate()
            #expect(fires.await { $0 >= 5 })
            timer.cancel()
            #expect(cancelRan.await())
            #expect(timer.isCancelled)
            let total = fires.value
            #expect(keepsHolding(for: .milliseconds(150)) { fires.value == total })
            #expect(afterCancel.value == 0, "an event handler ran after the cancel handler")
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
        }

        @Test func cancelBeforeActivationNeverFires() {
            let baseline = TimerTestKit.settledEngineCount()
            let fires = Counter()
            let cancelled = Flag()
            let timer = EventSource.makeTimerSource(queue: WorkQueue(label: "lull.test.timer.cancel-inactive"))
            timer.setEventHandler { fires.increment() }
            timer.setCancelHandler { cancelled.set() }
            timer.schedule(deadline: .now() + .milliseconds(5), repeating: .milliseconds(5))
            timer.cancel()
            timer.activate()
            #expect(cancelled.await())
            #expect(keepsHolding(for: .milliseconds(100)) { fires.value == 0 && Runtime.shared.timers.count == baseline })
        }

        @Test func releasedTimerIsCancelledAndLeavesTheEngine() {
            let baseline = TimerTestKit.settledEngineCount()
            let fires = Counter()
            let cancelled = Flag()
            do {
                let timer = EventSource.makeTimerSource(queue: WorkQueue(label: "lull.test.timer.released"))
                timer.setEventHandler { fires.increment() }
                timer.setCancelHandler { cancelled.set() }
                timer.schedule(deadline: .now(), repeating: .milliseconds(5))
                timer.activate()
                #expect(fires.await { $0 >= 3 })
            }
            #expect(cancelled.await())
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
            let total = fires.value
            #expect(keepsHolding(for: .milliseconds(100)) { fires.value == total })
        }

        // MARK: Many

        @Test func manyTimersEachFireOnceInsideTheirWindows() {
            let baseline = TimerTestKit.settledEngineCount()
            let queues = (0..<4).map { WorkQueue(label: "lull.test.timer.many.\($0)", attributes: $0 % 2 == 0 ? [] : .concurrent) }
            var random = TimerTestKit.Random(seed: 0x3A11)
            let count = 200
            let logs = (0..<count).map { _ in TimerTestKit.FireLog() }
            var timers: [TimerSource] = []
            var windows: [(deadline: UInt64, end: UInt64)] = []
            let now = monotonicNanoseconds()
            for index in 0..<count {
                let strict = index % 3 == 0
                let timer = EventSource.makeTimerSource(flags: strict ? .strict : [], queue: queues[index % queues.count])
                let log = logs[index]
                timer.setEventHandler { [weak timer] in log.record(timer?.data ?? 0) }
                let deadline = now + UInt64.random(in: 0...300_000_000, using: &random)
                let leeway = UInt64.random(in: 0...20_000_000, using: &random)
                // Without .strict the default leeway (≤ 1 ms at the default QoS) may widen it.
                windows.append((deadline, deadline + leeway + (strict ? 0 : 1_000_000)))
                timer.schedule(deadline: Deadline(uptimeNanoseconds: deadline), leeway: .nanoseconds(Int64(leeway)))
                timer.activate()
                timers.append(timer)
            }
            #expect(waitUntil { logs.allSatisfy { $0.count >= 1 } })
            #expect(keepsHolding(for: .milliseconds(150)) { logs.allSatisfy { $0.count == 1 } })
            var early: [Int] = []
            var late: [Int] = []
            for (index, log) in logs.enumerated() {
                guard let call = log.values.first else { continue }
                if call.time < windows[index].deadline { early.append(index) }
                if call.time > windows[index].end + TimerTestKit.lateSlack { late.append(index) }
                #expect(call.data == 1)
            }
            #expect(early.isEmpty, "timers that fired before their deadline: \(early)")
            #expect(late.isEmpty, "timers that fired long after their window: \(late)")
            #expect(waitUntil { Runtime.shared.timers.count == baseline })
            for timer in timers { #expect(TimerTestKit.cancel(timer)) }
        }
    }
}

// MARK: - Cases

struct DefaultLeewayCase: Sendable, CustomTestStringConvertible {
    struct Sample: Sendable {
        let at: UInt64
        let validUntil: UInt64
    }

    let qos: QoS
    let strict: Bool
    /// Still waiting here (after the deadline) when the effective window is wider.
    let openAt: Sample?
    /// Fired by here; a sample is only valid before the window a wrong default would give.
    let firedBy: Sample

    var testDescription: String { "\(qos.qosClass)\(strict ? ", strict" : "")" }

    private static let ms: UInt64 = 1_000_000
    /// One-shots 200 ms out. At and above the default QoS, 1/8 of the delay capped at 1 ms
    /// (an uncapped one would be 25 ms); utility 1/4 capped at 10 ms (uncapped: 50 ms);
    /// background 32× capped at 100 ms; strict: none.
    static let all: [DefaultLeewayCase] = [
        DefaultLeewayCase(qos: .userInteractive, strict: false, openAt: nil, firedBy: Sample(at: 15 * ms, validUntil: 24 * ms)),
        DefaultLeewayCase(qos: .userInitiated, strict: false, openAt: nil, firedBy: Sample(at: 15 * ms, validUntil: 24 * ms)),
        DefaultLeewayCase(qos: .default, strict: false, openAt: nil, firedBy: Sample(at: 15 * ms, validUntil: 24 * ms)),
        DefaultLeewayCase(qos: .unspecified, strict: false, openAt: nil, firedBy: Sample(at: 15 * ms, validUntil: 24 * ms)),
        DefaultLeewayCase(qos: .utility, strict: false, openAt: Sample(at: 3 * ms, validUntil: 9 * ms),
                          firedBy: Sample(at: 30 * ms, validUntil: 48 * ms)),
        DefaultLeewayCase(qos: .background, strict: false, openAt: Sample(at: 50 * ms, validUntil: 90 * ms),
                          firedBy: Sample(at: 130 * ms, validUntil: 500 * ms)),
        DefaultLeewayCase(qos: .utility, strict: true, openAt: nil, firedBy: Sample(at: 15 * ms, validUntil: 24 * ms)),
        DefaultLeewayCase(qos: .background, strict: true, openAt: nil, firedBy: Sample(at: 15 * ms, validUntil: 24 * ms)),
    ]
}

struct RequestedLeewayCase: Sendable, CustomTestStringConvertible {
    let qos: QoS
    let strict: Bool
    let repeating: Bool

    var testDescription: String { "\(qos.qosClass)\(strict ? ", strict" : "")\(repeating ? ", repeating" : "")" }

    static let all: [RequestedLeewayCase] = [QoS.userInteractive, .default, .utility, .background].flatMap { qos in
        [RequestedLeewayCase(qos: qos, strict: false, repeating: false), RequestedLeewayCase(qos: qos, strict: true, repeating: false)]
    } + [RequestedLeewayCase(qos: .default, strict: false, repeating: true), RequestedLeewayCase(qos: .default, strict: true, repeating: true)]
}

struct OversizedLeewayCase: Sendable, CustomTestStringConvertible {
    let leeway: Duration
    let strict: Bool

    var testDescription: String { "\(leeway)\(strict ? ", strict" : "")" }

    static let all: [OversizedLeewayCase] = [
        OversizedLeewayCase(leeway: .seconds(10), strict: false),
        OversizedLeewayCase(leeway: .seconds(10), strict: true),
        OversizedLeewayCase(leeway: .seconds(Int64.max), strict: false),
        OversizedLeewayCase(leeway: .seconds(Int64.max), strict: true),
    ]
}

enum PastDeadlineCase: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case oneSecondAgo, zero, backgroundQueue, wallFiveSecondsAgo, wallZero

    var testDescription: String { rawValue }
}

enum FarDeadlineCase: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case oneShot, repeating, saturatedSum, wallOneShot, wallRepeating

    var testDescription: String { rawValue }
}

// MARK: - Helpers

extension TimerTestKit {
    /// What a timer's event handler saw, call by call.
    final class FireLog: Sendable {
        struct Call: Sendable {
            let time: UInt64
            let wallTime: UInt64
            let data: UInt
        }

        private let calls = Mutex<[Call]>([])

        func record(_ data: UInt) {
            let call = Call(time: monotonicNanoseconds(), wallTime: realtimeNanoseconds(), data: data)
            calls.locked { $0.append(call) }
        }

        var values: [Call] { calls.locked { $0 } }
        var count: Int { calls.locked { $0.count } }
        var total: UInt { calls.locked { $0.reduce(0) { $0 + $1.data } } }
    }

    /// A timer on a new queue whose handler records `data` into `log` (holding the timer
    /// weakly: no cycle to break).
    static func makeTimer(_ label: String, flags: TimerFlags = [], qos: QoS = .unspecified, log: FireLog) -> TimerSource {
        let timer = EventSource.makeTimerSource(flags: flags, queue: WorkQueue(label: label, qos: qos))
        timer.setEventHandler { [weak timer] in log.record(timer?.data ?? 0) }
        return timer
    }

    /// Cancels `timer` and waits for its cancel handler; false if it never ran.
    static func cancel(_ timer: TimerSource) -> Bool {
        let done = Flag()
        timer.setCancelHandler { done.set() }
        timer.cancel()
        return done.await()
    }

    /// The calls of a repeating timer that had counted more fires than grid points
    /// start + k × interval had passed when they started.
    static func earlyCalls(_ calls: [FireLog.Call], start: UInt64, interval: UInt64, useWall: Bool = false) -> [String] {
        var cumulative: UInt64 = 0
        var early: [String] = []
        for (number, call) in calls.enumerated() {
            cumulative += UInt64(call.data)
            let due = gridPoints(start: start, interval: interval, by: useWall ? call.wallTime : call.time)
            if cumulative > due { early.append("call \(number): \(cumulative) fires counted, \(due) grid points passed") }
        }
        return early
    }
}
