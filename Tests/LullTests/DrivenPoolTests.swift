import CLullShims
import Glibc
import Synchronization
import Testing
@testable import Lull

/// The worker pool's hand-off to the poller and its timer firing, on a driven clock: a
/// private `WorkerPool` polls a `DrivenPollTarget` that only the test wakes, and fires a
/// `TimerEngine` on a `ManualClock` (docs/WorkerPool.md has the state model). Every step is
/// a condition: a poller entering the poll, a fire, a job run; time moves only when the test
/// moves it, so a fire's instant is checked exactly.
///
/// In `LullSuite`: the pool's threads are real, and a test elsewhere in this process may
/// make `pthread_create` fail through the shims' fault table.
extension LullSuite {
    @Suite struct DrivenPoolTests {
        /// The engine arms the target; the request gets a worker polling; time moves to the
        /// armed window's end and the poller's wake-up fires the timer, on the polling
        /// worker, at exactly that instant; then the pool gives the reactor up.
        @Test func aTimerFiresOnThePollingWorkerAtItsWindowsEnd() throws {
            let driven = DrivenPool()
            defer { driven.shutDown() }
            let start = driven.clock.monotonicNanoseconds()
            let fires = Beacon<(tid: Int32, time: UInt64)>()
            driven.engine.schedule(CallbackEntry { fires.post((lull_gettid(), driven.clock.monotonicNanoseconds())) },
                                   deadline: start + 50_000_000, leeway: 10_000_000)
            // Armed for the window's end (the engine lets the kernel choose in its last part).
            let armed = try #require(driven.target.armed, "the engine did not arm the reactor")
            #expect(armed.latest == start + 60_000_000 && armed.earliest >= start + 50_000_000)
            let poller = try #require(driven.target.awaitPoller(), "no worker came to poll the armed timer")
            #expect(driven.pool.pollerSlot.isPolling)
            #expect(driven.pool.pollerThreadID.load(ordering: .acquiring) == poller)
            #expect(fires.values.isEmpty, "fired before time moved")

            #expect(driven.target.expireTimer() == start + 60_000_000)
            let fire = try #require(fires.await(count: 1).first, "the expiry fired nothing")
            #expect(fire.tid == poller, "fired on another thread than the poller")
            #expect(fire.time == start + 60_000_000)
            // Nothing left: the reactor is disarmed and the slot given up.
            #expect(driven.target.awaitNoPollerNeeded())
            #expect(driven.target.armed == nil)
        }

        /// While the poller waits in the reactor, a job of its class runs on another worker;
        /// a job that the wake-up produces for its class runs on the poller itself, right
        /// after the poll (the inline batch); with a timer still armed, the pool polls again.
        @Test func thePollerStaysInTheReactorAndRunsItsWakeUpsWorkInline() throws {
            let driven = DrivenPool()
            defer { driven.shutDown() }
            let start = driven.clock.monotonicNanoseconds()
            let ran = Beacon<(name: String, tid: Int32)>()
            driven.engine.schedule(CallbackEntry {
                driven.pool.submit(DrivenPool.job { ran.post(("inline", lull_gettid())) })
            }, deadline: start + 10_000_000, leeway: 0)
            driven.engine.schedule(CallbackEntry {}, deadline: start + 20_000_000, leeway: 0)
            let poller = try #require(driven.target.awaitPoller())

            driven.pool.submit(DrivenPool.job { ran.post(("submitted", lull_gettid())) })
            let submitted = try #require(ran.await(count: 1).first)
            #expect(submitted.name == "submitted")
            #expect(submitted.tid != poller, "the poller left the reactor for a job")
            #expect(driven.target.pollingThread == poller)

            #expect(driven.target.expireTimer() == start + 10_000_000)
            let inline = try #require(ran.await(count: 2).last)
            #expect(inline.name == "inline")
            #expect(inline.tid == poller, "the wake-up's own work went to another thread")
            // The second timer keeps the reactor armed: a worker polls again, and its expiry fires.
            #expect(driven.target.awaitPoller(after: 1) != nil, "nobody polled for the timer still armed")
            #expect(driven.target.expireTimer() == start + 20_000_000)
            #expect(driven.target.awaitNoPollerNeeded())
            #expect(driven.target.polls.count == 2)
        }

        /// A wake-up whose inline batch runs long — many short jobs, none slow on its own —
        /// hands what is left to the class queue once the batch has taken a millisecond of
        /// the poller's CPU: the first jobs run on the poller, later ones on other workers,
        /// and every job runs once.
        @Test func aLongInlineBatchOfShortJobsIsSharedWithOtherWorkers() throws {
            let driven = DrivenPool()
            defer { driven.shutDown() }
            let start = driven.clock.monotonicNanoseconds()
            let jobs = 40
            let ran = Beacon<(index: Int, tid: Int32)>()
            driven.engine.schedule(CallbackEntry {
                for index in 0..<jobs {
                    driven.pool.submit(DrivenPool.job {
                        burnThreadCPU(milliseconds: 0.25)
                        ran.post((index, lull_gettid()))
                    })
                }
            }, deadline: start + 10_000_000, leeway: 0)
            let poller = try #require(driven.target.awaitPoller())
            #expect(driven.target.expireTimer() == start + 10_000_000)
            let runs = ran.await(count: jobs)
            try #require(runs.count == jobs, "\(runs.count) of \(jobs) jobs ran")
            #expect(Set(runs.map(\.index)).count == jobs, "a job ran twice")
            #expect(runs.first?.tid == poller, "the wake-up's first job did not run inline on the poller")
            #expect(runs.contains { $0.tid != poller }, "the poller ran the whole long batch alone")
        }

