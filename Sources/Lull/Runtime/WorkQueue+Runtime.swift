/// The public entry points of queues that need the process's runtime: a new queue's default
/// target, the global and main queues, and `concurrentPerform` on its worker pool.
extension WorkQueue {
    /// A serial queue (or with `.concurrent`, a concurrent one) that drains through `target`
    /// (nil: the global queue of `qos`'s class, the default one for `unspecified`).
    public convenience init(label: String, qos: QoS = .unspecified, attributes: Attributes = [],
                            target: WorkQueue? = nil) {
        self.init(label: label, qos: qos, attributes: attributes,
                  resolvedTarget: target ?? Runtime.shared.roots.defaultTarget(for: qos))
    }

    /// The concurrent global queue of a QoS class (`unspecified` gives the default one).
    public static func global(qos: QoS.QoSClass = .default) -> WorkQueue {
        Runtime.shared.roots.global(qos)
    }

    /// The serial queue drained by the thread that calls `runMain()`.
    public static var main: WorkQueue { Runtime.shared.roots.main }

    /// The value under `key` on the queue whose block the calling thread runs, or else on
    /// the nearest of that queue's targets that has one (`DispatchQueue.getSpecific(key:)`).
    /// Nil on a thread that runs no block; on the process's main thread outside any block,
    /// the main queue's (while no other thread runs `runMain()`).
    public static func getSpecific<Value>(key: SpecificKey<Value>) -> Value? {
        specific(key: key, for: ThreadState.current, roots: Runtime.shared.roots)
    }

    /// Drains the main queue on the calling thread forever. Call it once, from any thread
    /// outside the main queue: from a synchronous main, or from an async main's first slice
    /// (before its first suspension point). From code that runs on the main queue (a block
    /// of it, MainActor code inside it) the program stops with a message: the queue it
    /// holds could never drain again.
    public static func runMain() -> Never {
        let roots = Runtime.shared.roots
        let thread = ThreadState.current
        if thread.holdsExclusively(roots.main) || roots.mainThread.hostRuns(thread) {
            lullFatal("WorkQueue.runMain() called from code on the main queue, which would never drain again: "
                      + "call it from a synchronous main or an async main's first slice; later in an async main, "
                      + "await instead (the async main's run loop drains the main queue)")
        }
        roots.mainThread.run()
    }

    /// Runs `execute(0) ... execute(iterations - 1)` in parallel on the calling thread and
    /// the worker pool of the caller's QoS; returns when every iteration has returned.
    public static func concurrentPerform(iterations: Int, execute work: (Int) -> Void) {
        concurrentPerform(iterations: iterations, on: Runtime.shared.pool, execute: work)
    }
}
