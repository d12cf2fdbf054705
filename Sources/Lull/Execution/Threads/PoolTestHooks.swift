import Synchronization

#if DEBUG
/// Debug-build seams of the worker pool, for tests that must widen a window. Release builds
/// have none of this. (Thread creation fails on purpose through the shims' fault table.)
enum PoolTestHooks {
    /// Runs on the thread that claimed an idle worker to poll (`WorkerPool.ensurePoller`),
    /// after the claim is published and before the worker is woken: a test parks the
    /// claiming thread here to stand for a preemption at that point.
    static let claimedToPoll = Mutex<(@Sendable (Worker) -> Void)?>(nil)

    static func runClaimedToPoll(_ worker: Worker) {
        let hook = claimedToPoll.locked { $0 }
        hook?(worker)
    }

    /// Runs on a spinning worker when its spin ends, before it takes its class lock to
    /// decide what next: a test raises a need for a poller here to stand for one that
    /// arrives while the worker spins. Every pool of the process runs it (a test's hook
    /// looks at `worker.owner`).
    static let spinEnds = Mutex<(@Sendable (Worker) -> Void)?>(nil)

    static func runSpinEnds(_ worker: Worker) {
        let hook = spinEnds.locked { $0 }
        hook?(worker)
    }

    /// Jobs of inline batches that a wait handed to the class queue (`WorkerPool.blocking`).
    static let inlineJobsHandedOverByWaits = Atomic<Int>(0)
    /// Jobs of inline batches that the poll watch handed to the class queue.
    static let inlineJobsHandedOverByWatch = Atomic<Int>(0)

    /// Set while one of the two hooks below is installed: each costs a load otherwise.
    static let batchHooksInstalled = Atomic<Bool>(false)

    /// Runs on a batch's owner before it takes its next job (`InlineBatch.next`): a test
    /// holds the owner there while another thread hands the batch over.
    static let ownerTakesNextJob = Mutex<(@Sendable (InlineBatch) -> Void)?>(nil)

    static func runOwnerTakesNextJob(_ batch: InlineBatch) {
        guard batchHooksInstalled.load(ordering: .relaxed) else { return }
        let hook = ownerTakesNextJob.locked { $0 }
        hook?(batch)
    }

    /// Runs on any thread about to take a batch's jobs for a hand-over
    /// (`InlineBatch.takeAll`): a test holds one hand-over there while another runs.
    static let batchHandOver = Mutex<(@Sendable (InlineBatch) -> Void)?>(nil)

    static func runBatchHandOver(_ batch: InlineBatch) {
        guard batchHooksInstalled.load(ordering: .relaxed) else { return }
        let hook = batchHandOver.locked { $0 }
        hook?(batch)
    }
}
#endif