        /// With the pool quiet (its only worker idle), a new timer claims that idle worker to
        /// poll (`vacant → requested → polling`) rather than starting a thread.
        @Test func aNewTimerClaimsTheIdleWorkerToPoll() throws {
            let driven = DrivenPool()
            defer { driven.shutDown() }
            let start = driven.clock.monotonicNanoseconds()
            driven.engine.schedule(CallbackEntry {}, deadline: start + 1_000_000, leeway: 0)
            let first = try #require(driven.target.awaitPoller())
            _ = driven.target.expireTimer()
            #expect(driven.target.awaitNoPollerNeeded())
            let defaultClass = driven.pool.classes[QoS.QoSClass.default.poolIndex]
            #expect(waitUntil { defaultClass.state.locked { $0.idle.count == 1 && $0.running == 0 && $0.spinning == 0 } })

            let fired = Beacon<Int32>()
            driven.engine.schedule(CallbackEntry { fired.post(lull_gettid()) }, deadline: start + 5_000_000, leeway: 0)
            let second = try #require(driven.target.awaitPoller(after: 1), "the idle worker was not claimed to poll")
            #expect(second == first, "a new thread polls while an idle worker was there")
            #expect(defaultClass.state.locked { $0.threads } == 1)
            _ = driven.target.expireTimer()
            #expect(fired.await(count: 1) == [first])
        }

        /// The spinner–poller race: the class's last worker spins for work while the need for
        /// a poller arrives with no request that could reach it (the request found no idle
        /// worker, and the thread it started never ran). Ending its spin, the worker must
        /// poll rather than park: nobody else would, and the reactor would never be polled.
        @Test func aSpinningWorkerThatEndsItsSpinWhileAPollerIsNeededPolls() throws {
            let driven = DrivenPool()
            defer {
                PoolTestHooks.spinEnds.locked { $0 = nil }
                driven.shutDown()
            }
            let raised = Flag()
            let pool = driven.pool
            let target = driven.target
            PoolTestHooks.spinEnds.locked { hook in
                hook = { worker in
                    guard worker.owner === pool, !raised.isSet else { return }
                    raised.set()
                    target.raiseInterest(requestingPoller: false)
                }
            }
            let ran = Beacon<Int32>()
            pool.submit(DrivenPool.job { ran.post(lull_gettid()) })
            let worker = try #require(ran.await(count: 1).first)
            let poller = try #require(target.awaitPoller(), "the spinning worker parked with the reactor unpolled")
            #expect(raised.isSet)
            #expect(poller == worker)
        }
    }
}

// MARK: - The driven pool

/// A private worker pool on a `DrivenPollTarget`, firing an engine on a `ManualClock`, wired
/// as `Runtime` wires the real ones.
final class DrivenPool: Sendable {
    let clock = ManualClock()
    let target: DrivenPollTarget
    let engine: TimerEngine
    let pool: WorkerPool

    init() {
        let target = DrivenPollTarget(clock: clock)
        engine = TimerEngine(clock: clock, arm: { target.arm($0, generation: $1) })
        pool = WorkerPool(reactor: target, timers: engine)
        target.connect(pool.pollerDemand)
        self.target = target
    }

    /// A default-QoS block for `pool.submit`.
    static func job(_ block: @escaping @Sendable () -> Void) -> Job {
        Job(work: .block(block), qos: QoS(.default), flags: [], context: .empty, group: nil)
    }

    /// Lets the pool go: nothing left to poll for, and a poller still waiting is woken, so
    /// that its workers park and retire.
    func shutDown() {
        target.shutDown()
    }
}

/// The reactor as the pool sees it (`PollTarget`), driven by the test: the engine arms it,
/// an armed window counts as interest and asks the pool for a poller, as `Reactor.setTimer`
/// does; `pollOnce` waits until the test wakes it (`expireTimer`, `shutDown`).
final class DrivenPollTarget: PollTarget {
    private struct State {
        var armed: WakeWindow?
        var appliedGeneration: UInt64 = 0
        /// The armed timer counts one in `interest`.
        var timerCounted = false
        /// The thread in `pollOnce` now, if any.
        var polling: Int32?
        /// Every `pollOnce` entered, by thread.
        var polls: [Int32] = []
        /// What the next (or current) poll returns once woken: whether the timer expired.
        var wake: Bool?
        var isShutDown = false
    }

    private let clock: ManualClock
    private let state = Mutex(State())
    private let interest = Atomic<Int>(0)
    private let demand = AtomicLazyReference<PollerDemand>()
    /// The polling worker sleeps here (one polls at a time).
    private let pollerParker = Parker()
    /// The test's thread sleeps here, waiting for a change.
    private let testParker = Parker()

