import Glibc
import Synchronization
import Testing
@testable import Lull

/// Cancel steps of sources on a global queue go through `CancellationIntake` (a lock-free
/// stack drained by one job) instead of a job each: every cancel handler must still run
/// exactly once, asynchronously, on a worker, at the queue's class, and a blocked cancel
/// handler must not hold up the others as a global queue never would.
extension LullSuite {
    @Suite struct CancellationIntakeTests {
        @Test func everyCancelHandlerRunsExactlyOnceOnAWorker() {
            let count = 20_000
            let runs = Mutex([UInt8](repeating: 0, count: count))
            let onCancellingThread = Atomic<Int>(0)
            let cancellingThread = ThreadIdentity.current
            let queue = WorkQueue.global()
            for index in 0..<count {
                let timer = EventSource.makeTimerSource(queue: queue)
                timer.setEventHandler {}
                timer.setCancelHandler {
                    if ThreadIdentity.current == cancellingThread { onCancellingThread.add(1, ordering: .relaxed) }
                    runs.locked { $0[index] &+= 1 }
                }
                timer.schedule(deadline: .now() + .seconds(3600))
                timer.activate()
                timer.cancel()
            }
            #expect(waitUntil(timeout: .seconds(30)) { runs.locked { $0.allSatisfy { $0 != 0 } } })
            // None runs twice, late.
            #expect(keepsHolding { runs.locked { $0.allSatisfy { $0 <= 1 } } })
            let ranInsideCancel = onCancellingThread.load(ordering: .relaxed)
            #expect(ranInsideCancel == 0, "a cancel handler ran inside cancel()")
            #expect(waitUntil { CancellationIntake.intake(for: .default).isIdle })
        }

        @Test func manyThreadsCancellingOnOneGlobalQueueRunEveryCancelHandlerOnce() {
            // Posts race each other, the drain job's exchange and its end: every cancel
            // handler runs once, and the intake is idle again afterwards (no drain job left
            // behind, nothing left posted).
            let threads = 8
            let perThread = 1_000
            let runs = Mutex([UInt8](repeating: 0, count: threads * perThread))
            let queue = WorkQueue.global(qos: .utility)
            SourceTestKit.runThreads(threads) { thread in
                for offset in 0..<perThread {
                    let index = thread * perThread + offset
                    let source: EventSourceBase
                    if index.isMultiple(of: 2) {
                        let timer = EventSource.makeTimerSource(queue: queue)
                        timer.schedule(deadline: .now() + .seconds(3600))
                        source = timer
                    } else {
                        source = EventSource.makeUserDataAddSource(queue: queue)
                    }
                    source.setCancelHandler { runs.locked { $0[index] &+= 1 } }
                    source.activate()
                    source.cancel()
                    // Gaps of 0-80 µs, around the drain job's brief wait: it ends and
                    // starts again while the other threads post.
                    spin(microseconds: UInt64(index &* 2_654_435_761 % 81))
                }
            }
            #expect(waitUntil(timeout: .seconds(30)) { runs.locked { $0.allSatisfy { $0 != 0 } } })
            #expect(keepsHolding { runs.locked { $0.allSatisfy { $0 <= 1 } } })
            #expect(waitUntil { CancellationIntake.intake(for: .utility).isIdle })
        }

        @Test func cancelHandlersRunAtTheQueuesClass() {
            let seen = Mutex<[QoS.QoSClass]>([])
            let queue = WorkQueue.global(qos: .utility)
            for _ in 0..<100 {
                let source = EventSource.makeUserDataAddSource(queue: queue)
                source.setCancelHandler { seen.locked { $0.append(QoS.current.qosClass) } }
                source.activate()
                source.cancel()
            }
            #expect(waitUntil { seen.locked { $0.count == 100 } })
            #expect(seen.locked { $0.allSatisfy { $0 == .utility } })
        }

        @Test func aBlockedCancelHandlerDoesNotHoldUpTheOthers() {
            // The first cancel handler waits for the second one: on a global queue, which
            // runs blocks concurrently, that must finish.
            let secondRan = Atomic<Bool>(false)
            let firstSawSecond = Atomic<Bool>(false)
            let firstDone = Atomic<Bool>(false)
            let queue = WorkQueue.global()
            let first = EventSource.makeUserDataAddSource(queue: queue)
            first.setCancelHandler {
                firstSawSecond.store(waitUntil { secondRan.load(ordering: .acquiring) }, ordering: .relaxed)
                firstDone.store(true, ordering: .releasing)
            }
            let second = EventSource.makeUserDataAddSource(queue: queue)
            second.setCancelHandler { secondRan.store(true, ordering: .releasing) }
            first.activate()
            second.activate()
            first.cancel()
            second.cancel()
            #expect(waitUntil(timeout: .seconds(20)) { firstDone.load(ordering: .acquiring) })
            let sawSecond = firstSawSecond.load(ordering: .relaxed)
            #expect(sawSecond, "the second cancel handler waited behind the first")
        }

