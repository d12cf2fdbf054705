import CLullShims

/// A value guarded by a lock that spins briefly before it sleeps.
///
/// `Synchronization.Mutex` on Linux is a priority-inheritance futex that goes to the kernel
/// as soon as it is contended; Lull's queue and pool locks guard a few instructions each and
/// are taken by a producer and a consumer on two cores at once, where a short spin wins by
/// an order of magnitude. Used for the hot locks only.
///
/// `@unchecked Sendable` is sound: `value` is only read or written inside `withLock`, which
/// holds the lock word for the duration (acquire on lock, release on unlock), so every access
/// is ordered by the lock; the word pointer is allocated once and freed in deinit.
final class SpinFutexLock<Value>: @unchecked Sendable {
    /// `@exclusivity(unchecked)`: the run-time check of overlapping accesses (a thread-local
    /// access set, paid at every lock) could only fire for a body that takes the same lock
    /// again, which deadlocks on the lock word first.
    @exclusivity(unchecked) private var value: Value
    private let word: UnsafeMutablePointer<UInt32>
    /// The lock's place in the runtime's lock order (checked in debug builds), if it has one.
    private let rank: LockRank?

    init(_ value: Value, rank: LockRank? = nil) {
        self.value = value
        self.rank = rank
        word = .allocate(capacity: 1)
        word.initialize(to: 0)
    }

    deinit {
        word.deallocate()
    }

    @inline(__always)
    func locked<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try withLock(body)
    }

    /// `locked` for a body that moves `argument` into the guarded value: a capture would be
    /// copied (retaining all it holds), a `consuming` parameter is moved.
    @inline(__always)
    func locked<Argument, Result>(moving argument: consuming Argument,
                                  _ body: (inout Value, consuming Argument) throws -> Result) rethrows -> Result {
        acquire()
        defer { release() }
        return try body(&value, argument)
    }

    @inline(__always)
    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        acquire()
        defer { release() }
        return try body(&value)
    }

    /// For a wrapper that acts between its body and the unlock (`QueueLock`): `acquire()`,
    /// then `guarded` (only between the two), then `release()`.
    var guarded: Value {
        @inline(__always) _read { yield value }
        @inline(__always) _modify { yield &value }
    }

    @inline(__always)
    func acquire() {
        #if DEBUG
        if let rank { LockOrder.willAcquire(rank) }
        #endif
        lull_lock(word)
    }

    @inline(__always)
    func release() {
        lull_unlock(word)
        #if DEBUG
        if let rank { LockOrder.didRelease(rank) }
        #endif
    }
}
