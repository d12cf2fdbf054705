import Synchronization

#if DEBUG
/// Debug-build seams of the serial queue's inbox protocol, for tests that must widen a
/// window (docs/Queues.md, "The serial queue's inbox"). Release builds have none of this.
/// Every queue of the process runs them: a test's hook looks at the queue it is given.
enum QueueTestHooks {
    /// Runs on a serial drain that found nothing more to take, before the section in which
    /// it gives the queue up: a test enqueues here to stand for a producer that arrives as
    /// the drain goes idle.
    static let drainGoesIdle = Mutex<(@Sendable (WorkQueue) -> Void)?>(nil)

    /// Runs on a producer that pushed into a serial queue's inbox and takes the lock (it
    /// found nothing counted, or its class needs the lock), before it does.
    static let slowEnqueue = Mutex<(@Sendable (WorkQueue) -> Void)?>(nil)

    /// Runs on a producer of a serial queue before it pushes its job into the inbox: a test
    /// holds a producer here while a drain takes and empties the inbox.
    static let beforePush = Mutex<(@Sendable (WorkQueue) -> Void)?>(nil)

    /// Runs on the thread that starts a block a concurrent queue forwarded to its global
    /// target, before it checks for a suspension: a test holds blocks here while it
    /// suspends the queue. Given the block's group, by which a test tells blocks apart.
    static let forwardedStarts = Mutex<(@Sendable (WorkQueue, WorkGroup?) -> Void)?>(nil)

    static func runForwardedStarts(_ queue: WorkQueue, group: WorkGroup?) {
        let hook = forwardedStarts.locked { $0 }
        hook?(queue, group)
    }

    static func runBeforePush(_ queue: WorkQueue) {
        let hook = beforePush.locked { $0 }
        hook?(queue)
    }

    static func runDrainGoesIdle(_ queue: WorkQueue) {
        let hook = drainGoesIdle.locked { $0 }
        hook?(queue)
    }

    static func runSlowEnqueue(_ queue: WorkQueue) {
        let hook = slowEnqueue.locked { $0 }
        hook?(queue)
    }
}
#endif
