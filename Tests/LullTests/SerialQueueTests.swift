import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    @Suite struct SerialQueueTests {
        @Test func labelAndQoSAreKept() {
            let plain = WorkQueue(label: "lull.test.serial.label")
            #expect(plain.label == "lull.test.serial.label")
            #expect(plain.qos == .unspecified)
            let utility = WorkQueue(label: "lull.test.serial.utility", qos: .utility)
            #expect(utility.label == "lull.test.serial.utility")
            #expect(utility.qos == .utility)
        }

        @Test func runsTwentyThousandBlocksInSubmissionOrder() {
            let queue = WorkQueue(label: "lull.test.serial.fifo")
            let count = 20_000
            let next = Counter()
            let outOfOrder = Counter()
            for index in 0..<count {
                queue.async {
                    // Exactly one block runs at a time, so reading then bumping is safe here
                    // when the queue is correct; a wrong order or an overlap shows as a miss.
                    if next.value != index { outOfOrder.increment() }
                    next.increment()
                }
            }
            #expect(next.await { $0 == count })
            #expect(outOfOrder.value == 0)
        }

        @Test func recordsTheExactOrderOfTenThousandBlocks() {
            let queue = WorkQueue(label: "lull.test.serial.order")
            let log = Recorder<Int>()
            let count = 10_000
            for index in 0..<count {
                queue.async { log.append(index) }
            }
            #expect(waitUntil { log.count == count })
            #expect(log.values == Array(0..<count))
        }

        @Test func neverRunsTwoBlocksAtOnceAndKeepsEachSubmittersOrder() {
            let queue = WorkQueue(label: "lull.test.serial.exclusive")
            let overlap = OverlapTracker()
            let submitters = 4
            let perSubmitter = 3_000
            let log = Recorder<(Int, Int)>()
            let submitted = Counter()
            for submitter in 0..<submitters {
                WorkQueue.global(qos: submitter % 2 == 0 ? .default : .userInitiated).async {
                    for index in 0..<perSubmitter {
                        queue.async {
                            overlap.enter()
                            if index % 100 == 0 { spin(microseconds: 50) }
                            log.append((submitter, index))
                            overlap.exit()
                        }
                    }
                    submitted.increment()
                }
            }
            #expect(waitUntil { submitted.value == submitters && log.count == submitters * perSubmitter })
            #expect(overlap.maximum == 1)
            var expectedNext = [Int](repeating: 0, count: submitters)
            var misordered = 0
            for (submitter, index) in log.values {
                if expectedNext[submitter] != index { misordered += 1 }
                expectedNext[submitter] = index + 1
            }
            #expect(misordered == 0)
            #expect(expectedNext == [Int](repeating: perSubmitter, count: submitters))
        }

        @Test func blockSubmittedFromARunningBlockRunsAfterIt() {
            let queue = WorkQueue(label: "lull.test.serial.reentrant")
            let log = Recorder<String>()
            queue.async {
                queue.async { log.append("inner") }
                spin(microseconds: 2_000)
                log.append("outer end")
            }
            #expect(waitUntil { log.count == 2 })
            #expect(log.values == ["outer end", "inner"])
        }

        @Test func slowBlockHoldsUpTheRest() {
            let queue = WorkQueue(label: "lull.test.serial.slow")
            let gate = Gate()
            let ran = Counter()
            let firstStarted = Flag()
            queue.async {
                firstStarted.set()
                gate.wait()
            }
            for _ in 0..<10 {
                queue.async { ran.increment() }
            }
            #expect(firstStarted.await())
            #expect(keepsHolding { ran.value == 0 })
            gate.open()
            #expect(ran.await { $0 == 10 })
        }

        @Test func manyQueuesEachKeepTheirOwnOrder() {
            let queues = (0..<16).map { WorkQueue(label: "lull.test.serial.many.\($0)") }
            let perQueue = 1_000
            let logs = queues.map { _ in Recorder<Int>() }
            for index in 0..<perQueue {
                for (queue, log) in zip(queues, logs) {
                    queue.async { log.append(index) }
                }
            }
            #expect(waitUntil { logs.allSatisfy { $0.count == perQueue } })
            for log in logs {
                #expect(log.values == Array(0..<perQueue))
            }
        }

        @Test func globalQueuesAreSharedPerClass() {
            #expect(WorkQueue.global() === WorkQueue.global(qos: .default))
            #expect(WorkQueue.global(qos: .unspecified) === WorkQueue.global(qos: .default))
            for qosClass in schedulableClasses {
                #expect(WorkQueue.global(qos: qosClass) === WorkQueue.global(qos: qosClass))
                #expect(WorkQueue.global(qos: qosClass).qos.qosClass == qosClass)
            }
            let distinct = Set(schedulableClasses.map { ObjectIdentifier(WorkQueue.global(qos: $0)) })
            #expect(distinct.count == schedulableClasses.count)
        }

        @Test func queueFreedWithPendingWorkStillRunsIt() {
            let ran = Counter()
            do {
                let queue = WorkQueue(label: "lull.test.serial.released")
                for _ in 0..<100 {
                    queue.async { ran.increment() }
                }
            }
            #expect(ran.await { $0 == 100 })
        }
    }
}
