import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The QoS worker pool: one set of threads per QoS class, created on demand, retired after
/// `idleTimeout` without work (one wake-up per thread, never a periodic one).
///
/// A thread's nice value and I/O class are set once, from its class, when it starts: an
/// unprivileged process may lower a thread's priority but never raise it back, so threads
/// are not shared between classes (the same choice Dispatch makes on Linux).
///
/// Concurrency per class is bounded by the CPU count. A worker that blocks in one of Lull's
/// waits (`sync` on a busy queue, `WorkGroup.wait`, `WorkItem.wait`) stops counting, so that
/// another thread may start; `threadCeiling` bounds the total.
///
/// Idle workers take turns polling the reactor (leader/followers): at most one polls at a
/// time, and work that the events it receives produce for its own class goes to its
/// *inline slot* and runs right after the poll on that same thread, without a hand-off.
///
/// The hand-off between workers and the poller (docs/WorkerPool.md) lives in one atomic
/// word, `pollerSlot`: `vacant`, `requested(worker)` or `polling(worker)` (see `PollerSlot`
/// for the transitions). A worker of a polling class looks at the slot first whenever it
/// takes its class lock: a request that names it is answered, and while there is something
/// to poll for and the slot is vacant it polls before it takes a job (recruiting another
/// worker for the jobs), so the reactor never waits behind a class's work — the poller's own
/// class included. Only a worker just woken or started for queued work takes that work
/// first. Invariants:
/// - at most one worker polls, and `pollerThreadID` is its tid while it polls;
/// - a request names a worker that is off every idle stack and counted running, which looks
///   at the slot first thing; a named worker never parks;
/// - while the reactor has interest, the slot is `vacant` only until the next worker of a
///   polling class takes its lock or the next `ensurePoller`: the one that changed the
///   interest and the one that left the slot see each other (sequential consistency).
final class WorkerPool: Sendable {

    let cpuCount: Int
    let threadCeiling: Int
    let idleTimeout: Duration = .seconds(5)
    /// A job that ran longer than this hands the work queued behind it to other threads,
    /// so that a slow handler does not hold the others up.
    let longInlineNanoseconds: UInt64 = 1_000_000

    let classes: [ClassPool]
    /// Creates workers for threads whose nice value is above theirs, in a process that cannot
    /// lower nice values (nil where it can).
    private let starter: ThreadStarter?
    private let totalThreads = Atomic<Int>(0)
    /// Threads started so far, by why (said when the ceiling is reached; read by tests).
    let threadStarts = ThreadStartCounts()
    /// Who polls the reactor, or who has been asked to (see `PollerSlot`).
    let pollerSlot = PollerSlot()
    /// Consecutive failures to create a thread: the stall monitor's retries back off by it.
    let threadCreationFailures = Atomic<Int>(0)
    private let liveThreadIDs = Mutex<Set<Int32>>([])
    /// The kernel tid of the polling worker (0: none), so the stall check can skip it.
    let pollerThreadID = Atomic<Int32>(0)
    let stallMonitor: StallMonitor
    /// How many workers hold deferred level checks (see `DeferredLevelChecks`).
    let deferredCheckHolders = DeferredLevelChecks.Holders()
    /// Set when a worker relied on the stall check's look for its deferred checks, cleared
    /// by the look: a worker that parks leaves such a look armed (see
    /// `cancelStallCheckIfNothingWaits`).
    let lookServesDeferredChecks = Atomic<Bool>(false)
    /// Keeps a worker stuck in a job from stalling the reactor and its batch (`PollWatch`).
    let pollWatch = PollWatch()
    /// What the leader polls, and the timers that ride on its wake-ups.
    let reactor: any PollTarget
    private let timers: TimerEngine

