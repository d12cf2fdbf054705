import CLullShims
import Glibc
import Synchronization
import Testing
@testable import Lull

/// The stall check's policy as a pure decision: blocked workers are replaced, once each;
/// a class whose workers are runnable but wait for a CPU gets no threads.
extension IndependentSuite {
    @Suite(.serialized) struct StallPolicyTests {
        typealias Look = StallPolicy.Look
        static let blocked = Look(inOneJobWithoutCPU: true, sleeping: true, runQueueWait: 0)
        static let busy = Look(inOneJobWithoutCPU: false, sleeping: false, runQueueWait: 0)
        /// Runnable, in one job, barely run since the last look: it waited for a CPU.
        static let descheduled = Look(inOneJobWithoutCPU: true, sleeping: false,
                                      runQueueWait: StallMonitor.interval / 2)

        @Test func workersBlockedInTheKernelAreReplacedUpToTheQueuedJobs() {
            #expect(StallPolicy.threadsToStart(looks: [Self.blocked, Self.blocked], running: 2, knownBlocked: 0,
                                               queued: 10, waking: 0, cpuCount: 2) == 2)
            #expect(StallPolicy.threadsToStart(looks: [Self.blocked, Self.blocked], running: 2, knownBlocked: 0,
                                               queued: 1, waking: 0, cpuCount: 2) == 1)
            #expect(StallPolicy.threadsToStart(looks: [Self.blocked, Self.blocked], running: 2, knownBlocked: 0,
                                               queued: 3, waking: 2, cpuCount: 2) == 1,
                    "jobs already claimed by workers on their way need no thread")
            #expect(StallPolicy.threadsToStart(looks: [Self.blocked, Self.busy], running: 2, knownBlocked: 0,
                                               queued: 10, waking: 0, cpuCount: 2) == 1)
        }

        @Test func aWorkerThatStaysBlockedIsReplacedOnce() {
            // Two blocked workers replaced at an earlier look by two that run: no more.
            #expect(StallPolicy.threadsToStart(looks: [Self.blocked, Self.blocked, Self.busy, Self.busy], running: 4,
                                               knownBlocked: 0, queued: 10, waking: 0, cpuCount: 2) == 0)
            // Those two blocked as well: two more, not four.
            #expect(StallPolicy.threadsToStart(looks: Array(repeating: Self.blocked, count: 4), running: 4,
                                               knownBlocked: 0, queued: 10, waking: 0, cpuCount: 2) == 2)
        }

        @Test func workersInLullsOwnWaitsAreNotReplacedAgain() {
            // Both sleepers are in Lull's waits (counted apart, replaced when they blocked).
            #expect(StallPolicy.threadsToStart(looks: [Self.blocked, Self.blocked, Self.busy, Self.busy], running: 2,
                                               knownBlocked: 2, queued: 10, waking: 0, cpuCount: 2) == 0)
        }

        @Test func busyWorkersAreNotReplaced() {
            #expect(StallPolicy.threadsToStart(looks: [Self.busy, Self.busy], running: 2, knownBlocked: 0,
                                               queued: 10, waking: 0, cpuCount: 2) == 0)
        }

        @Test func aClassWhoseWorkersWaitForACPUDoesNotGrow() {
            // A lock holder descheduled and the workers asleep on its lock.
            #expect(StallPolicy.threadsToStart(looks: [Self.descheduled, Self.blocked, Self.blocked], running: 3,
                                               knownBlocked: 0, queued: 100, waking: 0, cpuCount: 2) == 0)
            // A busy worker that waited for a CPU most of the interval: the cores are taken.
            var waitedForCPU = Self.busy
            waitedForCPU.runQueueWait = StallPolicy.starvedRunQueueWait
            #expect(StallPolicy.threadsToStart(looks: [waitedForCPU, Self.blocked], running: 2, knownBlocked: 0,
                                               queued: 100, waking: 0, cpuCount: 2) == 0)
            // A short wait for a CPU is no sign of a shortage.
            var ranSoon = Self.busy
            ranSoon.runQueueWait = StallPolicy.starvedRunQueueWait - 1
            #expect(StallPolicy.threadsToStart(looks: [ranSoon, Self.blocked], running: 2, knownBlocked: 0,
                                               queued: 100, waking: 0, cpuCount: 2) == 1)
        }

        @Test func schedulerStatisticsAreParsed() throws {
            let stat = try #require(ThreadSchedStat.parse(ArraySlice(Array("123456789 4567 89\n".utf8))))
            #expect(stat == ThreadSchedStat(cpuNanoseconds: 123_456_789, runQueueWaitNanoseconds: 4567))
            #expect(ThreadSchedStat.parse(ArraySlice(Array("12\n".utf8))) == nil)
            #expect(ThreadSchedStat.parse(ArraySlice(Array("99999999999999999999999 1 1\n".utf8))) == nil)
            // This thread's own, where the kernel keeps them.
            if access("/proc/self/task/\(lull_gettid())/schedstat", R_OK) == 0 {
                let own = try #require(ThreadSchedStat.read(tid: lull_gettid()))
                #expect(own.cpuNanoseconds > 0)
            }
        }
    }
}

