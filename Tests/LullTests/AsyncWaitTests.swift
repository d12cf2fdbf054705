import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    /// `wait() async` on groups and work items, and `withActivity` for async code.
    @Suite(.timeLimit(.minutes(1))) struct AsyncWaitTests {
        /// A hundred tasks wait on one group, far more than Swift's cooperative pool has
        /// threads (one per CPU): were a wait to hold its thread, the pool would be full
        /// before most of them started, and the group's `leave`, itself a task, could not run.
        @Test func aHundredTasksAwaitAGroupWithoutHoldingThreads() async {
            let group = WorkGroup()
            group.enter()
            let started = WorkGroup()
            let finished = WorkGroup()
            let resumed = Counter()
            for _ in 0..<100 {
                started.enter()
                finished.enter()
                Task {
                    started.leave()
                    await group.wait()
                    _ = resumed.increment()
                    finished.leave()
                }
            }
            await started.wait()
            #expect(resumed.value == 0, "a wait returned before the group was empty")
            Task { group.leave() }
            await finished.wait()
            #expect(resumed.value == 100)
            await group.wait()  // empty: at once
        }

        /// The leave races the wait's registration: whichever comes first, the wait ends.
        @Test func aLeaveRacingTheAsyncWaitNeverStrandsIt() async {
            let queue = WorkQueue(label: "lull.test.async-wait.race", attributes: .concurrent)
            for round in 0..<200 {
                let group = WorkGroup()
                group.enter()
                queue.async {
                    spin(microseconds: UInt64(round % 20))
                    group.leave()
                }
                await group.wait()
            }
        }

        @Test func aTaskAwaitsAGroupThatABlockLeaves() async {
            let group = WorkGroup()
            let queue = WorkQueue(label: "lull.test.async-wait.group")
            queue.suspend()
            let ran = Flag()
            queue.async(group: group) { ran.set() }
            let waiter = Task {
                await group.wait()
                return ran.isSet
            }
            queue.resume()
            #expect(await waiter.value)
        }

        @Test func aTaskAwaitsAWorkItemRunOrSkipped() async {
            let queue = WorkQueue(label: "lull.test.async-wait.item")
            queue.suspend()
            let ran = Flag()
            let item = WorkItem { ran.set() }
            let skipped = WorkItem { Issue.record("a cancelled item ran") }
            queue.async(execute: item)
            queue.async(execute: skipped)
            skipped.cancel()
            let waiter = Task {
                await item.wait()
                await skipped.wait()
                return ran.isSet
            }
            queue.resume()
            #expect(await waiter.value)
            await item.wait()  // completed: at once
        }

        /// The activity is the task's: it survives suspensions (the task may resume on
        /// another thread), reaches blocks submitted and tasks created inside, and ends
        /// with the body.
        @Test func anAsyncActivityFollowsTheTask() async throws {
            let outer = ExecutionContext.current
            let queue = WorkQueue(label: "lull.test.async-activity")
            let seen = try await ExecutionContext.withActivity("async request") { () async throws -> [String?] in
                let activity = ExecutionContext.current
                #expect(activity.activityName == "async request")
                #expect(activity.parentActivityID == outer.activityID)
                try await Task.sleep(for: .milliseconds(2), tolerance: .milliseconds(1), clock: CoalescingClock())
                let afterSleep = ExecutionContext.current.activityName
                let inBlock = Captured<String?>()
                queue.async { inBlock.set(ExecutionContext.current.activityName) }
                let inTask = await Task { ExecutionContext.current.activityName }.value
                let nested = await ExecutionContext.withActivity("nested") { () async in
                    await Task.yield()
                    return ExecutionContext.current
                }
                #expect(nested.parentActivityID == activity.activityID)
                #expect(ExecutionContext.current == activity, "the nested activity did not end")
                return [afterSleep, inBlock.await() ?? nil, inTask]
            }
            #expect(seen == ["async request", "async request", "async request"])
            #expect(ExecutionContext.current == outer)
        }
    }
}