    /// A pool whose leader polls `reactor` and fires `timers` after each wake-up. The
    /// composition root (`Runtime`) connects the reactor's poller requests to it; a test
    /// gives it a `PollTarget` of its own and an engine on a `ManualClock`.
    init(reactor: any PollTarget, timers: TimerEngine) {
        let online = sysconf(Int32(_SC_NPROCESSORS_ONLN))
        cpuCount = max(1, online > 0 ? online : 1)
        threadCeiling = max(64, cpuCount * 16)
        classes = QoS.QoSClass.schedulable.map { ClassPool(qosClass: $0) }
        // The energy policy's capabilities are detected (and what is missing said) once, here.
        let pinnedIdle = EnergyPolicy.idleMode == .pinned
        starter = ThreadPriority.canRaise && !pinnedIdle ? nil : ThreadStarter.make()
        self.reactor = reactor
        self.timers = timers
        stallMonitor = StallMonitor(timers: timers)
        lull_fork_guard_install()
    }

    /// The reactor's side of the hand-off: a poller on demand, and who polls now.
    var pollerDemand: PollerDemand {
        PollerDemand(request: { [unowned self] in ensurePoller() },
                     pollingThread: { [unowned self] in pollerThreadID.load(ordering: .acquiring) })
    }

    /// The classes whose idle workers may poll the reactor: a poller at background
    /// priority would make every event wait behind CPU-bound work.
    static let pollingClasses: [QoS.QoSClass] = [.default, .userInitiated, .userInteractive]

    // MARK: Submitting work

    /// Queues a job (already resolved to its QoS) on the pool of its class.
    func submit(_ job: consuming Job) {
        ForkGuard.check()
        let qosClass = job.qos.qosClass == .unspecified ? QoS.QoSClass.default : job.qos.qosClass
        let route = ThreadState.submitRoute(for: qosClass, in: self)
        if route == .inlineBatch {
            ThreadState.current.inlineBatch.append(job)
            return
        }
        let pool = classes[qosClass.poolIndex]
        // A drain's request for its own next turn, posted by a worker of the class that goes
        // back to the class queue as soon as it returns (counted running all along): that
        // worker takes the request, or recruits for it if it polls first, so waking another
        // thread would only move the drain to a thread that has to be scheduled.
        let recruits = route != .ownContinuation
        let helper = pool.state.locked(moving: job) { state, job -> Helper in
            state.pushJob(job, pool)
            return recruits ? recruit(&state) : .none
        }
        start(helper, in: pool)
    }

    enum Helper {
        case none
        case wake(Worker)
        case spawn
        case saturated
    }

    /// Under the class lock, with work queued: gets one more thread going — unless one is
    /// already on its way or spinning, in which case that one takes the work and recruits
    /// the next itself if more is queued (so a stream of small blocks costs no wake-up per
    /// block, and a burst still ramps up to the CPU count).
    func recruit(_ state: inout ClassPool.State) -> Helper {
        if state.spinning > 0 || state.waking > 0 { return .none }
        if let worker = state.idle.popLast() {
            state.running += 1
            state.waking += 1
            worker.wokenForWork.store(true, ordering: .relaxed)
            return .wake(worker)
        }
        guard state.running < cpuCount else { return .saturated }
        guard reserveThread() else { return .saturated }
        state.running += 1
        state.threads += 1
        state.waking += 1
        return .spawn
    }

    /// Carries out `recruit`'s decision, outside the lock.
    func start(_ helper: Helper, in pool: ClassPool) {
        switch helper {
        case .none: break
        case .wake(let worker): worker.parker.unpark()
        case .spawn: startWorker(Worker(pool: pool, owner: self), wokenForWork: true, reason: .work)
        case .saturated: noteSaturated()
        }
    }

    /// Runs `body`, a wait, with the calling worker counted as blocked rather than running in
    /// its pool, so that its class may start another thread meanwhile (a thread that is not
    /// a worker just waits).
    ///
    /// What the thread waits for may be a deferred source's next delivery, a job of the
    /// inline batch it runs, behind the waiting one (a handler waiting on a semaphore that a
    /// handler of the same wake-up signals), or the reactor's next event while this thread,
    /// the last poller, runs its batch: the checks complete, the batch's other jobs go to
    /// the class queue, where the thread started for the wait takes them, and some worker
    /// polls.
    static func blocking<T>(_ body: () -> T) -> T {
        let thread = ThreadState.current
        thread.completeDeferredChecks()
        guard let pool = thread.workerPool, let qosClass = thread.workerClass else { return body() }
        return pool.blocking(qosClass, thread: thread, body)
    }

