import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    @Suite struct AsyncAfterTests {
        @Test(arguments: [0, 1, 5, 20, 100, 300])
        func blockNeverRunsBeforeItsDeadline(_ milliseconds: Int) {
            let queue = WorkQueue(label: "lull.test.after")
            let deadline = Deadline.now() + .milliseconds(milliseconds)
            let ranAt = Captured<UInt64>()
            queue.asyncAfter(deadline: deadline) { ranAt.set(monotonicNanoseconds()) }
            let time = ranAt.await()
            #expect(time != nil)
            if let time {
                #expect(time >= deadline.uptimeNanoseconds)
            }
        }

        @Test func deadlineInThePastRunsSoon() {
            let ran = Flag()
            WorkQueue.global().asyncAfter(deadline: .now() - .seconds(1)) { ran.set() }
            #expect(ran.await())
            let zero = Flag()
            WorkQueue.global().asyncAfter(deadline: Deadline(uptimeNanoseconds: 0)) { zero.set() }
            #expect(zero.await())
        }

        @Test func manyTimersAllRunNoEarlierThanTheirDeadlines() {
            let queue = WorkQueue(label: "lull.test.after.many", attributes: .concurrent)
            let early = Recorder<String>()
            let done = Counter()
            let count = 2_000
            var generator = SystemRandomNumberGenerator()
            for index in 0..<count {
                let delay = Duration.microseconds(Int64.random(in: 0...200_000, using: &generator))
                let deadline = Deadline.now() + delay
                let target: WorkQueue = index % 2 == 0 ? queue : .global(qos: schedulableClasses[index % 5])
                target.asyncAfter(deadline: deadline) {
                    let now = monotonicNanoseconds()
                    if now < deadline.uptimeNanoseconds {
                        early.append("timer \(index) ran \(deadline.uptimeNanoseconds - now) ns early")
                    }
                    done.increment()
                }
            }
            #expect(done.await { $0 == count })
            #expect(early.values.isEmpty)
        }

        @Test func blocksWithSeparateWindowsRunInDeadlineOrder() {
            let queue = WorkQueue(label: "lull.test.after.order")
            let log = Recorder<Int>()
            let start = Deadline.now()
            // Submitted in reverse; windows [d, d + 10%] do not overlap.
            for index in (0..<5).reversed() {
                queue.asyncAfter(deadline: start + .milliseconds(50 + 60 * index)) { log.append(index) }
            }
            #expect(waitUntil { log.count == 5 })
            #expect(log.values == [0, 1, 2, 3, 4])
        }

        @Test func blockRunsOnItsQueue() {
            let queue = WorkQueue(label: "lull.test.after.queue")
            queue.suspend()
            let ran = Flag()
            let deadline = Deadline.now() + .milliseconds(10)
            queue.asyncAfter(deadline: deadline) { ran.set() }
            // Due, but the queue is suspended: it stays queued there.
            #expect(keepsHolding(for: .milliseconds(100)) { !ran.isSet })
            queue.resume()
            #expect(ran.await())
        }

        @Test func blockTakesTheQueuesQoS() {
            let queue = WorkQueue(label: "lull.test.after.qos", qos: .utility)
            let seen = scheduling(of: { queue.asyncAfter(deadline: .now() + .milliseconds(5), execute: $0) })
            #expect(seen?.qos == .utility)
            #expect(seen?.nice == expectedNice(.utility))
        }

        @Test func blockDoesNotInheritTheSubmittersQoS() {
            // asyncAfter blocks are detached: a plain queue gives them the default QoS, not the
            // submitter's.
            let plain = WorkQueue(label: "lull.test.after.detached")
            let seen = scheduling(of: { block in
                WorkQueue.global(qos: .utility).async {
                    plain.asyncAfter(deadline: .now() + .milliseconds(5), execute: block)
                }
            })
            #expect(seen?.qos.qosClass == .default)
        }

        @Test func distantFutureNeverRuns() {
            let ran = Flag()
            WorkQueue.global().asyncAfter(deadline: .distantFuture) { ran.set() }
            #expect(keepsHolding(for: .milliseconds(200)) { !ran.isSet })
        }

        // MARK: Wall clock

        @Test(arguments: [0, 1, 20, 150])
        func wallDeadlineBlockNeverRunsBeforeItsDeadline(_ milliseconds: Int) {
            let queue = WorkQueue(label: "lull.test.after.wall")
            let deadline = WallDeadline.now() + .milliseconds(milliseconds)
            let ranAt = Captured<WallDeadline>()
            let ranAtClock = Captured<UInt64>()
            queue.asyncAfter(wallDeadline: deadline) {
                ranAtClock.set(realtimeNanoseconds())
                ranAt.set(.now())
            }
            let time = ranAt.await()
            #expect(time != nil)
            if let time {
                #expect(time >= deadline)
            }
            if let clock = ranAtClock.value {
                #expect(clock >= deadline.nanosecondsSinceEpoch)
            }
        }

        @Test func wallDeadlineInThePastRunsSoon() {
            let ran = Flag()
            WorkQueue.global().asyncAfter(wallDeadline: .now() + .seconds(-5)) { ran.set() }
            #expect(ran.await())
        }

        @Test func wallDeadlineBlockTakesTheQueuesQoS() {
            let queue = WorkQueue(label: "lull.test.after.wall-qos", qos: .background)
            let seen = scheduling(of: { queue.asyncAfter(wallDeadline: .now() + .milliseconds(5), execute: $0) })
            #expect(seen?.qos == .background)
        }

        // MARK: Work items

        @Test func workItemRunsNoEarlierThanItsDeadline() {
            let queue = WorkQueue(label: "lull.test.after.item")
            let deadline = Deadline.now() + .milliseconds(80)
            let ranAt = Captured<UInt64>()
            let item = WorkItem { ranAt.set(monotonicNanoseconds()) }
            let notified = Flag()
            item.notify(queue: .global()) { notified.set() }
            queue.asyncAfter(deadline: deadline, execute: item)
            #expect(item.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(monotonicNanoseconds() >= deadline.uptimeNanoseconds)
            let time = ranAt.value
            #expect(time != nil)
            if let time {
                #expect(time >= deadline.uptimeNanoseconds)
            }
            #expect(notified.await())
        }

        @Test func workItemWaitTimesOutBeforeTheDeadline() {
            let item = WorkItem { }
            WorkQueue.global().asyncAfter(deadline: .now() + .seconds(1), execute: item)
            #expect(item.wait(timeout: .now() + .milliseconds(50)) == .timedOut)
            #expect(item.wait(timeout: .now() + .seconds(10)) == .success)
        }

        @Test func cancelledWorkItemIsSkippedAndStillNotifies() {
            let ran = Flag()
            let notified = Flag()
            let item = WorkItem { ran.set() }
            item.notify(queue: .global()) { notified.set() }
            WorkQueue(label: "lull.test.after.cancelled").asyncAfter(deadline: .now() + .milliseconds(30), execute: item)
            item.cancel()
            #expect(item.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(notified.await())
            #expect(!ran.isSet)
        }

        @Test func workItemKeepsItsOwnQoS() {
            let plain = WorkQueue(label: "lull.test.after.item-qos")
            let seen = scheduling(of: { block in
                plain.asyncAfter(deadline: .now() + .milliseconds(5), execute: WorkItem(qos: .utility, block: block))
            })
            #expect(seen?.qos.qosClass == .utility)
        }
    }
}
