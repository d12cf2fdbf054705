/// Which queues a thread is on: the question behind `workPrecondition(.onQueue)` and
/// `WorkQueue.getSpecific(key:)`. A serial executor's isolation check asks a narrower one
/// over the same records (`ThreadState.holdsExclusively`: held exclusively, not merely run).
///
/// A thread is on queue Q while it runs a block of Q or of a queue that targets Q, directly
/// or through other queues (a serial queue's blocks are on every queue of its hierarchy, as
/// in Dispatch, whose check walks the same chain). What the thread records:
///
/// - `heldQueues`: every queue whose drain, barrier or `sync` it is inside, innermost last
///   (a `sync` onto a global queue counts too);
/// - `runningGlobal`: the global queue whose job it runs (a block of that queue, or a drain
///   request of a queue that targets it);
/// - the process's main thread stands for the main queue while no other thread drains it
///   (code on Darwin's main thread is on the main queue, which is bound to that thread).
extension WorkQueue {
    /// Whether the calling thread runs a block of this queue or of a queue that targets it.
    var isCurrent: Bool {
        isRunBy(ThreadState.current)
    }

    /// Whether `thread` runs a block of this queue or of a queue that targets it.
    func isRunBy(_ thread: ThreadState) -> Bool {
        if case .root(let qosClass) = kind, thread.runningGlobal == qosClass { return true }
        for held in thread.heldQueues.reversed() {
            var queue: WorkQueue? = held.queue
            while let current = queue {
                if current === self { return true }
                queue = current.target
            }
        }
        return self === services.roots.main && thread.heldQueues.isEmpty && thread.runningGlobal == nil
            && services.roots.mainThread.representsMainQueue(thread)
    }

    /// The queue whose block `thread` runs now, the innermost one: where a lookup of a
    /// queue-specific value starts. Nil on a thread that runs no block of any queue.
    static func innermost(of thread: ThreadState, roots: RootQueues) -> WorkQueue? {
        if let held = thread.heldQueues.last { return held.queue }
        if let global = thread.runningGlobal { return roots.global(global) }
        return roots.mainThread.representsMainQueue(thread) ? roots.main : nil
    }
}
