import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The pool's side of the poll watch (`PollWatch`) and the one hand-over of an inline batch
/// that the owner's wait, the owner's long batch and the watch share.
extension WorkerPool {
    /// Why the jobs of an inline batch not yet started go to the class queue.
    enum InlineHandOver {
        /// The owner waits in one of Lull's waits (`blocking`): it also stops counting as
        /// running, in the same critical section.
        case wait
        /// The owner's batch has run long (`runInline`).
        case longBatch
        /// The owner is stuck in one job (the poll watch, from its own thread).
        case watch
    }

    /// Moves the jobs of `batch` not yet started to its class queue, in order, and recruits
    /// a worker for them and makes sure some worker polls — as the owner would, had it not
    /// been stuck or waiting. Each job is taken out of the batch exactly once (`takeAll`,
    /// under the batch's lock), so whichever path runs first gets them and the others find
    /// none. The class's counters change, and the jobs are queued, in one critical section;
    /// the recruit and the poller request are made after it.
    func handOverInlineBatch(_ batch: InlineBatch?, in pool: ClassPool, for reason: InlineHandOver) {
        var jobs = batch?.takeAll() ?? Fifo<Job>()
        let count = jobs.count
        if count == 0 && reason != .wait { return }
        let helper = pool.state.locked { state -> Helper in
            if reason == .wait {
                state.running -= 1
                state.blocked += 1
            }
            while let job = jobs.popFirst() { state.pushJob(job, pool) }
            return state.jobs.isEmpty ? .none : recruit(&state)
        }
        #if DEBUG
        switch reason {
        case .wait: PoolTestHooks.inlineJobsHandedOverByWaits.add(count, ordering: .relaxed)
        case .longBatch: break
        case .watch: PoolTestHooks.inlineJobsHandedOverByWatch.add(count, ordering: .relaxed)
        }
        #endif
        if reason == .watch { pollWatch.handOvers.add(1, ordering: .relaxed) }
        start(helper, in: pool)
        // The owner may be the last poller, away from the reactor while it runs the batch.
        ensurePollerIfNeeded()
    }

    /// Starts the watch's thread the first time the reactor needs a poller (never before
    /// the reactor has interest). Called outside every lock. A thread that cannot be made
    /// leaves the pool as it is without the watch: said once, not retried.
    func startPollWatchIfNeeded() {
        guard pollWatch.claimStart() else { return }
        // Opened here, before the thread and by the thread that first needs a poller, so
        // that the descriptor exists from the reactor's first interest on.
        do throws(SystemError) {
            _ = pollWatch.alarm.storeIfNil(try PollWatchAlarm.open())
        } catch {
            RuntimeLog.once("poll-watch-alarm-open-failed") {
                "could not open Lull's poll watch alarm (\(error)); the watch is woken for every batch of a sparse process instead"
            }
        }
        let context = Unmanaged.passRetained(self).toOpaque()
        let result: Int32
        if let starter = starterFor(.userInteractive) {
            let bits = UInt(bitPattern: context)
            result = starter.create { WorkerPool.spawnWatchThread(UnsafeMutableRawPointer(bitPattern: bits)!) }
        } else {
            result = WorkerPool.spawnWatchThread(context)
        }
        guard result != 0 else { return }
        Unmanaged<WorkerPool>.fromOpaque(context).release()
        RuntimeLog.once("poll-watch-failed") {
            "could not start Lull's poll watch (\(SystemError("pthread_create", code: -result))); a handler that blocks in a system call of its own keeps the reactor and its wake-up's other handlers waiting until it returns"
        }
    }

    /// `pthread_create` of the watch's thread, with the pool retained in `context`: 0 or -errno.
    private static func spawnWatchThread(_ context: UnsafeMutableRawPointer) -> Int32 {
        createDetachedThread(context) { context in
            let pool = Unmanaged<WorkerPool>.fromOpaque(context!).takeRetainedValue()
            pool.pollWatchMain()
            return nil
        }
    }

    private func pollWatchMain() {
        let tid = lull_gettid()
        _ = lull_set_thread_name("lull.watch")
        // The watch must get a CPU while the workers keep every one busy: the
        // user-interactive class's priority (or the nearest allowed), never SCHED_IDLE.
        if lull_get_thread_policy(tid) == LULL_SCHED_IDLE { _ = EnergyPolicy.setIdle(false, tid: tid) }
        ThreadPriority.apply(QoS(.userInteractive), tid: tid)
        pollWatch.run(for: self)
    }

    /// The kernel says a worker sleeps inside the reactor's poll.
    var pollerIsInsidePoll: Bool { pollerThreadID.load(ordering: .relaxed) != 0 }

    /// One tick of the watch: hands over the batches whose owner is inside the same job as at
    /// the previous tick, and asks for a poller when the reactor has interest and no poll
    /// ended since the previous tick with nobody inside one. True while something is to
    /// watch (a batch with jobs left, or nobody inside a poll the reactor needs).
    func watchTick(lastEpoch: inout UInt64) -> Bool {
        var watching = false
        for qosClass in WorkerPool.pollingClasses {
            let pool = classes[qosClass.poolIndex]
            var stuck: [InlineBatch] = []
            let busy = pool.state.locked { state -> Bool in
                var busy = false
                for activity in state.workers.values {
                    guard let batch = activity.inlineBatch, !batch.isEmpty else { continue }
                    busy = true
                    let jobs = activity.jobs.load(ordering: .relaxed)
                    let previous = batch.jobsAtLastWatchTick.exchange(jobs, ordering: .relaxed)
                    // Odd: inside a job; unchanged: the same one since the previous tick.
                    if jobs & 1 == 1 && jobs == previous { stuck.append(batch) }
                }
                return busy
            }
            if busy { watching = true }
            for batch in stuck { handOverInlineBatch(batch, in: pool, for: .watch) }
        }
        let epoch = pollWatch.pollEpoch.load(ordering: .relaxed)
        if reactor.needsPoller && !pollerIsInsidePoll {
            watching = true
            if epoch == lastEpoch {
                pollWatch.pollerRequests.add(1, ordering: .relaxed)
                ensurePoller()
            }
        }
        lastEpoch = epoch
        return watching
    }

    /// Nothing for the watch to watch: no inline batch has jobs left, and a worker is inside
    /// the reactor's poll or there is nothing to poll for. The batches are read first: a
    /// batch that was published and is already run out was published after its poller left
    /// the poll, so the read of the poller after it sees that too.
    func watchFindsQuiet() -> Bool {
        for qosClass in WorkerPool.pollingClasses {
            let pool = classes[qosClass.poolIndex]
            let busy = pool.state.locked { state in
                state.workers.values.contains { activity in
                    guard let batch = activity.inlineBatch else { return false }
                    return !batch.isEmpty
                }
            }
            if busy { return false }
        }
        return pollerIsInsidePoll || !reactor.needsPoller
    }
}
