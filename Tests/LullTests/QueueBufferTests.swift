import Testing
@testable import Lull

/// A serial queue fed one block at a time keeps one buffer for its blocks and allocates no
/// new one per block (`QueueState.pending`): the drain gives its emptied batch back.
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

        @Test func aBurstGrowsTheBufferAndTheQueueKeepsIt() {
            let queue = WorkQueue(label: "burst")
            let gate = Gate()
            let ran = Counter()
            queue.async { gate.wait() }
            for _ in 0..<100 { queue.async { ran.increment() } }
            gate.open()
            #expect(ran.await { $0 == 100 })
            #expect(waitUntil { queue.state.locked { !$0.isOwned } })
            #expect(queue.state.locked { $0.pending.capacity + $0.spare.capacity } >= 100)
        }
    }
}
