import Synchronization

/// The context that work carries from whoever submitted it: the activity (a request being
/// served, say) it belongs to. It follows `async`, `sync` and notifications across queues
/// and threads, and Swift tasks started inside a block; source handlers and delayed blocks
/// are detached from it by default.
public struct ExecutionContext: Sendable, Equatable {
    // Held by value, not as a reference to a shared object: every queued block carries a
    // copy, and reference counting one object from the submitting and the running thread
    // at once costs more than the block itself. A name given as a literal (or one of up to
    // 15 bytes) is copied without any reference counting either.
    private let id: UInt64
    private let parentID: UInt64
    private let name: String?

    private static let nextID = Atomic<UInt64>(1)

    private init(id: UInt64, parentID: UInt64, name: String?) {
        self.id = id
        self.parentID = parentID
        self.name = name
    }

    /// The context of the calling thread's current block (or activity); in Swift
    /// concurrency code outside any block, the context of the task (inherited by a `Task`
    /// created inside a block or an activity).
    public static var current: ExecutionContext {
        ThreadState.current.currentContext
    }

    /// The context bound for Swift concurrency: a `Task` copies it when it is created.
    /// Bound only together with the thread's context (`ThreadState.withContext`).
    @TaskLocal static var taskContext: ExecutionContext?

    /// No activity.
    public static let empty = ExecutionContext(id: 0, parentID: 0, name: nil)

    /// The current activity's identifier; 0 means no activity.
    public var activityID: UInt64 { id }
    /// The identifier of the activity this one was started in; 0 for none.
    public var parentActivityID: UInt64 { parentID }
    /// The name given to `withActivity`, or nil without an activity.
    public var activityName: String? { name }

    /// Whether this context has an activity.
    var hasActivity: Bool { id != 0 }

    /// Runs `body` inside a new activity whose parent is the current one; the outer
    /// context is current again when `body` returns or throws. Work submitted and tasks
    /// created inside `body` carry the new activity.
    public static func withActivity<T>(_ name: String, _ body: () throws -> T) rethrows -> T {
        let activity = ExecutionContext(id: nextID.wrappingAdd(1, ordering: .relaxed).oldValue,
                                        parentID: current.activityID, name: name)
        return try ThreadState.current.withContext(activity, body)
    }

    /// Two contexts are equal when they carry the same activity (or both none).
    public static func == (lhs: ExecutionContext, rhs: ExecutionContext) -> Bool {
        lhs.id == rhs.id
    }
}
