import Glibc
import Synchronization
import Testing
@testable import Lull

struct Payload: Equatable, Sendable {
    let name: String
    let values: [Int]
}

/// A serial or concurrent queue, plain or funnelled through a serial target.
enum QueueShape: String, CaseIterable, Sendable, CustomStringConvertible {
    case serial, concurrent, serialWithSerialTarget, concurrentWithSerialTarget, global

    var description: String { rawValue }

    func make() -> WorkQueue {
        switch self {
        case .serial:
            WorkQueue(label: "lull.test.sync.serial")
        case .concurrent:
            WorkQueue(label: "lull.test.sync.concurrent", attributes: .concurrent)
        case .serialWithSerialTarget:
            WorkQueue(label: "lull.test.sync.serial-child", target: WorkQueue(label: "lull.test.sync.target"))
        case .concurrentWithSerialTarget:
            WorkQueue(label: "lull.test.sync.concurrent-child", attributes: .concurrent,
                      target: WorkQueue(label: "lull.test.sync.target"))
        case .global:
            WorkQueue.global()
        }
    }
}

extension LullSuite {
    @Suite struct SyncTests {
        @Test(arguments: QueueShape.allCases)
        func returnsTheBlocksValue(_ shape: QueueShape) {
            let queue = shape.make()
            #expect(queue.sync { 42 } == 42)
            #expect(queue.sync { "text" } == "text")
            #expect(queue.sync { Payload(name: "p", values: [1, 2, 3]) } == Payload(name: "p", values: [1, 2, 3]))
            #expect(queue.sync(flags: .barrier) { 7 } == 7)
            queue.sync { }
        }

