import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A multi-producer, single-consumer FIFO: producers append without a lock, one consumer
/// at a time takes elements in the order their slots were claimed.
///
/// Elements live in a chain of segments (arrays of slots with a ready flag each). The
/// `tail` word names the segment producers fill and the next free slot in it; a producer
/// claims a slot with one compare-and-swap of that word, moves its element in and sets the
/// slot's flag. The claim of a segment's last slot installs the next segment (the consumer's
/// recycled one if it fits) before its element is written, so a consumer that has read that
/// slot always finds the link. A producer that finds the segment full waits for that install
/// (a few instructions, or the allocation of a segment).
///
/// Producers touch a segment only after claiming one of its slots, which keeps the segment
/// alive until the consumer has read that slot: the consumer may then recycle or free it.
/// The word holds the segment's address (so a compare-and-swap that succeeds claims a slot
/// of the segment that is the tail at that instant, whatever happened to an older segment
/// at the same address), its capacity and the offset.
///
/// `published` counts the elements pushed and not yet taken. `push` returns the count it
/// found: the producer that moves it from zero knows that nobody was about to take anything
/// (the wake-up rule of the queue's drain, docs/Queues.md). `take` reads the count first and
/// takes at most that many: it never counts out an element whose producer has not yet
/// counted it in, so the count never goes below zero. A slot claimed but not yet filled
/// (its producer between the claim and the flag) stops `take`; `waitForNext` waits for it.
///
/// Segments start at `minimumLog2` (2 slots) and double when the segment filled while
/// elements were waiting, up to 64; they halve after 16 fills in a row with none waiting, so
/// a queue fed one element at a time keeps two small segments (the one filled, the one
/// recycled), and a queue that fell quiet after a burst comes back to them.
///
/// `@unchecked Sendable`: the producer side is atomics and slots claimed through them; the
/// consumer side (`head`, `headIndex`) is read and written only by the one consumer, whom
/// the user of the inbox designates under a lock of its own (a queue's owner, set under the
/// queue's lock), which orders one consumer's accesses before the next one's. Debug builds
/// assert that two consumers never overlap.
final class SegmentedInbox<Element>: @unchecked Sendable {
    static var minimumLog2: Int { 1 }
    static var maximumLog2: Int { 6 }
    static var quietFillsToShrink: Int { 16 }

    /// Segment address (16-byte aligned, below 2^52) << 12 | log2(capacity) << 12 | offset.
    private let tail = Atomic<UInt64>(0)
    private let published = Atomic<Int>(0)
    /// The first segment, handed by the producer that installs it to the consumer (retained).
    private let firstSegment = Atomic<UnsafeMutableRawPointer?>(nil)
    /// A segment the consumer has emptied, kept for the next install (retained).
    private let spare = Atomic<UnsafeMutableRawPointer?>(nil)
    /// Consumer side: the segment being read and the next slot in it.
    private var head: InboxSegment<Element>?
    private var headIndex = 0
    #if DEBUG
    private let consuming = Atomic<Bool>(false)
    /// Segments this inbox allocated (tests bound it).
    let segmentsAllocated = Atomic<Int>(0)
    /// The most elements one `take` moved (a queue takes under its lock: tests bound it).
    let largestTake = Atomic<Int>(0)
    /// Runs on the producer of a segment's last slot before it installs the next segment:
    /// a test holds it there, with the tail word saying "full".
    let beforeInstallNext = Mutex<(@Sendable () -> Void)?>(nil)
    #endif

    init() {}

    deinit {
        // Nothing pushes or takes any more: the chain from the head (each segment destroys
        // the elements still flagged in it), and the spare. The chain is released one link at
        // a time, each detached before its segment goes: a segment that released its
        // successor from its own deinit would recurse once per segment, and a suspended
        // queue released with a million blocks waiting has some 16,000 segments.
        if let first = firstSegment.exchange(nil, ordering: .acquiring) {
            assert(head == nil, "SegmentedInbox: a first segment left behind a head")
            head = Unmanaged<InboxSegment<Element>>.fromOpaque(first).takeRetainedValue()
        }
        var segment = head
        head = nil
        while let current = segment {
            segment = current.next.exchange(nil, ordering: .acquiring).map {
                Unmanaged<InboxSegment<Element>>.fromOpaque($0).takeRetainedValue()
            }
        }
        if let kept = spare.exchange(nil, ordering: .acquiring) {
            Unmanaged<InboxSegment<Element>>.fromOpaque(kept).release()
        }
    }

