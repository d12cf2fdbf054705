import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Blocking work must not starve a class. Lull's own waits tell the pool when a worker
/// blocks (`WorkerPool.blocking`); a block that sleeps or does blocking I/O on its own does
/// not. So while a class has queued work and every thread it may run is taken, the pool
/// looks again `interval` later, from the polling thread, and replaces, up to the pool's
/// ceiling, the workers that are blocked without Lull knowing: a worker counts as blocked
/// when it is inside the same job as at the previous look, its thread used almost no CPU
/// since then (`busyCPU`), and the kernel reports it sleeping (`S` or `D` in /proc) — and
/// only if the class finished no job in the meantime. A busy worker is none of that: one
/// caught asleep for an instant on a lock (the class's own, a caller's, the allocator's)
/// used CPU since the last look, and one between jobs is in none. Workers in Lull's waits
/// are counted apart (`blocked`): another thread was started for them when they blocked.
/// How many threads a look starts is `StallPolicy`'s: each blocked worker once, none while
/// the class's workers wait for a CPU (runnable but descheduled is not blocked), never more
/// than the queued work. Every class is looked at alike, the poller's own included: the poller never takes a
/// job while there is something to poll for (see `WorkerPool`), so the check always gets
/// to run.
///
/// A class with queued work, no idle worker, none on its way and fewer running than it may
/// run is short of a thread that could not be created (`pthread_create` failed, or the
/// ceiling was reached): the check starts one again, looking again later while it fails,
/// with a delay that doubles with each consecutive failed creation (up to
/// `maximumInterval`), and every `interval` while the pool is at its ceiling.
///
/// Nothing runs while the pool is neither saturated nor short of a thread: the check is
/// armed by a saturated submit or a failed thread creation, never by a clock, with a
/// leeway (a watchdog, not a deadline), and taken back, with its wake-up, by a worker that
/// runs out of work while no class has queued work: a burst that drains before the look
/// costs no wake-up. The state model is in docs/WorkerPool.md.
final class StallMonitor: Sendable {
    static let interval: UInt64 = 50_000_000
    /// The CPU time a worker may have used between two looks and still count as waiting
    /// through the interval (2% of it): a blocked thread uses none, a busy one far more,
    /// even on a loaded machine that gives it a fraction of a core.
    static let busyCPU: UInt64 = 1_000_000
    static let maximumInterval: UInt64 = 1_600_000_000

    /// The look is a watchdog, not a deadline: its window is [delay, delay + leeway], so
    /// that it shares a wake-up with any timer due in it.
    static let leeway: UInt64 = interval

    /// Whether a look is scheduled: lets `arm` and `cancelIfNothingWaits` return at once,
    /// without the lock, when there is nothing to do (every saturated submit and every
    /// worker that runs out of work asks).
    private let armed = Atomic<Bool>(false)
    /// The scheduled look and its generation: a look cancelled too late to stop its fire
    /// finds another generation (or none) and does nothing.
    private let scheduled = Mutex<(entry: CallbackEntry, generation: UInt64)?>(nil)
    private let generations = Atomic<UInt64>(0)
    /// Where the look is scheduled: the runtime's timer engine, as housekeeping.
    private let timers: TimerEngine

    init(timers: TimerEngine) {
        self.timers = timers
    }

    /// The delay of the next look after `failures` consecutive failed thread creations.
    static func delay(afterFailures failures: Int) -> UInt64 {
        min(maximumInterval, interval << UInt64(min(max(failures, 0), 5)))
    }

    /// Whether a look is scheduled (for tests).
    var isArmed: Bool { armed.load(ordering: .acquiring) }

    /// Schedules `check` `delay` from now (within `leeway`), unless a look is scheduled.
    func arm(after delay: UInt64, _ check: @escaping @Sendable () -> Void) {
        if armed.load(ordering: .acquiring) { return }
        let generation = generations.add(1, ordering: .relaxed).newValue
        let entry = CallbackEntry(isHousekeeping: true) { [self] in
            if take(generation) { check() }
        }
        let won = scheduled.locked { current -> Bool in
            guard current == nil else { return false }
            current = (entry, generation)
            armed.store(true, ordering: .releasing)
            return true
        }
        // Scheduled after the lock: a cancel in between finds the entry not yet scheduled
        // and clears the record, so that the late fire finds another generation.
        if won { timers.schedule(entry, deadline: timers.now + delay, leeway: StallMonitor.leeway) }
    }

    /// The look's fire: true when it is the scheduled one (which is no longer scheduled).
    private func take(_ generation: UInt64) -> Bool {
        scheduled.locked { current -> Bool in
            guard current?.generation == generation else { return false }
            current = nil
            armed.store(false, ordering: .releasing)
            return true
        }
    }

