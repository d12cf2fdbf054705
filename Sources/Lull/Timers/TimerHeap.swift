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

    /// Sifting moves a hole, not the entry: the sifted entry is moved out once, each level
    /// moves one entry into the hole (bitwise: no reference counting) and writes its slot,
    /// and the sifted entry goes into the final hole. A swap would write two slots per level,
    /// each through `TimerEntry`'s witness.
    private mutating func siftUp(_ start: Int) {
        guard start > 0 else { return }
        let deadline = deadlines[start]
        deadlines.withUnsafeMutableBufferPointer { deadlines in
            entries.withUnsafeMutableBufferPointer { entries in
                let base = entries.baseAddress!
                let moving = (base + start).move()
                let sequence = moving.sequence
                var hole = start
                while hole > 0 {
                    let parent = (hole - 1) / 2
                    let before = deadline != deadlines[parent] ? deadline < deadlines[parent]
                        : TimerSequence.isEarlier(sequence, than: base[parent].sequence)
                    guard before else { break }
                    TimerHeap.move(from: parent, to: hole, base, deadlines)
                    hole = parent
                }
                TimerHeap.place(moving, deadline, at: hole, base, deadlines)
            }
        }
    }

    private mutating func siftDown(_ start: Int) {
        let count = deadlines.count
        guard 2 * start + 1 < count else { return }
        let deadline = deadlines[start]
        deadlines.withUnsafeMutableBufferPointer { deadlines in
            entries.withUnsafeMutableBufferPointer { entries in
                let base = entries.baseAddress!
                let moving = (base + start).move()
                let sequence = moving.sequence
                var hole = start
                while true {
                    let left = 2 * hole + 1
                    guard left < count else { break }
                    let right = left + 1
                    var child = left
                    if right < count {
                        let rightFirst = deadlines[right] != deadlines[left] ? deadlines[right] < deadlines[left]
                            : TimerSequence.isEarlier(base[right].sequence, than: base[left].sequence)
                        if rightFirst { child = right }
                    }
                    let childFirst = deadlines[child] != deadline ? deadlines[child] < deadline
                        : TimerSequence.isEarlier(base[child].sequence, than: sequence)
                    guard childFirst else { break }
                    TimerHeap.move(from: child, to: hole, base, deadlines)
                    hole = child
                }
                TimerHeap.place(moving, deadline, at: hole, base, deadlines)
            }
        }
    }

    /// Moves the entry at `source` into the hole at `target` (bitwise), with its deadline
    /// and slot; `source` becomes the hole.
    @inline(__always)
    private static func move(from source: Int, to target: Int, _ base: UnsafeMutablePointer<TimerEntry>,
                             _ deadlines: UnsafeMutableBufferPointer<UInt64>) {
        (base + target).moveInitialize(from: base + source, count: 1)
        deadlines[target] = deadlines[source]
        base[target].slot = Int32(truncatingIfNeeded: target)
    }

    /// Puts the sifted entry into the final hole.
    @inline(__always)
    private static func place(_ entry: TimerEntry, _ deadline: UInt64, at index: Int, _ base: UnsafeMutablePointer<TimerEntry>,
                              _ deadlines: UnsafeMutableBufferPointer<UInt64>) {
        (base + index).initialize(to: entry)
        deadlines[index] = deadline
        entry.slot = Int32(truncatingIfNeeded: index)
    }

    private mutating func swapAt(_ lhs: Int, _ rhs: Int) {
        deadlines.swapAt(lhs, rhs)
        entries.swapAt(lhs, rhs)
        entries[lhs].slot = Int32(truncatingIfNeeded: lhs)
        entries[rhs].slot = Int32(truncatingIfNeeded: rhs)
    }
}
