/// The public questions about the calling thread — its QoS, its execution context — which
/// Lull answers from the thread's `ThreadState`.
extension QoS {
    /// The QoS the calling thread runs at now, overrides included. Lull's workers run at
    /// the class of the work they run, raised while more important work waits on it (a
    /// block queued behind it on a serial queue, a `sync` caller, a `wait`); the process's
    /// main thread is user-interactive and any other thread Lull did not create is `default`.
    public static var current: QoS {
        ThreadState.current.currentQoS
    }
}

extension ExecutionContext {
    /// The context of the calling thread's current block (or activity); in Swift
    /// concurrency code outside any block, the context of the task (inherited by a `Task`
    /// created inside a block or an activity).
    public static var current: ExecutionContext {
        ThreadState.current.currentContext
    }

    /// Runs `body` inside a new activity whose parent is the current one; the outer
    /// context is current again when `body` returns or throws. Work submitted and tasks
    /// created inside `body` carry the new activity.
    public static func withActivity<T>(_ name: String, _ body: () throws -> T) rethrows -> T {
        let thread = ThreadState.current
        return try thread.withContext(.startingActivity(name, under: thread.currentContext), body)
    }
}
