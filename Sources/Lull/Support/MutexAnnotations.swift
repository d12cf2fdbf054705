import CLullShims
import Synchronization

extension Mutex where Value: ~Copyable {
    /// `withLock`, with the lock's ordering made visible to ThreadSanitizer.
    ///
    /// `Mutex` takes its contended path (a futex) inside the uninstrumented Synchronization
    /// library, so ThreadSanitizer misses the ordering between two critical sections that
    /// met under contention and reports races that cannot happen. The annotations, keyed by
    /// the mutex's address (stable: Lull's mutexes are stored properties of classes), restore
    /// it; they cost nothing outside sanitizer builds (empty C functions).
    /// `package`: the examples and benchmarks of this package lock the same way.
    @inline(__always)
    package borrowing func locked<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        let address = withUnsafePointer(to: self) { UnsafeRawPointer($0) }
        return try withLock { (value: inout sending Value) throws(E) -> sending Result in
            lull_tsan_acquire(address)
            defer { lull_tsan_release(address) }
            return try body(&value)
        }
    }

    /// `locked`, for a mutex with a place in the runtime's lock order (checked in debug
    /// builds, see `LockRank`).
    @inline(__always)
    borrowing func locked<Result: ~Copyable, E: Error>(
        ranked rank: LockRank, _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        #if DEBUG
        LockOrder.willAcquire(rank)
        defer { LockOrder.didRelease(rank) }
        #endif
        return try locked(body)
    }
}