    /// Elements pushed and not yet taken (a producer between its claim and its count is not
    /// in it yet).
    var count: Int { published.load(ordering: .sequentiallyConsistent) }

    // MARK: Producers

    /// Appends `element` with `tag` (1...255, which the consumer's `take` sees without
    /// reading the element); returns how many elements were counted in and not taken just
    /// before this one was (0: the inbox looked empty).
    @discardableResult
    func push(_ element: consuming Element, tag: UInt8 = 1) -> Int {
        assert(tag != 0, "SegmentedInbox: tag 0 marks an empty slot")
        let (address, offset) = claim()
        let segment = Unmanaged<InboxSegment<Element>>.fromOpaque(address)
        // No reference counted: the claimed slot keeps the segment alive until it is taken.
        let slot = segment._withUnsafeGuaranteedRef { segment -> UnsafeMutablePointer<Element> in
            if offset == segment.capacity - 1 {
                #if DEBUG
                runBeforeInstallNext()
                #endif
                installNext(after: segment)
            }
            return segment.slot(offset)
        }
        slot.initialize(to: consume element)
        segment._withUnsafeGuaranteedRef { $0.markFilled(offset, tag: tag) }
        return published.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue
    }

    /// Claims the next slot: its segment's address and its offset.
    @inline(__always)
    private func claim() -> (UnsafeMutableRawPointer, Int) {
        var spins = 0
        while true {
            let word = tail.load(ordering: .acquiring)
            if word == 0 {
                if let first = installFirst() { return (first, 0) }
                continue
            }
            let offset = Int(word & InboxWord.offsetMask)
            let log2 = Int((word >> InboxWord.log2Shift) & InboxWord.log2Mask)
            if offset == 1 &<< log2 {
                // Full: the producer of its last slot is installing the next segment.
                InboxWord.backOff(&spins)
                continue
            }
            if tail.compareExchange(expected: word, desired: word &+ 1, successOrdering: .acquiringAndReleasing,
                                    failureOrdering: .relaxed).exchanged {
                return (InboxWord.address(word), offset)
            }
        }
    }

    /// The first push of the inbox's life: installs a segment whose slot 0 is the caller's,
    /// and hands it to the consumer. Nil when another producer installed one first.
    private func installFirst() -> UnsafeMutableRawPointer? {
        let segment = makeSegment(log2: Self.minimumLog2)
        let address = Unmanaged.passRetained(segment).toOpaque()
        guard tail.compareExchange(expected: 0, desired: InboxWord.make(address, log2: segment.log2Capacity, offset: 1),
                                   successOrdering: .acquiringAndReleasing, failureOrdering: .relaxed).exchanged else {
            Unmanaged<InboxSegment<Element>>.fromOpaque(address).release()
            return nil
        }
        // The allocation's reference goes to the consumer, which treats slot 0 as any other
        // (taken once flagged).
        firstSegment.store(address, ordering: .releasing)
        return address
    }

    /// Run by the producer that claimed `full`'s last slot, before it fills that slot.
    ///
    /// The next segment doubles while elements wait when one fills, and halves only after
    /// `quietFillsToShrink` fills in a row with none waiting: a queue whose traffic comes
    /// and goes keeps recycling the same two segments instead of allocating at each turn.
    private func installNext(after full: InboxSegment<Element>) {
        let waiting = published.load(ordering: .relaxed)
        let quietFills = waiting > 0 ? 0 : full.quietFills + 1
        var wanted = full.log2Capacity
        if waiting > 0 {
            wanted = Swift.min(Self.maximumLog2, wanted + 1)
        } else if quietFills >= Self.quietFillsToShrink {
            wanted = Swift.max(Self.minimumLog2, wanted - 1)
        }
        let shrinking = wanted < full.log2Capacity
        var next: InboxSegment<Element>
        if let kept = spare.exchange(nil, ordering: .acquiring) {
            let recycled = Unmanaged<InboxSegment<Element>>.fromOpaque(kept).takeRetainedValue()
            // A larger spare serves an inbox whose elements wait; otherwise only the size
            // wanted does (a larger one would undo a shrink).
            let fits = waiting > 0 ? recycled.log2Capacity >= wanted : recycled.log2Capacity == wanted
            next = fits ? recycled : makeSegment(log2: wanted)
        } else {
            next = makeSegment(log2: wanted)
        }
        next.quietFills = shrinking ? 0 : quietFills
        let address = Unmanaged.passRetained(next).toOpaque()
        let previous = full.next.exchange(address, ordering: .releasing)
        assert(previous == nil, "SegmentedInbox: a segment linked twice")
        tail.store(InboxWord.make(address, log2: next.log2Capacity, offset: 0), ordering: .releasing)
    }

