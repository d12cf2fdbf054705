#if compiler(>=6.3) && os(Linux)
@_spi(ExperimentalCustomExecutors) @_spi(ExperimentalScheduling) import _Concurrency

/// Swift concurrency's default executor on Lull's worker pool (`GlobalExecutor.install()`).
///
/// A job goes to the global queue of its priority's QoS class (`QoS(taskPriorityRawValue:)`)
/// as a `.hostedSwiftJob`, two words, no allocation of Lull's; a worker of that class runs
/// it with this executor as the current task executor, which is what the runtime compares a
/// task's default preference with, so a task hops no further. A delayed job (`Task.sleep`
/// on the continuous or suspending clock) becomes a timer of the engine, as `asyncAfter`'s
/// blocks do: its window is [deadline, deadline + leeway], the leeway the sleep's
/// `tolerance`, and never less than the default leeway of the job's QoS (a timer without
/// `.strict`); so sleeps whose windows overlap wake the process once (`SwiftJobTimer`).
final class PoolTaskExecutor: SwiftJobHost, TaskExecutor, SchedulingExecutor, @unchecked Sendable {
    // @unchecked Sendable: `roots` and `timers` are immutable references to Sendable parts.
    let roots: RootQueues
    let timers: TimerEngine

    init(roots: RootQueues, timers: TimerEngine) {
        self.roots = roots
        self.timers = timers
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let unownedJob = UnownedJob(job)
        PendingTaskSleeps.shared.taskEnqueued(unownedJob)
        let (queue, job) = placed(unownedJob)
        queue.enqueue(job)
    }

    func enqueue<C: Clock>(_ job: consuming ExecutorJob, at instant: C.Instant, tolerance: C.Duration?, clock: C) {
        let isTask = job.kind == .task
        let (queue, placedJob) = placed(UnownedJob(job))
        SwiftJobTimer.schedule(placedJob, isTask: isTask, on: queue, at: instant, tolerance: tolerance, clock: clock,
                               timers: timers)
    }

    override func runSwiftJob(_ job: UnownedJob) {
        job.runSynchronously(on: asUnownedTaskExecutor())
    }

    /// The global queue of the job's class, and the job as that queue's.
    private func placed(_ job: UnownedJob) -> (WorkQueue, Job) {
        let qos = QoS(taskPriorityRawValue: job.priority.rawValue)
        return (roots.global(qos.qosClass),
                Job(work: .hostedSwiftJob(job, self), qos: qos, flags: [], context: .empty, group: nil))
    }

}
#endif
