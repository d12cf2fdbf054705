import Synchronization

/// A queue of blocks: serial (one at a time, FIFO) or concurrent, funnelled through a
/// target queue down to a global queue that the QoS worker pool runs.
///
/// Every queue but the global ones drains through its target: when it has blocks and is
/// neither suspended, inactive nor already being drained, it puts one *drain request* on its
/// target; whoever runs that request runs a batch of the queue's blocks on its own thread.
/// A serial target therefore makes all its children mutually exclusive, as in Dispatch.
public final class WorkQueue: Sendable {
    public struct Attributes: OptionSet, Sendable {
        public let rawValue: UInt32
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

    public let label: String
    public let qos: QoS
    let kind: Kind
    let state: SpinFutexLock<QueueState>
    /// Mirrors "suspended or inactive" for the check a drain makes between two blocks.
    let pausedCount = Atomic<Int>(0)

    public init(label: String, qos: QoS = .unspecified, attributes: Attributes = [], target: WorkQueue? = nil) {
        self.label = label
        self.qos = qos
        self.kind = attributes.contains(.concurrent) ? .concurrent : .serial
        let resolvedTarget = target ?? WorkQueue.defaultTarget(for: qos)
        let inactive = attributes.contains(.initiallyInactive)
        state = SpinFutexLock(QueueState(target: resolvedTarget, isInactive: inactive,
                                 floor: WorkQueue.floor(ownQoS: qos, target: resolvedTarget)))
        if inactive { pausedCount.store(1, ordering: .relaxed) }
    }

    init(rootLabel: String, kind: Kind, qos: QoS) {
        self.label = rootLabel
        self.qos = qos
        self.kind = kind
        state = SpinFutexLock(QueueState(target: nil, isInactive: false, floor: .unspecified))
    }

