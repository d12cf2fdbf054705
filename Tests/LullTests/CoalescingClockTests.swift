import Dispatch
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    /// `CoalescingClock` on the process's runtime: sleeps are timers of its engine.
    @Suite struct CoalescingClockTests {
        /// Twenty sleeps, deadlines 3 ms apart, each with 300 ms of tolerance: every window
        /// contains [deadline of the last, end of the first], so one wake-up serves them all
        /// (with no tolerance they would take about twenty). None ends before its deadline.
        /// The deadlines count from the moment all twenty tasks run (`StartLine`): a task
        /// that started after its deadline (a loaded host may start one tens of ms late)
        /// would return without a timer, and its fire would be missing from the count.
        @Test func overlappingSleepsShareOneWakeUp() async throws {
            try RuntimeDiagnostics.start()
            let clock = CoalescingClock()
            let early = Counter()
            let startLine = StartLine(count: 20)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<20 {
                    group.addTask {
                        let base = await startLine.arrive()
                        let deadline = base + .milliseconds(50 + 3 * index)
                        try await clock.sleep(until: deadline, tolerance: .milliseconds(300))
                        if clock.now < deadline { _ = early.increment() }
                    }
                }
                try await group.waitForAll()
            }
            let report = try #require(RuntimeDiagnostics.stop())
            #expect(early.value == 0, "a sleep ended before its deadline")
            let sleeps = try #require(report.timers.first { $0.identity == "CoalescingClock.sleep" })
            #expect(sleeps.fires == 20)
            #expect(abs(sleeps.leewayMilliseconds - 300) < 0.001)
            // The sleeps' one wake-up, and room for the runtime's own housekeeping.
            #expect(report.coalescing.wakeupsWithTimerFires <= 3,
                    "\(report.coalescing.wakeupsWithTimerFires) wake-ups fired timers")
        }

        /// Without tolerance a sleep gets its QoS's default leeway and never ends early.
        @Test func aSleepNeverEndsBeforeItsDeadline() async throws {
            let clock = CoalescingClock()
            for milliseconds in [1, 5, 12] {
                let deadline = clock.now + .milliseconds(milliseconds)
                try await clock.sleep(until: deadline, tolerance: nil)
                #expect(clock.now >= deadline)
                let strict = clock.now + .milliseconds(milliseconds)
                try await Task.sleep(until: strict, tolerance: .zero, clock: clock)
                #expect(clock.now >= strict)
            }
            // A deadline already past returns at once.
            try await clock.sleep(until: clock.now - .seconds(1), tolerance: nil)
        }

        @Test func aSleepCancelledBeforeItStartsThrowsAtOnce() async throws {
            let before = Runtime.shared.timers.count
            let task = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                try await Task.sleep(for: .seconds(60), tolerance: .seconds(1), clock: CoalescingClock())
            }
            await #expect(throws: CancellationError.self) { try await task.value }
            #expect(Runtime.shared.timers.count == before)
        }

        /// Cancelled while sleeping: throws promptly and takes its timer out of the engine.
        @Test func aSleepCancelledWhileSleepingThrowsPromptlyAndLeavesNoTimer() async throws {
            let before = Runtime.shared.timers.count
            let task = Task {
                try await Task.sleep(for: .seconds(60), clock: CoalescingClock())
            }
            #expect(waitUntil { Runtime.shared.timers.count == before + 1 })
            let cancelledAt = Deadline.now()
            task.cancel()
            await #expect(throws: CancellationError.self) { try await task.value }
            #expect(Deadline.now() - cancelledAt < .seconds(5))
            #expect(Runtime.shared.timers.count == before)
        }

        /// A sleep to the end of time waits for its cancel, with no timer in the engine.
        @Test func aSleepToTheDistantFutureEndsOnlyByCancellation() async throws {
            let task = Task { try await CoalescingClock().sleep(until: .distantFuture, tolerance: nil) }
            task.cancel()
            await #expect(throws: CancellationError.self) { try await task.value }
        }

        /// The tolerance is the leeway; without one, the QoS class's default for the delay.
        @Test func aSleepsLeewayIsItsToleranceOrItsClassDefault() {
            #expect(SleepTimer.leeway(tolerance: .milliseconds(500), delay: 1_000_000_000, qosClass: .background) == 500_000_000)
            #expect(SleepTimer.leeway(tolerance: .zero, delay: 1_000_000_000, qosClass: .background) == 0)
            #expect(SleepTimer.leeway(tolerance: .milliseconds(-3), delay: 1_000_000_000, qosClass: .default) == 0)
            #expect(SleepTimer.leeway(tolerance: nil, delay: 1_000_000_000, qosClass: .default) == 1_000_000)
            #expect(SleepTimer.leeway(tolerance: nil, delay: 1_000_000_000, qosClass: .utility) == 10_000_000)
            #expect(SleepTimer.leeway(tolerance: nil, delay: 1_000_000_000, qosClass: .background) == 100_000_000)
            #expect(SleepTimer.leeway(tolerance: nil, delay: 4_000_000, qosClass: .default) == 500_000)
        }

        @Test func deadlineIsAnInstant() {
            let start = Deadline(uptimeNanoseconds: 5_000_000_000)
            #expect(start.advanced(by: .milliseconds(1_500)) == Deadline(uptimeNanoseconds: 6_500_000_000))
            #expect(start.duration(to: Deadline(uptimeNanoseconds: 4_000_000_001)) == .nanoseconds(-999_999_999))
            #expect(Deadline(uptimeNanoseconds: 7_250_000_000) - start == .milliseconds(2_250))
            #expect(start.advanced(by: .seconds(-10)) == Deadline(uptimeNanoseconds: 0))
            #expect(CoalescingClock().minimumResolution == .nanoseconds(1))
        }
    }
}