    private func makeSegment(log2: Int) -> InboxSegment<Element> {
        #if DEBUG
        segmentsAllocated.wrappingAdd(1, ordering: .relaxed)
        #endif
        return InboxSegment(log2Capacity: log2)
    }

    // MARK: The consumer

    /// Takes up to `limit` elements in order and moves each to the end of `batch`, after
    /// `note` saw its tag and its position in `batch`; stops early at a slot claimed but not
    /// yet filled. Only the designated consumer calls this.
    @discardableResult
    func take(upTo limit: Int = .max, into batch: inout Fifo<Element>,
              noting note: (_ tag: UInt8, _ position: Int) -> Void = { _, _ in }) -> Int {
        #if DEBUG
        enterConsumer()
        defer { leaveConsumer() }
        #endif
        let bound = Swift.min(limit, published.load(ordering: .sequentiallyConsistent))
        guard bound > 0, var segment = currentHead() else { return 0 }
        var taken = 0
        while taken < bound {
            if headIndex == segment.capacity {
                guard let next = segment.next.exchange(nil, ordering: .acquiring) else { break }
                let emptied = segment
                segment = Unmanaged<InboxSegment<Element>>.fromOpaque(next).takeRetainedValue()
                head = segment
                headIndex = 0
                recycle(emptied)
                continue
            }
            let tag = segment.tag(headIndex)
            guard tag != 0 else { break }
            note(tag, batch.count)
            // The element moves from its slot into the batch: no copy, no reference counted.
            batch.append(segment.take(headIndex))
            headIndex += 1
            taken += 1
        }
        if taken > 0 {
            let before = published.wrappingSubtract(taken, ordering: .sequentiallyConsistent).oldValue
            assert(before >= taken, "SegmentedInbox: took \(taken) of \(before) elements counted in")
            #if DEBUG
            if taken > largestTake.load(ordering: .relaxed) { largestTake.store(taken, ordering: .relaxed) }
            #endif
        }
        return taken
    }

    /// Waits until the next element can be taken; only the consumer calls this, while the
    /// count says an element was pushed (its producer, or one claimed before it, is between
    /// its claim and its flag).
    func waitForNext() {
        #if DEBUG
        enterConsumer()
        defer { leaveConsumer() }
        #endif
        var spins = 0
        while !nextIsFilled() { InboxWord.backOff(&spins) }
    }

    private func nextIsFilled() -> Bool {
        guard let segment = currentHead() else { return false }
        if headIndex == segment.capacity { return segment.next.load(ordering: .acquiring) != nil }
        return segment.tag(headIndex) != 0
    }

    private func currentHead() -> InboxSegment<Element>? {
        if let head { return head }
        guard let first = firstSegment.exchange(nil, ordering: .acquiring) else { return nil }
        let segment = Unmanaged<InboxSegment<Element>>.fromOpaque(first).takeRetainedValue()
        head = segment
        headIndex = 0
        return segment
    }

    /// An emptied segment (every slot taken, every flag cleared, no successor) becomes the
    /// spare; a spare already there goes.
    private func recycle(_ segment: InboxSegment<Element>) {
        let address = Unmanaged.passRetained(segment).toOpaque()
        if let dropped = spare.exchange(address, ordering: .acquiringAndReleasing) {
            Unmanaged<InboxSegment<Element>>.fromOpaque(dropped).release()
        }
    }

    #if DEBUG
    private func runBeforeInstallNext() {
        let hook = beforeInstallNext.locked { $0 }
        hook?()
    }

    private func enterConsumer() {
        let overlapping = consuming.exchange(true, ordering: .acquiring)
        assert(!overlapping, "SegmentedInbox: two consumers at once")
    }

    private func leaveConsumer() {
        consuming.store(false, ordering: .releasing)
    }

