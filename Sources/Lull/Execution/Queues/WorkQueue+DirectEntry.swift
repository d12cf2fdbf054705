import Synchronization

/// A source's delivery that the poller runs in its inline batch, inside its idle serial
/// queue without a drain around it (docs/Queues.md, "Direct entry").
///
/// A delivery on a serial queue is a job of that queue: into the inbox, a drain request on
/// the global queue, the drain taking the job out and running it. When the poller finds an
/// event for a source whose serial queue is idle, that job would be the queue's only block:
/// so the poller claims the queue for it at once (owned, as by a drain, before anything else
/// can arrive), puts the job in its inline batch through the global queue, and the job runs
/// inside the queue and gives it back, which posts a drain request for whatever arrived
/// meanwhile. Blocks queued after the claim wait behind the delivery, as they would behind
/// its job in the queue; a `sync` waits for it.
extension WorkQueue {
    /// On the poller, for a source's delivery at `qos` whose work is `work`: claims this
    /// serial queue for the job and puts the job in the poller's inline batch, when the job
    /// would go there from the global queue under this one (its class is the one the thread
    /// polls for, in the pool that queue feeds), that global queue keeps the QoS the queue's
    /// floor resolves (`entersDirectlyFrom`), and the queue is idle (nothing waiting or
    /// running, not paused). The job is the one that global queue would put in the batch:
    /// its QoS resolved with the queue's floor (and `.enforceQoS`, which the global queue
    /// keeps), on that global queue (`globalClass`). False: nothing was claimed, and the job
    /// goes into this queue.
    ///
    /// The claim owns the queue with the poller as its owner (raised by more important
    /// blocks that arrive meanwhile), retained until the job runs (`runClaimed`): the batch
    /// may hand the job to another worker, and the poller may retire before it runs.
    func claimForInlineJob(qos: QoS, work: PostedWork) -> Bool {
        guard kind == .serial else { return false }
        return ThreadState.withCurrent { thread -> Bool in
            guard let polling = thread.pollingClass, let pool = thread.workerPool else { return false }
            let claimed = state.locked { state -> (QoS, QoS.QoSClass)? in
                guard !state.isPaused, !state.isOwned, !state.hasWaiting(self),
                      let target = state.target, state.entersDirectlyFrom(target),
                      case .root(let rootClass) = target.kind, target.rootExecutor === pool else { return nil }
                let resolved = QoSResolution.effective(qos, flags: [], floor: state.floor)
                guard resolved.qosClass == polling else { return nil }
                state.isOwned = true
                state.setOwner(thread.priorityReference.retain(), level: resolved.qosClass)
                return (resolved, rootClass)
            }
            guard let (resolved, rootClass) = claimed else { return false }
            thread.inlineBatch.append(Job(work: .posted(work), qos: resolved, flags: .enforceQoS,
                                          globalClass: rootClass, context: .empty, group: nil))
            return true
        }
    }

    /// The job a `claimForInlineJob` claimed the queue for, on the worker that runs it: runs
    /// `body` inside the queue (held exclusively, as by its drain: `workPrecondition`,
    /// `getSpecific` and the overrides of blocks that arrive see it so), then gives the queue
    /// back. When the queue was suspended since the claim, the job (`job()`) waits in the
    /// queue instead, as a drain that finds its queue suspended leaves its blocks there, and
    /// this returns false without running `body`.
    func runClaimed(thread: ThreadState, job: () -> Job, _ body: () -> Void) -> Bool {
        #if DEBUG
        DirectEntryTestHooks.runBeforeClaimedJob(self)
        #endif
        let (runs, claimer) = state.locked { state -> (Bool, Unmanaged<ThreadPriorityControl>?) in
            assert(state.isOwned, "Lull: a claimed job runs on a serial queue nobody owns")
            let claimer = state.owner
            guard !state.isPaused else {
                state.isOwned = false
                state.setOwner(nil)
                var waiting = Fifo<Job>()
                waiting.append(job())
                state.putBack(&waiting)
                return (false, claimer)
            }
            // This thread owns the queue now; blocks that arrived above the job's class
            // since the claim raise it.
            let level = thread.ownQoS.qosClass
            state.setOwner(thread.priorityReference, level: level)
            let waitingMax = state.pendingMax(self)
            if waitingMax > level { state.noteSerialArrival(waitingMax) }
            return (true, claimer)
        }
        claimer?.release()
        guard runs else { return false }
        thread.heldQueues.append(HeldQueue(self, exclusive: true))
        body()
        thread.heldQueues.removeLast()
        releaseSync(exclusive: true)
        return true
    }
}

extension QueueState {
    /// A job of this serial queue may run on `target` directly: a global queue that keeps
    /// the QoS the queue's floor resolved (with `.enforceQoS`), as the queue's drain runs
    /// it. The default global queue imposes no floor; another keeps a QoS of a class above
    /// its own and replaces any other by its own, so the queue's floor must be above it or
    /// be it (a floor below it comes only from `setTarget`).
    @inline(__always)
    func entersDirectlyFrom(_ target: WorkQueue) -> Bool {
        guard case .root(let rootClass) = target.kind else { return false }
        return rootClass == .default || (!floor.isUnspecified && floor.qosClass > rootClass) || floor == QoS(rootClass)
    }
}

#if DEBUG
/// Debug-build seam of the direct entry, for tests that must widen its window: runs on the
/// worker of a claimed job before it takes the queue over from the claim (a test queues a
/// block or suspends the queue here). Release builds have none of this.
enum DirectEntryTestHooks {
    static let beforeClaimedJob = Mutex<(@Sendable (WorkQueue) -> Void)?>(nil)

    static func runBeforeClaimedJob(_ queue: WorkQueue) {
        let hook = beforeClaimedJob.locked { $0 }
        hook?(queue)
    }
}
#endif
