import Synchronization

/// A queue of blocks: serial (one at a time, FIFO) or concurrent, funnelled through a
/// target queue down to a global queue that the QoS worker pool runs.
///
/// Every queue but the global ones drains through its target: when it has blocks and is
/// neither suspended, inactive nor already being drained, it puts one *drain request* on its
/// target; whoever runs that request runs a batch of the queue's blocks on its own thread.
/// A serial target therefore makes all its children mutually exclusive, as in Dispatch.
public final class WorkQueue: Sendable {
    /// How a queue runs its blocks and whether it starts active.
    public struct Attributes: OptionSet, Sendable {
        /// The bits of the queue attributes.
        public let rawValue: UInt32
        /// The queue attributes with these bits.
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        /// Blocks may run at the same time (barriers excepted).
        public static let concurrent = Attributes(rawValue: 1 << 0)
        /// The queue runs nothing until `activate()`.
        public static let initiallyInactive = Attributes(rawValue: 1 << 1)
    }

    enum Kind: Sendable, Equatable {
        case serial
        case concurrent
        /// A global queue: blocks go straight to the worker pool.
        case root(QoS.QoSClass)
        /// Where the main queue drains: the thread inside `runMain()`.
        case mainThread
    }

    /// The name given at creation (shown in logs and debug descriptions).
    public let label: String
    /// The QoS given at creation (`unspecified`: the queue takes its hierarchy's).
    public let qos: QoS
    let kind: Kind
    /// Where a root queue's jobs go (the worker pool, or the main thread's runner); nil for
    /// the others, which drain through their target.
    let rootExecutor: (any RootExecutor)?
    /// The runtime's parts this queue's hierarchy uses (its target's, for a queue that is not
    /// a root). `unowned(unsafe)`, read on every timer schedule and `asyncAfter` without
    /// touching a reference count the threads would share: services are made only by a
    /// `Runtime`, which holds them for good (`Runtime.shared` is never released), so they
    /// outlive every queue.
    unowned(unsafe) let services: QueueServices
    /// A root queue (a global queue or the main thread's): a static that lives as long as
    /// the process, so that what points at it need not count (see `SourceCore.target`).
    var livesForever: Bool {
        switch kind {
        case .root, .mainThread: true
        case .serial, .concurrent: false
        }
    }
    let state: QueueLock
    /// Mirrors "suspended or inactive" for the check a drain makes between two blocks.
    let pausedCount = Atomic<Int>(0)
    /// Serial: where producers put the queue's jobs, without the lock; the queue's owner
    /// takes them (docs/Queues.md, "The serial queue's inbox"). The other kinds share one
    /// that stays empty (a stored reference that is never nil costs no check, and the
    /// producer's call through it no reference count).
    let inbox: SegmentedInbox<Job>
    private static let unusedInbox = SegmentedInbox<Job>()
    /// Serial: the classes (bit `1 << rank`) of the jobs that went into the inbox without
    /// the lock since a drain last took everything counted in it.
    let inboxClasses = Atomic<UInt8>(0)
    /// Values stored with `setSpecific(key:value:)`; released with the queue. A leaf lock.
    let specifics = Mutex(SpecificValues())

    /// A serial queue (or with `.concurrent`, a concurrent one) that drains through
    /// `resolvedTarget` (the public initializer picks the process runtime's global queue
    /// when it is given none).
    init(label: String, qos: QoS, attributes: Attributes, resolvedTarget: WorkQueue) {
        self.label = label
        self.qos = qos
        self.kind = attributes.contains(.concurrent) ? .concurrent : .serial
        rootExecutor = nil
        services = resolvedTarget.services
        let inactive = attributes.contains(.initiallyInactive)
        let serial = kind == .serial
        inbox = serial ? SegmentedInbox<Job>() : WorkQueue.unusedInbox
        state = QueueLock(QueueState(target: resolvedTarget, isInactive: inactive,
                                 floor: WorkQueue.floor(ownQoS: qos, target: resolvedTarget), usesInbox: serial,
                                 gatesForwarding: kind == .concurrent))
        if inactive { pausedCount.store(1, ordering: .relaxed) }
    }

    /// A root queue whose jobs go to `executor`.
    init(rootLabel: String, kind: Kind, qos: QoS, executor: any RootExecutor, services: QueueServices) {
        self.label = rootLabel
        self.qos = qos
        self.kind = kind
        rootExecutor = executor
        self.services = services
        inbox = WorkQueue.unusedInbox
        state = QueueLock(QueueState(target: nil, isInactive: false, floor: .unspecified))
    }

