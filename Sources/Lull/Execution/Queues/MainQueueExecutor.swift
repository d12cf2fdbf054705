#if compiler(>=6.3) && os(Linux)
@_spi(ExperimentalCustomExecutors) @_spi(ExperimentalScheduling) import _Concurrency

/// Swift concurrency's main executor on `WorkQueue.main` (`GlobalExecutor.install()`):
/// MainActor jobs are jobs of the main queue, in order with its blocks and exclusive with
/// them, run by the thread inside `WorkQueue.runMain()` — which is also what this
/// executor's `run()` does. The main actor is isolated exactly while the thread holds the
/// main queue (a block of it, or a MainActor job).
final class MainQueueExecutor: SwiftJobHost, MainExecutor, SchedulingExecutor, @unchecked Sendable {
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
        roots.main.enqueue(placed(unownedJob))
    }

    /// A sleep on the main actor: its timer puts the job straight on the main queue.
    func enqueue<C: Clock>(_ job: consuming ExecutorJob, at instant: C.Instant, tolerance: C.Duration?, clock: C) {
        let isTask = job.kind == .task
        SwiftJobTimer.schedule(placed(UnownedJob(job)), isTask: isTask, on: roots.main, at: instant,
                               tolerance: tolerance, clock: clock, timers: timers)
    }

    private func placed(_ job: UnownedJob) -> Job {
        Job(work: .hostedSwiftJob(job, self), qos: QoS(taskPriorityRawValue: job.priority.rawValue),
            flags: [], context: .empty, group: nil)
    }

    override func runSwiftJob(_ job: UnownedJob) {
        job.runSynchronously(on: asUnownedSerialExecutor())
    }

    func checkIsolated() {
        guard isIsolating(ThreadState.current) else {
            lullFatal("the current thread is not isolated to the main actor: it runs no block of WorkQueue.main")
        }
    }

    func isIsolatingCurrentContext() -> Bool? {
        isIsolating(ThreadState.current)
    }

    /// Holding the main queue, or standing for it outside any queue: the main thread while
    /// no other thread runs `runMain()` (an async main's first slice, code before
    /// `runMain()`), or a callout of Dispatch's main queue while it hosts the main queue.
    private func isIsolating(_ thread: ThreadState) -> Bool {
        if thread.holdsExclusively(roots.main) { return true }
        return thread.heldQueues.isEmpty && thread.runningGlobal == nil && roots.mainThread.representsMainQueue(thread)
    }

    /// Drains the main queue on the calling thread; never returns.
    func run() throws {
        roots.mainThread.run()
    }

    /// The main queue's thread never stops: nothing to do.
    func stop() {}
}
#endif
