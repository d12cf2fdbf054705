import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    @Suite struct WorkGroupTests {
        @Test func waitOnAnEmptyGroupReturnsAtOnce() {
            let group = WorkGroup()
            group.wait()
            #expect(group.wait(timeout: .now()) == .success)
            #expect(group.wait(timeout: Deadline(uptimeNanoseconds: 0)) == .success)
        }

        @Test func balancedEnterAndLeaveLeaveTheGroupEmpty() {
            let group = WorkGroup()
            group.enter()
            group.enter()
            group.leave()
            #expect(group.wait(timeout: .now()) == .timedOut)
            group.leave()
            #expect(group.wait(timeout: .now()) == .success)
        }

        @Test func waitWithTimeoutTimesOutNoEarlierThanTheDeadline() {
            let group = WorkGroup()
            group.enter()
            for milliseconds in [0, 1, 30, 100] {
                let deadline = Deadline.now() + .milliseconds(milliseconds)
                #expect(group.wait(timeout: deadline) == .timedOut)
                #expect(monotonicNanoseconds() >= deadline.uptimeNanoseconds)
            }
            group.leave()
            #expect(group.wait(timeout: .now() + .seconds(10)) == .success)
        }

        @Test func waitReturnsWhenAnotherThreadLeaves() {
            let group = WorkGroup()
            group.enter()
            let left = Flag()
            WorkQueue.global().async {
                sleep(milliseconds: 30)
                left.set()
                group.leave()
            }
            group.wait()
            #expect(left.isSet)
        }

        @Test func waitWithTimeoutSucceedsWhenAnotherThreadLeaves() {
            let group = WorkGroup()
            group.enter()
            let left = Flag()
            WorkQueue.global().async {
                sleep(milliseconds: 30)
                left.set()
                group.leave()
            }
            #expect(group.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(left.isSet)
        }

        @Test func asyncWithGroupCountsEveryBlock() {
            let group = WorkGroup()
            let serial = WorkQueue(label: "lull.test.group.serial")
            let concurrent = WorkQueue(label: "lull.test.group.concurrent", attributes: .concurrent)
            let done = Counter()
            let perQueue = 5_000
            for _ in 0..<perQueue {
                for queue in [serial, concurrent, .global(qos: .utility)] {
                    queue.async(group: group) {
                        done.increment()
                    }
                }
            }
            group.wait()
            #expect(done.value == perQueue * 3)
        }

        @Test func asyncWithGroupKeepsTheGroupBusyUntilTheBlockEnds() {
            let group = WorkGroup()
            let queue = WorkQueue(label: "lull.test.group.busy")
            queue.suspend()
            queue.async(group: group) { }
            #expect(group.wait(timeout: .now() + .milliseconds(50)) == .timedOut)
            queue.resume()
            #expect(group.wait(timeout: .now() + .seconds(10)) == .success)
        }

        @Test func manyThreadsCanWaitOnOneGroup() {
            let group = WorkGroup()
            group.enter()
            let woken = Counter()
            for _ in 0..<8 {
                WorkQueue.global(qos: .utility).async {
                    group.wait()
                    woken.increment()
                }
            }
            #expect(keepsHolding(for: .milliseconds(50)) { woken.value == 0 })
            group.leave()
            #expect(woken.await { $0 == 8 })
        }

        @Test func notifyRunsOnceAllWorkIsDone() {
            let group = WorkGroup()
            let queue = WorkQueue(label: "lull.test.group.notify", attributes: .concurrent)
            let done = Counter()
            let count = 1_000
            for _ in 0..<count {
                queue.async(group: group) {
                    done.increment()
                }
            }
            let seenByNotify = Captured<Int>()
            group.notify(queue: WorkQueue(label: "lull.test.group.notify-target")) {
                seenByNotify.set(done.value)
            }
            #expect(seenByNotify.await() == count)
        }

        @Test func notifyWaitsForManualLeave() {
            let group = WorkGroup()
            group.enter()
            let notified = Flag()
            group.notify(queue: .global()) { notified.set() }
            #expect(keepsHolding { !notified.isSet })
            group.leave()
            #expect(notified.await())
        }

        @Test func notifyOnAnEmptyGroupRunsAtOnce() {
            let group = WorkGroup()
            let notified = Flag()
            group.notify(queue: WorkQueue(label: "lull.test.group.empty-notify")) { notified.set() }
            #expect(notified.await())
        }

        @Test func everyNotificationRunsExactlyOnce() {
            let group = WorkGroup()
            group.enter()
            let counts = Mutex<[Int]>([Int](repeating: 0, count: 10))
            for index in 0..<10 {
                group.notify(queue: .global()) { counts.locked { $0[index] += 1 } }
            }
            group.leave()
            #expect(waitUntil { counts.locked { $0.reduce(0, +) } == 10 })
            // Using the group again does not replay old notifications.
            group.enter()
            group.leave()
            #expect(keepsHolding(for: .milliseconds(50)) { counts.locked { $0 } == [Int](repeating: 1, count: 10) })
        }

        @Test func notifyRunsOnTheGivenQueue() {
            let group = WorkGroup()
            let target = WorkQueue(label: "lull.test.group.notify-suspended")
            target.suspend()
            let notified = Flag()
            group.notify(queue: target) { notified.set() }
            #expect(keepsHolding { !notified.isSet })
            target.resume()
            #expect(notified.await())
        }

        @Test func groupCanBeReused() {
            let group = WorkGroup()
            for round in 0..<20 {
                let done = Counter()
                for _ in 0..<50 {
                    WorkQueue.global().async(group: group) { done.increment() }
                }
                #expect(group.wait(timeout: .now() + .seconds(10)) == .success, "round \(round)")
                #expect(done.value == 50)
            }
        }

        @Test func blocksMayEnterTheGroupForMoreWork() {
            let group = WorkGroup()
            let queue = WorkQueue(label: "lull.test.group.chain", attributes: .concurrent)
            let done = Counter()
            @Sendable func chain(_ remaining: Int) {
                queue.async(group: group) {
                    if remaining > 0 { chain(remaining - 1) }
                    sleep(milliseconds: 1)
                    done.increment()
                }
            }
            chain(20)
            group.wait()
            #expect(done.value == 21)
        }
    }
}
