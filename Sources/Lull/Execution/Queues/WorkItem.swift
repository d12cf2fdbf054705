import Synchronization

/// A block object: a block with its QoS and flags that can be submitted, performed, waited
/// on, observed with `notify` and cancelled.
///
/// Cancellation is not preemptive: a cancelled item that has not started returns at once
/// when dequeued; one that started runs to its end. The item "completes" the first time it
/// runs to its end or is skipped because it was cancelled; `wait` returns and `notify`
/// blocks are submitted at that moment.
public final class WorkItem: Sendable {
    let block: @Sendable () -> Void
    let qos: QoS
    let flags: WorkItemFlags
    /// The context captured at creation with `.assignCurrentContext`.
    let assignedContext: ExecutionContext?
    /// The QoS captured at creation with `.assignCurrentContext` (when none was given).
    let assignedQoS: QoS?

    private let cancelled = Atomic<Bool>(false)
    private let completion = Mutex<Completion>(Completion())

    private struct Completion {
        var isDone = false
        var waiters = CompletionWaiters()
        /// Threads waiting raise the threads running the item.
        var overrides = WaitOverrides()
        /// The queue the item waits in (to raise it), until it starts.
        var queue: WorkQueue?
        /// The queue a waiter raised for this item (set with the look at `queue`): the item
        /// ends that raise when it starts.
        var raisedIn: WorkQueue?
    }
    /// Set as the item starts (or is skipped), before it looks at `raisedIn`: a queue adds
    /// a raise for the item only while this is false, under its lock (`raisePending`).
    private let started = Atomic<Bool>(false)

    /// A work item that runs `block` with `qos` and `flags`; with `.assignCurrentContext` it
    /// captures the current execution context (and QoS) now, and runs with them.
    public init(qos: QoS = .unspecified, flags: WorkItemFlags = [], block: @escaping @Sendable () -> Void) {
        self.block = block
        self.qos = qos
        self.flags = flags
        if flags.contains(.assignCurrentContext) {
            assignedContext = ExecutionContext.current
            assignedQoS = qos.isUnspecified ? QoSResolution.inferred(from: ThreadState.current.ownQoS) : nil
        } else {
            assignedContext = nil
            assignedQoS = nil
        }
    }

    /// The QoS this item asks for: its own, or the one captured with `.assignCurrentContext`.
    var requestedQoS: QoS {
        if !qos.isUnspecified { return qos }
        return assignedQoS ?? .unspecified
    }

    /// The context this item runs with when submitted from a thread whose context is `submitter`.
    func runContext(submitter: ExecutionContext) -> ExecutionContext {
        if let assignedContext { return assignedContext }
        if flags.contains(.detached) { return .empty }
        return submitter
    }

    /// Runs the block on the calling thread (unless cancelled), with the item's context and
    /// at the higher of the caller's QoS and the item's.
    public func perform() {
        let thread = ThreadState.current
        let context = runContext(submitter: thread.currentContext)
        let runQoS = requestedQoS.isUnspecified ? thread.ownQoS : QoS.maximum(requestedQoS, thread.ownQoS)
        run(context: context, qos: runQoS, thread: thread)
    }

    /// Runs the block with an explicit context and QoS (a queue decided them), then completes.
    /// While it runs, threads that wait for the item raise this thread to their QoS.
    func run(context: ExecutionContext, qos runQoS: QoS, thread: ThreadState) {
        let skipped = isCancelled
        started.store(true, ordering: .releasing)
        // It waits in no queue any more (a skipped one holds none either).
        let raisedIn = completion.locked { state -> WorkQueue? in
            state.queue = nil
            if !skipped { state.overrides.addRunner(thread.priority) }
            defer { state.raisedIn = nil }
            return state.raisedIn
        }
        raisedIn?.dropRaise(for: self)
        if !skipped {
            thread.withContext(context) { thread.withQoS(runQoS, block) }
            completion.locked { $0.overrides.removeRunner(thread.priority) }
        }
        complete()
    }

    /// The item started running or was skipped (see `started`).
    var hasStarted: Bool { started.load(ordering: .acquiring) }

    /// Records the queue the item was submitted to, so that a waiter can raise it.
    func noteQueued(on queue: WorkQueue) {
        completion.locked { $0.queue = queue }
    }

    /// Marks the item as finished (or skipped): wakes waiters and submits notifications.
    func complete() {
        let waiters = completion.locked { state -> CompletionWaiters in
            if state.isDone { return CompletionWaiters() }
            state.isDone = true
            return state.waiters.takeAll()
        }
        waiters.release()
    }

    /// Blocks until the item has completed.
    public func wait() {
        _ = wait(timeout: .distantFuture)
    }

    /// Blocks until the item has completed or `timeout` passes.
    /// The waiting thread raises the item to its QoS: the queue it waits in, then the
    /// thread that runs it (synchronous inversion avoidance).
    public func wait(timeout: Deadline) -> WaitResult {
        let waitClass = ThreadState.current.currentQoS.qosClass
        var waitsIn: WorkQueue?
        var registered = false
        let result = CompletionWaiters.wait(until: timeout, register: { parker in
            let done = completion.locked { state -> Bool in
                if state.isDone { return true }
                state.waiters.add(parker)
                state.overrides.addWaiter(waitClass)
                waitsIn = state.queue
                if let waitsIn { state.raisedIn = waitsIn }
                return false
            }
            registered = !done
            waitsIn?.raisePending(to: waitClass, for: self)
            return done
        }, unregister: { parker in
            completion.locked { $0.waiters.remove(parker) }
        })
        if registered {
            completion.locked { $0.overrides.removeWaiter(waitClass) }
        }
        return result
    }

    /// Submits `execute` to `queue` once the item has completed.
    public func notify(qos: QoS = .unspecified, flags: WorkItemFlags = [], queue: WorkQueue,
                       execute: @escaping @Sendable () -> Void) {
        let job = queue.makeJob(.block(execute), qos: qos, flags: flags)
        addNotification(queue: queue, job: job)
    }

    /// Submits `execute` to `queue` once this item has completed.
    public func notify(queue: WorkQueue, execute: WorkItem) {
        addNotification(queue: queue, job: queue.makeJob(for: execute))
    }

    private func addNotification(queue: WorkQueue, job: Job) {
        let done = completion.locked { state -> Bool in
            if state.isDone { return true }
            state.waiters.add(notification: job, on: queue)
            return false
        }
        if done { queue.enqueue(job) }
    }

    /// Cancels the item: if it has not started, it will not run. Not preemptive.
    public func cancel() {
        cancelled.store(true, ordering: .releasing)
    }

    /// Whether `cancel()` was called.
    public var isCancelled: Bool {
        cancelled.load(ordering: .acquiring)
    }

    /// Registers a suspended task to resume when the item completes; false (nothing
    /// registered) when it has completed already.
    func addWaiting(task continuation: UnsafeContinuation<Void, Never>) -> Bool {
        completion.locked { state -> Bool in
            if state.isDone { return false }
            state.waiters.add(task: continuation)
            return true
        }
    }
}
