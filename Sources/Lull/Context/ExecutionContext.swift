import Synchronization

/// The context that work carries from whoever submitted it: the activity (a request being
/// served, say) it belongs to. It follows `async`, `sync` and notifications across queues
/// and threads, and Swift tasks started inside a block; source handlers and delayed blocks
/// are detached from it by default.
public struct ExecutionContext: Sendable, Equatable {
    let activity: Activity?

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
    public static let empty = ExecutionContext(activity: nil)

    /// The current activity's identifier; 0 means no activity.
    public var activityID: UInt64 { activity?.id ?? 0 }
    /// The identifier of the activity this one was started in; 0 for none.
    public var parentActivityID: UInt64 { activity?.parentID ?? 0 }
    /// The name given to `withActivity`, or nil without an activity.
    public var activityName: String? { activity?.name }

    /// Runs `body` inside a new activity whose parent is the current one; the outer
    /// context is current again when `body` returns or throws. Work submitted and tasks
    /// created inside `body` carry the new activity.
    public static func withActivity<T>(_ name: String, _ body: () throws -> T) rethrows -> T {
        let activity = Activity(name: name, parentID: current.activityID)
        return try ThreadState.current.withContext(ExecutionContext(activity: activity), body)
    }

    public static func == (lhs: ExecutionContext, rhs: ExecutionContext) -> Bool {
        lhs.activityID == rhs.activityID
    }
}

/// One activity: immutable once created, shared by every block that carries it.
final class Activity: Sendable {
    private static let nextID = Atomic<UInt64>(1)

    let id: UInt64
    let parentID: UInt64
    let name: String

    init(name: String, parentID: UInt64) {
        self.id = Activity.nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        self.parentID = parentID
        self.name = name
    }
}
