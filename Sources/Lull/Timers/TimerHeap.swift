/// A four-ary min-heap of timer entries by deadline (ties: scheduling order), where each
/// entry knows its slot so that it can be removed in O(log n) when cancelled or rescheduled.
///
/// Four children per node, not two: every level a sift crosses writes the slot of the entry
/// it moves, a cache miss on that entry's object once the timers outgrow the cache, while the
/// children's deadlines it compares sit side by side in `deadlines`. Half the levels is half
/// the misses, on every schedule, cancel and fire.
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

    /// Children per node.
    static let arity = 4

    mutating func remove(_ entry: TimerEntry) {
        let index = Int(entry.slot)
        guard index >= 0, index < entries.count, entries[index] === entry else { return }
        let lastDeadline = deadlines.removeLast()
        let last = entries.removeLast()
        entry.slot = -1
        guard index < entries.count else { return }
        // The last entry fills the hole, sifted from there: one slot write per level it
        // moves, none for the entry that leaves.
        entries[index] = last
        deadlines[index] = lastDeadline
        last.slot = Int32(truncatingIfNeeded: index)
        siftDown(index)
        siftUp(Int(last.slot))
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
            let firstChild = TimerHeap.arity * index + 1
            guard firstChild < entries.count else { continue }
            for child in firstChild..<min(firstChild + TimerHeap.arity, entries.count) where deadlines[child] < best {
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
                    let parent = (hole - 1) / TimerHeap.arity
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
        guard TimerHeap.arity * start + 1 < count else { return }
        let deadline = deadlines[start]
        deadlines.withUnsafeMutableBufferPointer { deadlines in
            entries.withUnsafeMutableBufferPointer { entries in
                let base = entries.baseAddress!
                let moving = (base + start).move()
                let sequence = moving.sequence
                var hole = start
                while true {
                    let firstChild = TimerHeap.arity * hole + 1
                    guard firstChild < count else { break }
                    // The earliest of the (up to four) children.
                    var child = firstChild
                    var next = firstChild + 1
                    let end = Swift.min(firstChild + TimerHeap.arity, count)
                    while next < end {
                        let nextFirst = deadlines[next] != deadlines[child] ? deadlines[next] < deadlines[child]
                            : TimerSequence.isEarlier(base[next].sequence, than: base[child].sequence)
                        if nextFirst { child = next }
                        next += 1
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
}
