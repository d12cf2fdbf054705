/// A growable ring buffer: O(1) append and pop at both ends, storage reused across drains.
///
/// Elements move in and out (`consuming`, `take()`): a job passing through a queue costs no
/// retain/release of what it carries, which on a hot producer/consumer pair is the price of
/// a cache line bouncing between two cores per copy.
struct Fifo<Element> {
    private var storage: ContiguousArray<Element?> = []
    private var head = 0
    private(set) var count = 0

    init() {}

    var isEmpty: Bool { count == 0 }
    var capacity: Int { storage.count }

    var first: Element? {
        count == 0 ? nil : storage[head]
    }

    /// Whether there is a first element and it satisfies `predicate`, which reads it in
    /// place (`first` returns a copy, retaining what the element holds).
    func firstSatisfies(_ predicate: (borrowing Element) -> Bool) -> Bool {
        guard count > 0 else { return false }
        return storage.withUnsafeBufferPointer { buffer in
            guard let element = buffer[head] else { return false }
            return predicate(element)
        }
    }

    mutating func append(_ element: consuming Element) {
        if count == storage.count { grow() }
        storage[(head + count) & (storage.count - 1)] = element
        count += 1
    }

    mutating func prepend(_ element: consuming Element) {
        if count == storage.count { grow() }
        head = (head - 1) & (storage.count - 1)
        storage[head] = element
        count += 1
    }

    mutating func popFirst() -> Element? {
        guard count > 0 else { return nil }
        let element = storage[head].take()
        head = (head + 1) & (storage.count - 1)
        count -= 1
        return element
    }

    private mutating func grow() {
        // From one slot: most queues hold one job at a time, and keep their buffer.
        let newCapacity = Swift.max(1, storage.count * 2)
        var newStorage = ContiguousArray<Element?>(repeating: nil, count: newCapacity)
        for index in 0..<count {
            newStorage[index] = storage[(head + index) & (storage.count - 1)].take()
        }
        storage = newStorage
        head = 0
    }
}

extension Fifo: Sendable where Element: Sendable {}