    /// Takes the scheduled look back, with the wake-up the reactor was armed for it: called
    /// when no class has queued work (a burst drained before the look), so that a process
    /// whose bursts drain wakes only for its own timers.
    func cancel() {
        guard armed.load(ordering: .acquiring) else { return }
        let entry = scheduled.locked { current -> CallbackEntry? in
            defer {
                current = nil
                armed.store(false, ordering: .releasing)
            }
            return current?.entry
        }
        if let entry { timers.cancel(entry, reclaimingWakeUp: true) }
    }

    /// True when the kernel says the thread sleeps (interruptibly or not).
    static func isSleeping(tid: Int32) -> Bool {
        let path = "/proc/self/task/\(tid)/stat"
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, 256) }
        guard count > 0 else { return false }
        // "tid (comm) S ...": the state follows the last ')', since comm may hold one.
        guard let close = buffer[0..<count].lastIndex(of: UInt8(ascii: ")")), close + 2 < count else { return false }
        let state = buffer[close + 2]
        return state == UInt8(ascii: "S") || state == UInt8(ascii: "D")
    }
}

extension WorkerPool {
    /// Called when work was queued and no thread could take it, or a thread could not be
    /// created.
    func noteSaturated() {
        // Every saturated submit comes here: while a look is armed, return before the
        // closure (an allocation) is made.
        if stallMonitor.isArmed { return }
        let delay = StallMonitor.delay(afterFailures: threadCreationFailures.load(ordering: .relaxed))
        stallMonitor.arm(after: delay) { self.checkForStalls() }
    }

    /// Called by a worker that found no job of its class: when no class has queued work,
    /// the scheduled look has nothing to look at (a burst that saturated a class drained
    /// before it), and is taken back with its wake-up.
    func cancelStallCheckIfNothingWaits() {
        guard stallMonitor.isArmed else { return }
        for pool in classes where pool.queuedJobs.load(ordering: .acquiring) > 0 { return }
        if deferredCheckHolders.count.load(ordering: .sequentiallyConsistent) > 0 { return }
        // A look that serves deferred checks fires once (a wake-up per interval at most, while
        // batches defer checks) rather than being taken back and armed again, two timer
        // updates and a poller's wake-up, after every such batch.
        if lookServesDeferredChecks.load(ordering: .relaxed) { return }
        stallMonitor.cancel()
        // A worker that deferred a check after the look above, and saw the look still
        // armed before the cancel, relies on it: arm it again (the count is sequentially
        // consistent with the worker's, which counts before it looks at `isArmed`).
        atomicMemoryFence(ordering: .sequentiallyConsistent)
        if deferredCheckHolders.count.load(ordering: .sequentiallyConsistent) > 0 { watchDeferredChecks() }
    }

    /// By a worker about to run another read delivery while it holds deferred level checks:
    /// makes sure the stall check will look, in case that handler blocks in a system call
    /// of its own waiting for what a deferred source's next delivery does. The look takes
    /// the checks of every worker that still holds some (`takeDeferredChecks`).
    ///
    /// The look fires on the poller: when nobody polls (this thread was the last poller, back
    /// from its poll with its batch), another worker is asked to, or a handler of the batch
    /// that blocks would leave the look, and the deferred source, waiting for ever.
    func watchDeferredChecks() {
        if !lookServesDeferredChecks.load(ordering: .relaxed) {
            lookServesDeferredChecks.store(true, ordering: .relaxed)
        }
        atomicMemoryFence(ordering: .sequentiallyConsistent)
        if !stallMonitor.isArmed {
            stallMonitor.arm(after: StallMonitor.interval) { self.checkForStalls() }
        }
        // The look fires only on a polling thread, and this worker may be the poller away
        // running its inline batch, about to block in that handler: the engine asks for a
        // poller only when it arms an earlier window, which it does not while a timer due
        // sooner is armed. So a poller is asked for here (one request at a time).
        ensurePollerIfNeeded()
    }

    /// The stall check's look at deferred level checks: completes those of every worker
    /// that holds some (its owner, running or blocked, finds them taken).
    private func takeDeferredChecks() {
        lookServesDeferredChecks.store(false, ordering: .relaxed)
        // Paired with `watchDeferredChecks`: the look was disarmed before this read.
        atomicMemoryFence(ordering: .sequentiallyConsistent)
        guard deferredCheckHolders.count.load(ordering: .sequentiallyConsistent) > 0 else { return }
        for pool in classes {
            let activities = pool.state.locked { state in Array(state.workers.values) }
            for activity in activities where activity.deferredChecks.mayHoldChecks {
                #if DEBUG
                DeferredLevelChecks.takenByLookCount.add(1, ordering: .relaxed)
                #endif
                activity.deferredChecks.completeAll()
            }
        }
    }

    private enum ClassCondition {
        /// Jobs wait, every thread the class may run is taken: some may be blocked.
        case saturated(workers: [(tid: Int32, activity: WorkerActivity)], taken: UInt64)
        /// Jobs wait with a thread missing (its creation failed): start one.
        case shortOfAThread
        /// Jobs wait with a thread missing and the pool at its ceiling: look again later.
        case atTheCeiling
    }

