extension ExecutionContext {
    /// Runs the async `body` inside a new activity whose parent is the current one.
    ///
    /// The activity is bound to the task (the task-local `ExecutionContext.taskContext`), so
    /// it stays current across the body's suspension points, whatever threads the task
    /// resumes on; blocks submitted inside `body` (`async`, `sync`, notifications) and tasks
    /// created inside it carry it. The outer context is current again when `body` returns
    /// or throws.
    public static func withActivity<T>(_ name: String, isolation: isolated (any Actor)? = #isolation,
                                       _ body: () async throws -> T) async rethrows -> T {
        try await withTaskActivity(.startingActivity(name, under: current), body)
    }

    /// Binds `activity` (and its ServiceContext) to the task for `body`.
    static func withTaskActivity<T>(_ activity: ExecutionContext, isolation: isolated (any Actor)? = #isolation,
                                    _ body: () async throws -> T) async rethrows -> T {
        try await ExecutionContext.$taskContext.withValue(activity) {
            try await activity.bindingServiceContext(body)
        }
    }
}
