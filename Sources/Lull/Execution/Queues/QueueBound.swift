/// A value owned by one serial queue and reachable only from blocks running on it: the
/// per-connection (or per-job) state that Dispatch code keeps in a class whose every use
/// sits on one queue, without an `@unchecked Sendable` that nothing checks.
///
/// ```swift
/// struct Connection { var bytes = 0; var lastSeen = Deadline.now() }
/// let queue = WorkQueue(label: "connection.1")
/// let state = QueueBound(Connection(), on: queue)
/// queue.async { state.value.bytes += 512 }          // on the queue: allowed
/// let total = state.sync { $0.bytes }               // hops onto the queue
/// ```
///
/// Every access checks that the calling thread runs a block of the queue (or of a queue
/// that targets it, `sync` included, as `workPrecondition(condition: .onQueue(queue))`);
/// an access from anywhere else stops the program with a message naming the queue.
///
/// `@unchecked Sendable` is sound: the stored value is only read or written after that check,
/// and the queue is serial (checked at creation), so two blocks that pass it never run at
/// once, and the queue's hand-off from one block to the next orders their accesses. The
/// value enters as `sending` and leaves only inside the queue's blocks (`sync` returns
/// `Sendable` results only). One gap: the process's main thread passes the check for the
/// main queue while no other thread runs `WorkQueue.runMain()`; a box on the main queue
/// must not be used from the main thread once another thread drains that queue.
public final class QueueBound<Value>: @unchecked Sendable {
    /// The serial queue that owns the value.
    public let queue: WorkQueue
    private var stored: Value

    /// Gives `value` to `queue`.
    /// - Precondition: `queue` is serial (the main queue included): a concurrent queue's
    ///   blocks run at the same time and could not share the value.
    public init(_ value: sending Value, on queue: WorkQueue) {
        switch queue.kind {
        case .serial, .mainThread: break
        case .concurrent, .root:
            lullFatal("QueueBound needs a serial queue: WorkQueue '\(queue.label)' is concurrent")
        }
        self.queue = queue
        stored = value
    }

    /// The value, read or changed in place from a block running on `queue`.
    public var value: Value {
        get {
            checkOnQueue()
            return stored
        }
        _modify {
            checkOnQueue()
            yield &stored
        }
    }

    /// Runs `body` on the value, from a block running on `queue`.
    public func withValue<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        checkOnQueue()
        return try body(&stored)
    }

    /// Runs `body` on the value on `queue`, after what is queued there; returns at once.
    public func async(_ body: @escaping @Sendable (inout Value) -> Void) {
        queue.async { [self] in body(&stored) }
    }

    /// Runs `body` on the value on `queue` and returns its result, waiting for it (`sync`:
    /// not from a block that already runs on `queue`).
    public func sync<Result: Sendable>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try queue.sync { try body(&stored) }
    }

    private func checkOnQueue() {
        if !queue.isCurrent {
            lullFatal("QueueBound<\(Value.self)> used off its queue: only blocks running on WorkQueue '\(queue.label)' may touch it")
        }
    }
}
