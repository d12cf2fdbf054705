/// Every queue is a Swift `TaskExecutor`, and a serial queue an actor's `SerialExecutor`.
///
/// A Swift job (a task's slice between two suspension points, or an actor's turn) enqueued
/// here becomes one job of the queue, like a block: it resolves its QoS by the queue's rules
/// (the queue's own QoS, else the task's priority as a QoS), runs with the empty execution
/// context (a task carries its own, task-locally), in FIFO order with the queue's blocks,
/// and on a serial queue exclusive with them. The job is stored as an `UnownedJob` beside
/// the queue in the `Job`, so enqueuing one allocates nothing of Lull's.
///
/// Isolation is the thread's: `isIsolatingCurrentContext()` holds while the calling thread
/// holds the queue exclusively — it runs a block or a Swift job of it, a `sync` on it, or
/// a block of a queue that targets it (a serial target makes its children mutually
/// exclusive, so their blocks run inside a drain of the target). So `assumeIsolated` works
/// from a plain `queue.async` block, and an actor on a queue may be assumed from a block of
/// a child queue.
extension WorkQueue: TaskExecutor, SerialExecutor {
    /// Runs `job` as a block of this queue.
    public func enqueue(_ job: consuming ExecutorJob) {
        let unownedJob = UnownedJob(job)
        // A task back from a sleep that Lull's executors timed: a cancelled one's timer goes.
        PendingTaskSleeps.shared.taskEnqueued(unownedJob)
        enqueue(Job(work: .swiftJob(unownedJob, self),
                    qos: QoS(taskPriorityRawValue: unownedJob.priority.rawValue),
                    flags: [], context: .empty, group: nil))
    }

    /// This queue as an actor's executor.
    /// - Precondition: the queue is serial (a concurrent queue cannot isolate an actor: the
    ///   program stops with a message naming it).
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        guard isSerialExecutor else {
            lullFatal("WorkQueue '\(label)' is concurrent and cannot be an actor's executor: "
                      + "an actor needs a serial queue (WorkQueue(label:) without .concurrent)")
        }
        return UnownedSerialExecutor(complexEquality: self)
    }

    /// True when running a block of `other` means holding this queue: the same queue, or
    /// the calling thread holds this one exclusively (it runs a block of a queue below it).
    public func isSameExclusiveExecutionContext(other: WorkQueue) -> Bool {
        self === other || ThreadState.current.holdsExclusively(other)
    }

    /// Stops the program unless the calling thread holds this queue exclusively.
    public func checkIsolated() {
        guard ThreadState.current.holdsExclusively(self) else {
            lullFatal("the current thread is not isolated to WorkQueue '\(label)': it runs no block of it "
                      + "nor of a queue that targets it")
        }
    }

    /// Whether the calling thread holds this queue exclusively (see the extension's notes).
    public func isIsolatingCurrentContext() -> Bool? {
        ThreadState.current.holdsExclusively(self)
    }

    /// Serial queues (the main queue among them) isolate; concurrent and global ones do not.
    var isSerialExecutor: Bool {
        kind == .serial
    }

    /// Runs a Swift job enqueued here, on the calling thread, inside the queue's drain.
    /// On a serial queue the job runs isolated to the queue (an actor on it runs without a
    /// further hop) with the queue as its task executor; elsewhere on the queue as task
    /// executor only.
    func runSwiftJob(_ job: UnownedJob) {
        if isSerialExecutor {
            job.runSynchronously(isolatedTo: UnownedSerialExecutor(complexEquality: self),
                                 taskExecutor: asUnownedTaskExecutor())
        } else {
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

extension ThreadState {
    /// Whether this thread holds `queue` exclusively now: a serial drain, a barrier or a
    /// `sync` of it, possibly with the drains of queues that target it nested inside.
    func holdsExclusively(_ queue: WorkQueue) -> Bool {
        let id = queue.identity
        return heldQueues.contains { $0.id == id && $0.exclusive }
    }
}
