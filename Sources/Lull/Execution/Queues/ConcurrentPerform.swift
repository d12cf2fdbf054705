import Synchronization

extension WorkQueue {
    /// Runs `execute(0) ... execute(iterations - 1)` in parallel on the calling thread and
    /// `pool`, at the caller's QoS; returns when every iteration has returned.
    ///
    /// The caller takes part, so nothing deadlocks when the pool is busy: helpers that have
    /// not started by the time the iterations run out simply do nothing.
    static func concurrentPerform(iterations: Int, on pool: WorkerPool, execute work: (Int) -> Void) {
        guard iterations > 0 else { return }
        guard iterations > 1 else {
            work(0)
            return
        }
        withoutActuallyEscaping(work) { escapable in
            let thread = ThreadState.current
            let shared = ConcurrentPerformState(iterations: iterations, work: escapable,
                                                callerQueue: thread.heldQueues.last?.queue,
                                                callerGlobal: thread.runningGlobal)
            let qos = QoSResolution.inferred(from: thread.ownQoS)
            let helpers = min(pool.cpuCount, iterations) - 1
            for _ in 0..<helpers {
                pool.submit(Job(work: .block({ shared.help(onHelperThread: true) }), qos: qos, flags: [],
                                             context: thread.currentContext, group: nil))
            }
            shared.help(onHelperThread: false)
            shared.closeAndWait()
        }
    }
}

/// The iterations of one `concurrentPerform` and the helpers taking part.
///
/// `@unchecked Sendable` is sound: `work` is the caller's non-escaping closure, read only
/// by helpers between a successful `enter()` and their `leave()`; `closeAndWait()` forbids
/// new entries, waits until every entered helper has left, and only then clears `work` —
/// so no call outlives the caller's frame and helpers still queued in the pool (which will
/// find the state closed) hold no reference to the closure. Each index is claimed exactly
/// once through the atomic counter.
///
/// Helpers run their iterations on the caller's queue, as Dispatch's do (for
/// `workPrecondition` and `getSpecific`): the queue whose block called, held `unowned(unsafe)`
/// because that block waits in `closeAndWait()` until every entered helper has left.
private final class ConcurrentPerformState: @unchecked Sendable {
    private static let closedBit = 1 << 62

    private let iterations: Int
    private var work: ((Int) -> Void)?
    private let nextIndex = Atomic<Int>(0)
    private let participants = Atomic<Int>(0)
    private let allLeft = Parker()
    private unowned(unsafe) let callerQueue: WorkQueue?
    private let callerGlobal: QoS.QoSClass?

    init(iterations: Int, work: @escaping (Int) -> Void, callerQueue: WorkQueue?, callerGlobal: QoS.QoSClass?) {
        self.iterations = iterations
        self.work = work
        self.callerQueue = callerQueue
        self.callerGlobal = callerGlobal
    }

    func help(onHelperThread: Bool) {
        guard enter() else { return }
        if onHelperThread {
            let thread = ThreadState.current
            let outerGlobal = thread.runningGlobal
            thread.runningGlobal = callerGlobal
            if let callerQueue { thread.heldQueues.append(HeldQueue(callerQueue, exclusive: false)) }
            runIterations()
            if callerQueue != nil { thread.heldQueues.removeLast() }
            thread.runningGlobal = outerGlobal
        } else {
            runIterations()
        }
        if participants.subtract(1, ordering: .acquiringAndReleasing).newValue == ConcurrentPerformState.closedBit {
            allLeft.unpark()
        }
    }

    /// A frame of its own, so that the local reference to `work` is gone before `help`
    /// announces that it left.
    @inline(never)
    private func runIterations() {
        guard let work else { return }
        while true {
            let index = nextIndex.wrappingAdd(1, ordering: .relaxed).oldValue
            if index >= iterations { break }
            work(index)
        }
    }

    private func enter() -> Bool {
        var current = participants.load(ordering: .relaxed)
        while current & ConcurrentPerformState.closedBit == 0 {
            let (exchanged, original) = participants.compareExchange(
                expected: current, desired: current + 1, ordering: .acquiringAndReleasing)
            if exchanged { return true }
            current = original
        }
        return false
    }

    func closeAndWait() {
        let before = participants.bitwiseOr(ConcurrentPerformState.closedBit, ordering: .acquiringAndReleasing).oldValue
        if before & ~ConcurrentPerformState.closedBit != 0 {
            WorkerPool.blocking { allLeft.park() }
        }
        work = nil
    }
}
