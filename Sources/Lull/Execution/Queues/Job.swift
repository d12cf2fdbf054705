/// One unit of work in a queue: a block, a work item, a queue's drain request or a thread
/// waiting in `sync`, with the QoS and context it was submitted with.
struct Job: Sendable {
    enum Work: Sendable {
        case block(@Sendable () -> Void)
        case item(WorkItem)
        /// Drain the queue (a child queue funnelling through its target).
        case drain(WorkQueue)
        /// A thread blocked in `sync` that runs once the queue reaches it.
        case syncWaiter(SyncWaiter)
        /// Work the object performs itself (a source's next step, a drain of posted cancel
        /// steps): it knows what, so posting it allocates nothing.
        case posted(PostedWork)
        /// A Swift job (an actor's turn, or a job handed to the queue as a plain executor)
        /// enqueued on the queue as its serial executor; the queue runs it isolated to itself
        /// (see `WorkQueue+Executor.swift`). Two words, like a block: no allocation per job.
        case swiftJob(UnownedJob, WorkQueue)
        /// A slice of a task that prefers the queue, enqueued on it as task executor; the
        /// queue runs it with itself as task executor, not isolated to it.
        case preferringTaskJob(UnownedJob, WorkQueue)
        /// A Swift job enqueued on one of Lull's process-wide executors (the default or main
        /// executor `GlobalExecutor.install()` installs), which runs it as itself.
        case hostedSwiftJob(UnownedJob, SwiftJobHost)
        /// What a job holds once its runner took the work out to run it (`takeWork`);
        /// never queued.
        case taken
    }

    var work: Work
    /// The QoS the job resolved to where it was enqueued (see `QoSResolution`).
    var qos: QoS
    var flags: WorkItemFlags
    /// The global queue the job was put on (set there): what a thread running it is on,
    /// for `workPrecondition` and its kin (see `WorkQueue.isRunBy`).
    var globalClass: QoS.QoSClass? = nil
    var context: ExecutionContext
    var group: WorkGroup?
    /// Set on a block a concurrent queue forwarded straight to its global target: it still
    /// counts as running on that queue (for barriers and suspension).
    var owner: WorkQueue? = nil

    /// Moves the work out, leaving `taken`: the runner runs the block it took without
    /// retaining it (a copy of the block would count a reference the submitting thread
    /// also writes, and the job would release it once more when it is destroyed).
    mutating func takeWork() -> Work {
        // A move through the field's address: `swap` and an assignment copy the work
        // (through its value witness) and release it again.
        withUnsafeMutablePointer(to: &work) { field in
            let taken = field.move()
            field.initialize(to: .taken)
            return taken
        }
    }

    /// The `sync` caller this job stands for, if it is one. Read through the getter (the
    /// job borrowed), a test of a job about to be consumed does not copy its work.
    var syncWaiter: SyncWaiter? {
        if case .syncWaiter(let waiter) = work { return waiter }
        return nil
    }

    /// What running this job asks of the level checks its thread deferred (see
    /// `DeferredLevelChecks`): a source's delivery keeps them (its own check may join
    /// them), but its handler may block in a system call of its own, so the stall check
    /// is to look; a drain keeps them (its jobs decide one by one); anything else may wait
    /// for what a deferred source's next delivery does, and comes after them.
    var deferredChecksRule: DeferredChecksRule {
        switch work {
        case .drain: return .keep
        case .posted(let posted): return posted.isSourceDelivery ? .keepAndWatch : .complete
        default: return .complete
        }
    }

    enum DeferredChecksRule {
        case keep
        case keepAndWatch
        case complete
    }

    var isBarrier: Bool {
        if flags.contains(.barrier) { return true }
        if case .syncWaiter(let waiter) = work { return waiter.isBarrier }
        return false
    }

    /// A drain request carries the class of the most important block waiting in the queue,
    /// over any QoS the target imposes (a raised child raises its target).
    static func drain(_ queue: WorkQueue, at qosClass: QoS.QoSClass) -> Job {
        Job(work: .drain(queue), qos: QoS(qosClass), flags: .enforceQoS, context: .noActivity, group: nil)
    }
}


extension Fifo where Element == Job {
    /// The first job is a barrier (read in place, without copying the job).
    var firstIsBarrier: Bool { firstSatisfies { $0.isBarrier } }
}
