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
}
#endif