/// The stall check on a private pool (`DrivenPool`): real threads blocked in the kernel,
/// the look called by the test, time on a `ManualClock`.
extension LullSuite {
    @Suite struct StallCheckTests {
        /// Submits `count` default-QoS jobs that sleep in the kernel (a condition variable,
        /// unknown to Lull) until `gate` is set; each counts itself in `started`.
        static func submitBlocking(_ count: Int, to pool: WorkerPool, gate: Flag, started: Counter) {
            for _ in 0..<count {
                pool.submit(DrivenPool.job {
                    started.increment()
                    gate.await(timeout: .seconds(60))
                })
            }
        }

        /// Waits until every worker of the default class but the poller sleeps in the kernel
        /// (a worker that counted itself started may not have reached its wait yet).
        static func awaitWorkersAsleep(_ pool: WorkerPool, count: Int) -> Bool {
            waitUntil {
                let poller = pool.pollerThreadID.load(ordering: .acquiring)
                let tids = pool.classes[QoS.QoSClass.default.poolIndex].state.locked { Array($0.workers.keys) }
                let workers = tids.filter { $0 != poller }
                return workers.count == count && workers.allSatisfy { StallMonitor.isSleeping(tid: $0) }
            }
        }

        /// Every worker blocked with work queued: two looks replace the blocked workers, up
        /// to the CPU count; once the replacements block too, the next two looks replace
        /// those — and not again the workers replaced before.
        @Test func blockedWorkersAreReplacedOnceEach() throws {
            let driven = DrivenPool()
            let pool = driven.pool
            let cpus = pool.cpuCount
            let gate = Flag()
            defer {
                gate.set()
                driven.shutDown()
            }
            let started = Counter()
            Self.submitBlocking(cpus, to: pool, gate: gate, started: started)
            try #require(started.await { $0 == cpus }, "the class's first workers did not start")
            Self.submitBlocking(4 * cpus, to: pool, gate: gate, started: started)
            #expect(pool.threadStarts[.stallReplacement] == 0)
            // The saturated submit armed the look, whose timer got a worker polling: the
            // poller is no worker of the class's jobs (a thread on its way to poll would
            // count as running, and the look would replace one fewer).
            try #require(driven.target.awaitPoller() != nil)
            try #require(Self.awaitWorkersAsleep(pool, count: cpus))

            pool.checkForStalls()  // records each worker's job
            pool.checkForStalls()
            let classState = { pool.classes[QoS.QoSClass.default.poolIndex].state.locked { state in
                "running \(state.running), queued \(state.jobs.count), waking \(state.waking), workers \(state.workers.count)"
            } }
            try #require(started.await { $0 == 2 * cpus },
                         "blocked workers were not replaced: \(started.value) started; \(pool.threadStarts.summary); \(classState())")
            #expect(pool.threadStarts[.stallReplacement] == cpus)
            try #require(Self.awaitWorkersAsleep(pool, count: 2 * cpus))

            pool.checkForStalls()  // jobs were taken since: records
            pool.checkForStalls()
            try #require(started.await { $0 == 3 * cpus }, "blocked replacements were not replaced")
            #expect(pool.threadStarts[.stallReplacement] == 2 * cpus,
                    "workers replaced at an earlier look were replaced again")
            #expect(keepsHolding(for: .milliseconds(50)) { started.value == 3 * cpus })
        }

        /// A burst saturates the class (every worker taken, jobs queued): the stall check is
        /// armed as a watchdog, with a leeway; once the burst drained, it is taken back, and
        /// the reactor is no longer armed for it.
        @Test func aBurstThatDrainsLeavesNoStallCheckBehind() throws {
            let driven = DrivenPool()
            let pool = driven.pool
            let cpus = pool.cpuCount
            let gate = Flag()
            defer {
                gate.set()
                driven.shutDown()
            }
            let started = Counter()
            Self.submitBlocking(cpus, to: pool, gate: gate, started: started)
            try #require(started.await { $0 == cpus })
            #expect(!pool.stallMonitor.isArmed, "armed with no work waiting")
            let now = driven.clock.monotonicNanoseconds()
            let ran = Counter()
            for _ in 0..<3 { pool.submit(DrivenPool.job { ran.increment() }) }
            #expect(pool.stallMonitor.isArmed, "queued work with every worker taken armed no look")
            #expect(driven.engine.armedWindowEnd == now + StallMonitor.interval + StallMonitor.leeway)

            gate.set()
            #expect(ran.await { $0 == 3 })
            #expect(waitUntil { !pool.stallMonitor.isArmed }, "the look stayed armed after the burst drained")
            // Nothing else is scheduled: the engine takes its wake-up back (`Runtime` connects
            // that to the reactor; the driven target keeps its last window).
            #expect(waitUntil { driven.engine.armedWindowEnd == nil }, "the engine stayed armed for the look")
        }
    }
}
