import Testing
@testable import Lull

/// A serial queue fed one block at a time keeps one batch buffer and allocates no new one
/// per block (`QueueState.pending`: the drain gives its emptied batch back); a burst grows
/// the inbox's segments and the batch buffer, which the queue keeps for the next one.
extension LullSuite {
    @Suite struct QueueBufferTests {
        @Test func aSerialQueueFedOneBlockAtATimeKeepsOneSlot() {
            let queue = WorkQueue(label: "one at a time")
            for _ in 0..<50 {
                let ran = Flag()
                queue.async { ran.set() }
                #expect(ran.await())
                // The drain gives the buffer back after the block ran: wait for it to leave.
                #expect(waitUntil { queue.state.locked { !$0.isOwned } })
                #expect(queue.state.locked { $0.pending.capacity } == 1, "the drain let its buffer go")
            }
        }

        @Test func aBurstGrowsTheBuffersAndTheQueueKeepsThem() {
            let queue = WorkQueue(label: "burst")
            let ran = Counter()
            func burst() {
                let gate = Gate()
                let running = Flag()
                queue.async { running.set(); gate.wait() }
                #expect(running.await())
                for _ in 0..<100 { queue.async { ran.increment() } }
                gate.open()
            }
            burst()
            #expect(ran.await { $0 == 100 })
            #expect(waitUntil { queue.state.locked { !$0.isOwned } })
            #expect(queue.state.locked { $0.pending.capacity + $0.spare.capacity } >= 1, "the drain let its batch buffer go")
            #expect(queue.inbox.heldCapacities.contains(64), "\(queue.inbox.heldCapacities)")
            // The next burst of the same size reuses what the first one grew.
            let allocated = queue.inbox.segmentsAllocated.load(ordering: .relaxed)
            burst()
            #expect(ran.await { $0 == 200 })
            #expect(queue.inbox.segmentsAllocated.load(ordering: .relaxed) - allocated <= 2)
        }
    }
}
