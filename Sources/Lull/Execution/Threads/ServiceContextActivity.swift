#if ServiceContext
import ServiceContextModule

extension ExecutionContext {
    /// Runs `body` inside a new activity that carries `serviceContext` (trait
    /// `ServiceContext`): `ServiceContext.current` is `serviceContext` in `body`, in the
    /// blocks submitted from it wherever they run, and in tasks created there; detached
    /// blocks and source handlers see none. A request handler that received a trace
    /// context calls this once, and its spans and logging metadata follow its work.
    public static func withActivity<T>(_ name: String, serviceContext: ServiceContext,
                                       _ body: () throws -> T) rethrows -> T {
        let thread = ThreadState.current
        let activity = ExecutionContext(id: ExecutionContext.nextID.wrappingAdd(1, ordering: .relaxed).oldValue,
                                        parentID: thread.currentContext.activityID, name: name,
                                        serviceContext: serviceContext)
        return try thread.withContext(activity, body)
    }

    /// The async `withActivity(_:serviceContext:_:)`: the activity and its ServiceContext
    /// are the task's, across suspension points.
    public static func withActivity<T>(_ name: String, serviceContext: ServiceContext,
                                       isolation: isolated (any Actor)? = #isolation,
                                       _ body: () async throws -> T) async rethrows -> T {
        let activity = ExecutionContext(id: ExecutionContext.nextID.wrappingAdd(1, ordering: .relaxed).oldValue,
                                        parentID: current.activityID, name: name, serviceContext: serviceContext)
        return try await withTaskActivity(activity, body)
    }
}
#endif
