/// A growable ring buffer: O(1) append and pop at both ends, storage reused across drains.
///
/// Elements move in and out (`consuming`, `popFirst`): a job passing through a queue costs
/// no retain/release of what it carries, which on a hot producer/consumer pair is the price
/// of a cache line bouncing between two cores per copy.
///
/// The elements live in a `FifoBuffer`, raw slots of which only the live range is
/// initialized: an append initializes a slot, a pop moves the element out, and nothing
/// passes through `Optional` (whose value witness, for a `Job`, is an outlined call that
/// inspects every payload). A copy of a `Fifo` shares the buffer until either side changes
/// it (copy on write, as `Array` does).
struct Fifo<Element> {
    private var buffer: FifoBuffer<Element>?

    init() {}

    var count: Int { buffer?.count ?? 0 }
    var isEmpty: Bool { count == 0 }
    var capacity: Int { buffer?.capacity ?? 0 }

    var first: Element? {
        guard count > 0 else { return nil }
        return withBuffer { $0.slots[$0.head] }
    }

    /// Whether there is a first element and it satisfies `predicate`, which reads it in
    /// place (`first` returns a copy, retaining what the element holds).
    func firstSatisfies(_ predicate: (borrowing Element) -> Bool) -> Bool {
        guard count > 0 else { return false }
        return withBuffer { predicate($0.slots[$0.head]) }
    }

    /// The position (0 is the first element) of the first element at `start` or after that
    /// satisfies `predicate`, which reads each in place; nil when none does.
    func firstIndex(from start: Int, where predicate: (borrowing Element) -> Bool) -> Int? {
        guard start < count else { return nil }
        return withBuffer { buffer -> Int? in
            for position in Swift.max(start, 0)..<buffer.count
            where predicate(buffer.slots[(buffer.head &+ position) & (buffer.capacity &- 1)]) {
                return position
            }
            return nil
        }
    }

    mutating func append(_ element: consuming Element) {
        makeUniqueWithRoom()
        let slot = withBuffer { buffer -> UnsafeMutablePointer<Element> in
            defer { buffer.count &+= 1 }
            return buffer.slots + ((buffer.head &+ buffer.count) & (buffer.capacity &- 1))
        }
        slot.initialize(to: element)
    }

    mutating func prepend(_ element: consuming Element) {
        makeUniqueWithRoom()
        let slot = withBuffer { buffer -> UnsafeMutablePointer<Element> in
            buffer.head = (buffer.head &- 1) & (buffer.capacity &- 1)
            buffer.count &+= 1
            return buffer.slots + buffer.head
        }
        slot.initialize(to: element)
    }

    mutating func popFirst() -> Element? {
        guard count > 0 else { return nil }
        makeUnique()
        return withBuffer { buffer in
            let element = (buffer.slots + buffer.head).move()
            buffer.head = (buffer.head &+ 1) & (buffer.capacity &- 1)
            buffer.count &-= 1
            return element
        }
    }

    /// Runs `body` on the buffer (there is one) without counting a reference to it: this
    /// `Fifo` holds the buffer and is not changed during the call. Every append and pop of
    /// a job goes through here, on the producer's and on the drainer's side.
    @inline(__always)
    private func withBuffer<Result>(_ body: (FifoBuffer<Element>) -> Result) -> Result {
        Unmanaged.passUnretained(buffer.unsafelyUnwrapped)._withUnsafeGuaranteedRef(body)
    }

    /// Makes the buffer this `Fifo`'s own (copied if shared), with room for one more element.
    @inline(__always)
    private mutating func makeUniqueWithRoom() {
        if buffer == nil {
            // From one slot: most queues hold one job at a time, and keep their buffer.
            buffer = FifoBuffer<Element>(capacity: 1)
            return
        }
        let unique = isKnownUniquelyReferenced(&buffer)
        let full = withBuffer { $0.count == $0.capacity }
        if unique && !full { return }
        replaceBuffer(moving: unique, grow: full)
    }

    /// Makes the buffer this `Fifo`'s own (copied if shared). Only called with elements.
    @inline(__always)
    private mutating func makeUnique() {
        if !isKnownUniquelyReferenced(&buffer) { replaceBuffer(moving: false, grow: false) }
    }

    private mutating func replaceBuffer(moving: Bool, grow: Bool) {
        let current = buffer.unsafelyUnwrapped
        let replacement = FifoBuffer<Element>(capacity: grow ? current.capacity * 2 : current.capacity)
        if moving {
            current.moveElements(into: replacement)
        } else {
            current.copyElements(into: replacement)
        }
        buffer = replacement
    }
}

/// `@unchecked Sendable`: a `Fifo` is a value. Its buffer is changed only through a `Fifo`
/// that holds the one reference to it (`isKnownUniquelyReferenced`, else it copies first),
/// so a buffer two values share is only read, as with `Array`'s storage.
extension Fifo: @unchecked Sendable where Element: Sendable {}

/// The slots of a `Fifo`: `capacity` (a power of two) of them, of which the `count` from
/// `head` on (wrapping) are initialized.
final class FifoBuffer<Element> {
    let slots: UnsafeMutablePointer<Element>
    let capacity: Int
    var head = 0
    var count = 0

    init(capacity: Int) {
        self.capacity = capacity
        slots = .allocate(capacity: capacity)
    }

    deinit {
        forEachRun { start, length in (slots + start).deinitialize(count: length) }
        slots.deallocate()
    }

    /// The live range as at most two runs of slots (it may wrap).
    private func forEachRun(_ body: (_ start: Int, _ length: Int) -> Void) {
        guard count > 0 else { return }
        let firstRun = Swift.min(count, capacity - head)
        body(head, firstRun)
        if firstRun < count { body(0, count - firstRun) }
    }

    /// Moves every element, in order, to the start of `other` (empty, large enough).
    func moveElements(into other: FifoBuffer<Element>) {
        var filled = 0
        forEachRun { start, length in
            (other.slots + filled).moveInitialize(from: slots + start, count: length)
            filled += length
        }
        other.count = count
        count = 0
        head = 0
    }

    /// Copies every element, in order, to the start of `other` (empty, large enough).
    func copyElements(into other: FifoBuffer<Element>) {
        var filled = 0
        forEachRun { start, length in
            (other.slots + filled).initialize(from: slots + start, count: length)
            filled += length
        }
        other.count = count
    }
}
