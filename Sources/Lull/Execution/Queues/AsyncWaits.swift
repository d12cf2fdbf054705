/// Waiting for a group or a work item from Swift concurrency: the task suspends, its
/// continuation joins the group's or item's waiters (beside parked threads and `notify`
/// blocks), and the completion resumes it. No thread is held meanwhile, so any number of
/// tasks may wait. Unlike a blocking `wait`, an async wait raises nothing: it has no thread
/// whose QoS could be lent.
///
/// The wait does not end when the waiting task is cancelled (as a blocking `wait` does not
/// end when its thread is asked to stop): it ends when the group empties or the item
/// completes.
extension WorkGroup {
    /// Suspends the calling task until the group is empty; never blocks a thread.
    public func wait() async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            if !addWaiting(task: continuation) { continuation.resume() }
        }
    }
}

extension WorkItem {
    /// Suspends the calling task until the item has run or was skipped because it was
    /// cancelled; never blocks a thread.
    public func wait() async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            if !addWaiting(task: continuation) { continuation.resume() }
        }
    }
}
