import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    @Suite struct WorkItemTests {
        // MARK: perform

        @Test func performRunsTheBlockNowOnTheCallingThread() {
            let thread = Captured<ThreadIdentity>()
            let item = WorkItem { thread.set(.current) }
            item.perform()
            #expect(thread.value == ThreadIdentity.current)
        }

        @Test func performCompletesTheItem() {
            let item = WorkItem { }
            #expect(item.wait(timeout: .now()) == .timedOut)
            item.perform()
            #expect(item.wait(timeout: .now()) == .success)
            item.wait()
            let notified = Flag()
            item.notify(queue: .global()) { notified.set() }
            #expect(notified.await())
        }

        // MARK: async and wait

        @Test func asyncRunsTheItemAndWaitReturnsAfterIt() {
            let queue = WorkQueue(label: "lull.test.item.async")
            let finished = Flag()
            let item = WorkItem {
                sleep(milliseconds: 20)
                finished.set()
            }
            queue.async(execute: item)
            item.wait()
            #expect(finished.isSet)
        }

        @Test func waitWithTimeoutSucceedsOnceTheItemRan() {
            let item = WorkItem { }
            WorkQueue.global().async(execute: item)
            #expect(item.wait(timeout: .now() + .seconds(10)) == .success)
            // Completed items keep answering at once.
            #expect(item.wait(timeout: .now()) == .success)
            #expect(item.wait(timeout: Deadline(uptimeNanoseconds: 0)) == .success)
        }

        @Test func waitWithTimeoutTimesOutNoEarlierThanTheDeadline() {
            let queue = WorkQueue(label: "lull.test.item.timeout")
            queue.suspend()
            let item = WorkItem { }
            queue.async(execute: item)
            for milliseconds in [0, 1, 30, 100] {
                let deadline = Deadline.now() + .milliseconds(milliseconds)
                #expect(item.wait(timeout: deadline) == .timedOut)
                #expect(monotonicNanoseconds() >= deadline.uptimeNanoseconds)
            }
            #expect(item.wait(timeout: Deadline(uptimeNanoseconds: 0)) == .timedOut)
            queue.resume()
            #expect(item.wait(timeout: .now() + .seconds(10)) == .success)
        }

        @Test func manyThreadsCanWaitForOneItem() {
            let gate = Gate()
            let item = WorkItem { gate.wait() }
            let woken = Counter()
            for _ in 0..<8 {
                WorkQueue.global(qos: .utility).async {
                    item.wait()
                    woken.increment()
                }
            }
            WorkQueue.global().async(execute: item)
            #expect(keepsHolding(for: .milliseconds(50)) { woken.value == 0 })
            gate.open()
            #expect(woken.await { $0 == 8 })
        }

        // MARK: notify

        @Test func notifyRunsOnTheQueueAfterTheItem() {
            let target = WorkQueue(label: "lull.test.item.notify")
            let log = Recorder<String>()
            let item = WorkItem {
                sleep(milliseconds: 20)
                log.append("item")
            }
            item.notify(queue: target) {
                log.append("notify")
            }
            WorkQueue.global().async(execute: item)
            #expect(waitUntil { log.count == 2 })
            #expect(log.values == ["item", "notify"])
        }

        @Test func notifyRunsOnTheGivenQueue() {
            let target = WorkQueue(label: "lull.test.item.notify-queue")
            target.suspend()
            let notified = Flag()
            let item = WorkItem { }
            item.notify(queue: target) { notified.set() }
            item.perform()
            // The notification is queued on `target`, which is suspended.
            #expect(keepsHolding { !notified.isSet })
            target.resume()
            #expect(notified.await())
        }

        @Test func everyNotificationRunsOnce() {
            let item = WorkItem { }
            let counts = Mutex<[Int]>([Int](repeating: 0, count: 10))
            for index in 0..<10 {
                item.notify(queue: .global()) { counts.locked { $0[index] += 1 } }
            }
            item.perform()
            #expect(waitUntil { counts.locked { $0.reduce(0, +) } == 10 })
            #expect(keepsHolding(for: .milliseconds(50)) { counts.locked { $0 } == [Int](repeating: 1, count: 10) })
        }

        @Test func notifyAfterCompletionRunsAtOnce() {
            let item = WorkItem { }
            item.perform()
            let notified = Flag()
            item.notify(queue: WorkQueue(label: "lull.test.item.late-notify")) { notified.set() }
            #expect(notified.await())
        }

        @Test func notifyWithAWorkItemRunsThatItem() {
            let log = Recorder<String>()
            let first = WorkItem { log.append("first") }
            let second = WorkItem { log.append("second") }
            first.notify(queue: WorkQueue(label: "lull.test.item.notify-item"), execute: second)
            WorkQueue.global().async(execute: first)
            #expect(second.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(log.values == ["first", "second"])
        }

        @Test func notifyIsNotRunBeforeTheItemRuns() {
            let queue = WorkQueue(label: "lull.test.item.not-yet")
            queue.suspend()
            let item = WorkItem { }
            let notified = Flag()
            item.notify(queue: .global()) { notified.set() }
            queue.async(execute: item)
            #expect(keepsHolding { !notified.isSet })
            queue.resume()
            #expect(notified.await())
        }

        // MARK: cancel

        @Test func newItemIsNotCancelled() {
            let item = WorkItem { }
            #expect(!item.isCancelled)
            item.cancel()
            #expect(item.isCancelled)
            item.cancel()
            #expect(item.isCancelled)
        }

        @Test func cancelledItemThatHasNotStartedIsSkippedAndStillNotifies() {
            let queue = WorkQueue(label: "lull.test.item.cancel")
            queue.suspend()
            let ran = Flag()
            let notified = Flag()
            let item = WorkItem { ran.set() }
            item.notify(queue: .global()) { notified.set() }
            queue.async(execute: item)
            let after = Flag()
            queue.async { after.set() }
            item.cancel()
            #expect(item.isCancelled)
            queue.resume()
            // Dequeued, it returns at once: wait succeeds, notify runs, the queue moves on.
            #expect(item.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(waitUntil { notified.isSet && after.isSet })
            #expect(!ran.isSet)
        }

        @Test func cancelledItemIsSkippedBehindABusyBlock() {
            let queue = WorkQueue(label: "lull.test.item.cancel-busy")
            let gate = Gate()
            let started = Flag()
            queue.async {
                started.set()
                gate.wait()
            }
            #expect(started.await())
            let ran = Flag()
            let item = WorkItem { ran.set() }
            let notified = Flag()
            item.notify(queue: .global()) { notified.set() }
            queue.async(execute: item)
            item.cancel()
            gate.open()
            #expect(item.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(notified.await())
            #expect(!ran.isSet)
        }

        @Test func cancelDoesNotStopARunningItem() {
            let gate = Gate()
            let started = Flag()
            let finished = Flag()
            let notified = Flag()
            let item = WorkItem {
                started.set()
                gate.wait()
                finished.set()
            }
            item.notify(queue: .global()) { notified.set() }
            WorkQueue.global().async(execute: item)
            #expect(started.await())
            item.cancel()
            #expect(item.isCancelled)
            gate.open()
            #expect(item.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(finished.isSet)
            #expect(notified.await())
        }

        @Test func performOfACancelledItemSkipsTheBlockButCompletes() {
            let ran = Flag()
            let item = WorkItem { ran.set() }
            item.cancel()
            item.perform()
            #expect(!ran.isSet)
            #expect(item.wait(timeout: .now()) == .success)
        }

        @Test func cancelledItemsAmongManyBlocks() {
            let queue = WorkQueue(label: "lull.test.item.cancel-many")
            queue.suspend()
            let log = Recorder<Int>()
            var items: [WorkItem] = []
            for index in 0..<1_000 {
                let item = WorkItem { log.append(index) }
                items.append(item)
                queue.async(execute: item)
            }
            for (index, item) in items.enumerated() where index % 3 == 0 {
                item.cancel()
            }
            queue.resume()
            for item in items {
                #expect(item.wait(timeout: .now() + .seconds(10)) == .success)
            }
            #expect(log.values == (0..<1_000).filter { $0 % 3 != 0 })
        }
    }
}
