import Glibc
import Synchronization
import Testing
@testable import Lull

/// Per-index run counts, shared by the iterations of one `concurrentPerform`.
final class IndexCounts: Sendable {
    private let counts: Mutex<[Int]>

    init(_ count: Int) {
        counts = Mutex([Int](repeating: 0, count: count))
    }

    func hit(_ index: Int) {
        counts.locked { $0[index] += 1 }
    }

    var values: [Int] { counts.locked { $0 } }
}

extension LullSuite {
    @Suite struct ConcurrentPerformTests {
        @Test(arguments: [1, 2, 3, 7, 64, 1_000, 10_000, 100_000])
        func runsEveryIndexExactlyOnce(_ iterations: Int) {
            let counts = IndexCounts(iterations)
            WorkQueue.concurrentPerform(iterations: iterations) { counts.hit($0) }
            #expect(counts.values == [Int](repeating: 1, count: iterations))
        }

        @Test func zeroIterationsRunNothing() {
            let calls = Counter()
            WorkQueue.concurrentPerform(iterations: 0) { _ in calls.increment() }
            #expect(calls.value == 0)
        }

        @Test func returnsOnlyAfterEveryIterationReturned() {
            let finished = Counter()
            WorkQueue.concurrentPerform(iterations: 16) { _ in
                sleep(milliseconds: 5)
                finished.increment()
            }
            #expect(finished.value == 16)
        }

        @Test func bodyMayUseLocalStateWithoutEscaping() {
            // The body is not escaping and not @Sendable: it may capture a local lock.
            let total = Mutex(0)
            WorkQueue.concurrentPerform(iterations: 1_000) { index in
                total.locked { $0 += index }
            }
            #expect(total.locked { $0 } == 499_500)
        }

        @Test(.enabled(if: onlineCPUs >= 2, "needs two CPUs"))
        func runsIterationsInParallel() {
            // Each iteration waits until both have started: that only succeeds if two run at
            // the same time.
            let rendezvous = Rendezvous(parties: 2)
            WorkQueue.concurrentPerform(iterations: 2) { _ in rendezvous.arrive() }
            #expect(rendezvous.failures.value == 0)
        }

        @Test(.enabled(if: onlineCPUs >= 2, "needs two CPUs"))
        func usesMoreThanOneThread() {
            let threads = Mutex<Set<Int32>>([])
            let rendezvous = Rendezvous(parties: 2)
            WorkQueue.concurrentPerform(iterations: 2) { _ in
                threads.locked { _ = $0.insert(ThreadIdentity.current.tid) }
                rendezvous.arrive()
            }
            #expect(threads.locked { $0.count } == 2)
        }

        @Test func nestedUseRunsEveryPairExactlyOnce() {
            let outer = 12
            let inner = 50
            let counts = IndexCounts(outer * inner)
            WorkQueue.concurrentPerform(iterations: outer) { i in
                WorkQueue.concurrentPerform(iterations: inner) { j in
                    counts.hit(i * inner + j)
                }
            }
            #expect(counts.values == [Int](repeating: 1, count: outer * inner))
        }

        @Test func threeLevelsOfNesting() {
            let counts = IndexCounts(8 * 8 * 8)
            WorkQueue.concurrentPerform(iterations: 8) { i in
                WorkQueue.concurrentPerform(iterations: 8) { j in
                    WorkQueue.concurrentPerform(iterations: 8) { k in
                        counts.hit((i * 8 + j) * 8 + k)
                    }
                }
            }
            #expect(counts.values == [Int](repeating: 1, count: 512))
        }

        @Test func worksFromInsideAQueueBlock() {
            let queue = WorkQueue(label: "lull.test.apply.inside")
            let result = Captured<[Int]>()
            queue.async {
                let counts = IndexCounts(5_000)
                WorkQueue.concurrentPerform(iterations: 5_000) { counts.hit($0) }
                result.set(counts.values)
            }
            #expect(result.await() == [Int](repeating: 1, count: 5_000))
        }

        @Test func worksFromManyBlocksAtOnce() {
            let queue = WorkQueue(label: "lull.test.apply.many", attributes: .concurrent)
            let correct = Counter()
            let finished = Counter()
            let callers = 8
            for _ in 0..<callers {
                queue.async {
                    let counts = IndexCounts(2_000)
                    WorkQueue.concurrentPerform(iterations: 2_000) { counts.hit($0) }
                    if counts.values == [Int](repeating: 1, count: 2_000) { correct.increment() }
                    finished.increment()
                }
            }
            #expect(finished.await { $0 == callers })
            #expect(correct.value == callers)
        }
    }
}
