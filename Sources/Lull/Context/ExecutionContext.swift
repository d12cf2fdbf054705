import Synchronization
#if ServiceContext
import ServiceContextModule
#endif

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
    #if ServiceContext
    /// The `ServiceContext` the activity carries (one reference; nil costs no counting).
    private let service: ServiceContext?
    #endif

    static let nextID = Atomic<UInt64>(1)

    init(id: UInt64, parentID: UInt64, name: String?) {
        self.id = id
        self.parentID = parentID
        self.name = name
        #if ServiceContext
        service = nil
        #endif
    }

    #if ServiceContext
    init(id: UInt64, parentID: UInt64, name: String?, serviceContext: ServiceContext?) {
        self.id = id
        self.parentID = parentID
        self.name = name
        service = serviceContext
    }

    /// The `ServiceContext` of the activity (trait `ServiceContext`): the one given to
    /// `withActivity(_:serviceContext:_:)`, else the one current when the activity started.
    /// While a block of the activity runs, it is also `ServiceContext.current`, so trace
    /// spans and logging metadata follow the activity's blocks across queues and into tasks.
    public var serviceContext: ServiceContext? { service }
    #endif

    /// The context bound for Swift concurrency: a `Task` copies it when it is created.
    /// Bound only together with the thread's context (`ThreadState.withContext`).
    @TaskLocal static var taskContext: ExecutionContext?

    /// No activity.
    public static let empty = ExecutionContext(id: 0, parentID: 0, name: nil)

    /// `empty`, built in place: a static costs a once-check and a copy that counts the
    /// references of its (nil) name and service, on every block submitted.
    static var noActivity: ExecutionContext {
        @inline(__always) get { ExecutionContext(id: 0, parentID: 0, name: nil) }
    }

    /// The current activity's identifier; 0 means no activity.
    public var activityID: UInt64 { id }
    /// The identifier of the activity this one was started in; 0 for none.
    public var parentActivityID: UInt64 { parentID }
    /// The name given to `withActivity`, or nil without an activity.
    public var activityName: String? { name }

    /// Whether this context has an activity.
    var hasActivity: Bool { id != 0 }

    /// Two contexts are equal when they carry the same activity (or both none).
    public static func == (lhs: ExecutionContext, rhs: ExecutionContext) -> Bool {
        lhs.id == rhs.id
    }
}
