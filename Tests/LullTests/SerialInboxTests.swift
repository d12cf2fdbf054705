import Dispatch
import Glibc
import Synchronization
import Testing
@testable import Lull

/// A serial queue's lock-free submission (the inbox, docs/Queues.md): many producers, each
/// block run exactly once in its producer's order; suspension storms during submission; a
/// producer arriving as the drain goes idle (the lost wake-up window, held open with the
/// debug hooks); a queue released with blocks waiting.
extension LullSuite {
    @Suite struct SerialInboxTests {
        /// Counts its live instances: blocks captured by a released queue must be released.
        final class Tracked: Sendable {
            static let live = Atomic<Int>(0)
            init() { Tracked.live.add(1, ordering: .relaxed) }
            deinit { Tracked.live.subtract(1, ordering: .relaxed) }
        }

        /// Per-producer sequence numbers seen by the queue's blocks, which run one at a time
        /// (the queue is serial: plain state guarded by the queue, checked by the tracker).
        final class OrderLog: Sendable {
            private let state: Mutex<(next: [Int], outOfOrder: Int, ran: Int)>
            let overlap = OverlapTracker()
            init(producers: Int) { state = Mutex((next: [Int](repeating: 0, count: producers), outOfOrder: 0, ran: 0)) }
            func ran(producer: Int, sequence: Int) {
                overlap.enter()
                state.locked { state in
                    if state.next[producer] != sequence { state.outOfOrder += 1 }
                    state.next[producer] = sequence + 1
                    state.ran += 1
                }
                overlap.exit()
            }
            var snapshot: (next: [Int], outOfOrder: Int, ran: Int) { state.locked { $0 } }
        }

        @Test func manyProducersEveryBlockRunsOnceInProducerOrder() {
            let producers = 4
            let perProducer = 5_000
            let queue = WorkQueue(label: "lull.test.inbox.producers")
            let log = OrderLog(producers: producers)
            let syncOutOfOrder = Atomic<Int>(0)
            let group = DispatchGroup()
            for producer in 0..<producers {
                DispatchQueue.global().async(group: group) {
                    for sequence in 0..<perProducer {
                        queue.async { log.ran(producer: producer, sequence: sequence) }
                        // A `sync` now and then: it runs after this producer's blocks.
                        if sequence % 1_000 == 999 {
                            let next = queue.sync { log.snapshot.next[producer] }
                            if next != sequence + 1 { syncOutOfOrder.add(1, ordering: .relaxed) }
                        }
                    }
                }
            }
            group.wait()
            #expect(waitUntil { log.snapshot.ran == producers * perProducer })
            let seen = log.snapshot
            #expect(seen.outOfOrder == 0)
            #expect(syncOutOfOrder.load(ordering: .relaxed) == 0, "a sync ran before its producer's earlier blocks")
            #expect(seen.next == [Int](repeating: perProducer, count: producers))
            #expect(log.overlap.maximum == 1, "a serial queue ran two blocks at once")
            #expect(keepsHolding(for: .milliseconds(20)) { log.snapshot.ran == producers * perProducer }, "a block ran twice")
        }

        @Test func suspendResumeStormsDuringSubmissionLoseAndRepeatNothing() {
            let producers = 3
            let perProducer = 3_000
            let queue = WorkQueue(label: "lull.test.inbox.storm")
            let log = OrderLog(producers: producers)
            let producing = DispatchGroup()
            for producer in 0..<producers {
                DispatchQueue.global().async(group: producing) {
                    for sequence in 0..<perProducer {
                        queue.async { log.ran(producer: producer, sequence: sequence) }
                    }
                }
            }
            let stormDone = Flag()
            DispatchQueue.global().async {
                var storms = 0
                while producing.wait(timeout: .now()) == .timedOut || storms < 50 {
                    queue.suspend()
                    spin(microseconds: 20)
                    queue.resume()
                    storms += 1
                }
                stormDone.set()
            }
            producing.wait()
            #expect(stormDone.await())
            #expect(waitUntil { log.snapshot.ran == producers * perProducer })
            let seen = log.snapshot
            #expect(seen.outOfOrder == 0)
            #expect(seen.next == [Int](repeating: perProducer, count: producers))
            #expect(log.overlap.maximum == 1, "a serial queue ran two blocks at once")
            // Suspended again, it runs nothing submitted meanwhile until resumed.
            queue.suspend()
            let late = Counter()
            for _ in 0..<10 { queue.async { late.increment() } }
            #expect(keepsHolding(for: .milliseconds(20)) { late.value == 0 })
            queue.resume()
            #expect(late.await { $0 == 10 })
        }

        @Test func aProducerArrivingAsTheDrainGoesIdleIsNotLost() {
            let queue = WorkQueue(label: "lull.test.inbox.idle-window")
            let late = Flag()
            let armed = Atomic<Bool>(true)
            // On the drain's thread, after its last look found nothing and before it gives
            // the queue up: a block submitted here finds the queue still owned, posts no
            // drain request, and must be run by the drain's own hand-over.
            QueueTestHooks.drainGoesIdle.locked { hook in
                hook = { drained in
                    guard drained === queue, armed.exchange(false, ordering: .acquiringAndReleasing) else { return }
                    queue.async { late.set() }
                }
            }
            defer { QueueTestHooks.drainGoesIdle.locked { $0 = nil } }
            let first = Flag()
            queue.async { first.set() }
            #expect(first.await())
            #expect(late.await(), "the block submitted as the drain went idle never ran")
        }

