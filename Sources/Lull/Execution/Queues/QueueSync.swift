/// `sync`: run a block on the calling thread once the queue (and every serial queue it
/// funnels through) is ours, without a thread hand-off when the queue is free.
extension WorkQueue {
    /// Runs `work` on the calling thread once the queue is the caller's (after the blocks
    /// before it, on a serial queue) and returns its result; with `.barrier` on a concurrent
    /// queue, alone. The caller's context and QoS go with it (unless `.detached`).
    /// - Precondition: not on a serial queue the calling thread is already running (that would
    ///   deadlock: Lull stops the program with a message instead).
    public func sync<T>(flags: WorkItemFlags = [], execute work: () throws -> T) rethrows -> T {
        try syncRun(flags: flags, itemQoS: .unspecified, work)
    }

    /// Performs `workItem` on the calling thread as `sync(execute:)` does a block, with the
    /// item's flags and QoS.
    public func sync(execute workItem: WorkItem) {
        syncRun(flags: workItem.flags, itemQoS: workItem.requestedQoS) { workItem.perform() }
    }

    private func syncRun<T>(flags: WorkItemFlags, itemQoS: QoS, _ work: () throws -> T) rethrows -> T {
        let thread = ThreadState.current
        let barrier = flags.contains(.barrier) && kind == .concurrent
        checkNoDeadlock(thread: thread, barrier: barrier)
        // Runs at the higher of the caller's QoS and the item's, never lower than the caller.
        let qos = itemQoS.isUnspecified ? thread.ownQoS : QoS.maximum(itemQoS, thread.ownQoS)
        // The body runs on the calling thread: without `.detached` it is already in the
        // caller's context (thread or task), and nothing needs installing.
        let detached = flags.contains(.detached)
        switch kind {
        case .root:
            // The block runs on the global queue as far as `workPrecondition` and
            // `getSpecific` can tell.
            thread.heldQueues.append(HeldQueue(self, exclusive: false))
            defer { thread.heldQueues.removeLast() }
            return try runBody(work, thread: thread, detached: detached, qos: qos)
        case .mainThread:
            lullFatal("sync onto the main thread's root")
        case .serial, .concurrent:
            break
        }
        let exclusive = kind == .serial || barrier
        switch tryAcquireDirect(exclusive: exclusive, owner: thread.priorityReference) {
        case .acquired:
            // The common case, a free queue right on a global queue: no hand-off, no list.
            thread.heldQueues.append(HeldQueue(self, exclusive: exclusive))
            defer {
                thread.heldQueues.removeLast()
                releaseSync(exclusive: exclusive)
            }
            return try runBody(work, thread: thread, detached: detached, qos: qos)
        case .mainThread:
            return try syncOnMainThread(qos: qos, context: detached ? .empty : thread.currentContext, work)
        case .nested:
            if let chain = tryAcquireChain(barrier: barrier, owner: thread.priorityReference) {
                for (queue, exclusive) in chain {
                    thread.heldQueues.append(HeldQueue(queue, exclusive: exclusive))
                }
                defer {
                    thread.heldQueues.removeLast(chain.count)
                    for (queue, exclusive) in chain.reversed() { queue.releaseSync(exclusive: exclusive) }
                }
                return try runBody(work, thread: thread, detached: detached, qos: qos)
            }
        case .busy:
            break
        }
        // The waiter is queued at the caller's QoS (overrides included) over the queue's, so
        // that whatever runs ahead of it runs at least at that QoS (synchronous inversion).
        let waiter = SyncWaiter(isBarrier: barrier || kind == .serial, callerPriority: thread.priority)
        let waitQoS = QoS.maximum(qos, thread.currentQoS)
        enqueue(Job(work: .syncWaiter(waiter), qos: waitQoS,
                    flags: barrier ? [.barrier, .enforceQoS] : .enforceQoS, context: .empty, group: nil))
        waiter.awaitGrant()
        thread.heldQueues.append(HeldQueue(self, exclusive: exclusive))
        defer {
            thread.heldQueues.removeLast()
            if waiter.isNested {
                waiter.finish()
            } else {
                releaseSync(exclusive: exclusive)
            }
        }
        return try runBody(work, thread: thread, detached: detached, qos: qos)
    }

    private func runBody<T>(_ work: () throws -> T, thread: ThreadState, detached: Bool,
                            qos: QoS) rethrows -> T {
        // The usual `sync` changes neither the context nor the QoS: skip the bookkeeping.
        if !detached { return try thread.withQoS(qos, work) }
        return try thread.withContext(.empty) { try thread.withQoS(qos, work) }
    }

    private enum DirectAcquisition {
        case acquired, busy, nested, mainThread
    }

