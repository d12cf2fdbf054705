import CLullShims

/// Installing a block's execution context on the thread that runs it.
///
/// A context lives in two places: the thread's `ThreadState.context` (what Lull reads,
/// cheaply) and the task-local `ExecutionContext.taskContext` (what a `Task` created inside
/// the block copies, and what async code reads). Outside Swift tasks the two always agree:
/// the task-local is only ever bound here, together with the thread's context. So a thread
/// that runs no task never needs to read the task-local (reading one costs tens of
/// nanoseconds, binding one an allocation): it binds it only when the context changes.
/// With the trait `ServiceContext`, `ServiceContext.current` is bound at the same moments
/// (`bindingServiceContext`).
extension ThreadState {
    /// `ExecutionContext.current`: the context installed on the thread, else the task's.
    /// Activity ids start at 1: a context without one is `empty`, which is rebuilt rather
    /// than copied (no reference counting of its nil fields).
    var currentContext: ExecutionContext {
        if context.hasActivity { return context }
        if lull_in_swift_task() == 0 { return .noActivity }
        return ExecutionContext.taskContext ?? .noActivity
    }

    /// Runs `body` with `context` current, from any thread (a worker, a foreign thread, a
    /// Swift task's thread); the previous context is current again afterwards.
    func withContext<T>(_ context: ExecutionContext, _ body: () throws -> T) rethrows -> T {
        let saved = self.context
        let needsBinding: Bool
        if lull_in_swift_task() != 0 {
            // The task's own binding may be anything it inherited.
            let bound = ExecutionContext.taskContext
            needsBinding = (bound?.activityID ?? 0) != context.activityID
        } else {
            needsBinding = context.activityID != saved.activityID
        }
        if !needsBinding && context.activityID == saved.activityID { return try body() }
        self.context = context
        defer { self.context = saved }
        if needsBinding {
            return try ExecutionContext.$taskContext.withValue(context) {
                try context.bindingServiceContext(body)
            }
        }
        return try body()
    }

    /// `withContext` for a job a worker (or the main queue's thread) runs from its loop:
    /// when the job's activity is the thread's (none, or the one a serial drain installed
    /// for a run of blocks), nothing changes, and the common case costs one comparison.
    @inline(__always)
    func withJobContext(_ context: ExecutionContext, _ body: () -> Void) {
        if context.activityID == self.context.activityID {
            body()
        } else {
            withContext(context, body)
        }
    }
}
