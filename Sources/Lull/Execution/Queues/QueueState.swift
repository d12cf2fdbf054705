/// The mutable state of a serial or concurrent queue, guarded by the queue's mutex.
struct QueueState: Sendable {
    /// The blocks waiting: a concurrent queue's, or the blocks a serial drain took from the
    /// inbox and put back (a serial queue's producers use the inbox). A serial drain takes
    /// the whole buffer as its batch, adds what it takes from the inbox, and gives the
    /// buffer back emptied, so a drain allocates no batch buffer of its own.
    var pending = Fifo<Job>()
    /// An emptied batch buffer a busy serial queue keeps besides `pending`'s, so that its
    /// producer does not grow a new buffer after every drain. Small ones are not kept: a
    /// queue keeps at most the one buffer its traffic needs.
    var spare = Fifo<Job>()
    static let spareMinimumCapacity = 64
    var target: WorkQueue?
    var isInactive: Bool
    var suspendCount = 0
    /// The QoS the queue imposes on its blocks (rule 1 of QoS resolution).
    var floor: QoS
    /// Serial: a drain or a `sync` caller owns the queue.
    var isOwned = false
    /// Concurrent: blocks taken off `pending` by drains (or `sync` callers) that have not
    /// finished. Blocks forwarded straight to the global target count in the queue's
    /// forward gate instead (`QueueLock.forwardGate`).
    var inFlight = 0
    /// Concurrent: a barrier block (or barrier `sync`) runs.
    var barrierActive = false
    /// Drain requests posted on the target: for a serial queue until they start or end, for a
    /// concurrent queue until they start.
    var drainers = 0
    /// The highest class a posted drain request was posted at.
    var drainerClass: QoS.QoSClass = .unspecified
    /// An upper bound of the effective class of the pending blocks (serial: and of those
    /// that went into the inbox through the lock; see `pendingMax`).
    var pendingMaxClass: QoS.QoSClass = .unspecified
    /// Serial: where in `pending` the last block of each class is, so that a drain runs the
    /// blocks ahead of a more important one at its class (asynchronous inversion). The drain
    /// marks the blocks it takes from the inbox itself.
    var pendingMarks = ClassMarks()
    /// Serial: the thread that owns the queue (a drain or a `sync` caller), and the override
    /// this queue puts on it because blocks more important than it arrived meanwhile.
    /// Unretained (no reference counting on the `sync` fast path): an owner is set only
    /// while its thread runs the queue's drain or waits in, or runs, a `sync` on it, and is
    /// cleared under the queue's lock before that thread returns, so it is alive whenever
    /// another thread reads it here.
    var owner: Unmanaged<ThreadPriorityControl>?
    var ownerOverride: QoS.QoSClass = .unspecified
    /// Threads whose override counts changed in this lock section: their nice values are
    /// applied once the queue's lock is released (`QueueLock`), retained until then. One
    /// section changes at most two (the owner it lets go, the owner it raises).
    var deferredNice: (Unmanaged<ThreadPriorityControl>?, Unmanaged<ThreadPriorityControl>?) = (nil, nil)
    /// The least class a draining owner runs every block ahead of a new one at (the highest
    /// class among the rest of its batch): a new block up to that class needs no override.
    var ownerLevel: QoS.QoSClass = .unspecified

    /// Serial: producers append to the queue's `SegmentedInbox` (lock-free) and `pending`
    /// holds only blocks a drain took from it and put back.
    let usesInbox: Bool
    /// Concurrent: each section ends by opening or closing the queue's forward gate
    /// (`forwardTarget`).
    let gatesForwarding: Bool
    /// Serial: work items that waiters raised and that may still be in the inbox (or not
    /// pushed yet): each take runs what is ahead of such an item at its raised class.
    var inboxRaises = InboxRaises()

    /// Concurrent queues ask for at most this many drains at once; the pool's concurrency
    /// limit, not this number, bounds how many run.
    static let concurrentWidth = 64

    init(target: WorkQueue?, isInactive: Bool, floor: QoS, usesInbox: Bool = false, gatesForwarding: Bool = false) {
        self.usesInbox = usesInbox
        self.gatesForwarding = gatesForwarding
        self.target = target
        self.isInactive = isInactive
        self.floor = floor
    }

    var isPaused: Bool { isInactive || suspendCount > 0 }

