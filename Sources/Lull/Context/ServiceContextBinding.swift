#if ServiceContext
import ServiceContextModule
#endif

/// The task-local `ServiceContext.current` (trait `ServiceContext`) kept in step with the
/// execution context: wherever Lull binds a context for a block (`withContext`) or an async
/// activity, it binds the context's `serviceContext` too, or none over one that is bound.
/// So a block sees its activity's ServiceContext, and a detached block (which runs with the
/// empty context) sees none. Without the trait these are the bodies themselves.
extension ExecutionContext {
    /// Runs `body` with `ServiceContext.current` bound to this context's ServiceContext.
    @inline(__always)
    func bindingServiceContext<T>(_ body: () throws -> T) rethrows -> T {
        #if ServiceContext
        if let service = serviceContext {
            return try ServiceContext.$current.withValue(service, operation: body)
        }
        if ServiceContext.current != nil {
            return try ServiceContext.$current.withValue(nil, operation: body)
        }
        #endif
        return try body()
    }

    /// `bindingServiceContext` for async code: the binding is the task's, across suspensions.
    func bindingServiceContext<T>(isolation: isolated (any Actor)? = #isolation,
                                  _ body: () async throws -> T) async rethrows -> T {
        #if ServiceContext
        if let service = serviceContext {
            return try await ServiceContext.$current.withValue(service, operation: body)
        }
        if ServiceContext.current != nil {
            return try await ServiceContext.$current.withValue(nil, operation: body)
        }
        #endif
        return try await body()
    }

    /// A new activity named `name` under the current context `parent`: it carries
    /// `ServiceContext.current` (trait `ServiceContext`), which inside a block of an activity
    /// is the activity's own, or a span's started since.
    static func startingActivity(_ name: String, under parent: ExecutionContext) -> ExecutionContext {
        let id = ExecutionContext.nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        #if ServiceContext
        return ExecutionContext(id: id, parentID: parent.activityID, name: name, serviceContext: ServiceContext.current)
        #else
        return ExecutionContext(id: id, parentID: parent.activityID, name: name)
        #endif
    }
}