        @Test func aProducerHeldBeforeItsLockWhileTheDrainGoesIdleIsNotLost() {
            let queue = WorkQueue(label: "lull.test.inbox.slow-producer")
            let gate = Gate()
            let running = Flag()
            let ran = Counter()
            queue.async { running.set(); gate.wait(); ran.increment() }
            #expect(running.await())
            // The drain owns the queue and waits on the gate. A producer pushes, finds the
            // count at zero (the drain took the first block), and stops before its lock
            // until the drain has given the queue up.
            let held = Flag()
            let proceed = Gate()
            QueueTestHooks.slowEnqueue.locked { hook in
                hook = { producerQueue in
                    guard producerQueue === queue else { return }
                    held.set()
                    proceed.wait()
                }
            }
            let submitted = Flag()
            DispatchQueue.global().async {
                queue.async { ran.increment() }
                submitted.set()
            }
            #expect(held.await())
            QueueTestHooks.slowEnqueue.locked { $0 = nil }
            gate.open()
            // The drain sees the block counted in and runs it or posts for it; either way it
            // runs once the producer goes on.
            #expect(ran.await { $0 == 2 })
            proceed.open()
            #expect(submitted.await())
            #expect(keepsHolding(for: .milliseconds(20)) { ran.value == 2 })
        }

        @Test func aQueueReleasedWithBlocksWaitingReleasesThem() {
            let before = Tracked.live.load(ordering: .relaxed)
            let ran = Counter()
            do {
                let queue = WorkQueue(label: "lull.test.inbox.released")
                queue.suspend()
                for _ in 0..<200 {
                    let tracked = Tracked()
                    queue.async { _ = tracked; ran.increment() }
                }
                #expect(Tracked.live.load(ordering: .relaxed) == before + 200)
            }
            #expect(waitUntil { Tracked.live.load(ordering: .relaxed) == before })
            #expect(ran.value == 0)
        }

        @Test func aSerialQueueFedOneBlockAtATimeAllocatesNoSegmentPerBlock() {
            let queue = WorkQueue(label: "lull.test.inbox.one-at-a-time")
            for _ in 0..<200 {
                let ran = Flag()
                queue.async { ran.set() }
                #expect(ran.await())
                #expect(waitUntil { queue.state.locked { !$0.isOwned } })
            }
            let inbox = queue.inbox
            #expect(inbox.segmentsAllocated.load(ordering: .relaxed) <= 4)
            #expect(inbox.heldCapacities.allSatisfy { $0 <= 4 }, "\(inbox.heldCapacities)")
        }

        /// The inbox releases its chain of segments one link at a time: a suspended queue
        /// released with 100,000 blocks waiting (some 1,500 segments) on a thread with a
        /// 256 KiB stack. Released from each segment's own `deinit`, the chain overflowed it.
        @Test func aQueueReleasedWithManyBlocksWaitingReleasesItsSegmentsOnASmallStack() {
            var queue: WorkQueue? = WorkQueue(label: "lull.test.inbox.deep")
            queue?.suspend()
            for _ in 0..<100_000 { queue?.async {} }
            #expect((queue?.inbox.segmentsAllocated.load(ordering: .relaxed) ?? 0) > 1_000)
            // The test's reference goes to the small thread, which drops the last one.
            let last = Unmanaged.passRetained(queue!).toOpaque()
            queue = nil
            var attributes = pthread_attr_t()
            pthread_attr_init(&attributes)
            defer { pthread_attr_destroy(&attributes) }
            pthread_attr_setstacksize(&attributes, 256 * 1024)
            var thread = pthread_t()
            let created = pthread_create(&thread, &attributes, { context in
                Unmanaged<WorkQueue>.fromOpaque(context!).release()
                return nil
            }, last)
            #expect(created == 0)
            if created == 0 { pthread_join(thread, nil) }
        }

        /// A producer stalls just before its push while the drain takes and empties the
        /// inbox, then pushes a user-initiated block behind a background one that took the
        /// lock: the queue's bound of what waits must still cover user-initiated (the class
        /// bit is set after the push, so the drain's take cannot clear it unseen).
        @Test func aProducerStalledBeforeItsPushKeepsItsClassInTheQueuesBound() {
            let queue = WorkQueue(label: "lull.test.inbox.class-bit")
            let firstGate = Gate(), secondGate = Gate(), proceed = Gate()
            let firstRunning = Flag(), secondRunning = Flag(), held = Flag(), pushed = Flag(), stalledRan = Flag()
            let producerThread = Atomic<UInt>(0)
            QueueTestHooks.beforePush.locked { hook in
                hook = { producerQueue in
                    guard producerQueue === queue,
                          producerThread.load(ordering: .acquiring) == UInt(pthread_self()) else { return }
                    held.set()
                    proceed.wait()
                }
            }
            defer { QueueTestHooks.beforePush.locked { $0 = nil } }
            // A drain owns the queue.
            queue.async(qos: .default) { firstRunning.set(); firstGate.wait() }
            #expect(firstRunning.await())
            // The producer of a user-initiated block stalls before its push.
            DispatchQueue.global().async {
                producerThread.store(UInt(pthread_self()), ordering: .releasing)
                queue.async(qos: .userInitiated) { stalledRan.set() }
                pushed.set()
            }
            #expect(held.await())
            // The drain's next take: a user-initiated block that holds it, a background one.
            queue.async(qos: .userInitiated) { secondRunning.set(); secondGate.wait() }
            queue.async(qos: .background) {}
            firstGate.open()
            #expect(secondRunning.await())
            // A background block counted in on an empty inbox takes the lock; then the
            // stalled producer pushes behind it, under the published ceiling, without it.
            queue.async(qos: .background) {}
            proceed.open()
            #expect(pushed.await())
            let bound = queue.state.locked { $0.pendingMax(queue) }
            #expect(bound >= .userInitiated, "the queue's bound \(bound) misses a user-initiated block waiting")
            secondGate.open()
            #expect(stalledRan.await())
        }
    }
}