    /// What `QueueLock` publishes for a serial queue's producers after each section: the
    /// class (rank, high byte) up to which a block that finds others waiting in the inbox
    /// needs nothing of the lock — the owner already runs at least at it (its override or
    /// the level of its batch), or a drain request was posted at it — and the floor (rank,
    /// low byte) the producer resolves its block's class with. Paused, or neither owned nor
    /// requested: 0, every block takes the lock.
    /// `mutating` only so that the lock's release reads the state in place: a getter on the
    /// guarded state makes the caller copy the whole state first.
    @inline(__always)
    mutating func fastPathWord() -> UInt16 {
        var ceiling = QoS.QoSClass.unspecified
        if !isPaused {
            if isOwned {
                ceiling = Swift.max(ownerOverride, ownerLevel)
            } else if drainers > 0 {
                ceiling = drainerClass
            }
        }
        let floorRank = floor.isUnspecified ? 0 : floor.qosClass.rank
        return UInt16(ceiling.rank) << 8 | UInt16(floorRank)
    }

    /// Concurrent: the global target a block may go straight to, without the lock, when
    /// nothing is in its way — not paused, no barrier running, nothing waiting in `pending`
    /// (a barrier waiting there included) — and nil otherwise: what the section's end
    /// publishes in the forward gate. `mutating` for the same reason as `fastPathWord`.
    @inline(__always)
    mutating func forwardTarget() -> WorkQueue? {
        guard !isPaused, !barrierActive, pending.isEmpty, let target, target.isGlobal else { return nil }
        return target
    }

    /// A serial queue's block (or a raise of what waits) that arrives through the lock:
    /// remembered for the drain request's class, and the owner, if any, is raised to its
    /// class right away.
    mutating func noteSerialArrival(_ qosClass: QoS.QoSClass) {
        if qosClass > pendingMaxClass { pendingMaxClass = qosClass }
        if qosClass > ownerOverride, qosClass > ownerLevel, isOwned, let owner {
            changeOverride(on: owner, with: qosClass)
        }
    }

    /// The serial queue changes hands (`owner` nil: nobody): the override it put on the old
    /// owner is taken back; the blocks that caused it are the new owner's business.
    /// `level`: see `ownerLevel`.
    @inline(__always)
    mutating func setOwner(_ newOwner: Unmanaged<ThreadPriorityControl>?, level: QoS.QoSClass = .unspecified) {
        if ownerOverride != .unspecified { dropOwnerOverride() }
        owner = newOwner
        ownerLevel = level
    }

    private mutating func dropOwnerOverride() {
        if let owner { changeOverride(on: owner, with: .unspecified) }
        ownerOverride = .unspecified
    }

    /// Replaces this queue's override on `owner` by `new`: the counts now, the nice value
    /// after the lock (`deferredNice`).
    private mutating func changeOverride(on owner: Unmanaged<ThreadPriorityControl>, with new: QoS.QoSClass) {
        owner.takeUnretainedValue().replaceOverride(ownerOverride, with: new, applyingNice: false)
        ownerOverride = new
        let control = owner.takeUnretainedValue()
        if deferredNice.0?.takeUnretainedValue() === control || deferredNice.1?.takeUnretainedValue() === control { return }
        if deferredNice.0 == nil {
            deferredNice.0 = owner.retain()
        } else if deferredNice.1 == nil {
            deferredNice.1 = owner.retain()
        } else {
            lullFatal("a queue's lock section changed the overrides of more than two threads")
        }
    }

    /// The threads whose nice values wait to be applied, taken out of the state.
    mutating func takeDeferredNice() -> (Unmanaged<ThreadPriorityControl>?, Unmanaged<ThreadPriorityControl>?) {
        defer { deferredNice = (nil, nil) }
        return deferredNice
    }

    /// The draining owner's level fell (it ran the most important block of its batch):
    /// blocks that arrived meanwhile above the new level now need the override they did
    /// not get.
    mutating func ownerLevelFell(to level: QoS.QoSClass, in queue: WorkQueue) {
        ownerLevel = level
        let waitingMax = pendingMax(queue)
        if waitingMax > level && waitingMax > ownerOverride, let owner {
            changeOverride(on: owner, with: waitingMax)
        }
    }

    /// A drain takes every pending block: their marks become its levels.
    mutating func takePendingMarks() -> ClassMarks {
        defer { pendingMarks = ClassMarks() }
        return pendingMarks
    }

    /// The class the queue is raised to above its own QoS, if any (for the debug description).
    var activeOverride: QoS.QoSClass? {
        let raised = Swift.max(ownerOverride, drainerClass)
        return raised > (floor.isUnspecified ? .default : floor.qosClass) ? raised : nil
    }

