import Glibc
import Synchronization
import Testing
@testable import Lull

/// An actor whose executor is a serial queue.
actor QueueBoundActor {
    let queue: WorkQueue
    private(set) var log: [Int] = []

    init(queue: WorkQueue) { self.queue = queue }

    nonisolated var unownedExecutor: UnownedSerialExecutor { queue.asUnownedSerialExecutor() }

    func append(_ value: Int) { log.append(value) }

    /// What the actor's turn sees: whether it runs as a block of its queue, and at what QoS.
    func observe() -> (onQueue: Bool, qos: QoS) {
        (queue.isIsolatingCurrentContext() == true, QoS.current)
    }

    /// Enters the shared overlap tracker for a moment, as the queue's blocks do.
    func overlapping(_ tracker: OverlapTracker) {
        tracker.enter()
        spin(microseconds: 20)
        tracker.exit()
    }
}

extension LullSuite {
    @Suite struct QueueExecutorTests {
        @Test func aTaskPreferringASerialQueueRunsAsItsBlocksAcrossSuspensions() async {
            let queue = WorkQueue(label: "lull.test.executor.preference.serial")
            let other = WorkQueue(label: "lull.test.executor.preference.other")
            let seen = await Task(executorPreference: queue) { () -> [Bool] in
                var seen = [queue.isIsolatingCurrentContext() == true]
                await Task.yield()
                seen.append(queue.isIsolatingCurrentContext() == true)
                seen.append(other.isIsolatingCurrentContext() == true)
                return seen
            }.value
            #expect(seen == [true, true, false])
            #expect(queue.isIsolatingCurrentContext() == false)
        }

        @Test func aTaskPreferringAConcurrentQueueRunsOnIt() async {
            let queue = WorkQueue(label: "lull.test.executor.preference.concurrent", attributes: .concurrent)
            let held = await Task(executorPreference: queue) { () -> Bool in
                await Task.yield()
                return ThreadState.current.heldQueues.contains { $0.id == ObjectIdentifier(queue) }
            }.value
            #expect(held)
        }

        @Test func aSuspendedQueueHoldsBackItsTasks() async {
            let queue = WorkQueue(label: "lull.test.executor.preference.suspended")
            queue.suspend()
            let ran = Flag()
            let task = Task(executorPreference: queue) { ran.set() }
            #expect(keepsHolding(for: .milliseconds(50)) { !ran.isSet })
            queue.resume()
            await task.value
            #expect(ran.isSet)
        }

        @Test func aTaskOnAQueueRunsAtItsPriorityOrTheQueuesQoS() {
            let plain = WorkQueue(label: "lull.test.executor.priority.plain")
            let utility = WorkQueue(label: "lull.test.executor.priority.utility", qos: .utility)
            // Read without awaiting the tasks: an `await` on a task escalates its priority.
            func classOf(_ queue: WorkQueue, _ priority: TaskPriority) -> QoS.QoSClass? {
                let seen = Captured<QoS.QoSClass>()
                Task(executorPreference: queue, priority: priority) { seen.set(QoS.current.qosClass) }
                return seen.await()
            }
            #expect(classOf(plain, .high) == .userInitiated)
            #expect(classOf(plain, .medium) == .default)
            #expect(classOf(plain, .low) == .utility)
            #expect(classOf(plain, .background) == .background)
            #expect(classOf(utility, .background) == .utility)
            #expect(classOf(utility, .high) == .utility)
        }

        @Test func anActorOnASerialQueueRunsItsTurnsAsBlocksOfTheQueue() async {
            let queue = WorkQueue(label: "lull.test.executor.actor.turns", qos: .utility)
            let actor = QueueBoundActor(queue: queue)
            let (onQueue, qos) = await actor.observe()
            #expect(onQueue)
            #expect(qos == .utility)
            // Suspending the queue holds the actor's turns back, as it holds back blocks.
            queue.suspend()
            let done = Flag()
            let call = Task {
                await actor.append(1)
                done.set()
            }
            #expect(keepsHolding(for: .milliseconds(50)) { !done.isSet })
            queue.resume()
            await call.value
            #expect(await actor.log == [1])
        }

