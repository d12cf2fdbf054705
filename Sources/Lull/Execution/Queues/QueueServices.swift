import Synchronization

/// What the queues of one runtime share: the worker pool their global queues feed, the
/// timer engine their delayed blocks (and timer sources) wait on, and the root queues. Every
/// queue holds its hierarchy's, taken from its target when it is made, so a queue reaches
/// its runtime without a global.
final class QueueServices: Sendable {
    let pool: WorkerPool
    let timers: TimerEngine
    /// Connected once by the composition root, right after the roots are made (they need
    /// these services first); read only by queues made after that.
    private let rootQueues = AtomicLazyReference<RootQueues>()

    init(pool: WorkerPool, timers: TimerEngine) {
        self.pool = pool
        self.timers = timers
    }

    func connect(_ roots: RootQueues) {
        let stored = rootQueues.storeIfNil(roots)
        precondition(stored === roots, "Lull: a runtime's root queues are connected twice")
    }

    var roots: RootQueues {
        guard let roots = rootQueues.load() else {
            lullFatal("the root queues are used before the runtime connected them")
        }
        return roots
    }
}