extension LullSuite {
    /// Cancellation against the fire, on an engine of the test's own: each round, a fire
    /// loop and a cancel race for one sleep. Whoever wins, the sleep ends exactly once (its
    /// continuation is checked, a second resume traps) and the engine holds no entry. In
    /// `LullSuite` although its engine is its own: its fires would show in the wake-up
    /// recordings of other tests.
    @Suite struct SleepCancellationRaceTests {
        @Test func cancelRacingTheFireResumesOnceAndLeavesNoTimer() async throws {
            let driven = DrivenEngine()
            var outcomes = (fired: 0, cancelled: 0)
            for round in 0..<300 {
                let deadline = driven.now + 1_000
                let finished = Flag()
                let task = Task {
                    defer { finished.set() }
                    try await SleepTimer.sleep(until: deadline, leeway: 0, qosClass: .default, on: driven.engine)
                }
                let firing = DispatchGroup()
                DispatchQueue.global().async(group: firing) {
                    driven.clock.advance(by: 1_000)
                    while !finished.isSet { driven.engine.fire() }
                }
                // Cancel at a varying moment: before the sleep starts, while it is armed, as it fires.
                spin(microseconds: UInt64(round % 40))
                task.cancel()
                do {
                    try await task.value
                    outcomes.fired += 1
                } catch is CancellationError {
                    outcomes.cancelled += 1
                }
                firing.wait()
                #expect(driven.engine.count == 0, "round \(round) left a timer behind")
            }
            #expect(outcomes.fired + outcomes.cancelled == 300)
        }

        /// A thousand one-hour sleeps (without `install()`), cancelled: each throws, the
        /// engine holds none of them, and the reactor is disarmed, so they cost no wake-up.
        @Test func cancelledSleepsLeaveNoTimerAndNoArmedWakeUp() async throws {
            let driven = DrivenEngine()
            let deadline = Deadline.now() + .seconds(3_600)
            let tasks = (0..<1_000).map { _ in
                Task {
                    try await CoalescingClock.sleep(until: deadline, tolerance: .seconds(1), on: driven.engine)
                }
            }
            #expect(waitUntil { driven.engine.count == 1_000 })
            #expect(driven.recorder.applied != nil)
            for task in tasks { task.cancel() }
            for task in tasks {
                await #expect(throws: CancellationError.self) { try await task.value }
            }
            #expect(driven.engine.count == 0)
            #expect(driven.recorder.applied == nil, "still armed for cancelled sleeps")
            #expect(driven.runUntilIdle() == 0)
        }
    }
}

/// Holds tasks until `count` have arrived, then lets them all go with the instant the last
/// one arrived: their deadlines then count from a moment when all of them run.
final class StartLine: Sendable {
    private let state: Mutex<(count: Int, waiting: [CheckedContinuation<Deadline, Never>])>

    init(count: Int) {
        state = Mutex((count, []))
    }

    func arrive() async -> Deadline {
        await withCheckedContinuation { continuation in
            let released = state.locked { state -> [CheckedContinuation<Deadline, Never>]? in
                state.waiting.append(continuation)
                guard state.waiting.count == state.count else { return nil }
                defer { state.waiting = [] }
                return state.waiting
            }
            guard let released else { return }
            let now = Deadline.now()
            for waiter in released { waiter.resume(returning: now) }
        }
    }
}
