import Synchronization

extension Mutex where Value: ~Copyable {
    /// `withLock` under the name the code here uses (Lull's own `locked` adds
    /// ThreadSanitizer annotations, and is not public).
    @inline(__always)
    borrowing func locked<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        try withLock(body)
    }
}
