import CLullShims
import Dispatch
import Synchronization
import Testing
@testable import Lull

#if canImport(Glibc)
import Glibc
#endif

/// Blocks that block in the kernel on their own (not through Lull's waits) must not starve
/// their class: the pool notices sleeping workers and starts more threads.
@Suite struct BlockingWorkTests {
    @Test func blocksThatSleepInTheKernelDoNotStarveTheirClass() throws {
        var fds: [Int32] = [0, 0]
        try #require(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let readEnd = fds[0]
        // More blocks than the class may run at once: each waits in read() until all have started.
        let count = Runtime.shared.pool.cpuCount * 3
        let started = Atomic<Int>(0)
        let finished = Atomic<Int>(0)
        let queue = WorkQueue(label: "blocking", qos: .utility, attributes: .concurrent)
        for _ in 0..<count {
            queue.async {
                started.add(1, ordering: .relaxed)
                var byte: UInt8 = 0
                _ = read(readEnd, &byte, 1)
                finished.add(1, ordering: .relaxed)
            }
        }
        let allStarted = waitFor(seconds: 20) { started.load(ordering: .relaxed) == count }
        // Release the readers whatever happened, so no thread stays stuck after the test.
        let bytes = [UInt8](repeating: 1, count: count)
        _ = bytes.withUnsafeBytes { write(fds[1], $0.baseAddress, count) }
        #expect(allStarted, "only \(started.load(ordering: .relaxed)) of \(count) blocking blocks started")
        #expect(waitFor(seconds: 20) { finished.load(ordering: .relaxed) == count })
    }
}

/// Polls `condition` every millisecond until it holds or `seconds` pass.
func waitFor(seconds: Int, _ condition: () -> Bool) -> Bool {
    let deadline = Deadline.now() + .seconds(seconds)
    while Deadline.now() < deadline {
        if condition() { return true }
        usleep(1_000)
    }
    return condition()
}

extension LullSuite {
    /// Blocks that sleep in the kernel, unknown to Lull, occupy every worker of their class;
    /// the reactor must keep polling (timers fire) and the pool must grow, whatever the class.
    @Suite struct BlockedClassTests {
        /// The queue for one case: a concurrent queue of the class, or of no QoS.
        static func queue(_ qosClass: QoS.QoSClass) -> WorkQueue {
            qosClass == .unspecified
                ? WorkQueue(label: "lull.test.blocked.none", attributes: .concurrent)
                : WorkQueue(label: "lull.test.blocked.\(qosClass.name)", qos: QoS(qosClass), attributes: .concurrent)
        }

        @Test(arguments: [QoS.QoSClass.default, .unspecified, .background, .utility, .userInitiated, .userInteractive])
        func timersFireWhileEveryWorkerOfTheClassSleeps(_ qosClass: QoS.QoSClass) throws {
            var fds: [Int32] = [0, 0]
            try #require(pipe(&fds) == 0)
            defer { close(fds[0]); close(fds[1]) }
            let readEnd = fds[0]
            let count = 8
            let started = Counter()
            let finished = Counter()
            let queue = Self.queue(qosClass)
            for _ in 0..<count {
                queue.async {
                    started.increment()
                    var byte: UInt8 = 0
                    _ = read(readEnd, &byte, 1)
                    finished.increment()
                }
            }
            // Released whatever happened, so that no worker stays stuck after the test.
            defer {
                let bytes = [UInt8](repeating: 1, count: count)
                _ = bytes.withUnsafeBytes { write(fds[1], $0.baseAddress, count) }
                #expect(finished.await { $0 == count })
            }
            #expect(started.await { $0 >= Runtime.shared.pool.cpuCount }, "the blocks did not start")
            // Later than the stall monitor's look (StallMonitor.interval), whose wake-up is
            // then already armed: this timer moves no deadline and asks for no poller itself.
            let fired = Flag()
            WorkQueue(label: "lull.test.blocked.timer", qos: .userInitiated)
                .asyncAfter(deadline: .now() + .milliseconds(300)) { fired.set() }
            #expect(fired.await(), "a timer did not fire while \(qosClass) workers slept")
            #expect(started.await { $0 == count },
                    "only \(started.value) of \(count) sleeping \(qosClass) blocks started")
        }
    }
}

/// The stall check's judgement of one worker (`WorkerActivity`): blocked only when it stayed
/// in one job across two looks and its thread used (almost) no CPU in between.
@Suite struct WorkerActivityTests {
    /// Runs `body` on a thread of its own with that thread's tid; returns once it started.
    static func onThread(_ body: @escaping @Sendable () -> Void) -> Int32 {
        let tid = Captured<Int32>()
        DispatchQueue.global().async {
            tid.set(lull_gettid())
            body()
        }
        return tid.await() ?? 0
    }

    @Test func aWorkerWaitingInOneJobIsBlockedAtTheSecondLook() throws {
        let activity = WorkerActivity()
        let release = DispatchSemaphore(value: 0)
        let inJob = Flag()
        let tid = Self.onThread {
            activity.enterJob()
            inJob.set()
            release.wait()
            activity.leaveJob()
        }
        #expect(inJob.await())
        #expect(!activity.waitedThroughInterval(tid: tid, cpuBudget: StallMonitor.busyCPU), "the first look only records")
        #expect(activity.waitedThroughInterval(tid: tid, cpuBudget: StallMonitor.busyCPU))
        release.signal()
    }

    @Test func aWorkerUsingCPUInOneJobIsNotBlocked() throws {
        let activity = WorkerActivity()
        let looked = Flag()
        let spun = Flag()
        let tid = Self.onThread {
            activity.enterJob()
            while !looked.isSet { lull_cpu_relax() }
            // Busy between the looks: 5 ms of this thread's own CPU time, however loaded the host.
            let start = SystemClock.threadCPUNanoseconds()
            while SystemClock.threadCPUNanoseconds() - start < 5 * StallMonitor.busyCPU { lull_cpu_relax() }
            spun.set()
            activity.leaveJob()
        }
        #expect(!activity.waitedThroughInterval(tid: tid, cpuBudget: StallMonitor.busyCPU))
        looked.set()
        #expect(spun.await())
        #expect(!activity.waitedThroughInterval(tid: tid, cpuBudget: StallMonitor.busyCPU), "it used CPU")
    }

    @Test func aWorkerBetweenJobsOrInANewJobIsNotBlocked() throws {
        let activity = WorkerActivity()
        let release = DispatchSemaphore(value: 0)
        let step = Counter()
        let tid = Self.onThread {
            release.wait()
            activity.enterJob()
            step.increment()
            release.wait()
            activity.leaveJob()
            activity.enterJob()
            step.increment()
            release.wait()
            activity.leaveJob()
        }
        // Between jobs (none started yet): never blocked.
        #expect(!activity.waitedThroughInterval(tid: tid, cpuBudget: StallMonitor.busyCPU))
        #expect(!activity.waitedThroughInterval(tid: tid, cpuBudget: StallMonitor.busyCPU))
        release.signal()
        #expect(step.await { $0 == 1 })
        #expect(!activity.waitedThroughInterval(tid: tid, cpuBudget: StallMonitor.busyCPU), "a job seen once")
        release.signal()
        #expect(step.await { $0 == 2 })
        #expect(!activity.waitedThroughInterval(tid: tid, cpuBudget: StallMonitor.busyCPU), "another job than at the last look")
        #expect(activity.waitedThroughInterval(tid: tid, cpuBudget: StallMonitor.busyCPU), "the same job, waiting")
        release.signal()
    }
}
