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
/// `.strict`); so sleeps whose windows overlap wake the process once.
final class PoolTaskExecutor: SwiftJobHost, TaskExecutor, SchedulingExecutor, @unchecked Sendable {
    // @unchecked Sendable: `roots` and `timers` are immutable references to Sendable parts.
    let roots: RootQueues
    let timers: TimerEngine

    init(roots: RootQueues, timers: TimerEngine) {
        self.roots = roots
        self.timers = timers
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let (queue, job) = placed(UnownedJob(job))
        queue.enqueue(job)
    }

    func enqueue<C: Clock>(_ job: consuming ExecutorJob, at instant: C.Instant, tolerance: C.Duration?, clock: C) {
        let (queue, placedJob) = placed(UnownedJob(job))
        guard let delay = clock.now.duration(to: instant) as? Duration,
              let tolerance: Duration? = tolerance.map({ $0 as? Duration }) ?? .some(nil) else {
            lullFatal("Task.sleep on \(C.self), a clock whose durations are not Swift.Duration, cannot be scheduled "
                      + "by Lull's executor")
        }
        let delayNanoseconds = PoolTaskExecutor.nanoseconds(delay)
        guard delayNanoseconds > 0 else {
            queue.enqueue(placedJob)
            return
        }
        let now = SystemClock.monotonicNanoseconds()
        let (deadline, overflow) = now.addingReportingOverflow(delayNanoseconds)
        let defaultLeeway = DefaultLeeway.nanoseconds(for: placedJob.qos.qosClass, delay: delayNanoseconds)
        let leeway = max(tolerance.map(PoolTaskExecutor.nanoseconds) ?? 0, defaultLeeway)
        let entry = DelayedEntry(queue: queue, job: placedJob,
                                 origin: Diagnostics.delayedOrigin(TimerSite(file: #fileID, line: #line)))
        timers.schedule(entry, deadline: overflow ? UInt64.max : deadline, leeway: leeway)
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

    /// A duration as nanoseconds, 0 when negative, saturating when huge.
    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0, attoseconds >= 0 || seconds > 0 else { return 0 }
        let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return UInt64.max }
        let total = Int64(bitPattern: whole) &+ attoseconds / 1_000_000_000
        return total < 0 ? 0 : UInt64(total)
    }
}

/// Swift concurrency's main executor on `WorkQueue.main` (`GlobalExecutor.install()`):
/// MainActor jobs are jobs of the main queue, in order with its blocks and exclusive with
/// them, run by the thread inside `WorkQueue.runMain()` — which is also what this
/// executor's `run()` does. The main actor is isolated exactly while the thread holds the
/// main queue (a block of it, or a MainActor job).
final class MainQueueExecutor: SwiftJobHost, MainExecutor, @unchecked Sendable {
    // @unchecked Sendable: `roots` is an immutable reference to a Sendable part.
    let roots: RootQueues

    init(roots: RootQueues) {
        self.roots = roots
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let unownedJob = UnownedJob(job)
        roots.main.enqueue(Job(work: .hostedSwiftJob(unownedJob, self),
                               qos: QoS(taskPriorityRawValue: unownedJob.priority.rawValue),
                               flags: [], context: .empty, group: nil))
    }

    override func runSwiftJob(_ job: UnownedJob) {
        job.runSynchronously(on: asUnownedSerialExecutor())
    }

    func checkIsolated() {
        guard ThreadState.current.holdsExclusively(roots.main) else {
            lullFatal("the current thread is not isolated to the main actor: it runs no block of WorkQueue.main")
        }
    }

    func isIsolatingCurrentContext() -> Bool? {
        ThreadState.current.holdsExclusively(roots.main)
    }

    /// Drains the main queue on the calling thread; never returns.
    func run() throws {
        roots.mainThread.run()
    }

    /// The main queue's thread never stops: nothing to do.
    func stop() {}
}
#endif