    init(clock: ManualClock) {
        self.clock = clock
    }

    func connect(_ demand: PollerDemand) {
        _ = self.demand.storeIfNil(demand)
    }

    // MARK: PollTarget

    var needsPoller: Bool { interest.load(ordering: .sequentiallyConsistent) > 0 }
    var sleepSlackForPoll: UInt64 { 0 }

    func pollOnce() -> Bool {
        let tid = lull_gettid()
        state.locked { state in
            precondition(state.polling == nil, "two workers poll at once")
            state.polling = tid
            state.polls.append(tid)
        }
        testParker.unpark()
        while true {
            let woken = state.locked { state -> Bool? in
                guard let wake = state.wake else { return nil }
                state.wake = nil
                state.polling = nil
                return wake
            }
            if let woken {
                testParker.unpark()
                return woken
            }
            pollerParker.park()
        }
    }

    func timerFireHandled() {
        let uncount = state.locked { state -> Bool in
            guard state.armed == nil, state.timerCounted else { return false }
            state.timerCounted = false
            return true
        }
        if uncount { interest.subtract(1, ordering: .sequentiallyConsistent) }
        testParker.unpark()
    }

    // MARK: The engine's arm capability

    /// As `Reactor.setTimer`: the newest generation wins; an armed window counts as
    /// interest; a new window asks for a poller.
    func arm(_ window: WakeWindow?, generation: UInt64) {
        let count = state.locked { state -> Int in
            guard generation > state.appliedGeneration, !state.isShutDown else { return 0 }
            state.appliedGeneration = generation
            state.armed = window
            if window != nil, !state.timerCounted {
                state.timerCounted = true
                return 1
            }
            if window == nil, state.timerCounted {
                state.timerCounted = false
                return -1
            }
            return 0
        }
        if count > 0 { interest.add(1, ordering: .sequentiallyConsistent) }
        if count < 0 { interest.subtract(1, ordering: .sequentiallyConsistent) }
        if window != nil { demand.load()?.request() }
        testParker.unpark()
    }

    // MARK: The test's side

    var armed: WakeWindow? { state.locked { $0.armed } }
    var pollingThread: Int32? { state.locked { $0.polling } }
    var polls: [Int32] { state.locked { $0.polls } }

    /// Counts one more thing to poll for; with `requestingPoller`, asks the pool for a poller
    /// as the reactor does, and without, stands for a request that could not be answered.
    func raiseInterest(requestingPoller: Bool) {
        interest.add(1, ordering: .sequentiallyConsistent)
        if requestingPoller { demand.load()?.request() }
    }

    /// Moves the clock to the armed window's end (never back), takes the window as the
    /// reactor's timer callback does, and wakes the poller with "the timer expired".
    /// Returns the instant, or nil when nothing was armed.
    func expireTimer() -> UInt64? {
        let end = state.locked { state -> UInt64? in
            guard let window = state.armed else { return nil }
            state.armed = nil
            state.wake = true
            return window.latest
        }
        guard let end else { return nil }
        let now = clock.monotonicNanoseconds()
        if end > now { clock.advance(by: end - now) }
        pollerParker.unpark()
        return end
    }

    /// Waits until a worker is in `pollOnce`, the `count + 1`-th poll at least; its tid, or
    /// nil after the generous timeout.
    func awaitPoller(after count: Int = 0) -> Int32? {
        awaitState { state in state.polls.count > count ? state.polling : nil }
    }

    /// Waits until nothing is left to poll for and nobody polls.
    func awaitNoPollerNeeded() -> Bool {
        awaitState { state in state.polling == nil && !needsPoller ? true : nil } ?? false
    }

    /// Drops every interest and wakes a waiting poller: the pool's workers then park, and
    /// retire after their idle timeout.
    func shutDown() {
        state.locked { state in
            state.isShutDown = true
            state.armed = nil
            state.timerCounted = false
            state.wake = false
        }
        interest.store(0, ordering: .sequentiallyConsistent)
        pollerParker.unpark()
    }

    private func awaitState<T>(_ look: (State) -> T?) -> T? {
        let end = Deadline.now() + generousTimeout
        while true {
            if let found = state.locked({ look($0) }) { return found }
            guard Deadline.now() < end else { return nil }
            _ = testParker.park(until: min(end, Deadline.now() + .milliseconds(50)))
        }
    }
}

/// Values that threads post and one test thread waits for, woken by each post (no polling).
final class Beacon<Value: Sendable>: Sendable {
    private let storage = Mutex<[Value]>([])
    private let parker = Parker()

    func post(_ value: Value) {
        storage.locked { $0.append(value) }
        parker.unpark()
    }

    var values: [Value] { storage.locked { $0 } }

    /// Waits (one thread at a time) until `count` values were posted; returns them (fewer
    /// after the generous timeout).
    func await(count: Int) -> [Value] {
        let end = Deadline.now() + generousTimeout
        while true {
            let values = values
            if values.count >= count || Deadline.now() >= end { return values }
            _ = parker.park(until: end)
        }
    }
}
