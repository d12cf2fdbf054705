/// The engine's heap for entries that are scheduled once and never cancelled nor
/// rescheduled (`asyncAfter` blocks): a four-ary min-heap by deadline (ties: scheduling
/// order) whose items carry their window — deadline, end, scheduling number — beside the
/// reference.
///
/// Unlike `TimerHeap`, nothing here needs to find an entry again, so no entry knows its
/// slot: a sift moves items inside one contiguous array and never touches an entry's
/// object. With a hundred thousand delayed blocks pending, that is a cache miss per level
/// saved on every schedule and every fire; the entry is read only when it fires.
struct FireOnceHeap {
    struct Item {
        let deadline: UInt64
        /// The window's end (`TimerHeapFields.latest`).
        let latest: UInt64
        let sequence: UInt32
        let entry: TimerEntry
    }

    private var items: [Item] = []
    /// `earliestWindowEnd`'s work list, kept to reuse its storage.
    private var pending: [Int] = []

    static let arity = 4

    var count: Int { items.count }
    var first: Item? { items.first }
    var firstDeadline: UInt64? { items.first?.deadline }

    mutating func insert(_ item: Item) {
        items.append(item)
        siftUp(items.count - 1)
    }

    /// Takes the earliest item out.
    mutating func popFirst() -> Item? {
        guard !items.isEmpty else { return nil }
        let last = items.removeLast()
        guard !items.isEmpty else { return last }
        let first = items[0]
        items[0] = last
        siftDown(0)
        return first
    }

    /// The earliest window end of all items, nil when empty: the walk of
    /// `TimerHeap.earliestWindowEnd` (a subtree whose root opens after the best end found so
    /// far cannot end earlier), reading only this heap's array.
    mutating func earliestWindowEnd() -> UInt64? {
        guard !items.isEmpty else { return nil }
        var best = items[0].latest
        pending.removeAll(keepingCapacity: true)
        pending.append(0)
        while let index = pending.popLast() {
            let firstChild = FireOnceHeap.arity * index + 1
            guard firstChild < items.count else { continue }
            for child in firstChild..<min(firstChild + FireOnceHeap.arity, items.count) where items[child].deadline < best {
                best = min(best, items[child].latest)
                pending.append(child)
            }
        }
        if pending.capacity > 4096 { pending = [] }  // a rare burst: do not keep its storage
        return best
    }

    /// Whether the item at `index` goes before the key (deadline, sequence).
    @inline(__always)
    private static func isBefore(_ item: UnsafeMutablePointer<Item>, _ deadline: UInt64, _ sequence: UInt32) -> Bool {
        item.pointee.deadline != deadline ? item.pointee.deadline < deadline
            : TimerSequence.isEarlier(item.pointee.sequence, than: sequence)
    }

    /// Sifting moves a hole (bitwise moves, no reference counting), as `TimerHeap` does.
    private mutating func siftUp(_ start: Int) {
        guard start > 0 else { return }
        items.withUnsafeMutableBufferPointer { buffer in
            let base = buffer.baseAddress!
            let moving = (base + start).move()
            var hole = start
            while hole > 0 {
                let parent = (hole - 1) / FireOnceHeap.arity
                let movingFirst = moving.deadline != base[parent].deadline ? moving.deadline < base[parent].deadline
                    : TimerSequence.isEarlier(moving.sequence, than: base[parent].sequence)
                guard movingFirst else { break }
                (base + hole).moveInitialize(from: base + parent, count: 1)
                hole = parent
            }
            (base + hole).initialize(to: moving)
        }
    }

    private mutating func siftDown(_ start: Int) {
        let count = items.count
        guard FireOnceHeap.arity * start + 1 < count else { return }
        items.withUnsafeMutableBufferPointer { buffer in
            let base = buffer.baseAddress!
            let moving = (base + start).move()
            var hole = start
            while true {
                let firstChild = FireOnceHeap.arity * hole + 1
                guard firstChild < count else { break }
                var child = firstChild
                var next = firstChild + 1
                let end = Swift.min(firstChild + FireOnceHeap.arity, count)
                while next < end {
                    if FireOnceHeap.isBefore(base + next, base[child].deadline, base[child].sequence) { child = next }
                    next += 1
                }
                guard FireOnceHeap.isBefore(base + child, moving.deadline, moving.sequence) else { break }
                (base + hole).moveInitialize(from: base + child, count: 1)
                hole = child
            }
            (base + hole).initialize(to: moving)
        }
    }
}