        @Test(arguments: QueueShape.allCases)
        func rethrowsTheBlocksErrorAndStaysUsable(_ shape: QueueShape) {
            let queue = shape.make()
            #expect(throws: TestError(code: 3)) {
                try queue.sync { () throws -> Int in throw TestError(code: 3) }
            }
            #expect(throws: TestError(code: 4)) {
                try queue.sync(flags: .barrier) { throw TestError(code: 4) }
            }
            // The queue was released: async and sync work again.
            let ran = Flag()
            queue.async { ran.set() }
            #expect(ran.await())
            #expect(queue.sync { 1 } == 1)
        }

        @Test func bodyMayMutateLocalState() {
            // sync's closure is not escaping: it can capture and change local variables.
            let queue = WorkQueue(label: "lull.test.sync.local")
            var total = 0
            for index in 1...100 {
                queue.sync { total += index }
            }
            #expect(total == 5_050)
        }

        @Test(arguments: QueueShape.allCases)
        func runsOnTheCallingThreadWhenIdle(_ shape: QueueShape) {
            let queue = shape.make()
            let outside = ThreadIdentity.current
            let inside = queue.sync { ThreadIdentity.current }
            #expect(inside == outside)
            let barrier = queue.sync(flags: .barrier) { ThreadIdentity.current }
            #expect(barrier == outside)
        }

        @Test(arguments: QueueShape.allCases)
        func runsOnTheCallingThreadWhenBusy(_ shape: QueueShape) {
            let queue = shape.make()
            let callerReady = Flag()
            let busyStarted = Flag()
            let busyEnded = Flag()
            queue.async {
                busyStarted.set()
                callerReady.await()
                sleep(milliseconds: 30)
                busyEnded.set()
            }
            #expect(busyStarted.await())
            let outside = ThreadIdentity.current
            callerReady.set()
            let (inside, sawBusyEnded) = queue.sync(flags: .barrier) { (ThreadIdentity.current, busyEnded.isSet) }
            #expect(inside == outside)
            if shape != .global {
                // A barrier (or any block of a serial queue) waits for the running block.
                #expect(sawBusyEnded)
            }
        }

        @Test func syncOnASerialQueueWaitsForTheRunningBlockAndRunsOnTheCaller() {
            let queue = WorkQueue(label: "lull.test.sync.busy-serial")
            let callerReady = Flag()
            let log = Recorder<String>()
            queue.async {
                callerReady.await()
                sleep(milliseconds: 30)
                log.append("async")
            }
            let outside = ThreadIdentity.current
            callerReady.set()
            let inside = queue.sync {
                log.append("sync")
                return ThreadIdentity.current
            }
            #expect(inside == outside)
            #expect(log.values == ["async", "sync"])
        }

        @Test(arguments: [QueueShape.serial, .serialWithSerialTarget, .concurrentWithSerialTarget])
        func syncRunsAfterEveryEarlierBlock(_ shape: QueueShape) {
            let queue = shape.make()
            let ran = Counter()
            for _ in 0..<5_000 {
                queue.async {
                    ran.increment()
                }
            }
            #expect(queue.sync { ran.value } == 5_000)
        }

        @Test func syncOnAConcurrentQueueRunsAlongsideRunningBlocks() {
            let queue = WorkQueue(label: "lull.test.sync.concurrent-overlap", attributes: .concurrent)
            let gate = Gate()
            let started = Flag()
            queue.async {
                started.set()
                gate.wait()
            }
            #expect(started.await())
            // A plain sync does not wait for the running block (it is not a barrier).
            let ran = queue.sync { !gate.isOpen }
            #expect(ran)
            gate.open()
        }

        @Test func syncExcludesAsyncBlocksOnASerialQueue() {
            let queue = WorkQueue(label: "lull.test.sync.exclusive")
            let overlap = OverlapTracker()
            let done = Counter()
            for _ in 0..<2_000 {
                queue.async {
                    overlap.enter()
                    overlap.exit()
                    done.increment()
                }
            }
            for _ in 0..<500 {
                queue.sync {
                    overlap.enter()
                    spin(microseconds: 10)
                    overlap.exit()
                }
            }
            #expect(done.await { $0 == 2_000 })
            #expect(overlap.maximum == 1)
        }

        @Test func nestedSyncAcrossDifferentSerialQueuesRunsOnTheCaller() {
            let outer = WorkQueue(label: "lull.test.sync.outer")
            let inner = WorkQueue(label: "lull.test.sync.inner")
            let outside = ThreadIdentity.current
            let (a, b) = outer.sync {
                (ThreadIdentity.current, inner.sync { ThreadIdentity.current })
            }
            #expect(a == outside)
            #expect(b == outside)
        }

        @Test func syncFromABlockRunsOnThatBlocksWorker() {
            let source = WorkQueue(label: "lull.test.sync.from-block")
            let destination = WorkQueue(label: "lull.test.sync.destination")
            let same = Captured<Bool>()
            source.async {
                let outside = ThreadIdentity.current
                let inside = destination.sync { ThreadIdentity.current }
                same.set(inside == outside)
            }
            #expect(same.await() == true)
        }

        @Test func syncWorkItemRunsOnTheCallerAndCompletesIt() {
            let queue = WorkQueue(label: "lull.test.sync.item")
            let thread = Captured<ThreadIdentity>()
            let item = WorkItem { thread.set(.current) }
            queue.sync(execute: item)
            #expect(thread.value == ThreadIdentity.current)
            #expect(item.wait(timeout: .now()) == .success)
        }

        @Test func manyThreadsSyncingOnOneQueueAreMutuallyExclusive() {
            let queue = WorkQueue(label: "lull.test.sync.contended")
            let overlap = OverlapTracker()
            let total = Mutex(0)
            let callers = 4
            let perCaller = 500
            let finished = Counter()
            for caller in 0..<callers {
                WorkQueue.global(qos: caller % 2 == 0 ? .utility : .userInitiated).async {
                    for _ in 0..<perCaller {
                        queue.sync {
                            overlap.enter()
                            total.locked { $0 += 1 }
                            overlap.exit()
                        }
                    }
                    finished.increment()
                }
            }
            #expect(finished.await { $0 == callers })
            #expect(overlap.maximum == 1)
            #expect(total.locked { $0 } == callers * perCaller)
        }
    }
}
