import Synchronization

/// A concurrent queue's lock-free `async`: one atomic word that says whether a block may go
/// straight to the queue's global target, and counts the blocks that went and have not
/// finished (docs/Queues.md, "The concurrent queue's forward gate").
///
/// The word: `count` (bits 0-39), a generation (bits 40-61), `barrierWaits` (bit 62),
/// `closed` (bit 63). The queue's lock sections close and open the gate (`publish`, at the
/// end of each section); a producer counts its block in with one compare-and-swap of an
/// open word (`tryEnter`) and then forwards it without the lock; the thread that ran a
/// forwarded block counts it out (`leave`). A barrier (or a barrier `sync`) closes the gate
/// and reads the count in one atomic step (`closeForExclusive`), so no block slips past
/// it, and when blocks are still running it leaves `barrierWaits` for the last one out.
///
/// The global target is published beside the word (`target`, an unretained reference:
/// global queues live as long as their runtime's services, which outlive every queue).
/// Every reopening advances the generation, and a target that changes is stored only while
/// the gate is closed, so a producer whose compare-and-swap succeeds read the target of
/// the word it counted itself into.
///
/// A noncopyable value stored in its queue's lock object, not an object of its own: the
/// producer and the thread that runs a block would otherwise retain and release it for each
/// block, on the very cache line that holds the word they share.
struct ForwardGate: ~Copyable, Sendable {
    private static let countMask: UInt64 = (1 << 40) - 1
    private static let generationUnit: UInt64 = 1 << 40
    private static let generationMask: UInt64 = ((1 << 22) - 1) << 40
    private static let barrierWaits: UInt64 = 1 << 62
    private static let closed: UInt64 = 1 << 63

    private let word: Atomic<UInt64>
    /// The global target's address while the gate is open (0 before it first opens).
    private let target = Atomic<UInt>(0)

    /// A closed gate: the queue's first lock section opens it if blocks may go through.
    init() {
        word = Atomic(ForwardGate.closed)
    }

    // MARK: Producers, without the queue's lock

    /// Counts one block in and returns the global queue to forward it to, or nil when the
    /// gate is closed (the block takes the queue's lock). Unretained: global queues outlive
    /// every queue (see the type's comment), and a retain per block would be a write to a
    /// line every producer of that class shares.
    @inline(__always)
    func tryEnter() -> Unmanaged<WorkQueue>? {
        var current = word.load(ordering: .acquiring)
        while current & ForwardGate.closed == 0 {
            // Read before the exchange: it belongs to this word's generation if the exchange
            // succeeds (see the type's comment).
            let address = target.load(ordering: .relaxed)
            let (exchanged, original) = word.compareExchange(
                expected: current, desired: current &+ 1,
                successOrdering: .acquiringAndReleasing, failureOrdering: .acquiring)
            if exchanged {
                assert(current & ForwardGate.countMask < ForwardGate.countMask, "Lull: a forward gate's count overflows")
                assert(current & ForwardGate.barrierWaits == 0, "Lull: an open forward gate with a barrier waiting")
                return Unmanaged<WorkQueue>.fromOpaque(UnsafeRawPointer(bitPattern: address)!)
            }
            current = original
        }
        return nil
    }

    /// Counts out a forwarded block that finished (or went back to wait in its queue).
    /// Returns true for the last one out while a barrier waits for it: that thread posts
    /// the queue's drain request.
    @inline(__always)
    func leave() -> Bool {
        let before = word.wrappingSubtract(1, ordering: .acquiringAndReleasing).oldValue
        assert(before & ForwardGate.countMask > 0, "Lull: a forward gate counts out a block it never counted in")
        assert(before & ForwardGate.barrierWaits == 0 || before & ForwardGate.closed != 0,
               "Lull: a barrier waits behind an open forward gate")
        guard before & ForwardGate.countMask == 1, before & ForwardGate.barrierWaits != 0 else { return false }
        // Only one thread clears the flag and posts; a barrier section that read the count
        // at zero meanwhile runs the barrier itself, and the request finds nothing to do.
        return word.bitwiseAnd(~ForwardGate.barrierWaits, ordering: .acquiringAndReleasing).oldValue
            & ForwardGate.barrierWaits != 0
    }

    // MARK: Under the queue's lock

    /// Counts in a block the queue's lock section decided to forward (the state allows it,
    /// so the gate is open).
    func enterLocked() {
        let before = word.wrappingAdd(1, ordering: .acquiringAndReleasing).oldValue
        assert(before & ForwardGate.closed == 0, "Lull: a block forwarded through a closed gate")
    }

    /// For a barrier (or a barrier `sync`) about to run: closes the gate and, in the same
    /// atomic step, reads whether forwarded blocks still run; if some do, leaves
    /// `barrierWaits` for the last one out (`leave`). True when none runs.
    func closeForExclusive() -> Bool {
        var current = word.load(ordering: .acquiring)
        while true {
            let finished = current & ForwardGate.countMask == 0
            let desired = current | ForwardGate.closed | (finished ? 0 : ForwardGate.barrierWaits)
            if desired == current { return finished }
            let (exchanged, original) = word.compareExchange(
                expected: current, desired: desired, successOrdering: .acquiringAndReleasing,
                failureOrdering: .acquiring)
            if exchanged { return finished }
            current = original
        }
    }

    /// At the end of a lock section: opens the gate to `openTo` (the global target, when the
    /// state lets blocks go straight to it) or closes it. Stores only a change.
    @inline(__always)
    func publish(openTo newTarget: WorkQueue?) {
        let current = word.load(ordering: .relaxed)
        guard let newTarget else {
            if current & ForwardGate.closed == 0 { word.bitwiseOr(ForwardGate.closed, ordering: .acquiringAndReleasing) }
            return
        }
        let address = UInt(bitPattern: Unmanaged.passUnretained(newTarget).toOpaque())
        if current & ForwardGate.closed == 0 && target.load(ordering: .relaxed) == address { return }
        open(to: address)
    }

    private func open(to address: UInt) {
        if target.load(ordering: .relaxed) != address {
            // A new target goes in only behind a closed gate: a producer that read the old
            // one then fails its exchange.
            word.bitwiseOr(ForwardGate.closed, ordering: .acquiringAndReleasing)
            target.store(address, ordering: .relaxed)
        }
        var current = word.load(ordering: .relaxed)
        while true {
            // Open, no barrier waits (the state that opens has none), the next generation.
            let generation = (current & ForwardGate.generationMask &+ ForwardGate.generationUnit) & ForwardGate.generationMask
            let desired = current & ForwardGate.countMask | generation
            let (exchanged, original) = word.compareExchange(
                expected: current, desired: desired, successOrdering: .acquiringAndReleasing,
                failureOrdering: .relaxed)
            if exchanged { return }
            current = original
        }
    }

    /// Blocks counted in and not yet out (tests and assertions).
    var forwardedCount: Int {
        Int(word.load(ordering: .acquiring) & ForwardGate.countMask)
    }

    /// The gate lets blocks through without the lock.
    var isOpen: Bool {
        word.load(ordering: .acquiring) & ForwardGate.closed == 0
    }
}
