/// Who waits for something to complete (a work item, an empty group): threads parked in
/// `wait` and blocks to submit with `notify`, and tasks suspended in `wait() async`. Kept
/// inside the owner's lock.
struct CompletionWaiters: Sendable {
    private var parkers: [Parker] = []
    private var notifications: [(WorkQueue, Job)] = []
    private var tasks: [UnsafeContinuation<Void, Never>] = []

    mutating func add(_ parker: Parker) {
        parkers.append(parker)
    }

    /// Takes a parker back after its wait timed out; false when a completion already took
    /// it (the wait then succeeded after all).
    mutating func remove(_ parker: Parker) -> Bool {
        guard let index = parkers.firstIndex(where: { $0 === parker }) else { return false }
        parkers.remove(at: index)
        return true
    }

    mutating func add(notification job: Job, on queue: WorkQueue) {
        notifications.append((queue, job))
    }

    /// A task suspended until completion (it occupies no thread meanwhile).
    mutating func add(task continuation: UnsafeContinuation<Void, Never>) {
        tasks.append(continuation)
    }

    /// Everyone waiting, taken out under the lock; `release()` them after it.
    mutating func takeAll() -> CompletionWaiters {
        defer { self = CompletionWaiters() }
        return self
    }

    /// Wakes the waiters, resumes the tasks and submits the notifications (outside the owner's lock).
    func release() {
        for parker in parkers { parker.unpark() }
        for (queue, job) in notifications { queue.enqueue(job) }
        for task in tasks { task.resume() }
    }

    /// A wait with a timeout: `register` adds the parker under the owner's lock unless the
    /// thing is already complete (then it returns true); `unregister` takes it back after
    /// a timeout (see `remove`). The worker counts as blocked while it waits.
    static func wait(until timeout: Deadline, register: (Parker) -> Bool,
                     unregister: (Parker) -> Bool) -> WaitResult {
        let parker = Parker()
        if register(parker) { return .success }
        if WorkerPool.blocking({ parker.park(until: timeout) }) { return .success }
        return unregister(parker) ? .timedOut : .success
    }
}