    private func blocking<T>(_ qosClass: QoS.QoSClass, thread: ThreadState, _ body: () -> T) -> T {
        let pool = classes[qosClass.poolIndex]
        // This thread may be the last poller, back from its poll with its batch: nobody
        // polls while it runs the batch, and what it waits for may need the next poll (the
        // hand-over asks for a poller, even with no job left to hand over).
        handOverInlineBatch(thread.runningInlineBatch?.takeUnretainedValue(), in: pool, for: .wait)
        defer {
            pool.state.locked { state in
                state.running += 1
                state.blocked -= 1
            }
        }
        return body()
    }

    /// `ensurePoller`, when the reactor has something to poll for.
    func ensurePollerIfNeeded() {
        if reactor.needsPoller { ensurePoller() }
    }

    /// Makes sure some worker polls the reactor: claims an idle worker of a polling class or
    /// starts one, naming it in `pollerSlot` (`vacant → requested(worker)`) under the class
    /// lock that takes it off the idle stack, so that the worker sees the request whenever it
    /// looks, however late this thread gets to wake it.
    ///
    /// One request at a time: the reactor asks whenever its interest or its timer changes
    /// while no worker polls, and under load (every worker busy, none idle) each request
    /// would otherwise start a thread.
    func ensurePoller() {
        startPollWatchIfNeeded()
        guard pollerSlot.isVacant else { return }
        for qosClass in WorkerPool.pollingClasses {
            let pool = classes[qosClass.poolIndex]
            let claim = pool.state.locked { state -> PollerClaim in
                guard let worker = state.idle.last else { return .noIdleWorker }
                guard pollerSlot.request(for: worker.token) else { return .answered }
                state.idle.removeLast()
                state.running += 1
                return .claimed(worker)
            }
            switch claim {
            case .noIdleWorker:
                continue
            case .answered:
                return
            case .claimed(let worker):
                #if DEBUG
                PoolTestHooks.runClaimedToPoll(worker)
                #endif
                worker.parker.unpark()
                return
            }
        }
        let pool = classes[QoS.QoSClass.default.poolIndex]
        let worker = Worker(pool: pool, owner: self)
        let spawn = pool.state.locked { state -> Bool in
            guard pollerSlot.request(for: worker.token) else { return false }
            guard reserveThread() else {
                pollerSlot.withdraw(for: worker.token)
                return false
            }
            state.running += 1
            state.threads += 1
            return true
        }
        if spawn { startWorker(worker, wokenForWork: false, reason: .poller) }
    }

    private enum PollerClaim {
        case noIdleWorker
        /// Another request or a poller was there first.
        case answered
        case claimed(Worker)
    }

    /// No worker polls and no request is outstanding.
    var pollerIsVacant: Bool { pollerSlot.isVacant }

    func reserveThread() -> Bool {
        var current = totalThreads.load(ordering: .relaxed)
        while current < threadCeiling {
            let (exchanged, original) = totalThreads.compareExchange(
                expected: current, desired: current + 1, ordering: .acquiringAndReleasing)
            if exchanged { return true }
            current = original
        }
        RuntimeLog.once("thread-ceiling") {
            "worker thread ceiling (\(threadCeiling) threads) reached: new work waits for a thread to become free (threads started: \(threadStarts.summary))"
        }
        return false
    }

    // MARK: Threads

