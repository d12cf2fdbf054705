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

    /// Whether (deadline, sequence) orders before the entry at `index`.
    private func isBefore(_ deadline: UInt64, _ sequence: UInt32, _ index: Int) -> Bool {
        deadline != deadlines[index] ? deadline < deadlines[index]
            : TimerSequence.isEarlier(sequence, than: entries[index].sequence)
    }

    /// Sifting moves a hole, not the entry: each level moves one entry and writes its slot
    /// once, and the sifted entry is placed (and its slot written) once at the end. Slots are
    /// written through `TimerEntry`'s witness, so fewer writes are what sifting costs.
    private mutating func siftUp(_ start: Int) {
        let entry = entries[start]
        let deadline = deadlines[start]
        let sequence = entry.sequence
        var hole = start
        while hole > 0 {
            let parent = (hole - 1) / 2
            guard isBefore(deadline, sequence, parent) else { break }
            move(from: parent, to: hole)
            hole = parent
        }
        if hole != start { place(entry, deadline, at: hole) }
    }

    private mutating func siftDown(_ start: Int) {
        let entry = entries[start]
        let deadline = deadlines[start]
        let sequence = entry.sequence
        let count = deadlines.count
        var hole = start
        while true {
            let left = 2 * hole + 1
            guard left < count else { break }
            let right = left + 1
            let child = right < count && isBefore(deadlines[right], entries[right].sequence, left) ? right : left
            guard isBefore(deadlines[child], entries[child].sequence, deadline, sequence) else { break }
            move(from: child, to: hole)
            hole = child
        }
        if hole != start { place(entry, deadline, at: hole) }
    }

    /// Whether (lhsDeadline, lhsSequence) orders before (rhsDeadline, rhsSequence).
    private func isBefore(_ lhsDeadline: UInt64, _ lhsSequence: UInt32, _ rhsDeadline: UInt64, _ rhsSequence: UInt32) -> Bool {
        lhsDeadline != rhsDeadline ? lhsDeadline < rhsDeadline : TimerSequence.isEarlier(lhsSequence, than: rhsSequence)
    }

    private mutating func move(from source: Int, to target: Int) {
        deadlines[target] = deadlines[source]
        entries[target] = entries[source]
        entries[target].slot = Int32(truncatingIfNeeded: target)
    }

    private mutating func place(_ entry: TimerEntry, _ deadline: UInt64, at index: Int) {
        deadlines[index] = deadline
        entries[index] = entry
        entry.slot = Int32(truncatingIfNeeded: index)
    }

    private mutating func swapAt(_ lhs: Int, _ rhs: Int) {
        deadlines.swapAt(lhs, rhs)
        entries.swapAt(lhs, rhs)
        entries[lhs].slot = Int32(truncatingIfNeeded: lhs)
        entries[rhs].slot = Int32(truncatingIfNeeded: rhs)
    }
}