    /// A plain queue targets the default global queue; a queue with a QoS targets the
    /// global queue of its class.
    static func defaultTarget(for qos: QoS) -> WorkQueue {
        global(qos: qos.qosClass)
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

    // MARK: Global and main queues

    private static let roots: [WorkQueue] = QoS.QoSClass.schedulable.map { qosClass in
        WorkQueue(rootLabel: "lull.global.\(qosClass.name)", kind: .root(qosClass), qos: QoS(qosClass))
    }

    /// The concurrent global queue of a QoS class (`unspecified` gives the default one).
    public static func global(qos: QoS.QoSClass = .default) -> WorkQueue {
        roots[qos.poolIndex]
    }

    private static let mainThreadRoot = WorkQueue(rootLabel: "lull.main-thread", kind: .mainThread, qos: .userInteractive)
    private static let mainQueue = WorkQueue(label: "lull.main", qos: .unspecified, target: mainThreadRoot)

    /// The serial queue drained by the thread that calls `runMain()`.
    public static var main: WorkQueue { mainQueue }

    /// Drains the main queue on the calling thread forever. Call it once, from any thread.
    public static func runMain() -> Never {
        MainThreadRunner.shared.run()
    }

    var isGlobal: Bool {
        if case .root = kind { return true }
        return false
    }

    var identity: ObjectIdentifier { ObjectIdentifier(self) }

    // MARK: Submission

    public func async(group: WorkGroup? = nil, qos: QoS = .unspecified, flags: WorkItemFlags = [],
                      execute work: @escaping @Sendable () -> Void) {
        var job = makeJob(.block(work), qos: qos, flags: flags)
        if let group {
            group.enter()
            job.group = group
        }
        enqueue(job)
    }

    public func async(execute workItem: WorkItem) {
        workItem.noteQueued(on: self)
        enqueue(makeJob(for: workItem))
    }

    public func asyncAfter(deadline: Deadline, qos: QoS = .unspecified, flags: WorkItemFlags = [],
                           execute work: @escaping @Sendable () -> Void) {
        DelayedWork.schedule(makeDelayedJob(.block(work), qos: qos, flags: flags), on: self, at: deadline)
    }

    public func asyncAfter(wallDeadline: WallDeadline, qos: QoS = .unspecified, flags: WorkItemFlags = [],
                           execute work: @escaping @Sendable () -> Void) {
        DelayedWork.schedule(makeDelayedJob(.block(work), qos: qos, flags: flags), on: self, at: wallDeadline)
    }

    public func asyncAfter(deadline: Deadline, execute workItem: WorkItem) {
        DelayedWork.schedule(makeDelayedJob(for: workItem), on: self, at: deadline)
    }

    /// A job for a block submitted now by the calling thread (its context and QoS travel).
    func makeJob(_ work: Job.Work, qos: QoS, flags: WorkItemFlags) -> Job {
        let thread = ThreadState.current
        let detached = flags.contains(.detached)
        return Job(work: work,
                   qos: QoSResolution.propagated(itemQoS: qos, flags: flags, submitter: thread.ownQoS),
                   flags: flags,
                   context: detached ? .empty : thread.currentContext,
                   group: nil)
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
    private func makeDelayedJob(_ work: Job.Work, qos: QoS, flags: WorkItemFlags) -> Job {
        Job(work: work, qos: QoSResolution.propagated(itemQoS: qos, flags: flags, submitter: nil),
            flags: flags, context: .empty, group: nil)
    }

    private func makeDelayedJob(for item: WorkItem) -> Job {
        Job(work: .item(item),
            qos: QoSResolution.propagated(itemQoS: item.requestedQoS, flags: item.flags, submitter: nil),
            flags: item.flags, context: item.assignedContext ?? .empty, group: nil)
    }

    /// Puts a job on this queue (or, for a global queue, on the worker pool).
    func enqueue(_ job: Job) {
        switch kind {
        case .root(let rootClass):
            var job = job
            // A block a concurrent queue forwards was resolved there already.
            if job.owner == nil {
                let floor: QoS = rootClass == .default ? .unspecified : QoS(rootClass)
                job.qos = QoSResolution.effective(job.qos, flags: job.flags, floor: floor)
            }
            WorkerPool.shared.submit(job)
        case .mainThread:
            MainThreadRunner.shared.submit(job)
        case .concurrent:
            var forwarded = job
            let request = state.locked { state -> (WorkQueue, Job)? in
                // Nothing in the way (no barrier, no suspension, nothing queued): the block
                // goes straight to the global target, still counted as running here.
                if state.pending.isEmpty, !state.isPaused, !state.barrierActive, !job.isBarrier,
                   let target = state.target, target.isGlobal {
                    state.inFlight += 1
                    forwarded.qos = QoSResolution.effective(job.qos, flags: job.flags, floor: state.floor)
                    forwarded.owner = self
                    return (target, forwarded)
                }
                state.pending.append(job)
                let jobClass = QoSResolution.effective(job.qos, flags: job.flags, floor: state.floor).qosClass
                if jobClass > state.pendingMaxClass { state.pendingMaxClass = jobClass }
                return state.drainRequestIfNeeded(for: self)
            }
            if let (target, token) = request { target.enqueue(token) }
        case .serial:
            let request = state.locked { state -> (WorkQueue, Job)? in
                state.pending.append(job)
                let jobClass = QoSResolution.effective(job.qos, flags: job.flags, floor: state.floor).qosClass
                state.noteSerialPending(jobClass, at: state.pending.count - 1)
                return state.drainRequestIfNeeded(for: self)
            }
            if let (target, token) = request { target.enqueue(token) }
        }
    }

    /// A thread of `qosClass` waits for something pending in this queue (a work item):
    /// the queue runs at that class at least until what is pending now has run.
    func raisePending(to qosClass: QoS.QoSClass) {
        guard !isGlobal, kind != .mainThread, qosClass != .unspecified else { return }
        let request = state.locked { state -> (WorkQueue, Job)? in
            if kind == .serial {
                // Conservative: everything pending now, the item among it, is raised.
                state.noteSerialPending(qosClass, at: state.pending.count - 1)
            } else if qosClass > state.pendingMaxClass {
                state.pendingMaxClass = qosClass
            }
            return state.drainRequestIfNeeded(for: self)
        }
        if let (target, token) = request { target.enqueue(token) }
    }

    // MARK: Suspension, activation, target

    public func activate() {
        guard !isGlobal, kind != .mainThread else { return }
        let request = state.locked { state -> (WorkQueue, Job)? in
            guard state.isInactive else { return nil }
            state.isInactive = false
            pausedCount.subtract(1, ordering: .releasing)
            return state.drainRequestIfNeeded(for: self)
        }
        if let (target, token) = request { target.enqueue(token) }
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
        if let (target, token) = request { target.enqueue(token) }
    }

    /// Makes `queue` (nil: the default global queue for this queue's QoS) the target.
    /// Blocks already handed to the old target finish there; later ones go to the new one.
    /// - Precondition: no cycle, and not on a global queue.
    public func setTarget(queue: WorkQueue?) {
        guard !isGlobal, kind != .mainThread, self !== WorkQueue.mainQueue else {
            lullFatal("setTarget(queue:) on the global or main queue '\(label)' is not allowed")
        }
        let newTarget = queue ?? WorkQueue.defaultTarget(for: qos)
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
