/// Every queue is a Swift `TaskExecutor`, and a serial queue an actor's `SerialExecutor`.
///
/// A Swift job enqueued here becomes one job of the queue, like a block: it resolves its QoS
/// by the queue's rules (the queue's own QoS, else the task's priority as a QoS), runs with
/// the empty execution context (a task carries its own, task-locally), in FIFO order with
/// the queue's blocks, and on a serial queue exclusive with them. The job is stored as an
/// `UnownedJob` beside the queue in the `Job`, so enqueuing one allocates nothing of Lull's.
///
/// The queue tells the runtime's two kinds of job apart by the protocol they come through,
/// and runs each as the runtime expects to find it, so that neither is enqueued again at its
/// next executor check (`swift_task_switch` compares the serial executor it runs on, and the
/// task executor, with the ones the code needs, by identity):
/// - through `TaskExecutor` come the slices of a task that prefers the queue and runs no
///   actor's code (`Task(executorPreference:)`, `withTaskExecutorPreference`); they run on
///   the generic executor with the queue as task executor, which is what nonisolated async
///   code asks for, so its hops to the generic executor stay on the thread;
/// - through `SerialExecutor` (and a plain `Executor`) come an actor's turns and anything
///   else; on a serial queue they run isolated to the queue, with no task executor (as the
///   runtime runs an actor's job), so a call from one actor into another on the same queue
///   takes no hop (for a task with no executor preference); on a concurrent queue as its
///   task jobs.
///
/// Both are jobs of the same queue: a task that prefers a serial queue still never runs
/// beside the queue's blocks or its actors' turns. The queue is the identity of both
/// executor references, so the reference `Task(executorPreference:)` retains and the one the
/// runtime releases when the task ends are the same object.
///
/// Isolation is the thread's: `isIsolatingCurrentContext()` holds while the calling thread
/// holds the queue exclusively — it runs a block or a Swift job of it, a `sync` on it, or
/// a block of a queue that targets it (a serial target makes its children mutually
/// exclusive, so their blocks run inside a drain of the target). So `assumeIsolated` works
/// from a plain `queue.async` block, and an actor on a queue may be assumed from a block of
/// a child queue.
extension WorkQueue: TaskExecutor, SerialExecutor {
    /// Runs `job` as a block of this queue: an actor's turn, isolated to the queue when it is
    /// serial (the `SerialExecutor` and `Executor` witness).
    public func enqueue(_ job: consuming ExecutorJob) {
        enqueueSwiftJob(UnownedJob(job), preferringTask: false)
    }

    /// Runs `job`, a slice of a task that prefers this queue, as a block of the queue, not
    /// isolated to it (the `TaskExecutor` witness). Not API: reached only through the
    /// runtime's task executor reference; call `enqueue(_:)` instead.
    ///
    /// `@_implements` gives `TaskExecutor`'s `enqueue(_:)` a witness of its own: the
    /// runtime enqueues a task on its preferred executor through the `TaskExecutor`
    /// witness table, and an actor's job through the `SerialExecutor` one, and these are
    /// the only ways to tell the two apart (a job carries no mark of which it is).
    @_implements(TaskExecutor, enqueue(_:))
    public func _enqueuePreferringTask(_ job: consuming ExecutorJob) {
        enqueueSwiftJob(UnownedJob(job), preferringTask: true)
    }

    private func enqueueSwiftJob(_ unownedJob: UnownedJob, preferringTask: Bool) {
        // A task back from a sleep that Lull's executors timed: a cancelled one's timer goes.
        PendingTaskSleeps.shared.taskEnqueued(unownedJob)
        let work: Job.Work = preferringTask ? .preferringTaskJob(unownedJob, self) : .swiftJob(unownedJob, self)
        enqueue(Job(work: work, qos: QoS(taskPriorityRawValue: unownedJob.priority.rawValue),
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

    /// Runs an actor's job enqueued here, on the calling thread, inside the queue's drain.
    /// On a serial queue the job runs isolated to the queue with no task executor (as the
    /// runtime's `swift_job_run` runs an actor's job), so the actor's calls into actors on
    /// the same queue run without a hop; elsewhere on the queue as task executor only.
    func runSwiftJob(_ job: UnownedJob) {
        if isSerialExecutor {
            assert(ThreadState.current.holdsExclusively(self), "'\(label)': an actor's job runs outside the queue's drain")
            job.runSynchronously(on: UnownedSerialExecutor(complexEquality: self))
        } else {
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }

    /// Runs a slice of a task that prefers this queue, on the calling thread, inside the
    /// queue's drain: on the generic executor with the queue as task executor, exactly what
    /// the task's nonisolated code switches to, so the runtime lets it go on in place.
    /// On a serial queue the slice is exclusive with the queue's blocks and actors as any
    /// job of it: the thread holds the queue.
    func runPreferringTaskJob(_ job: UnownedJob) {
        assert(!isSerialExecutor || ThreadState.current.holdsExclusively(self),
               "'\(label)': a preferring task's job runs outside the queue's drain")
        job.runSynchronously(on: asUnownedTaskExecutor())
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
