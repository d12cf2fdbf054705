/// Installing a block's execution context on the thread that runs it.
///
/// A context lives in two places: the thread's `ThreadState` (what Lull reads, cheaply)
/// and the task-local `ExecutionContext.taskContext` (what a `Task` created inside the block
/// copies, and what `ExecutionContext.current` falls back on in Swift concurrency code).
/// Binding the task-local costs an allocation, so it is done only when it changes what a
/// reader would see: for a context with an activity, unless already bound, and for the
/// empty context only over a bound one.
extension ThreadState {
    /// `ExecutionContext.current`: the context installed on the thread, else the task's.
    var currentContext: ExecutionContext {
        if context.activity != nil { return context }
        return ExecutionContext.taskContext ?? .empty
    }

    /// Runs `body` with `context` current, from any thread (a worker, a foreign thread, a
    /// Swift task's thread); the previous context is current again afterwards.
    func withContext<T>(_ context: ExecutionContext, _ body: () throws -> T) rethrows -> T {
        let saved = self.context
        let bound = ExecutionContext.taskContext
        let needsBinding = context.activity == nil
            ? bound?.activity != nil
            : bound?.activity !== context.activity
        if context.activity === saved.activity && !needsBinding { return try body() }
        self.context = context
        defer { self.context = saved }
        if needsBinding {
            return try ExecutionContext.$taskContext.withValue(context, operation: body)
        }
        return try body()
    }

    /// `withContext` for a job that a worker (or the main queue's thread) runs from its
    /// loop. No Swift task runs on such a thread, and whoever installed the thread's
    /// context bound the task-local with it: when the job's activity is the thread's (none,
    /// or one a serial drain installed for a run of blocks), nothing needs to change, and
    /// the common case costs one comparison.
    @inline(__always)
    func withJobContext(_ context: ExecutionContext, _ body: () -> Void) {
        if context.activity === self.context.activity {
            body()
        } else {
            withContext(context, body)
        }
    }
}