    /// A class with no thread whose thread could not be created hands its queued jobs to the
    /// nearest class that has a thread (a more important one first), where they run at that
    /// thread's priority: a logged degradation, instead of work that waits for a thread that
    /// may never come (RLIMIT_NPROC reached, say). The class gets its own thread again as
    /// soon as one can be created.
    private func rehomeJobsOfThreadlessClass(_ pool: ClassPool) {
        guard let index = classes.firstIndex(where: { $0 === pool }) else { return }
        let above = classes[(index + 1)...]
        let below = classes[..<index].reversed()
        guard let host = (Array(above) + Array(below)).first(where: { candidate in
            candidate.state.locked { $0.threads > 0 }
        }) else { return }
        var moved = pool.state.locked { state -> Fifo<Job> in
            guard state.threads == 0 else { return Fifo<Job>() }
            var jobs = Fifo<Job>()
            while let job = state.popJob(pool) { jobs.append(job) }
            return jobs
        }
        guard !moved.isEmpty else { return }
        let count = moved.count
        let helper = host.state.locked { state -> Helper in
            while let job = moved.popFirst() { state.pushJob(job, host) }
            return recruit(&state)
        }
        start(helper, in: host)
        RuntimeLog.once("jobs-rehomed-\(pool.qosClass.name)") {
            "no \(pool.qosClass.name) worker thread could be created: \(count) queued job(s) of that class run on \(host.qosClass.name) threads, at their priority, until one can be"
        }
    }

    func checkForStalls() {
        takeDeferredChecks()
        var stillSaturated = false
        let pollerTid = pollerThreadID.load(ordering: .acquiring)
        for pool in classes {
            let condition = pool.state.locked { state -> ClassCondition? in
                guard !state.jobs.isEmpty, state.idle.isEmpty else { return nil }
                guard state.running >= cpuCount else {
                    guard state.waking == 0, state.spinning == 0 else { return nil }
                    // At the ceiling: look again once threads of other classes may have retired.
                    guard reserveThread() else { return .atTheCeiling }
                    state.running += 1
                    state.threads += 1
                    state.waking += 1
                    return .shortOfAThread
                }
                // Workers woken for work and not yet back on a CPU sleep in the kernel's
                // eyes too, but are in no job: the look below passes them by.
                return .saturated(workers: state.workers.map { ($0.key, $0.value) }, taken: state.taken)
            }
            let workers: [(tid: Int32, activity: WorkerActivity)], taken: UInt64
            switch condition {
            case nil:
                continue
            case .shortOfAThread:
                // A failure re-arms the check itself (with back-off); a class left with no
                // thread at all hands its queued work to one that has a thread.
                if !startWorker(Worker(pool: pool, owner: self), wokenForWork: true, reason: .retry) {
                    rehomeJobsOfThreadlessClass(pool)
                }
                continue
            case .atTheCeiling:
                stillSaturated = true
                continue
            case .saturated(let classWorkers, let jobsTaken):
                (workers, taken) = (classWorkers, jobsTaken)
            }
            stillSaturated = true
            // Progress since the last look: threads seen asleep were only between jobs or on
            // a lock for a moment (a caller's lock, the allocator's), not blocked. Each look
            // records every worker's job, CPU time and run-queue wait all the same, so that
            // the next look measures from this one.
            let progressed = pool.takenAtLastCheck.exchange(taken, ordering: .relaxed) != taken
            var looks: [StallPolicy.Look] = []
            looks.reserveCapacity(workers.count)
            for worker in workers where worker.tid != pollerTid {
                let inOneJob = worker.activity.waitedThroughInterval(
                    tid: worker.tid, cpuBudget: progressed ? 0 : StallMonitor.busyCPU)
                let runQueueWait = worker.activity.runQueueWaitSinceLastCheck(tid: worker.tid)
                looks.append(StallPolicy.Look(inOneJobWithoutCPU: inOneJob,
                                              sleeping: inOneJob && StallMonitor.isSleeping(tid: worker.tid),
                                              runQueueWait: runQueueWait))
            }
            if progressed { continue }
            let wanted = pool.state.locked { state in
                StallPolicy.threadsToStart(looks: looks, running: state.running, knownBlocked: state.blocked,
                                           queued: state.jobs.count, waking: state.waking, cpuCount: cpuCount)
            }
            for _ in 0..<wanted {
                let spawn = pool.state.locked { state -> Bool in
                    guard state.jobs.count > state.waking, reserveThread() else { return false }
                    state.running += 1
                    state.threads += 1
                    state.waking += 1
                    return true
                }
                guard spawn, startWorker(Worker(pool: pool, owner: self), wokenForWork: true,
                                         reason: .stallReplacement) else { break }
            }
        }
        if stillSaturated { noteSaturated() }
    }
}
