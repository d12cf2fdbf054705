import Synchronization
import Testing
@testable import Lull

/// `Fifo`, the ring buffer every queue's jobs move through: order across growth and wrap,
/// value semantics (copy on write), and every element released exactly once.
extension IndependentSuite {
    @Suite struct FifoTests {
        /// Counts its live instances, to see every element released exactly once.
        final class Tracked {
            /// Only `releasesEveryElementOnce` makes them.
            static let live = Atomic<Int>(0)
            let value: Int
            init(_ value: Int) {
                self.value = value
                Tracked.live.add(1, ordering: .relaxed)
            }
            deinit { Tracked.live.subtract(1, ordering: .relaxed) }
        }

        @Test func keepsOrderAcrossGrowthAndWrap() {
            var fifo = Fifo<Int>()
            var expected: [Int] = []
            var next = 0
            // Interleaved appends and pops move the head around the ring while it grows.
            for round in 0..<200 {
                for _ in 0..<(round % 7 + 1) {
                    fifo.append(next)
                    expected.append(next)
                    next += 1
                }
                for _ in 0..<(round % 5) {
                    #expect(fifo.popFirst() == (expected.isEmpty ? nil : expected.removeFirst()))
                }
                #expect(fifo.count == expected.count)
            }
            #expect(fifo.first == expected.first)
            while let value = fifo.popFirst() { #expect(value == expected.removeFirst()) }
            #expect(expected.isEmpty)
            #expect(fifo.isEmpty)
            #expect(fifo.popFirst() == nil)
        }

        @Test func prependPutsAtTheHead() {
            var fifo = Fifo<Int>()
            for value in 1...5 { fifo.append(value) }
            _ = fifo.popFirst()
            _ = fifo.popFirst()
            fifo.prepend(2)
            fifo.prepend(1)
            fifo.prepend(0)
            #expect(fifo.firstSatisfies { $0 == 0 })
            var seen: [Int] = []
            while let value = fifo.popFirst() { seen.append(value) }
            #expect(seen == [0, 1, 2, 3, 4, 5])
        }

        @Test func aCopyIsIndependent() {
            var original = Fifo<Int>()
            for value in 0..<6 { original.append(value) }
            _ = original.popFirst()
            var copy = original
            copy.append(100)
            _ = copy.popFirst()
            original.prepend(-1)
            var fromOriginal: [Int] = []
            while let value = original.popFirst() { fromOriginal.append(value) }
            var fromCopy: [Int] = []
            while let value = copy.popFirst() { fromCopy.append(value) }
            #expect(fromOriginal == [-1, 1, 2, 3, 4, 5])
            #expect(fromCopy == [2, 3, 4, 5, 100])
        }

        @Test func releasesEveryElementOnce() {
            let before = Tracked.live.load(ordering: .relaxed)
            do {
                var fifo = Fifo<Tracked>()
                for value in 0..<37 { fifo.append(Tracked(value)) }
                for _ in 0..<20 { _ = fifo.popFirst() }
                for value in 37..<50 { fifo.append(Tracked(value)) }
                var copy = fifo
                copy.append(Tracked(50))
                #expect(Tracked.live.load(ordering: .relaxed) - before == 31)
                #expect(copy.popFirst()?.value == 20)
                #expect(fifo.first?.value == 20)
            }
            #expect(Tracked.live.load(ordering: .relaxed) == before)
        }
    }
}