    /// Rule 1 of QoS resolution: the queue's own QoS, else a global target's unless it is
    /// the default one, else what its (non-global) target imposes — a queue without a QoS of
    /// its own takes its hierarchy's, as in Dispatch. Computed when the target is set.
    static func floor(ownQoS: QoS, target: WorkQueue?) -> QoS {
        if !ownQoS.isUnspecified { return ownQoS }
        guard let target else { return .unspecified }
        switch target.kind {
        case .root(let qosClass): return qosClass == .default ? .unspecified : QoS(qosClass)
        case .mainThread: return .unspecified
        case .serial, .concurrent: return target.state.locked { $0.floor }
        }
    }

    var isGlobal: Bool {
        if case .root = kind { return true }
        return false
    }

    var identity: ObjectIdentifier { ObjectIdentifier(self) }

    // MARK: Submission

    /// Submits `work` to run on the queue; returns at once. The caller's execution context
    /// and QoS go with it (unless `.detached`); with `group`, the group counts it until it ran.
    public func async(group: WorkGroup? = nil, qos: QoS = .unspecified, flags: WorkItemFlags = [],
                      execute work: @escaping @Sendable () -> Void) {
        group?.enter()
        enqueue(makeJob(.block(work), qos: qos, flags: flags, group: group))
    }

    /// Submits `workItem` to run on the queue, with its flags and QoS.
    public func async(execute workItem: WorkItem) {
        workItem.noteQueued(on: self)
        enqueue(makeJob(for: workItem))
    }

    /// A job for a block submitted now by the calling thread (its context and QoS travel).
    func makeJob(_ work: consuming Job.Work, qos: QoS, flags: WorkItemFlags, group: WorkGroup? = nil) -> Job {
        let detached = flags.contains(.detached)
        let (propagated, context) = ThreadState.withCurrent { thread in
            (QoSResolution.propagated(itemQoS: qos, flags: flags, submitter: thread.ownQoS),
             detached ? ExecutionContext.noActivity : thread.currentContext)
        }
        return Job(work: work, qos: propagated, flags: flags, context: context, group: group)
    }

    func makeJob(for item: WorkItem) -> Job {
        let thread = ThreadState.current
        let submitter: QoS? = item.assignedContext == nil ? thread.ownQoS : nil
        return Job(work: .item(item),
                   qos: QoSResolution.propagated(itemQoS: item.requestedQoS, flags: item.flags, submitter: submitter),
                   flags: item.flags,
                   context: item.runContext(submitter: thread.currentContext),
                   group: nil)
    }

    /// Delayed blocks are detached by default: no context, no QoS from the submitter.
    func makeDelayedJob(_ work: Job.Work, qos: QoS, flags: WorkItemFlags) -> Job {
        Job(work: work, qos: QoSResolution.propagated(itemQoS: qos, flags: flags, submitter: nil),
            flags: flags, context: .empty, group: nil)
    }

    func makeDelayedJob(for item: WorkItem) -> Job {
        Job(work: .item(item),
            qos: QoSResolution.propagated(itemQoS: item.requestedQoS, flags: item.flags, submitter: nil),
            flags: item.flags, context: item.assignedContext ?? .empty, group: nil)
    }

