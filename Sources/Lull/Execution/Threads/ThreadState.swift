import CLullShims
#if canImport(Glibc)
import Glibc
#endif

/// What Lull knows about the calling thread: whether it is one of its workers, the QoS it
/// runs at, the execution context of the block it runs, and which queues it holds.
///
/// One instance per thread, reached through a pthread key; it is only ever touched by its
/// own thread, which is why it needs no locking and is not `Sendable`.
///
/// Its mutable fields are `@exclusivity(unchecked)`: Swift checks every modification of a
/// class's stored property at run time for an overlapping access, and on `sync` and `async`
/// those checks (a thread-local access set) are a large share of the time (measured in
/// Benchmarks/README.md). They can never
/// fire here: only the owning thread touches the fields, and each access is a single read,
/// write, append or swap that calls no code which could touch the same field again.
final class ThreadState {
    let tid: Int32
    /// The worker-pool class this thread belongs to; nil for threads Lull did not create.
    @exclusivity(unchecked) var workerClass: QoS.QoSClass?
    /// The worker pool this thread belongs to; nil for threads Lull did not create.
    @exclusivity(unchecked) var workerPool: WorkerPool?
    /// The QoS of the work this thread runs, overrides excluded: what work it submits
    /// inherits (as in Dispatch, an override never propagates).
    @exclusivity(unchecked) private(set) var ownQoS: QoS
    /// Its nice value, shared with the threads that raise it while they wait on its work.
    let priority: ThreadPriorityControl
    /// `priority` without reference counting, for the queues that record their owner.
    let priorityReference: Unmanaged<ThreadPriorityControl>
    /// The QoS this thread has when it runs nothing (its class, or the foreign default).
    let baseQoS: QoS
    @exclusivity(unchecked) var context: ExecutionContext = .empty
    /// Serial queues (and barrier-held concurrent queues) this thread holds, innermost last.
    @exclusivity(unchecked) var heldQueues: [HeldQueue] = []
    /// The global queue whose job this thread runs (a block, or a drain of a queue that
    /// targets it); nil outside such a job.
    @exclusivity(unchecked) var runningGlobal: QoS.QoSClass?
    /// Set while this thread polls the reactor: work for its class goes to its inline batch.
    @exclusivity(unchecked) var pollingClass: QoS.QoSClass?
    @exclusivity(unchecked) var inlineBatch = Fifo<Job>()
    /// The jobs of the inline batch this worker runs, not yet started (nil on threads that
    /// are not workers). A job that waits in one of Lull's waits hands them to its class
    /// queue first (`WorkerPool.blocking`): what it waits for may be one of them; the poll
    /// watch hands them over from its own thread when the job is stuck (`PollWatch`).
    /// Unretained: the worker's `WorkerActivity` owns the batch for as long as the thread
    /// runs the worker loop, the only code that reads this field, and a batch reached per
    /// wake-up costs no retain and release.
    @exclusivity(unchecked) var runningInlineBatch: Unmanaged<InlineBatch>?
    /// Set on a worker: where read deliveries leave their level checks (see
    /// `DeferredLevelChecks`); nil on other threads, where each check is made at once.
    @exclusivity(unchecked) var deferredChecks: DeferredLevelChecks?
    /// Set by the worker loop while it runs a job it took from its class queue: when the job
    /// returns, the thread goes straight back to that queue.
    @exclusivity(unchecked) var runsLoopJob = false
    /// Set, on such a job, around a drain's last act: the request for the queue's next turn
    /// (see `WorkerPool.submit`).
    @exclusivity(unchecked) var postsOwnContinuation = false
    /// The timer slack this thread asked the kernel for (ns; 0: `TimerSlack.threadDefault`), so that the
    /// poller calls prctl only when the value changes (see `TimerSlack`).
    @exclusivity(unchecked) var timerSlack: UInt64 = 0

    private init(workerClass: QoS.QoSClass?) {
        tid = lull_gettid()
        self.workerClass = workerClass
        if let workerClass {
            baseQoS = QoS(workerClass)
        } else {
            // Darwin's main thread is user-interactive; other threads start at default.
            baseQoS = tid == getpid() ? .userInteractive : .default
        }
        ownQoS = baseQoS
        var nice: Int32 = 0
        priority = ThreadPriorityControl(tid: tid, own: baseQoS,
                                         nice: lull_get_thread_nice(tid, &nice) == 0 ? nice : 0)
        priorityReference = Unmanaged.passUnretained(priority)
    }

