import Synchronization
import Testing
@testable import Lull

/// Hostile review of the concurrent queue's path to the pool: what the forward gate and the
/// drains behind it promise a Dispatch user (docs/Queues.md, "The concurrent queue's
/// forward gate").
extension LullSuite {
    @Suite struct ConcurrentQueueReviewTests {
        /// Dispatch runs a concurrent queue's dequeued blocks side by side: a block that
        /// waits for a later block of the same queue is waiting for one that starts. A
        /// drain that took a run of piled-up blocks and ran them one after the other would
        /// keep the later ones behind the waiting one (and a block submitted later through
        /// the reopened gate would start before them).
        @Test func aPiledUpBlockNeverWaitsBehindAnEarlierOneOfItsQueue() {
            let queue = WorkQueue(label: "lull.test.review.piled", attributes: .concurrent)
            let blocks = 64
            let secondStarted = Atomic<Bool>(false)
            let firstSawSecond = Atomic<Int>(0)
            let group = WorkGroup()
            queue.suspend()
            for index in 0..<blocks {
                queue.async(group: group) {
                    switch index {
                    case 0:
                        let saw = waitUntil(timeout: .milliseconds(600)) { secondStarted.load(ordering: .acquiring) }
                        firstSawSecond.store(saw ? 1 : 2, ordering: .releasing)
                    case 1:
                        secondStarted.store(true, ordering: .releasing)
                    default:
                        break
                    }
                }
            }
            queue.resume()
            #expect(group.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(firstSawSecond.load(ordering: .acquiring) == 1,
                    "block 1 did not start while block 0 of the same concurrent queue waited for it")
        }
    }
}

extension LullSuite.ConcurrentQueueReviewTests {
    /// Blocks forwarded through the open gate that start after `suspend()` go back to wait
    /// in the queue: they must wait in the order they were submitted, not the reverse.
    /// The hook holds the first until the queue is suspended and the second until the first
    /// went back; a serial target then runs what waits one block after the other.
    @Test func forwardedBlocksThatFindTheQueueSuspendedKeepTheirOrder() {
        let queue = WorkQueue(label: "lull.test.review.putback", attributes: .concurrent)
        let serial = WorkQueue(label: "lull.test.review.putback.serial")
        let groups = [WorkGroup(), WorkGroup()]
        let suspended = Atomic<Bool>(false)
        QueueTestHooks.forwardedStarts.locked { hook in
            hook = { forwarded, group in
                guard forwarded === queue, let group else { return }
                if group === groups[0] {
                    _ = waitUntil { suspended.load(ordering: .acquiring) }
                } else if group === groups[1] {
                    _ = waitUntil { suspended.load(ordering: .acquiring) && queue.forwardedBlocks == 1 }
                }
            }
        }
        defer { QueueTestHooks.forwardedStarts.locked { $0 = nil } }
        let order = Recorder<Int>()
        for index in 0..<2 {
            queue.async(group: groups[index]) { order.append(index) }
        }
        queue.suspend()
        suspended.store(true, ordering: .releasing)
        #expect(waitUntil { queue.forwardedBlocks == 0 })
        queue.setTarget(queue: serial)
        queue.resume()
        for group in groups { #expect(group.wait(timeout: .now() + .seconds(10)) == .success) }
        #expect(order.values == [0, 1])
    }
}
