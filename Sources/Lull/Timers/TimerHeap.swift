/// A binary min-heap of timer entries by deadline (ties: scheduling order), where each entry
/// knows its slot so that it can be removed in O(log n) when cancelled or rescheduled.
///
/// One heap, not a second one by window end: the earliest window end is found by walking
/// the top of this heap (`earliestWindowEnd`), which costs about as many steps as the next
/// wake-up fires entries. Each live timer costs 24 bytes here (its deadline, kept beside the
/// reference so that sifting reads no entry, and the entry's reference with its witness
/// table).
struct TimerHeap {
    private var deadlines: [UInt64] = []
    private var entries: [TimerEntry] = []
    /// `earliestWindowEnd`'s work list, kept to reuse its storage.
    private var pending: [Int] = []

    var count: Int { entries.count }
    var first: TimerEntry? { entries.first }
    var firstDeadline: UInt64? { deadlines.first }

    mutating func insert(_ entry: TimerEntry) {
        deadlines.append(entry.deadline)
        entries.append(entry)
        entry.slot = Int32(truncatingIfNeeded: entries.count - 1)
        siftUp(entries.count - 1)
    }

    mutating func remove(_ entry: TimerEntry) {
        let index = Int(entry.slot)
        guard index >= 0, index < entries.count, entries[index] === entry else { return }
        let last = entries.count - 1
        if index != last { swapAt(index, last) }
        deadlines.removeLast()
        entries.removeLast()
        entry.slot = -1
        if index < entries.count {
            siftDown(index)
            siftUp(index)
        }
    }

    mutating func removeAll() -> [TimerEntry] {
        let all = entries
        for entry in all { entry.slot = -1 }
        deadlines.removeAll()
        entries.removeAll()
        return all
    }

    /// The earliest window end (`latest`) of all entries, nil when empty.
    ///
    /// A window ends no earlier than it opens, and an entry's children in the heap open no
    /// earlier than it does: a subtree whose root opens after the best end found so far
    /// cannot hold an earlier end, so the walk visits only entries that open before the
    /// answer — the ones the wake-up at that instant fires.
    mutating func earliestWindowEnd() -> UInt64? {
        guard !entries.isEmpty else { return nil }
        var best = entries[0].latest
        pending.removeAll(keepingCapacity: true)
        pending.append(0)
        while let index = pending.popLast() {
            let left = 2 * index + 1
            guard left < entries.count else { continue }
            for child in left..<min(left + 2, entries.count) where deadlines[child] < best {
                best = min(best, entries[child].latest)
                pending.append(child)
            }
        }
        if pending.capacity > 4096 { pending = [] }  // a rare burst: do not keep its storage
        return best
    }

    private func isBefore(_ lhs: Int, _ rhs: Int) -> Bool {
        deadlines[lhs] != deadlines[rhs] ? deadlines[lhs] < deadlines[rhs]
            : TimerSequence.isEarlier(entries[lhs].sequence, than: entries[rhs].sequence)
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard isBefore(child, parent) else { break }
            swapAt(child, parent)
            child = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        let count = deadlines.count
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < count && isBefore(left, smallest) { smallest = left }
            if right < count && isBefore(right, smallest) { smallest = right }
            if smallest == parent { return }
            swapAt(parent, smallest)
            parent = smallest
        }
    }

    private mutating func swapAt(_ lhs: Int, _ rhs: Int) {
        deadlines.swapAt(lhs, rhs)
        entries.swapAt(lhs, rhs)
        entries[lhs].slot = Int32(truncatingIfNeeded: lhs)
        entries[rhs].slot = Int32(truncatingIfNeeded: rhs)
    }
}