        @Test func anActorOnASerialQueueRunsInOrderAndExclusiveWithTheQueuesBlocks() async {
            let queue = WorkQueue(label: "lull.test.executor.actor.exclusive")
            let actor = QueueBoundActor(queue: queue)
            let tracker = OverlapTracker()
            let count = 500
            let blocksDone = Counter()
            let blocks = Task.detached {
                for _ in 0..<count {
                    queue.async {
                        tracker.enter()
                        spin(microseconds: 20)
                        tracker.exit()
                        blocksDone.increment()
                    }
                }
            }
            for value in 0..<count {
                await actor.append(value)
                await actor.overlapping(tracker)
            }
            await blocks.value
            #expect(waitUntil { blocksDone.value == count })
            #expect(tracker.maximum == 1)
            #expect(await actor.log == Array(0..<count))
        }

        @Test func assumeIsolatedWorksFromAPlainBlockOfTheQueueAndOfAChild() {
            let queue = WorkQueue(label: "lull.test.executor.assume")
            let child = WorkQueue(label: "lull.test.executor.assume.child", target: queue)
            let actor = QueueBoundActor(queue: queue)
            let done = Counter()
            queue.async {
                actor.assumeIsolated { $0.append(1) }
                done.increment()
            }
            child.async {
                actor.assumeIsolated { $0.append(2) }
                done.increment()
            }
            queue.sync {
                actor.assumeIsolated { $0.append(3) }
            }
            #expect(waitUntil { done.value == 2 })
            let log = queue.sync { actor.assumeIsolated { $0.log } }
            #expect(log == [1, 2, 3])
        }

        @Test func isolationHoldsOnlyWhileTheThreadRunsTheQueue() {
            let queue = WorkQueue(label: "lull.test.executor.isolation")
            let other = WorkQueue(label: "lull.test.executor.isolation.other")
            let concurrent = WorkQueue(label: "lull.test.executor.isolation.concurrent", attributes: .concurrent)
            #expect(queue.isIsolatingCurrentContext() == false)
            let answers = Captured<[Bool?]>()
            other.async {
                answers.set([queue.isIsolatingCurrentContext(), other.isIsolatingCurrentContext()])
            }
            #expect(answers.await() == [false, true])
            let onConcurrent = Captured<Bool?>()
            concurrent.async { onConcurrent.set(concurrent.isIsolatingCurrentContext()) }
            #expect(onConcurrent.await() == false)
            let inBarrier = Captured<Bool?>()
            concurrent.async(flags: .barrier) { inBarrier.set(concurrent.isIsolatingCurrentContext()) }
            #expect(inBarrier.await() == true)
        }
    }
}

/// `assumeIsolated` from a synchronous context (the exit test's body is async).
private func assumeIsolatedFromHere(_ actor: QueueBoundActor) {
    actor.assumeIsolated { $0.append(1) }
}

extension IndependentSuite {
    @Suite(.serialized) struct QueueExecutorTrapTests {
        @Test func aConcurrentQueueAsAnActorsExecutorStopsTheProgramNamingIt() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let queue = WorkQueue(label: "lull.test.trap.concurrent-actor", attributes: .concurrent)
                let actor = QueueBoundActor(queue: queue)
                _ = actor.unownedExecutor
            }
            let message = standardErrorText(result)
            #expect(message.contains("lull.test.trap.concurrent-actor"), "stderr: \(message)")
            #expect(message.contains("concurrent"), "stderr: \(message)")
        }

        @Test func checkIsolatedOffTheQueueStopsTheProgram() async {
            await #expect(processExitsWith: .failure) {
                let queue = WorkQueue(label: "lull.test.trap.check-isolated")
                assumeIsolatedFromHere(QueueBoundActor(queue: queue))
            }
        }
    }
}
