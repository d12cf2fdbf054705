import Testing
@testable import Lull

/// A nonisolated async function that always runs on the generic executor (`@concurrent`):
/// a task that prefers a queue calls it with a switch to the generic executor and back, the
/// hop the queue's task jobs must let run in place.
@concurrent @inline(never)
private func onGenericExecutor(_ value: Int) async -> Int {
    value
}

/// The actor's last log entry, read synchronously by assuming its isolation.
private func lastEntryAssumingIsolation(_ actor: QueueBoundActor) -> Int? {
    actor.assumeIsolated { $0.log.last }
}

/// An actor on a queue that calls into another actor on the same queue.
private actor QueueRelayActor {
    let queue: WorkQueue
    let next: QueueBoundActor

    init(queue: WorkQueue, next: QueueBoundActor) {
        self.queue = queue
        self.next = next
    }

    nonisolated var unownedExecutor: UnownedSerialExecutor { queue.asUnownedSerialExecutor() }

    /// Calls `next` `count` times; true if a block enqueued first ran in between (a hop).
    func relay(_ count: Int, blockRan: Flag) async -> Bool {
        queue.async { blockRan.set() }
        for value in 0..<count { await next.append(value) }
        return blockRan.isSet
    }
}

/// A task preferring a queue and actors on the queue, mixed: the runtime enqueues the task's
/// slices through the queue's `TaskExecutor` face and the actors' turns through its
/// `SerialExecutor` face, and both run as jobs of the queue.
extension LullSuite {
    @Suite struct QueueTaskPreferenceTests {
        @Test func aPreferringTasksHopsToTheGenericExecutorStayOnTheThread() async {
            let queue = WorkQueue(label: "lull.test.preference.no-hop")
            let blockRan = Flag()
            let (sum, ranBetween) = await Task(executorPreference: queue) { () -> (Int, Bool) in
                // Behind this slice in the queue: it runs only if the slice gives the queue up.
                queue.async { blockRan.set() }
                var sum = 0
                for value in 0..<100 { sum += await onGenericExecutor(value) }
                return (sum, blockRan.isSet)
            }.value
            #expect(sum == 4_950)
            #expect(!ranBetween, "a switch to the generic executor enqueued the task on its queue again")
            #expect(blockRan.await())
        }

        @Test func aPreferringTaskRunsInOrderWithTheSerialQueuesBlocks() async {
            let queue = WorkQueue(label: "lull.test.preference.fifo")
            let log = Recorder<String>()
            let rounds = 50
            await Task(executorPreference: queue) {
                for round in 0..<rounds {
                    log.append("task \(round)")
                    queue.async { log.append("block \(round)") }
                    // The task's next slice is enqueued behind the block: it runs after it.
                    await Task.yield()
                    _ = await onGenericExecutor(round)
                }
            }.value
            let expected = (0..<rounds).flatMap { ["task \($0)", "block \($0)"] }
            #expect(log.values == expected)
        }

        @Test func aPreferringTaskNeverOverlapsTheSerialQueuesBlocksOrItsActor() async {
            let queue = WorkQueue(label: "lull.test.preference.exclusive")
            let actor = QueueBoundActor(queue: queue)
            let tracker = OverlapTracker()
            let rounds = 300
            let blocksDone = Counter()
            let blocks = Task.detached {
                for _ in 0..<rounds {
                    queue.async {
                        tracker.enter()
                        spin(microseconds: 10)
                        tracker.exit()
                        blocksDone.increment()
                    }
                }
            }
            await Task(executorPreference: queue) {
                for round in 0..<rounds {
                    tracker.enter()
                    spin(microseconds: 10)
                    tracker.exit()
                    if round % 3 == 0 { await actor.overlapping(tracker) }
                    _ = await onGenericExecutor(round)
                    if round % 5 == 0 { await Task.yield() }
                }
            }.value
            await blocks.value
            #expect(waitUntil { blocksDone.value == rounds })
            #expect(tracker.maximum == 1)
        }

        @Test func aPreferringTaskCallsAnActorOnTheSameQueueAndComesBack() async {
            let queue = WorkQueue(label: "lull.test.preference.actor")
            let actor = QueueBoundActor(queue: queue)
            let rounds = 100
            let seen = await Task(executorPreference: queue) { () -> [Bool] in
                var seen: [Bool] = []
                for value in 0..<rounds {
                    await actor.append(value)
                    _ = await onGenericExecutor(value)
                    // Back in the task's own code: still a job of the queue, which isolates
                    // the actor, so it may be assumed synchronously.
                    seen.append(queue.isIsolatingCurrentContext() == true)
                }
                let last = lastEntryAssumingIsolation(actor)
                seen.append(last == rounds - 1)
                return seen
            }.value
            #expect(seen == Array(repeating: true, count: rounds + 1))
            #expect(await actor.log == Array(0..<rounds))
            let (onQueue, _) = await actor.observe()
            #expect(onQueue)
        }

        @Test func actorsOnOneQueueCallEachOtherWithoutAHop() async {
            let queue = WorkQueue(label: "lull.test.preference.actor-to-actor")
            let target = QueueBoundActor(queue: queue)
            let relay = QueueRelayActor(queue: queue, next: target)
            let blockRan = Flag()
            // A task with no executor preference: an actor's turn runs with no task
            // executor, which is what the task asks for, so the switch between the two
            // actors (one serial executor) lets it go on in place.
            let hopped = await Task.detached { await relay.relay(100, blockRan: blockRan) }.value
            #expect(!hopped, "a call between two actors on one queue enqueued the task again")
            #expect(blockRan.await())
            #expect(await target.log == Array(0..<100))
        }

        @Test func aTaskPreferringAConcurrentQueueStaysOnItAcrossHops() async {
            let queue = WorkQueue(label: "lull.test.preference.concurrent", attributes: .concurrent)
            let held = await Task(executorPreference: queue) { () -> [Bool] in
                var held: [Bool] = []
                for value in 0..<20 {
                    _ = await onGenericExecutor(value)
                    if value % 4 == 0 { await Task.yield() }
                    held.append(ThreadState.current.heldQueues.contains { $0.id == ObjectIdentifier(queue) }
                                && queue.isIsolatingCurrentContext() == false)
                }
                return held
            }.value
            #expect(held == Array(repeating: true, count: 20))
        }

        @Test func aQueueReleasedWhileItsPreferringTaskIsSuspendedLivesUntilTheTaskEnds() async {
            let resume = Captured<CheckedContinuation<Void, Never>>()
            weak var released: WorkQueue?
            let task: Task<Bool, Never>
            do {
                let queue = WorkQueue(label: "lull.test.preference.release")
                released = queue
                task = Task(executorPreference: queue) { () -> Bool in
                    await withCheckedContinuation { resume.set($0) }
                    _ = await onGenericExecutor(1)
                    return ThreadState.current.heldQueues.contains { $0.exclusive }
                }
            }
            let continuation = resume.await()
            #expect(continuation != nil)
            // The caller's reference is gone; the suspended task holds the queue it prefers.
            #expect(released != nil)
            continuation?.resume()
            #expect(await task.value)
            // The task's end releases the preference: nothing else keeps the queue.
            #expect(waitUntil { released == nil })
        }
    }
}