    /// The capacities of the segments the inbox holds now (the chain from the consumer's
    /// head, and the spare), for tests.
    var heldCapacities: [Int] {
        var result: [Int] = []
        var segment = head
        while let current = segment {
            result.append(current.capacity)
            segment = current.next.load(ordering: .acquiring).map {
                Unmanaged<InboxSegment<Element>>.fromOpaque($0).takeUnretainedValue()
            }
        }
        if let kept = spare.load(ordering: .acquiring) {
            result.append(Unmanaged<InboxSegment<Element>>.fromOpaque(kept).takeUnretainedValue().capacity)
        }
        return result
    }
    #endif
}

/// The layout of `SegmentedInbox.tail`.
enum InboxWord {
    static let offsetMask: UInt64 = 0xFFF
    static let log2Shift: UInt64 = 12
    static let log2Mask: UInt64 = 0xF
    static let addressShift: UInt64 = 12

    @inline(__always)
    static func make(_ address: UnsafeMutableRawPointer, log2: Int, offset: Int) -> UInt64 {
        let bits = UInt64(UInt(bitPattern: address))
        precondition(bits & 0xF == 0 && bits >> 52 == 0, "SegmentedInbox: segment address \(address) does not fit the tail word")
        return (bits << addressShift) | (UInt64(log2) << log2Shift) | UInt64(offset)
    }

    @inline(__always)
    static func address(_ word: UInt64) -> UnsafeMutableRawPointer {
        UnsafeMutableRawPointer(bitPattern: UInt((word >> 16) << 4)).unsafelyUnwrapped
    }

    /// A short spin, then a yield of the processor: the thread waited for may be preempted.
    /// In the child of a `fork()` the thread waited for does not exist (it was mid-push in
    /// the parent): once yielding, each turn checks the fork guard, which stops the child
    /// with its message instead of letting it wait for ever.
    @inline(__always)
    static func backOff(_ spins: inout Int) {
        spins += 1
        if spins < 64 {
            lull_cpu_relax()
        } else {
            ForkGuard.check()
            sched_yield()
        }
    }
}

/// One segment of a `SegmentedInbox`: `capacity` slots (a power of two) with a flag each:
/// the element's tag once the element is in, 0 again once the consumer took it out.
final class InboxSegment<Element> {
    let log2Capacity: Int
    let capacity: Int
    private let slots: UnsafeMutablePointer<Element>
    private let flags: UnsafeMutablePointer<Atomic<UInt8>>
    /// The segment after this one (retained), linked by the producer of the last slot.
    let next = Atomic<UnsafeMutableRawPointer?>(nil)
    /// How many segments in a row filled with nothing waiting, this one's predecessor the
    /// last: written by the producer that installs it, before the tail word publishes it,
    /// and read by the producer of its last slot, after its claim.
    var quietFills = 0

    init(log2Capacity: Int) {
        self.log2Capacity = log2Capacity
        capacity = 1 << log2Capacity
        slots = .allocate(capacity: capacity)
        flags = .allocate(capacity: capacity)
        for index in 0..<capacity { (flags + index).initialize(to: Atomic<UInt8>(0)) }
    }

    deinit {
        // Elements pushed and never taken (the inbox's owner went away with them).
        for index in 0..<capacity where flags[index].load(ordering: .acquiring) != 0 {
            (slots + index).deinitialize(count: 1)
        }
        flags.deinitialize(count: capacity)
        flags.deallocate()
        slots.deallocate()
        if let successor = next.load(ordering: .acquiring) {
            Unmanaged<InboxSegment<Element>>.fromOpaque(successor).release()
        }
    }

    @inline(__always)
    func slot(_ index: Int) -> UnsafeMutablePointer<Element> {
        slots + index
    }

    /// Publishes the element the producer put in slot `index`, with its tag (not 0).
    @inline(__always)
    func markFilled(_ index: Int, tag: UInt8) {
        flags[index].store(tag, ordering: .releasing)
    }

    /// The tag of slot `index`'s element; 0 while the slot is not filled.
    @inline(__always)
    func tag(_ index: Int) -> UInt8 {
        flags[index].load(ordering: .acquiring)
    }

    /// Moves out the element of a slot whose tag said it was filled, and clears the tag.
    @inline(__always)
    func take(_ index: Int) -> Element {
        flags[index].store(0, ordering: .relaxed)
        return (slots + index).move()
    }
}
