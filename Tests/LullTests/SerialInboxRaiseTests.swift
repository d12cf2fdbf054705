import Dispatch
import Glibc
import Synchronization
import Testing
@testable import Lull

/// A work item's waiter raises a serial queue until the item has run, whichever take of
/// the drain holds it (`InboxRaises`); a resumed queue moves its backlog a quantum at a
/// time under its lock, in order, losing nothing.
extension LullSuite.SerialInboxTests {
    /// The item's producer stalls before its push while a take runs without it: the blocks
    /// counted in after that take are still ahead of the item, and run at the waiter's
    /// class too; the raise ends with the item.
    @Test func aRaisedItemNotYetPushedRaisesTheBlocksAheadOfItPastTheNextTake() {
        let queue = WorkQueue(label: "lull.test.inbox.raise-held", qos: .utility)
        let first = Holder()
        queue.async(execute: first.block)
        #expect(first.waitUntilRunning(at: .utility))
        let producerThread = Atomic<UInt>(0)
        let held = Flag(), pushed = Flag(), proceed = Gate()
        QueueTestHooks.beforePush.locked { hook in
            hook = { producerQueue in
                guard producerQueue === queue,
                      producerThread.load(ordering: .acquiring) == UInt(pthread_self()) else { return }
                held.set()
                proceed.wait()
            }
        }
        defer { QueueTestHooks.beforePush.locked { $0 = nil } }
        let itemSaw = Captured<ObservedScheduling>()
        let item = WorkItem { itemSaw.set(observeScheduling()) }
        DispatchQueue.global().async {
            producerThread.store(UInt(pthread_self()), ordering: .releasing)
            queue.async(execute: item)
            pushed.set()
        }
        #expect(held.await())
        // The drain's next take: one block, not the item.
        let second = Holder()
        queue.async(execute: second.block)
        let waited = Flag()
        WorkQueue.global(qos: .userInteractive).async {
            item.wait()
            waited.set()
        }
        #expect(first.waitUntilRunning(at: .userInteractive))
        first.gate.open()
        #expect(second.waitUntilRunning(at: .userInteractive))
        #expect(!queue.state.locked { $0.inboxRaises.isEmpty }, "the raise ended before its item was taken")
        // Counted in after that take, ahead of the item.
        let ahead = Captured<ObservedScheduling>()
        queue.async { ahead.set(observeScheduling()) }
        proceed.open()
        #expect(pushed.await())
        second.gate.open()
        #expect(waited.await())
        #expect(ahead.await()?.qos == .userInteractive, "a block ahead of the raised item ran below the waiter")
        #expect(itemSaw.value?.qos == .userInteractive)
        #expect(queue.state.locked { $0.inboxRaises.isEmpty })
        let behind = scheduling { queue.async(execute: $0) }
        #expect(behind?.qos == .utility, "a block after the raised item still ran raised")
    }

    /// The item is in the drain's batch (taken, not started) when its waiter raises the
    /// queue: the raise ends when the item runs, not at a later take, so blocks submitted
    /// behind the item run at their own class.
    @Test func aRaiseEndsWhenItsItemRunsFromTheDrainsBatch() {
        let queue = WorkQueue(label: "lull.test.inbox.raise-left", qos: .utility)
        let first = Holder()
        queue.async(execute: first.block)
        #expect(first.waitUntilRunning(at: .utility))
        let second = Holder()
        queue.async(execute: second.block)
        let item = WorkItem {}
        queue.async(execute: item)
        first.gate.open()
        // One take moved `second` and the item into the drain's batch.
        #expect(second.waitUntilRunning(at: .utility))
        #expect(queue.inbox.count == 0)
        let waited = Flag()
        WorkQueue.global(qos: .userInteractive).async {
            item.wait()
            waited.set()
        }
        #expect(second.waitUntilRunning(at: .userInteractive))
        let behind = Captured<ObservedScheduling>()
        queue.async { behind.set(observeScheduling()) }
        second.gate.open()
        #expect(waited.await())
        #expect(behind.await()?.qos == .utility, "a block submitted behind the raised item ran raised")
        #expect(queue.state.locked { $0.inboxRaises.isEmpty }, "the raise outlived its item")
    }

    /// The drain stops early (a block suspends the queue) and puts the raised item back:
    /// the next drain's take finds it among the jobs put back, so the blocks taken behind
    /// it run at their own class.
    @Test func aRaisedItemPutBackByADrainThatStoppedIsFoundAheadOfTheNextTake() {
        let queue = WorkQueue(label: "lull.test.inbox.raise-put-back", qos: .utility)
        let first = Holder()
        queue.async(execute: first.block)
        #expect(first.waitUntilRunning(at: .utility))
        let suspender = Holder()
        queue.async {
            suspender.block()
            queue.suspend()
        }
        let item = WorkItem {}
        queue.async(execute: item)
        first.gate.open()
        // One take moved the suspending block and the item into the drain's batch.
        #expect(suspender.waitUntilRunning(at: .utility))
        let waited = Flag()
        WorkQueue.global(qos: .userInteractive).async {
            item.wait()
            waited.set()
        }
        #expect(suspender.waitUntilRunning(at: .userInteractive))
        suspender.gate.open()
        #expect(waitUntil { queue.state.locked { $0.pending.count == 1 && !$0.isOwned } })
        let behind = Captured<ObservedScheduling>()
        queue.async { behind.set(observeScheduling()) }
        queue.resume()
        #expect(waited.await())
        #expect(behind.await()?.qos == .utility, "a block taken behind the put-back item ran raised")
        #expect(queue.state.locked { $0.inboxRaises.isEmpty })
    }