    /// Starts `worker`'s thread, already counted in its class (`running`, `threads`, and
    /// `waking` when `wokenForWork`) and in `totalThreads`, and perhaps named in `pollerSlot`.
    /// When the thread cannot be created, takes all of that back, logs the degradation and
    /// arms the stall monitor, which tries again (backing off) while work waits: queued work
    /// never waits on a thread that was never created. Returns whether the thread started.
    @discardableResult
    func startWorker(_ worker: Worker, wokenForWork: Bool, reason: ThreadStartReason) -> Bool {
        let pool = worker.pool
        worker.wokenForWork.store(wokenForWork, ordering: .relaxed)
        let context = Unmanaged.passRetained(worker).toOpaque()
        let result: Int32
        if let starter = starterFor(pool.qosClass) {
            let bits = UInt(bitPattern: context)
            result = starter.create { WorkerPool.spawnWorkerThread(UnsafeMutableRawPointer(bitPattern: bits)!) }
        } else {
            result = WorkerPool.spawnWorkerThread(context)
        }
        guard result != 0 else {
            threadCreationFailures.store(0, ordering: .relaxed)
            threadStarts.record(reason)
            return true
        }
        Unmanaged<Worker>.fromOpaque(context).release()
        pool.state.locked { state in
            state.running -= 1
            state.threads -= 1
            if wokenForWork { state.waking -= 1 }
        }
        totalThreads.subtract(1, ordering: .relaxed)
        if pollerSlot.state == .requested(worker.token) { pollerSlot.withdraw(for: worker.token) }
        threadCreationFailures.add(1, ordering: .relaxed)
        RuntimeLog.once("thread-create-failed") {
            "could not start a \(pool.qosClass.name) worker thread: \(SystemError("pthread_create", code: -result)); queued work waits for an existing thread, and the pool tries again with back-off"
        }
        noteSaturated()
        return false
    }

    /// `pthread_create` of a worker thread whose retained `Worker` is `context`: 0 or -errno.
    private static func spawnWorkerThread(_ context: UnsafeMutableRawPointer) -> Int32 {
        createDetachedThread(context) { context in
            let worker = Unmanaged<Worker>.fromOpaque(context!).takeRetainedValue()
            worker.owner.workerMain(worker)
            return nil
        }
    }