    /// Puts a job on this queue (or, for a global queue, on the worker pool).
    ///
    /// The job moves all the way (`consuming`, `take()`): what it carries is not retained
    /// again on its way to the thread that runs it.
    func enqueue(_ job: consuming Job) {
        switch kind {
        case .root(let rootClass):
            job.globalClass = rootClass
            // A block a concurrent queue forwards was resolved there already.
            if job.owner == nil {
                let floor: QoS = rootClass == .default ? .unspecified : QoS(rootClass)
                job.qos = QoSResolution.effective(job.qos, flags: job.flags, floor: floor)
            }
            rootExecutor!.submit(job)
        case .mainThread:
            rootExecutor!.submit(job)
        case .concurrent:
            // Nothing in the way (no barrier, no suspension, nothing queued): the block goes
            // straight to the global target, still counted as running here — through the
            // forward gate without the lock, or through the lock when the gate was closed as
            // the producer looked. The job stays out of the lock's closure, which would copy it.
            let isBarrier = job.isBarrier
            var forwardTo = isBarrier ? nil : state.forwardGate.tryEnter()
            if forwardTo == nil {
                forwardTo = state.locked { state -> Unmanaged<WorkQueue>? in
                    guard !isBarrier, let target = state.forwardTarget() else { return nil }
                    self.state.forwardGate.enterLocked()
                    return Unmanaged.passUnretained(target)
                }
            }
            if let forwardTo {
                // Unretained (see `ForwardGate.tryEnter`): global queues live for good.
                unowned(unsafe) let target = forwardTo.takeUnretainedValue()
                // The floor a global target gives (rule 1): what `state.floor` holds for it.
                job.qos = QoSResolution.effective(job.qos, flags: job.flags, floor: WorkQueue.floor(ownQoS: qos, target: target))
                job.owner = self
                target.enqueue(job)
                return
            }
            let request = state.locked(moving: job) { (state: inout QueueState, job: consuming Job) -> (WorkQueue, Job)? in
                let jobClass = QoSResolution.effective(job.qos, flags: job.flags, floor: state.floor).qosClass
                state.pending.append(job)
                if jobClass > state.pendingMaxClass { state.pendingMaxClass = jobClass }
                return state.drainRequestIfNeeded(for: self)
            }
            WorkQueue.post(request)
        case .serial:
            enqueueSerial(consume job)
        }
    }

    /// A serial queue's job goes into the inbox with one claim of a slot, no lock. The lock
    /// is for the producer that finds nothing counted in the inbox (it may have to post the
    /// drain request: the wake-up rule) and for a job of a class above what the queue's
    /// owner or drain request already runs at (its override, or a request at its class).
    @inline(__always)
    private func enqueueSerial(_ job: consuming Job) {
        let fastPath = state.fastPath.load(ordering: .sequentiallyConsistent)
        let (jobQoS, jobFlags) = (job.qos, job.flags)
        let jobClass = QoSResolution.effectiveClass(jobQoS, flags: jobFlags, floorRank: Int(fastPath & 0xFF))
        let classBit = UInt8(1) &<< UInt8(jobClass.rank)
        #if DEBUG
        QueueTestHooks.runBeforePush(self)
        #endif
        let before = inbox.push(consume job, tag: UInt8(jobClass.rank))
        // The class bit goes in after the push: a drain's take exchanges the bits to zero
        // and puts them back only while jobs stay counted, so a bit set before the job is
        // counted could be cleared by a take that never saw the job, and the queue's bound
        // would then miss the class of a job still waiting.
        if inboxClasses.load(ordering: .relaxed) & classBit == 0 {
            inboxClasses.bitwiseOr(classBit, ordering: .sequentiallyConsistent)
        }
        if before > 0 && jobClass.rank <= Int(state.fastPath.load(ordering: .sequentiallyConsistent) >> 8) { return }
        #if DEBUG
        QueueTestHooks.runSlowEnqueue(self)
        #endif
        let request = state.locked { state -> (WorkQueue, Job)? in
            // The floor read under the lock (the published one may be older).
            state.noteSerialArrival(QoSResolution.effective(jobQoS, flags: jobFlags, floor: state.floor).qosClass)
            return state.drainRequestIfNeeded(for: self)
        }
        WorkQueue.post(request)
    }

    /// The highest class whose bit (`1 << rank`) is set in `mask`.
    static func highestClass(in mask: UInt8) -> QoS.QoSClass {
        mask == 0 ? .unspecified : QoS.QoSClass.byRank[7 - mask.leadingZeroBitCount]
    }

    /// Puts a job decided on under a lock (a drain request, a forwarded block) on its
    /// target, moving it.
    static func post(_ request: consuming (WorkQueue, Job)?) {
        switch consume request {
        case .some((let target, let job)): target.enqueue(job)
        case .none: break
        }
    }

