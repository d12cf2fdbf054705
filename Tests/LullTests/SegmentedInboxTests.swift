import Dispatch
import Synchronization
import Testing
@testable import Lull

/// `SegmentedInbox`, the lock-free multi-producer single-consumer FIFO in front of a serial
/// queue: every element taken exactly once in the order of its producer, the count the
/// wake-up rule reads, segments that follow the traffic, and elements released with it.
extension IndependentSuite {
    @Suite(.serialized) struct SegmentedInboxTests {
        /// Counts its live instances, to see every element released exactly once.
        final class Tracked: Sendable {
            static let live = Atomic<Int>(0)
            init() { Tracked.live.add(1, ordering: .relaxed) }
            deinit { Tracked.live.subtract(1, ordering: .relaxed) }
        }

        @Test func manyProducersOneConsumerTakeEveryElementOnceInProducerOrder() {
            let producers = 4
            let perProducer = 20_000
            let inbox = SegmentedInbox<Int>()
            let group = DispatchGroup()
            for producer in 0..<producers {
                DispatchQueue.global().async(group: group) {
                    for sequence in 0..<perProducer { inbox.push(producer << 32 | sequence) }
                }
            }
            var next = [Int](repeating: 0, count: producers)
            var taken = 0
            var outOfOrder = 0
            while taken < producers * perProducer {
                var batch = Fifo<Int>()
                let count = inbox.take(into: &batch)
                while let element = batch.popFirst() {
                    let producer = element >> 32
                    if element & 0xFFFF_FFFF != next[producer] { outOfOrder += 1 }
                    next[producer] = (element & 0xFFFF_FFFF) + 1
                }
                taken += count
                if count == 0 && inbox.count > 0 { inbox.waitForNext() }
            }
            group.wait()
            #expect(outOfOrder == 0)
            #expect(next == [Int](repeating: perProducer, count: producers))
            #expect(inbox.count == 0)
            var none = Fifo<Int>()
            #expect(inbox.take(into: &none) == 0)
        }

        @Test func pushReportsWhatWasCountedBeforeIt() {
            let inbox = SegmentedInbox<Int>()
            #expect(inbox.push(1) == 0, "the first push finds the inbox empty")
            #expect(inbox.push(2) == 1)
            #expect(inbox.push(3) == 2)
            var seen: [Int] = []
            seen += inbox.takeArray(upTo: 2)
            #expect(seen.count == 2)
            #expect(inbox.push(4) == 1)
            let rest = inbox.takeArray()
            #expect(rest.count == 2)
            seen += rest
            #expect(seen == [1, 2, 3, 4])
            #expect(inbox.push(5) == 0, "emptied, the inbox counts nothing again")
        }

        @Test func oneElementAtATimeKeepsTwoSmallSegments() {
            let inbox = SegmentedInbox<Int>()
            for value in 0..<1_000 {
                inbox.push(value)
                #expect(inbox.takeArray() == [value])
            }
            #expect(inbox.segmentsAllocated.load(ordering: .relaxed) <= 3)
            #expect(inbox.heldCapacities.allSatisfy { $0 <= 4 }, "\(inbox.heldCapacities)")
        }

        @Test func aBurstGrowsTheSegmentsAndQuietTrafficShrinksThem() {
            let inbox = SegmentedInbox<Int>()
            for value in 0..<1_000 { inbox.push(value) }
            #expect(inbox.takeArray() == Array(0..<1_000))
            #expect(inbox.heldCapacities.contains(64), "\(inbox.heldCapacities)")
            let afterBurst = inbox.segmentsAllocated.load(ordering: .relaxed)
            #expect(afterBurst < 30, "segments of up to 64 slots: \(afterBurst)")
            // Sixteen quiet fills in a row halve the next segment: 64 → 2 in 16 × 124 pushes.
            for value in 0..<2_500 {
                inbox.push(value)
                _ = inbox.takeArray()
            }
            #expect(inbox.heldCapacities.allSatisfy { $0 <= 4 },
                    "\(inbox.heldCapacities), \(inbox.segmentsAllocated.load(ordering: .relaxed) - afterBurst) allocated")
        }

        @Test func releasesEveryElementOnceWithTheInbox() {
            let before = Tracked.live.load(ordering: .relaxed)
            do {
                let inbox = SegmentedInbox<Tracked>()
                for _ in 0..<300 { inbox.push(Tracked()) }
                #expect(inbox.takeArray(upTo: 170).count == 170)
                #expect(Tracked.live.load(ordering: .relaxed) == before + 130)
            }
            #expect(Tracked.live.load(ordering: .relaxed) == before)
        }
    }
}

extension SegmentedInbox {
    /// Takes up to `limit` elements, in order.
    func takeArray(upTo limit: Int = .max) -> [Element] {
        var batch = Fifo<Element>()
        take(upTo: limit, into: &batch)
        var result: [Element] = []
        while let element = batch.popFirst() { result.append(element) }
        return result
    }
}