    /// One lock: takes the queue when it is free and sits right on a global queue; otherwise
    /// says what kind of path `sync` needs.
    private func tryAcquireDirect(exclusive: Bool, owner: Unmanaged<ThreadPriorityControl>) -> DirectAcquisition {
        state.locked { state in
            guard let target = state.target else { return .busy }
            switch target.kind {
            case .mainThread: return .mainThread
            case .serial, .concurrent: return .nested
            case .root: break
            }
            return state.acquireForSync(self, exclusive: exclusive, owner: owner) ? .acquired : .busy
        }
    }

    /// `sync` onto a queue this thread already holds exclusively can never proceed.
    private func checkNoDeadlock(thread: ThreadState, barrier: Bool) {
        guard !thread.heldQueues.isEmpty else { return }
        var queue: WorkQueue? = self
        var first = true
        while let current = queue, !current.isGlobal, current.kind != .mainThread {
            let needsExclusive = current.kind == .serial || (first && barrier)
            if thread.heldQueues.contains(where: { $0.id == current.identity && ($0.exclusive || needsExclusive) }) {
                lullFatal("sync onto WorkQueue '\(label)' from a block already running on '\(current.label)': deadlock")
            }
            first = false
            queue = current.target
        }
    }

    /// Takes this queue and every non-global queue it funnels through, if all are free now.
    private func tryAcquireChain(barrier: Bool, owner: Unmanaged<ThreadPriorityControl>) -> [(WorkQueue, Bool)]? {
        var acquired: [(WorkQueue, Bool)] = []
        var queue: WorkQueue? = self
        var exclusiveHere = barrier
        while let current = queue, !current.isGlobal {
            if current.kind == .mainThread { break }
            let exclusive = current.kind == .serial || exclusiveHere
            guard current.tryAcquireForSync(exclusive: exclusive, owner: owner) else {
                for (held, heldExclusive) in acquired.reversed() { held.releaseSync(exclusive: heldExclusive) }
                return nil
            }
            acquired.append((current, exclusive))
            exclusiveHere = false
            queue = current.target
        }
        return acquired
    }

    private func tryAcquireForSync(exclusive: Bool, owner: Unmanaged<ThreadPriorityControl>) -> Bool {
        state.locked { $0.acquireForSync(self, exclusive: exclusive, owner: owner) }
    }

    /// Gives back what a `sync` caller held, and lets waiting blocks run.
    func releaseSync(exclusive: Bool) {
        let request = state.locked { state -> (WorkQueue, Job)? in
            switch kind {
            case .serial:
                state.isOwned = false
                state.setOwner(nil)
            case .concurrent:
                state.inFlight -= 1
                if exclusive { state.barrierActive = false }
            case .root, .mainThread:
                break
            }
            return state.drainRequestIfNeeded(for: self)
        }
        WorkQueue.post(request)
    }

    /// The main queue's blocks run on the main thread, `sync` ones included: the block is
    /// queued like any other and the caller waits for it.
    private func syncOnMainThread<T>(qos: QoS, context: ExecutionContext, _ body: () throws -> T) rethrows -> T {
        try syncOnMainThread(qos: qos, context: context, body, rescue: { throw $0 })
    }

    /// `rescue` rethrows the body's error on the caller's thread; taking it as a parameter
    /// keeps `syncOnMainThread` rethrows (the same shape as Dispatch's `_syncHelper`).
    private func syncOnMainThread<T>(qos: QoS, context: ExecutionContext, _ body: () throws -> T,
                                     rescue: (any Error) throws -> T) rethrows -> T {
        let outcome: Result<T, any Error> = withoutActuallyEscaping(body) { escapable in
            let box = SyncBodyBox(escapable)
            let done = Parker()
            enqueue(Job(work: .block({ box.run(); done.unpark() }), qos: qos, flags: [], context: context, group: nil))
            WorkerPool.blocking { done.park() }
            return box.outcome!
        }
        switch outcome {
        case .success(let value): return value
        case .failure(let error): return try rescue(error)
        }
    }
}

/// Carries a non-escaping `sync` body to the main thread and its result back.
///
/// `@unchecked Sendable` is sound here: the body and result are touched by exactly two
/// threads in strict sequence — the main thread runs `run()`, then unparks the caller, which
/// only then reads `result()`; the parker's futex gives the happens-before edge. The caller
/// stays blocked until then, so the non-escaping closure outlives every use.
private final class SyncBodyBox<T>: @unchecked Sendable {
    private var body: (() throws -> T)?
    private(set) var outcome: Result<T, any Error>?

    init(_ body: @escaping () throws -> T) {
        self.body = body
    }

    /// Runs the body and lets go of it before the caller is woken: the caller's
    /// `withoutActuallyEscaping` checks that nothing holds the closure any more.
    func run() {
        if let body {
            outcome = Result { try body() }
        }
        body = nil
    }
}