    /// A thread of `qosClass` waits for `item`, submitted to this queue: the queue runs at
    /// that class at least until the item has run (the blocks ahead of it too).
    ///
    /// Serial: an item put back in `pending` raises the blocks up to its place; otherwise
    /// every block put back is ahead of it, and the item, in the inbox or still being pushed,
    /// gets a raise that the drain's takes apply (`InboxRaises`) until it runs. An item that
    /// started raises nothing here (its waiter raises the thread running it).
    func raisePending(to qosClass: QoS.QoSClass, for item: WorkItem) {
        guard !isGlobal, kind != .mainThread, qosClass != .unspecified else { return }
        let request = state.locked { state -> (WorkQueue, Job)? in
            if kind == .serial {
                // Under the lock: an item that starts after this look removes the raise
                // added here (`WorkItem.run`), one that started before it is not raised.
                guard !item.hasStarted else { return nil }
                state.noteSerialArrival(qosClass)
                let identity = ObjectIdentifier(item)
                if let position = state.pending.firstIndex(from: 0, where: { $0.holds(item: identity) }) {
                    state.pendingMarks.note(qosClass, at: position)
                } else {
                    state.pendingMarks.note(qosClass, at: state.pending.count - 1)
                    state.inboxRaises.raise(identity, to: qosClass)
                }
            } else if qosClass > state.pendingMaxClass {
                state.pendingMaxClass = qosClass
            }
            return state.drainRequestIfNeeded(for: self)
        }
        WorkQueue.post(request)
    }

    /// `item`, raised by a waiter while it waited in this queue, starts: its raise ends.
    func dropRaise(for item: WorkItem) {
        guard kind == .serial else { return }
        let identity = ObjectIdentifier(item)
        state.locked { $0.inboxRaises.remove(identity) }
    }

    // MARK: Suspension, activation, target

    /// Starts a queue created `.initiallyInactive`; nothing on others.
    public func activate() {
        guard !isGlobal, kind != .mainThread else { return }
        let request = state.locked { state -> (WorkQueue, Job)? in
            guard state.isInactive else { return nil }
            state.isInactive = false
            pausedCount.subtract(1, ordering: .releasing)
            return state.drainRequestIfNeeded(for: self)
        }
        WorkQueue.post(request)
    }

    /// Suspends the queue after the block running now: counts, and needs a matching `resume`.
    public func suspend() {
        guard !isGlobal, kind != .mainThread else { return }
        state.locked { state in
            state.suspendCount += 1
            pausedCount.add(1, ordering: .releasing)
        }
    }

    /// Undoes one `suspend`. On a never-activated queue with no suspension, activates it.
    /// - Precondition: not more resumes than suspends ("over-resume" stops the program).
    public func resume() {
        guard !isGlobal, kind != .mainThread else { return }
        let request = state.locked { state -> (WorkQueue, Job)? in
            if state.suspendCount == 0 {
                if state.isInactive {
                    state.isInactive = false
                    pausedCount.subtract(1, ordering: .releasing)
                    return state.drainRequestIfNeeded(for: self)
                }
                lullFatal("over-resume of WorkQueue '\(label)': resume() without a matching suspend()")
            }
            state.suspendCount -= 1
            pausedCount.subtract(1, ordering: .releasing)
            return state.suspendCount == 0 ? state.drainRequestIfNeeded(for: self) : nil
        }
        WorkQueue.post(request)
    }

    /// Makes `queue` (nil: the default global queue for this queue's QoS) the target.
    /// Blocks already handed to the old target finish there; later ones go to the new one.
    /// - Precondition: no cycle, and not on a global queue.
    public func setTarget(queue: WorkQueue?) {
        let roots = services.roots
        guard !isGlobal, kind != .mainThread, self !== roots.main else {
            lullFatal("setTarget(queue:) on the global or main queue '\(label)' is not allowed")
        }
        retarget(to: queue ?? roots.defaultTarget(for: qos))
    }

    private func retarget(to newTarget: WorkQueue) {
        var ancestor: WorkQueue? = newTarget
        while let current = ancestor {
            if current === self {
                lullFatal("setTarget(queue:) on WorkQueue '\(label)' would make a cycle through '\(newTarget.label)'")
            }
            ancestor = current.state.locked { $0.target }
        }
        state.locked { state in
            state.target = newTarget
            state.floor = WorkQueue.floor(ownQoS: qos, target: newTarget)
        }
    }

    var target: WorkQueue? {
        state.locked { $0.target }
    }
}

extension WorkQueue: CustomDebugStringConvertible {
    /// The label, kind, QoS (the queue's own, or what its target gives it), target, any
    /// override in force (the queue raised because more important work waits on it),
    /// suspension and activation.
    public var debugDescription: String {
        let (target, suspended, inactive, floor, raised) = state.locked {
            ($0.target?.label ?? "-", $0.suspendCount, $0.isInactive, $0.floor, $0.activeOverride)
        }
        let overrideText = raised.map { " override=\($0.name)" } ?? ""
        return "<WorkQueue '\(label)' \(kind) qos=\(floor) target=\(target)\(overrideText) "
            + "suspended=\(suspended) inactive=\(inactive)>"
    }
}
