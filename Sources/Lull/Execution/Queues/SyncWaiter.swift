import Synchronization

/// A thread blocked in `sync` on a queue that was busy. The queue's drain reaches it in FIFO
/// order and grants it the queue; the caller then runs its block on its own thread.
///
/// When the queue drains inside a serial target (a nested drain), the targets must stay
/// held while the caller runs, so the drain thread waits for `finish()` (`drainerWaits`).
final class SyncWaiter: Sendable {
    let isBarrier: Bool
    /// The waiting thread: it owns the queue once granted (and is raised as its owner).
    let callerPriority: ThreadPriorityControl
    private let granted = Parker()
    private let finished = Parker()
    private let drainerWaits = Atomic<Bool>(false)

    init(isBarrier: Bool, callerPriority: ThreadPriorityControl) {
        self.isBarrier = isBarrier
        self.callerPriority = callerPriority
    }

    func grant(drainerWaits waits: Bool) {
        drainerWaits.store(waits, ordering: .relaxed)
        granted.unpark()
    }

    func awaitGrant() {
        WorkerPool.blocking { granted.park() }
    }

    /// True when a drain thread waits for this caller (and so keeps the accounting).
    var isNested: Bool { drainerWaits.load(ordering: .relaxed) }

    func finish() {
        if isNested { finished.unpark() }
    }

    func awaitFinish() {
        finished.park()
    }
}
