/// A binary min-heap of timer entries by deadline or by window end, where each entry knows
/// its slot so that it can be removed in O(log n) when cancelled or rescheduled.
struct TimerHeap {
    enum Order {
        case deadline
        case latest
    }

    let order: Order
    private var keys: [TimeKey] = []
    private var entries: [TimerEntry] = []

    init(order: Order) {
        self.order = order
    }

    var count: Int { entries.count }
    var first: TimerEntry? { entries.first }

    private func key(of entry: TimerEntry) -> TimeKey {
        TimeKey(time: order == .deadline ? entry.deadline : entry.latest, sequence: entry.sequence)
    }

    private func setSlot(_ entry: TimerEntry, _ slot: Int) {
        switch order {
        case .deadline: entry.deadlineSlot = Int32(truncatingIfNeeded: slot)
        case .latest: entry.latestSlot = Int32(truncatingIfNeeded: slot)
        }
    }

    private func slot(of entry: TimerEntry) -> Int {
        Int(order == .deadline ? entry.deadlineSlot : entry.latestSlot)
    }

    mutating func insert(_ entry: TimerEntry) {
        keys.append(key(of: entry))
        entries.append(entry)
        setSlot(entry, entries.count - 1)
        siftUp(entries.count - 1)
    }

    mutating func remove(_ entry: TimerEntry) {
        let index = slot(of: entry)
        guard index >= 0, index < entries.count, entries[index] === entry else { return }
        let last = entries.count - 1
        if index != last { swapAt(index, last) }
        keys.removeLast()
        entries.removeLast()
        setSlot(entry, -1)
        if index < entries.count {
            siftDown(index)
            siftUp(index)
        }
    }

    mutating func removeAll() -> [TimerEntry] {
        let all = entries
        for entry in all { setSlot(entry, -1) }
        keys.removeAll()
        entries.removeAll()
        return all
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard keys[child] < keys[parent] else { break }
            swapAt(child, parent)
            child = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        let count = keys.count
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < count && keys[left] < keys[smallest] { smallest = left }
            if right < count && keys[right] < keys[smallest] { smallest = right }
            if smallest == parent { return }
            swapAt(parent, smallest)
            parent = smallest
        }
    }

    private mutating func swapAt(_ lhs: Int, _ rhs: Int) {
        keys.swapAt(lhs, rhs)
        entries.swapAt(lhs, rhs)
        setSlot(entries[lhs], lhs)
        setSlot(entries[rhs], rhs)
    }
}

/// A heap key: a time, then the order of insertion for equal times.
struct TimeKey: Comparable {
    let time: UInt64
    let sequence: UInt64

    static func < (lhs: TimeKey, rhs: TimeKey) -> Bool {
        lhs.time != rhs.time ? lhs.time < rhs.time : lhs.sequence < rhs.sequence
    }
}
