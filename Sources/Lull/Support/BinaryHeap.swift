/// A binary min-heap of payloads ordered by a separate key.
///
/// Keys live in their own array so that sifting compares plain values: comparing whole
/// payloads (which hold references) would retain and release on every comparison.
struct BinaryHeap<Key: Comparable, Payload> {
    private var keys: [Key] = []
    private var payloads: [Payload] = []

    init() {}

    var count: Int { keys.count }
    var isEmpty: Bool { keys.isEmpty }
    var firstKey: Key? { keys.first }
    var first: Payload? { payloads.first }

    mutating func insert(_ payload: Payload, key: Key) {
        keys.append(key)
        payloads.append(payload)
        var child = keys.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard keys[child] < keys[parent] else { break }
            swapAt(child, parent)
            child = parent
        }
    }

    mutating func popFirst() -> Payload? {
        guard !keys.isEmpty else { return nil }
        swapAt(0, keys.count - 1)
        keys.removeLast()
        let first = payloads.removeLast()
        var parent = 0
        let count = keys.count
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < count && keys[left] < keys[smallest] { smallest = left }
            if right < count && keys[right] < keys[smallest] { smallest = right }
            if smallest == parent { break }
            swapAt(parent, smallest)
            parent = smallest
        }
        return first
    }

    private mutating func swapAt(_ lhs: Int, _ rhs: Int) {
        keys.swapAt(lhs, rhs)
        payloads.swapAt(lhs, rhs)
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