    /// Completes the level checks this thread deferred, if any: before it runs anything but
    /// a read delivery, and before it waits.
    @inline(__always)
    func completeDeferredChecks() {
        if let checks = deferredChecks, checks.mayHoldChecks { checks.completeAll() }
    }

    /// What the thread runs at now: its own QoS, or an override if one is higher.
    var currentQoS: QoS {
        if let overrideClass = priority.overrideClass, overrideClass > ownQoS.qosClass {
            return QoS(overrideClass)
        }
        return ownQoS
    }

    /// The nice value in force (tracked to skip redundant setpriority calls).
    var niceValue: Int32 {
        get { priority.appliedNice }
        set { priority.appliedNice = newValue }
    }

    /// Takes on `qos` as the thread's own QoS for good, without moving its nice value.
    func adoptQoS(_ qos: QoS) {
        ownQoS = qos
        priority.adoptOwn(qos)
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let result = pthread_key_create(&key) { pointer in
            guard let pointer else { return }
            Unmanaged<ThreadState>.fromOpaque(pointer).release()
        }
        guard result == 0 else {
            lullFatal("cannot make the key of its per-thread state", error: SystemError("pthread_key_create", code: result),
                      remedy: "The process has used all of its PTHREAD_KEYS_MAX thread-specific keys")
        }
        return key
    }()

    static var current: ThreadState {
        if let pointer = pthread_getspecific(key) {
            return Unmanaged<ThreadState>.fromOpaque(pointer).takeUnretainedValue()
        }
        return install(ThreadState(workerClass: nil))
    }

    /// Runs `body` with the calling thread's state, without counting a reference to it: the
    /// thread-specific slot holds the state (retained) until the thread exits, and `body`
    /// runs on this thread, so the state outlives the call. Every submission asks.
    @inline(__always)
    static func withCurrent<Result>(_ body: (ThreadState) throws -> Result) rethrows -> Result {
        guard let pointer = pthread_getspecific(key) else { return try body(current) }
        return try Unmanaged<ThreadState>.fromOpaque(pointer)._withUnsafeGuaranteedRef(body)
    }

    /// Where a submit of work of `qosClass` to `pool` from the calling thread goes, read
    /// without retaining its state (every submit asks).
    static func submitRoute(for qosClass: QoS.QoSClass, in pool: WorkerPool) -> SubmitRoute {
        guard let pointer = pthread_getspecific(key) else { return .classQueue }
        return Unmanaged<ThreadState>.fromOpaque(pointer)._withUnsafeGuaranteedRef { thread in
            if thread.pollingClass == qosClass { return .inlineBatch }
            if thread.postsOwnContinuation && thread.workerClass == qosClass && thread.workerPool === pool {
                return .ownContinuation
            }
            return .classQueue
        }
    }

    enum SubmitRoute {
        /// The calling thread polls for that class: the job joins its inline batch.
        case inlineBatch
        /// A worker of that class posts its own drain's next turn and goes back to the class
        /// queue right after: the job is queued, and nobody else need be woken for it.
        case ownContinuation
        case classQueue
    }

    /// Makes the calling thread a worker of `qosClass`.
    static func installWorker(_ qosClass: QoS.QoSClass, of pool: WorkerPool) -> ThreadState {
        let state = install(ThreadState(workerClass: qosClass))
        state.workerPool = pool
        state.takeDefaultTimerSlack()
        return state
    }

    private static func install(_ state: ThreadState) -> ThreadState {
        if let old = pthread_getspecific(key) {
            Unmanaged<ThreadState>.fromOpaque(old).release()
        }
        let result = pthread_setspecific(key, Unmanaged.passRetained(state).toOpaque())
        guard result == 0 else {
            lullFatal("cannot record the thread's state", error: SystemError("pthread_setspecific", code: result),
                      remedy: "The system is out of memory")
        }
        return state
    }

    /// Runs `body` with `qos` in force on this thread, moving the thread's nice value,
    /// policy and clamps when the process may move them back, and its timer slack to the
    /// class's; restores everything afterwards.
    /// Overrides other threads put on this one stay in force on top.
    func withQoS<T>(_ qos: QoS, _ body: () throws -> T) rethrows -> T {
        let savedQoS = ownQoS
        if qos == savedQoS { return try body() }
        ownQoS = qos
        priority.setOwn(qos)
        let savedSlack = timerSlack
        applyTimerSlack(ThreadState.classTimerSlack(qos.qosClass))
        defer {
            ownQoS = savedQoS
            priority.setOwn(savedQoS)
            applyTimerSlack(savedSlack)
        }
        return try body()
    }
}