        #if DEBUG
        @Test func aStepPostedWhileADrainJobTakesABlockingOneIsRescued() {
            // The second cancel step is posted in the window between the drain job taking
            // the first one and counting it as running: the drain job must see it waiting
            // and arm the rescue, or the first handler waits for the second for ever.
            let secondRan = Atomic<Bool>(false)
            let firstSawSecond = Atomic<Bool>(false)
            let firstDone = Atomic<Bool>(false)
            let queue = WorkQueue.global(qos: .utility)
            let first = EventSource.makeUserDataAddSource(queue: queue)
            first.setCancelHandler {
                firstSawSecond.store(waitUntil(timeout: .seconds(5)) { secondRan.load(ordering: .acquiring) },
                                     ordering: .relaxed)
                firstDone.store(true, ordering: .releasing)
            }
            let second = EventSource.makeUserDataAddSource(queue: queue)
            second.setCancelHandler { secondRan.store(true, ordering: .releasing) }
            first.activate()
            second.activate()
            let firstCore = ObjectIdentifier(first.core)
            CancellationIntake.stepTaken.locked { hook in
                hook = { core in
                    if ObjectIdentifier(core) == firstCore { second.cancel() }
                }
            }
            defer { CancellationIntake.stepTaken.locked { $0 = nil } }
            first.cancel()
            #expect(waitUntil(timeout: .seconds(20)) { firstDone.load(ordering: .acquiring) })
            let sawSecond = firstSawSecond.load(ordering: .relaxed)
            #expect(sawSecond, "the second cancel handler waited behind the first")
            #expect(waitUntil { CancellationIntake.intake(for: .utility).isIdle })
        }
        #endif

        @Test func aSourceDroppedRightAfterCancelStillGetsItsCancelHandler() {
            let ran = Atomic<Int>(0)
            for _ in 0..<1_000 {
                let timer = EventSource.makeTimerSource()
                timer.setCancelHandler { ran.add(1, ordering: .relaxed) }
                timer.schedule(deadline: .now() + .seconds(3600))
                timer.activate()
                timer.cancel()
                // The handle goes here, while its cancel step waits in the intake.
            }
            #expect(waitUntil { ran.load(ordering: .relaxed) == 1_000 })
            #expect(keepsHolding { ran.load(ordering: .relaxed) == 1_000 })
        }

        @Test func aCancelledTimerIgnoresSchedule() {
            let fired = Atomic<Int>(0)
            let cancelled = Atomic<Bool>(false)
            let timer = EventSource.makeTimerSource()
            timer.setEventHandler { fired.add(1, ordering: .relaxed) }
            timer.setCancelHandler { cancelled.store(true, ordering: .releasing) }
            timer.schedule(deadline: .now() + .seconds(3600))
            timer.activate()
            timer.cancel()
            timer.schedule(deadline: .now())
            #expect(waitUntil { cancelled.load(ordering: .acquiring) })
            #expect(keepsHolding(for: .milliseconds(200)) { fired.load(ordering: .relaxed) == 0 })
        }
    }
}

/// The intake's tests that run wholly in a child process: they share nothing with this
/// process, so they run alongside `LullSuite`.
extension IndependentSuite {
    @Suite(.serialized) struct CancellationIntakeChildTests {
        /// A timer's cancel step comes only once the timer left the engine: a repeating
        /// timer cancelled as its delivery job ends must not have its cancel step posted
        /// while it is still in the heap (a debug build asserts it where the step is
        /// posted; the child process stops there).
        @Test
        func aTimerCancelledAsItsDeliveryEndsIsOutOfTheEngineWhenItsStepIsPosted() async {
            await #expect(processExitsWith: .success) {
                let ran = Atomic<Int>(0)
                let rounds = 4_000
                for round in 0..<rounds {
                    let timer = EventSource.makeTimerSource(flags: .strict, queue: WorkQueue.global(qos: .utility))
                    let delivered = Atomic<Int>(0)
                    timer.setEventHandler { delivered.add(1, ordering: .relaxed) }
                    timer.setCancelHandler { ran.add(1, ordering: .relaxed) }
                    timer.schedule(deadline: .now(), repeating: .microseconds(20), leeway: .zero)
                    timer.activate()
                    _ = waitUntil(timeout: .milliseconds(50)) { delivered.load(ordering: .relaxed) > 0 }
                    // Deliveries end every few microseconds: cancel at varying points of one.
                    spin(microseconds: UInt64(round % 37))
                    timer.cancel()
                }
                exit(waitUntil { ran.load(ordering: .relaxed) == rounds } ? 0 : 1)
            }
        }
    }
}