    /// Decides whether `queue` must put a drain request on its target now, and records it.
    /// Called under the lock after anything that can make pending blocks runnable.
    mutating func drainRequestIfNeeded(for queue: WorkQueue) -> (WorkQueue, Job)? {
        // Called on every enqueue: nothing here copies a job (a copy retains the block, its
        // context and its group) or the target until a request is made.
        guard !isPaused, hasWaiting(queue), target != nil else { return nil }
        let waitingMax = pendingMax(queue)
        let wanted = waitingMax == .unspecified ? QoS.QoSClass.default : waitingMax
        if case .serial = queue.kind {
            if isOwned { return nil }
            // One request is enough, unless a higher-QoS block waits behind a request
            // posted at a lower class (asynchronous inversion): then post one at its class.
            if drainers > 0 && wanted <= drainerClass { return nil }
        } else {
            if barrierActive { return nil }
            if pending.firstIsBarrier && (inFlight > 0 || !queue.forwardedBlocksFinished()) { return nil }
            let useful = Swift.min(pending.count, QueueState.concurrentWidth)
            if drainers >= useful && wanted <= drainerClass { return nil }
        }
        drainers += 1
        if wanted > drainerClass { drainerClass = wanted }
        return (target.unsafelyUnwrapped, Job.drain(queue, at: wanted))
    }

    /// Blocks wait: in `pending`, or (serial) counted in the inbox.
    @inline(__always)
    func hasWaiting(_ queue: WorkQueue) -> Bool {
        !pending.isEmpty || (usesInbox && queue.inbox.count > 0)
    }

    /// An upper bound of the effective class of the waiting blocks: `pendingMaxClass`, the
    /// classes of the blocks that went into the inbox without the lock, and the classes
    /// work items in the inbox were raised to.
    @inline(__always)
    func pendingMax(_ queue: WorkQueue) -> QoS.QoSClass {
        guard usesInbox else { return pendingMaxClass }
        let inboxMax = Swift.max(inboxRaises.highest,
                                 WorkQueue.highestClass(in: queue.inboxClasses.load(ordering: .sequentiallyConsistent)))
        return Swift.max(pendingMaxClass, inboxMax)
    }

    /// Called by a drain request that starts (concurrent) or ends (serial).
    mutating func drainerFinished() {
        drainers -= 1
        if drainers == 0 { drainerClass = .unspecified }
    }

    /// Takes the queue for a `sync` caller if nothing is queued, running in the way, paused
    /// or inactive: exclusively (serial, barrier) or as one more runner (concurrent).
    /// `owner`: the caller's thread, raised while more important blocks wait behind it.
    mutating func acquireForSync(_ queue: WorkQueue, exclusive: Bool, owner: Unmanaged<ThreadPriorityControl>) -> Bool {
        guard !isPaused, !hasWaiting(queue) else { return false }
        switch queue.kind {
        case .serial:
            guard !isOwned else { return false }
            isOwned = true
            setOwner(owner)
        case .concurrent:
            guard !barrierActive else { return false }
            if exclusive {
                guard inFlight == 0, queue.forwardedBlocksFinished() else { return false }
                barrierActive = true
            }
            inFlight += 1
        case .root, .mainThread:
            break
        }
        return true
    }

    /// Concurrent: a block forwarded to the global target that found the queue suspended
    /// as it started goes back to wait behind the forwarded blocks that went back before it
    /// and ahead of the blocks that waited here (all submitted after the gate closed). The
    /// forwarded ones are those a global queue marked with its class (`globalClass`): only
    /// this path puts such a block in `pending`, and they stay together at the head, so the
    /// blocks that went through the gate come back in the order they return, which is the
    /// order the global queue handed them out when one thread takes them.
    mutating func putBackForwarded(_ job: consuming Job) {
        guard let start = pending.firstIndex(from: 0, where: { $0.globalClass != nil }) else {
            pending.prepend(job)
            return
        }
        let end = pending.firstIndex(from: start, where: { $0.globalClass == nil }) ?? pending.count
        var reordered = Fifo<Job>()
        for _ in 0..<end { reordered.append(pending.popFirst()!) }
        reordered.append(job)
        while let next = pending.popFirst() { reordered.append(next) }
        swap(&pending, &reordered)
    }

    /// Puts blocks that a drain took but did not run back at the head, before newer ones.
    /// `restMarks`: the marks of the blocks put back, counted from the first of them.
    mutating func putBack(_ rest: inout Fifo<Job>, restMarks: ClassMarks = ClassMarks()) {
        guard !rest.isEmpty else { return }
        pendingMarks = restMarks.followed(by: pendingMarks, offset: rest.count)
        while let job = pending.popFirst() { rest.append(job) }
        swap(&pending, &rest)
        // The blocks put back may be of any class: stay conservative.
        if pendingMaxClass < .default { pendingMaxClass = .default }
        if let highest = restMarks.highestClass(from: 0), highest > pendingMaxClass { pendingMaxClass = highest }
    }
}