    /// `pthread_create` of a detached thread that runs `start(context)`: 0 or -errno.
    static func createDetachedThread(_ context: UnsafeMutableRawPointer,
                                     _ start: @convention(c) (UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer?) -> Int32 {
        var thread = pthread_t()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        #if DEBUG
        LockOrder.assertNoSpinLockHeld("pthread_create")
        #endif
        let result = lull_pthread_create(&thread, &attributes, start, context)
        pthread_attr_destroy(&attributes)
        return result
    }

    /// The starter, when the calling thread would hand a new worker of `qosClass` a nice
    /// value above its class's, or SCHED_IDLE where a thread cannot leave it (see
    /// `ThreadStarter`); nil: the caller creates it itself.
    func starterFor(_ qosClass: QoS.QoSClass) -> ThreadStarter? {
        guard let starter else { return nil }
        let tid = lull_gettid()
        if qosClass != .background && EnergyPolicy.idleMode == .pinned
            && lull_get_thread_policy(tid) == LULL_SCHED_IDLE {
            return starter
        }
        var current: Int32 = 0
        guard lull_get_thread_nice(tid, &current) == 0 else { return nil }
        let wanted = ThreadPriority.allowedNiceValue(for: QoS(qosClass))
        return current > wanted && current > starter.niceValue ? starter : nil
    }

    private enum Next {
        case job(Job)
        case poll
        case spin
        case park
        /// A thread back from polling with its class over its CPU count: it exits.
        case retire
    }

    /// How long a worker that ran out of work spins before it sleeps (pause instructions,
    /// tens of microseconds): a producer that keeps a queue barely fed then hands work over
    /// without a futex wake-up per block.
    private static let spinIterations: Int32 = 1_000

    private func workerMain(_ worker: Worker) {
        let pool = worker.pool
        let thread = ThreadState.installWorker(pool.qosClass, of: self)
        // The policy first: a worker that inherited SCHED_IDLE leaves it at its inherited nice.
        thread.priority.startEnergyPolicy(pool.qosClass)
        thread.niceValue = ThreadPriority.apply(QoS(pool.qosClass), tid: thread.tid)
        thread.applyTimerSlack(ThreadState.classTimerSlack(pool.qosClass))
        _ = lull_set_thread_name(pool.threadName)
        liveThreadIDs.locked { _ = $0.insert(thread.tid) }
        pool.state.locked { $0.workers[thread.tid] = worker.activity }
        defer {
            pool.state.locked { $0.workers[thread.tid] = nil }
            liveThreadIDs.locked { _ = $0.remove(thread.tid) }
            totalThreads.subtract(1, ordering: .relaxed)
        }
        let mayPoll = WorkerPool.pollingClasses.contains(pool.qosClass)
        // Read deliveries on this worker leave their level checks to one poll (see
        // `DeferredLevelChecks`): completed before a job that is not a delivery, before a
        // wait in a Lull primitive, at the end of an inline batch, when the class queue is
        // empty after a job, and before the worker polls, spins, parks or retires.
        thread.deferredChecks = worker.activity.deferredChecks
        thread.runningInlineBatch = worker.activity.inlineBatch.map { Unmanaged.passUnretained($0) }
        defer { thread.runningInlineBatch = nil }
        var backFromPoll = false
        while true {
            var cascade = Helper.none
            // Started or claimed to poll: counted running for it, whatever the class ran.
            var answersPollerRequest = false
            let next = pool.state.locked { state -> Next in
                let wokenForWork = worker.wokenForWork.exchange(false, ordering: .relaxed)
                if wokenForWork { state.waking -= 1 }
                if mayPoll {
                    // A request naming this worker is answered by looking at the need, as
                    // any worker of a polling class does, before the jobs: the reactor
                    // must not wait behind the class's work (a worker woken for a job takes
                    // it first: it was counted for it). Leaving the slot and then reading
                    // the interest (both sequentially consistent) pairs with
                    // `ensurePoller`, which raises the interest and then reads the slot.
                    if pollerSlot.state == .requested(worker.token) {
                        pollerSlot.withdraw(for: worker.token)
                        answersPollerRequest = true
                    }
                    // While threads cannot be created, queued jobs come first too: no
                    // other thread may ever come for them (a degradation: the reactor
                    // then waits behind the job).
                    let jobsFirst = !state.jobs.isEmpty
                        && (wokenForWork || threadCreationFailures.load(ordering: .relaxed) > 0)
                    if !jobsFirst && reactor.needsPoller && pollerSlot.take(for: worker.token) {
                        state.running -= 1
                        // Jobs queued meanwhile get another worker (or the stall monitor).
                        if !state.jobs.isEmpty { cascade = recruit(&state) }
                        return .poll
                    }
                }
                // Back from polling (which it was started or claimed for while every worker
                // was busy), or started or claimed to poll and finding no need or another
                // poller, with the class over its CPU count: the thread retires rather
                // than run jobs on top of the others. Staying, it would be one more thread
                // competing for the same cores, and the next poll needed while all are busy
                // would start yet another (the stall check's own look needs one every
                // interval while the class is saturated), up to the pool's ceiling.
                if (backFromPoll || answersPollerRequest) && state.running > cpuCount {
                    state.running -= 1
                    state.threads -= 1
                    return .retire
                }
                if let job = state.popJob(pool) {
                    if !state.jobs.isEmpty { cascade = recruit(&state) }
                    return .job(job)
                }
                state.running -= 1
                // Spin while the class leaves a CPU unused (one spinner per class): the
                // worker that feeds this queue (a task spawning children, a producer of
                // blocks) then hands its next job over without a futex wake-up; with the
                // class's CPUs all taken, the CPU is better left to the workers running.
                if state.spinning == 0 && state.running < cpuCount {
                    state.spinning = 1
                    return .spin
                }
                assert(!pollerSlot.names(worker.token), "Lull: a worker named by the poller slot parks")
                assert(!thread.priority.hasOverrides, "Lull: a worker goes idle with an override still on it")
                state.idle.append(worker)
                return .park
            }
            start(cascade, in: pool)
            backFromPoll = false
            switch consume next {
            case .job(let job):
                runTimed(job, thread: thread, pool: pool, activity: worker.activity)
            case .poll:
                thread.completeDeferredChecks()
                poll(worker: worker, thread: thread)
                backFromPoll = true
            case .retire:
                thread.completeDeferredChecks()
                return
            case .spin:
                thread.completeDeferredChecks()
                // The stall check is taken back only by a worker that parks: a spinner that
                // finds the next job would see its class saturated again at once, and an
                // arm and a cancel per hand-off cost a timer update each.
                switch spinForWork(worker, pool: pool, mayPoll: mayPoll) {
                case .job(let job): runTimed(job, thread: thread, pool: pool, activity: worker.activity)
                case .lookAgain: continue
                case .idle:
                    thread.completeDeferredChecks()
                    cancelStallCheckIfNothingWaits()
                    if !parkUntilClaimed(worker, pool: pool) { return }
                }
            case .park:
                thread.completeDeferredChecks()
                cancelStallCheckIfNothingWaits()
                if !parkUntilClaimed(worker, pool: pool) { return }
            }
        }
    }

    /// One turn as the leader: poll, give up the slot, then run what the wake-up produced.
    private func poll(worker: Worker, thread: ThreadState) {
        let pool = worker.pool
        assert(pollerSlot.state == .polling(worker.token), "Lull: a worker polls without holding the poller slot")
        assert(pollerThreadID.load(ordering: .relaxed) == 0, "Lull: two workers poll at once")
        thread.pollingClass = pool.qosClass
        pollerThreadID.store(thread.tid, ordering: .releasing)
        // The armed window's slack while asleep, the thread's default after: the work it
        // runs next must not sleep with the reactor's slack.
        thread.applyTimerSlack(reactor.sleepSlackForPoll)
        let timerExpired = reactor.pollOnce()
        thread.applyTimerSlack(0)
        if timerExpired {
            timers.fire()
            reactor.timerFireHandled()
        } else {
            // Awake anyway: timers whose window has opened fire in this wake-up.
            timers.fireIfDue()
        }
        pollerThreadID.store(0, ordering: .releasing)
        // For the poll watch: a poll ended (the single writer is the slot's holder).
        pollWatch.pollEpoch.store(pollWatch.pollEpoch.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
        thread.pollingClass = nil
        pollerSlot.release(for: worker.token)
        pool.state.locked { $0.running += 1 }
        runInline(thread: thread, pool: pool, activity: worker.activity)
        assert(thread.runningInlineBatch?.takeUnretainedValue().isEmpty ?? true, "Lull: a job of the inline batch was left behind")
    }

    /// Runs the work one wake-up produced for this thread's class on this thread, so that a
    /// wake-up's worth of events (a thousand coalesced timers, say) costs no other thread's
    /// wake-up. The batch stays private: in the class queue, every job taken would recruit a
    /// helper for the rest. A batch that runs long — one slow job, or many short ones, such
    /// as the blocks of ten thousand `asyncAfter` calls whose windows one wake-up closed —
    /// hands the rest to the class queue and recruits helpers (and a poller): slow work never
    /// holds the others up, and the reactor is never left alone behind a long batch.
    ///
    /// "Long" is judged from the batch's start by the wall clock, then confirmed by the
    /// thread's CPU clock (read once per batch of several jobs, and again only once the wall
    /// clock says so): a batch that was merely preempted on a busy machine is no reason to
    /// wake another thread.
    ///
    /// The batch is `thread.runningInlineBatch`, where a job that waits in one of Lull's
    /// waits finds the jobs behind it and hands them to the class queue (`blocking`), and
    /// where the poll watch finds them when a job is stuck, blocked in a system call of its
    /// own or busy on the CPU (`PollWatch`): the poller wakes the watch, if it is parked,
    /// before a batch with jobs.
    private func runInline(thread: ThreadState, pool: ClassPool, activity: WorkerActivity) {
        thread.runningInlineBatch?._withUnsafeGuaranteedRef { batch in
            runInline(batch, thread: thread, pool: pool, activity: activity)
        }
    }

    @inline(__always)
    private func runInline(_ batch: InlineBatch, thread: ThreadState, pool: ClassPool, activity: WorkerActivity) {
        var started: UInt64 = 0
        var cpuAtStart: UInt64 = 0
        var first = true
        // The parked watch's alarm watches this call's batches until the last one ends.
        var alarmed = false
        defer { if alarmed { pollWatch.batchEnded() } }
        while true {
            // One lock per job (the first also moves the wake-up's jobs in); none after a
            // job that had nothing behind it. The watch hears of the batch once its jobs are
            // in the batch (published), before the first runs.
            var more = true
            var announce = true
            while more, let job = batch.next(from: &thread.inlineBatch, more: &more) {
                if announce {
                    announce = false
                    if !alarmed { alarmed = pollWatch.batchStarted() }
                }
                if first {
                    first = false
                    if more { cpuAtStart = SystemClock.threadCPUNanoseconds() }
                    started = SystemClock.monotonicNanoseconds()
                }
                activity.enterJob()
                JobRunner.run(consume job, floor: .unspecified, drainQoS: nil, thread: thread)
                activity.leaveJob()
                guard more, SystemClock.monotonicNanoseconds() &- started > longInlineNanoseconds,
                      SystemClock.threadCPUNanoseconds() &- cpuAtStart > longInlineNanoseconds else { continue }
                handOverInlineBatch(batch, in: pool, for: .longBatch)
                more = false
            }
            // The batch's end: the checks. A source with bytes left (often the peer's next
            // message, arrived since its handler ran) is delivered again in this batch, as
            // the wake-up's own work, instead of on another worker; the batch ends when the
            // checks find nothing. Once it has run long, the deliveries the checks cause go
            // to the class queue instead, and the thread goes back to the reactor.
            guard activity.deferredChecks.mayHoldChecks else { return }
            if first { started = SystemClock.monotonicNanoseconds() }
            let extends = SystemClock.monotonicNanoseconds() &- started <= longInlineNanoseconds
            if extends { thread.pollingClass = pool.qosClass }
            activity.deferredChecks.completeAll()
            guard extends else { return }
            thread.pollingClass = nil
            // The checks' deliveries, if any, are the next batch (the clocks keep the first's start).
            guard !thread.inlineBatch.isEmpty else { return }
        }
    }

    /// Runs a job; after a slow job with work still queued, recruits a helper (work kept
    /// for this thread must not wait behind slow work).
    private func runTimed(_ job: consuming Job, thread: ThreadState, pool: ClassPool, activity: WorkerActivity) {
        // The coarse clock (a few ns, tick resolution) is enough to tell slow work.
        let start = SystemClock.coarseMonotonicNanoseconds()
        thread.runsLoopJob = true
        activity.enterJob()
        JobRunner.run(job, floor: .unspecified, drainQoS: nil, thread: thread)
        activity.leaveJob()
        thread.runsLoopJob = false
        // No job queued behind it for the deferred checks to wait with: completed now.
        if pool.queuedJobs.load(ordering: .relaxed) == 0 { thread.completeDeferredChecks() }
        let duration = SystemClock.coarseMonotonicNanoseconds() &- start
        if duration > longInlineNanoseconds && pool.queuedJobs.load(ordering: .relaxed) > 0 {
            let helper = pool.state.locked { state in state.jobs.isEmpty ? .none : recruit(&state) }
            self.start(helper, in: pool)
        }
    }

    /// The class's one spinning worker waits briefly for work. Returns a job (the worker is
    /// running again), or nil after putting the worker on the idle stack.
    private enum SpinOutcome {
        case job(Job)
        /// Something needs polling and nobody polls: the worker goes round its loop again,
        /// counted as running, and takes the poller slot there.
        case lookAgain
        /// On the idle stack: the worker parks.
        case idle
    }

    /// The class's one spinning worker waits briefly for work; then, under the class lock,
    /// takes a job, or goes round again to poll (a poller request made while it spun found
    /// no idle worker, and the thread it would have started may not exist), or goes idle.
    private func spinForWork(_ worker: Worker, pool: ClassPool, mayPoll: Bool) -> SpinOutcome {
        var spins: Int32 = 0
        while spins < WorkerPool.spinIterations && pool.queuedJobs.load(ordering: .acquiring) == 0 {
            lull_cpu_relax()
            spins += 1
        }
        #if DEBUG
        PoolTestHooks.runSpinEnds(worker)
        #endif
        var cascade = Helper.none
        let outcome = pool.state.locked { state -> SpinOutcome in
            assert(state.spinning == 1, "Lull: a worker ends a spin its class does not count")
            state.spinning = 0
            guard let job = state.popJob(pool) else {
                // Read under the class lock, as `ensurePoller` looks at the idle stack under
                // it: either it finds this worker idle, or this worker sees its need.
                if mayPoll && reactor.needsPoller && pollerSlot.isVacant {
                    state.running += 1
                    return .lookAgain
                }
                assert(!pollerSlot.names(worker.token), "Lull: a worker named by the poller slot parks")
                state.idle.append(worker)
                return .idle
            }
            state.running += 1
            if !state.jobs.isEmpty { cascade = recruit(&state) }
            return .job(job)
        }
        start(cascade, in: pool)
        return outcome
    }

    /// Parks an idle worker until someone claims it (true) or it retires (false).
    private func parkUntilClaimed(_ worker: Worker, pool: ClassPool) -> Bool {
        while true {
            let woken = worker.parker.park(until: .now() + idleTimeout)
            let outcome = pool.state.locked { state -> Bool? in
                guard let index = state.idle.firstIndex(where: { $0 === worker }) else {
                    return true  // claimed: whoever claimed it counted it as running
                }
                assert(!pollerSlot.names(worker.token), "Lull: an idle worker is named by the poller slot")
                if woken { return nil }  // a stale permit: stay idle
                state.idle.remove(at: index)
                state.threads -= 1
                return false
            }
            if let outcome { return outcome }
        }
    }

    /// Kernel thread ids of the live workers (for diagnostics and tests).
    func workerThreadIDs() -> Set<Int32> {
        liveThreadIDs.locked { $0 }
    }
}

/// The workers and queued jobs of one QoS class.
final class ClassPool: Sendable {
    struct State {
        var jobs = Fifo<Job>()
        var idle: [Worker] = []
        /// Workers running jobs or about to (claimed or starting), not blocked, not idle.
        var running = 0
        var threads = 0
        var blocked = 0
        /// The live workers by kernel tid, with what the stall check reads of them.
        var workers: [Int32: WorkerActivity] = [:]
        /// 1 while a worker of the class spins waiting for work.
        var spinning = 0
        /// Workers woken or started for queued work that have not taken it yet.
        var waking = 0

        mutating func pushJob(_ job: consuming Job, _ pool: ClassPool) {
            jobs.append(job)
            pool.queuedJobs.store(jobs.count, ordering: .releasing)
        }

        /// Jobs taken off the queue so far (progress, for the stall check).
        var taken: UInt64 = 0

        mutating func popJob(_ pool: ClassPool) -> Job? {
            guard let job = jobs.popFirst() else { return nil }
            taken &+= 1
            pool.queuedJobs.store(jobs.count, ordering: .releasing)
            return job
        }
    }

    /// The number of queued jobs, readable without the lock by a spinning worker.
    let queuedJobs = Atomic<Int>(0)
    /// The count of taken jobs the stall check saw last: a class whose workers take jobs is
    /// not stalled, whatever state its threads are in at one instant.
    let takenAtLastCheck = Atomic<UInt64>(0)

    let qosClass: QoS.QoSClass
    let state = SpinFutexLock<State>(State(), rank: .workerClass)
    let threadName: String

    init(qosClass: QoS.QoSClass) {
        self.qosClass = qosClass
        threadName = switch qosClass {
        case .background: "lull.background"
        case .utility: "lull.utility"
        case .default, .unspecified: "lull.default"
        case .userInitiated: "lull.user-init"
        case .userInteractive: "lull.user-inter"
        }
    }
}

/// One worker thread's parking spot.
final class Worker: Sendable {
    let parker = Parker()
    let pool: ClassPool
    /// The pool the worker's thread runs for (it lives as long as its threads).
    let owner: WorkerPool
    /// Set by whoever wakes this worker for queued work (it counts in `waking` until it
    /// looks at the queue again).
    let wokenForWork = Atomic<Bool>(false)
    /// Names this worker in `WorkerPool.pollerSlot`; unique for the process's lifetime.
    let token: UInt64
    /// Which job the worker is in, for the stall check.
    let activity: WorkerActivity

    private static let lastToken = Atomic<UInt64>(0)

    init(pool: ClassPool, owner: WorkerPool) {
        self.pool = pool
        self.owner = owner
        activity = WorkerActivity(deferredCheckHolders: owner.deferredCheckHolders,
                                  inlineBatch: InlineBatch(pool: pool))
        token = Worker.lastToken.add(1, ordering: .relaxed).newValue
    }
}
