import Synchronization

/// The jobs of the inline batch a worker runs (the work one wake-up produced for its class),
/// not yet started: the owner takes them one by one, and three paths may hand the rest to
/// the class queue — the owner's own wait (`WorkerPool.blocking`), the owner's long batch,
/// and the poll watch, from its own thread, when the owner is stuck in one job
/// (`PollWatch`). All go through `WorkerPool.handOverInlineBatch`.
///
/// State model (docs/WorkerPool.md, "The poll watch"): the jobs live under a small spin
/// lock. `next` (the owner) moves the wake-up's jobs in when the batch is empty, and the
/// first one out; `takeAll` (any thread) moves every one out at once. Each
/// job therefore leaves exactly once, by exactly one of them, and those taken together keep
/// their order. The owner pays one uncontended lock per job; nobody else takes the lock but
/// a hand-over and the watch's look at `isEmpty`, at most once per watch tick.
final class InlineBatch: Sendable {
    private let jobs = SpinFutexLock<Fifo<Job>>(Fifo(), rank: .inlineBatch)
    /// The class whose queue takes the jobs a hand-over moves.
    let pool: ClassPool
    /// The owner's job count (`WorkerActivity.jobs`) the watch saw at its previous tick
    /// while the batch had jobs left; only the watch's thread reads and writes it.
    let jobsAtLastWatchTick = Atomic<UInt64>(.max)

    init(pool: ClassPool) {
        self.pool = pool
    }

    /// The owner's next job, moved out (nil once the batch is empty: run out, or handed
    /// over); `more` tells whether jobs are left behind it. When the batch is empty, the
    /// wake-up's jobs (`pending`, filled only while the owner polls or completes its checks)
    /// are moved in first, and the finished batch's buffer goes back to `pending`, so that a
    /// wake-up's batch allocates nothing: starting a batch and taking its first job are one
    /// critical section.
    @inline(__always)
    func next(from pending: inout Fifo<Job>, more: inout Bool) -> Job? {
        #if DEBUG
        PoolTestHooks.runOwnerTakesNextJob(self)
        #endif
        return jobs.locked { jobs -> Job? in
            if jobs.isEmpty { swap(&jobs, &pending) }
            let job = jobs.popFirst()
            more = !jobs.isEmpty
            return job
        }
    }

    /// Every job not yet started, in order, taken out of the batch (for a hand-over).
    func takeAll() -> Fifo<Job> {
        #if DEBUG
        PoolTestHooks.runBatchHandOver(self)
        #endif
        var taken = Fifo<Job>()
        jobs.locked { jobs in if !jobs.isEmpty { swap(&jobs, &taken) } }
        return taken
    }

    var isEmpty: Bool {
        jobs.locked { $0.isEmpty }
    }
}
