import Synchronization

#if DEBUG
/// Debug-build seams of the worker pool, for tests that must widen a window or make thread
/// creation fail on purpose. Release builds have none of this.
enum PoolTestHooks {
    /// Runs on the thread that claimed an idle worker to poll (`WorkerPool.ensurePoller`),
    /// after the claim is published and before the worker is woken: a test parks the
    /// claiming thread here to stand for a preemption at that point.
    static let claimedToPoll = Mutex<(@Sendable (Worker) -> Void)?>(nil)

    /// While positive, each thread creation of the pool fails with EAGAIN and counts this
    /// down (as `pthread_create` does under RLIMIT_NPROC).
    static let failingThreadCreations = Atomic<Int>(0)

    static func runClaimedToPoll(_ worker: Worker) {
        let hook = claimedToPoll.locked { $0 }
        hook?(worker)
    }

    /// True when this thread creation is to fail.
    static func threadCreationFails() -> Bool {
        var current = failingThreadCreations.load(ordering: .relaxed)
        while current > 0 {
            let (exchanged, original) = failingThreadCreations.compareExchange(
                expected: current, desired: current - 1, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }
}
#endif
