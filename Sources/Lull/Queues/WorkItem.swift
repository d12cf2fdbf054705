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
    }

    /// A work item that runs `block` with `qos` and `flags`; with `.assignCurrentContext` it
    /// captures the current execution context (and QoS) now, and runs with them.
    public init(qos: QoS = .unspecified, flags: WorkItemFlags = [], block: @escaping @Sendable () -> Void) {
        self.block = block
        self.qos = qos
        self.flags = flags
        if flags.contains(.assignCurrentContext) {
            let thread = ThreadState.current
            assignedContext = thread.context
            assignedQoS = qos.isUnspecified ? thread.effectiveQoS : nil
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
        let context = runContext(submitter: thread.context)
        let runQoS = requestedQoS.isUnspecified ? thread.effectiveQoS : QoS.maximum(requestedQoS, thread.effectiveQoS)
        run(context: context, qos: runQoS, thread: thread)
    }

    /// Runs the block with an explicit context and QoS (a queue decided them), then completes.
    func run(context: ExecutionContext, qos runQoS: QoS, thread: ThreadState) {
        if !isCancelled {
            let savedContext = thread.context
            thread.context = context
            defer { thread.context = savedContext }
            thread.withQoS(runQoS) { block() }
        }
        complete()
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
    public func wait(timeout: Deadline) -> WaitResult {
        CompletionWaiters.wait(until: timeout, register: { parker in
            completion.locked { state in
                if state.isDone { return true }
                state.waiters.add(parker)
                return false
            }
        }, unregister: { parker in
            completion.locked { $0.waiters.remove(parker) }
        })
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
}