    /// A waiter that comes after its item started raises nothing in the queue.
    @Test func waitingOnAnItemThatStartedAddsNoRaiseToItsQueue() {
        let queue = WorkQueue(label: "lull.test.inbox.raise-started", qos: .utility)
        let holder = Holder()
        let item = WorkItem(block: holder.block)
        queue.async(execute: item)
        #expect(holder.waitUntilRunning(at: .utility))
        let waited = Flag()
        WorkQueue.global(qos: .userInteractive).async {
            item.wait()
            waited.set()
        }
        #expect(holder.waitUntilRunning(at: .userInteractive))
        #expect(queue.state.locked { $0.inboxRaises.isEmpty })
        holder.gate.open()
        #expect(waited.await())
    }

    /// Resumed with a large backlog, the drain moves at most a quantum of it per take (each
    /// take holds the queue's lock), and runs all of it once, in order.
    @Test func aQueueResumedWithALargeBacklogMovesAQuantumPerTake() {
        let total = 50_000
        let queue = WorkQueue(label: "lull.test.inbox.resume-backlog")
        let log = OrderLog(producers: 1)
        queue.suspend()
        for sequence in 0..<total { queue.async { log.ran(producer: 0, sequence: sequence) } }
        #expect(queue.inbox.count == total)
        queue.resume()
        // A `sync` from another thread meanwhile runs after the backlog.
        let syncSaw = Captured<Int>()
        DispatchQueue.global().async { syncSaw.set(queue.sync { log.snapshot.ran }) }
        #expect(syncSaw.await() == total)
        let seen = log.snapshot
        #expect(seen.ran == total)
        #expect(seen.outOfOrder == 0)
        let largest = queue.inbox.largestTake.load(ordering: .relaxed)
        #expect(largest <= WorkQueue.serialQuantum, "one take moved \(largest) jobs under the queue's lock")
    }

    /// Several threads suspend and resume a queue that holds a backlog while producers
    /// feed it: every block runs once, in its producer's order, never two at once.
    @Test func suspendResumeStormsFromSeveralThreadsOverABacklogLoseAndRepeatNothing() {
        let producers = 3
        let perProducer = 3_000
        let backlog = 5_000
        let queue = WorkQueue(label: "lull.test.inbox.storm-backlog")
        let log = OrderLog(producers: producers + 1)
        queue.suspend()
        for sequence in 0..<backlog { queue.async { log.ran(producer: producers, sequence: sequence) } }
        let producing = DispatchGroup()
        for producer in 0..<producers {
            DispatchQueue.global().async(group: producing) {
                for sequence in 0..<perProducer {
                    queue.async { log.ran(producer: producer, sequence: sequence) }
                }
            }
        }
        let storming = DispatchGroup()
        for _ in 0..<3 {
            DispatchQueue.global().async(group: storming) {
                var storms = 0
                while producing.wait(timeout: .now()) == .timedOut || storms < 30 {
                    queue.suspend()
                    spin(microseconds: 10)
                    queue.resume()
                    storms += 1
                }
            }
        }
        queue.resume()
        producing.wait()
        #expect(storming.wait(timeout: .now() + .seconds(30)) == .success)
        let expected = producers * perProducer + backlog
        #expect(waitUntil { log.snapshot.ran == expected })
        let seen = log.snapshot
        #expect(seen.outOfOrder == 0)
        #expect(seen.next == [Int](repeating: perProducer, count: producers) + [backlog])
        #expect(log.overlap.maximum == 1, "a serial queue ran two blocks at once")
        #expect(queue.inbox.largestTake.load(ordering: .relaxed) <= WorkQueue.serialQuantum)
        #expect(keepsHolding(for: .milliseconds(20)) { log.snapshot.ran == expected }, "a block ran twice")
    }
}

extension LullSuite.ForkTests {
    /// The parent's producer of a segment's last slot is between its claim and the install
    /// of the next segment at the fork: in the child, a push finds the segment full for
    /// ever, and the fork guard stops it with its message instead of letting it spin.
    @Test func aPushIntoASegmentLeftFullAtTheForkStopsTheChildWithAMessage() async {
        await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            let inbox = SegmentedInbox<Int>()
            let held = Flag()
            let proceed = Gate()
            inbox.beforeInstallNext.locked { $0 = { held.set(); proceed.wait() } }
            // The first segment has two slots: the second push claims the last one.
            inbox.push(0)
            DispatchQueue.global().async { inbox.push(1) }
            ForkProbe.require(held.await(), "the producer of the segment's last slot never arrived")
            ForkProbe.expectChildStops(saying: "used in the child of fork()") {
                inbox.push(2)
                _exit(3)
            }
        }
    }
}
