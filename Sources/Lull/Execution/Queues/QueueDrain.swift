/// How a queue's blocks run: the drain loops that a drain request performs on whatever thread
/// runs it, and the execution of one job.
extension WorkQueue {
    /// Blocks a concurrent drain under a serial target takes per lock acquisition.
    private static let concurrentBatch = 16
    /// Blocks a serial drain runs before it yields its thread to other queues.
    static let serialQuantum = 1_024
    /// Blocks a concurrent drain runs before it yields its thread to other queues.
    private static let concurrentQuantum = 64

    /// Runs a drain request for this queue on the calling thread.
    func drain() {
        switch kind {
        case .serial: drainSerial()
        case .concurrent: drainConcurrent()
        case .root, .mainThread: lullFatal("drain request for global queue '\(label)'")
        }
    }

    /// Takes every pending block at once and runs them in order. Stops early when the queue
    /// is suspended or a `sync` caller takes the queue over, putting the rest back.
    ///
    /// Each block runs at least at the highest class among the blocks behind it in the batch
    /// (`ClassMarks`), and the thread is raised (by whoever queues them) for more important
    /// blocks that arrive meanwhile: asynchronous inversion avoidance, which ends once the
    /// block that caused it has run.
    private func drainSerial() {
        var batch = Fifo<Job>()
        let thread = ThreadState.current
        let taken = state.locked { state -> (floor: QoS, nested: Bool, marks: ClassMarks)? in
            state.drainerFinished()
            guard !state.isOwned, !state.isPaused, state.hasWaiting(self) else { return nil }
            state.isOwned = true
            var marks = state.takePendingMarks()
            swap(&batch, &state.pending)
            swap(&state.pending, &state.spare)
            takeFromInbox(into: &batch, marks: &marks, &state)
            state.setOwner(thread.priorityReference, level: marks.highestClass(from: 0) ?? .unspecified)
            return (state.floor, !(state.target?.isGlobal ?? true), marks)
        }
        guard let (floor, nested, firstMarks) = taken else { return }
        // Inside a parent queue's drain, blocks never run below the level the parent runs
        // this drain at.
        var cursor = SerialDrainCursor(floor: floor, nested: nested,
                                       base: nested ? thread.ownQoS.qosClass : .unspecified, marks: firstMarks)
        // The drain is the job a worker took from its class queue, not one run inside
        // another queue's block or drain: its thread goes back to that queue when it ends.
        let endsLoopJob = thread.runsLoopJob && thread.heldQueues.isEmpty
        thread.heldQueues.append(HeldQueue(self, exclusive: true))
        while true {
            var next = batch.popFirst()
            // Each job moves on to the thread's runner, which consumes it (`take()`: no copy).
            while !cursor.stopped, let job = next.take() {
                // Blocks of one activity run in one installation of its context (one
                // task-local binding for the run, not one per block).
                if job.context.hasActivity && job.context.activityID != thread.context.activityID {
                    next = thread.withContext(job.context) { runSameContext(from: job, &cursor, &batch, thread) }
                } else {
                    next = runSameContext(from: job, &cursor, &batch, thread)
                }
            }
            if let unrun = next.take() { batch.prepend(unrun) }
            // Blocks that arrived meanwhile run in the same turn, up to a quantum, so that a
            // producer feeding the queue does not cost a drain request per batch.
            guard !cursor.stopped, batch.isEmpty, cursor.ran < WorkQueue.serialQuantum else { break }
            let more = state.locked { state -> SerialRefill in
                guard !state.isPaused else { return .none }
                var marks = state.takePendingMarks()
                if !state.pending.isEmpty { swap(&batch, &state.pending) }
                takeFromInbox(into: &batch, marks: &marks, &state)
                if batch.isEmpty {
                    // Counted in but not filled yet: its producer is between its claim and
                    // its flag. Wait for it rather than give the queue up.
                    return state.hasWaiting(self) ? .producerInFlight : .none
                }
                // The blocks that raised this thread are in the batch now: its levels take over.
                state.setOwner(thread.priorityReference, level: marks.highestClass(from: 0) ?? .unspecified)
                return .batch(marks)
            }
            switch more {
            case .none:
                break
            case .producerInFlight:
                inbox.waitForNext()
                continue
            case .batch(let nextMarks):
                cursor.startBatch(nextMarks)
                continue
            }
            break
        }
        #if DEBUG
        if !cursor.stopped { QueueTestHooks.runDrainGoesIdle(self) }
        #endif
        let handedOff = cursor.handedOff
        let marks = cursor.marks
        let index = cursor.index
        thread.heldQueues.removeLast()
        let restMarks = marks.dropping(index)
        let request = state.locked { state -> (WorkQueue, Job)? in
            state.putBack(&batch, restMarks: restMarks)
            if batch.isEmpty {
                if state.pending.capacity == 0 {
                    swap(&state.pending, &batch)
                } else if batch.capacity >= QueueState.spareMinimumCapacity {
                    swap(&state.spare, &batch)
                }
            }
            // Handing off keeps the queue owned: the `sync` caller releases it.
            if let handedOff {
                state.setOwner(Unmanaged.passUnretained(handedOff.callerPriority))
            } else {
                state.isOwned = false
                state.setOwner(nil)
            }
            return state.drainRequestIfNeeded(for: self)
        }
        handedOff?.grant(drainerWaits: false)
        // The next turn (quantum used up, or blocks that arrived after the last look) goes
        // to the class queue this worker is about to look at (`WorkerPool.submit`).
        thread.postsOwnContinuation = endsLoopJob
        WorkQueue.post(request)
        thread.postsOwnContinuation = false
    }

    /// Moves what the inbox counts (up to a slot not filled yet, and at most a quantum) to
    /// the end of `batch`, marking each job's class (its tag) at its place. Only the queue's
    /// owner, under the lock. The jobs ahead of a work item that a waiter raised run at
    /// least at the raised class (`InboxRaises`).
    ///
    /// A take moves at most `serialQuantum` jobs: the drain runs no more than that in a turn,
    /// and every `async` or `sync` that needs the lock meanwhile waits for the move. Jobs
    /// left behind stay counted in the inbox, so the drain's next look, or the request it
    /// posts as it gives the queue up, takes them (a queue resumed with a million blocks
    /// waiting moves them a quantum at a time).
    @inline(__always)
    private func takeFromInbox(into batch: inout Fifo<Job>, marks: inout ClassMarks, _ state: inout QueueState) {
        assert(state.isOwned, "Lull: a serial queue's inbox read by a thread that does not own the queue")
        if inbox.count > 0 {
            let classes = inboxClasses.exchange(0, ordering: .sequentiallyConsistent)
            let start = batch.count
            // Each job's tag is its effective class's rank (the producer resolved it with the
            // floor published when it submitted).
            inbox.take(upTo: WorkQueue.serialQuantum, into: &batch) { rank, position in
                marks.note(QoS.QoSClass.byRank[Int(rank)], at: position)
            }
            if state.inboxRaises.highest != .unspecified {
                state.inboxRaises.apply(to: batch, takenFrom: start, marks: &marks)
            }
            if inbox.count > 0 {
                // Jobs left behind (beyond the quantum, counted in after the take began, or
                // behind a slot not filled yet): their classes stay in the bound.
                inboxClasses.bitwiseOr(classes, ordering: .sequentiallyConsistent)
                return
            }
        }
        // Everything waiting is in the batch now.
        state.pendingMaxClass = .unspecified
    }

    /// Runs `first` and the jobs after it in `batch` that carry the same activity; returns
    /// the first job taken that carries another one (nil when the batch ran out or the
    /// drain stops).
    private func runSameContext(from first: consuming Job, _ cursor: inout SerialDrainCursor, _ batch: inout Fifo<Job>,
                                _ thread: ThreadState) -> Job? {
        let activity = first.context.activityID
        var job = first
        while true {
            cursor.run(consume job, queue: self, thread: thread)
            if cursor.stopped { return nil }
            guard let next = batch.popFirst() else { return nil }
            if next.context.activityID != activity { return next }
            job = next
        }
    }

    /// Runs blocks while other drains of the same queue may run too; barriers run alone.
    ///
    /// A concurrent queue counts only the drain requests still waiting on the target, and
    /// keeps one waiting per pending block (up to its width): a drain stuck in a long or
    /// blocking block then never holds up the blocks behind it, and the pool sees queued
    /// work when all its threads are taken.
    private func drainConcurrent() {
        let thread = ThreadState.current
        let drainQoS = thread.ownQoS
        var ran = 0
        var started = false
        var batch = Fifo<Job>()
        while true {
            let taken = state.locked { state -> (floor: QoS, nested: Bool, barrier: Bool, more: (WorkQueue, Job)?)? in
                if !started {
                    started = true
                    state.drainerFinished()
                }
                guard !state.isPaused, !state.barrierActive, let head = state.pending.first,
                      ran < WorkQueue.concurrentQuantum else {
                    return nil
                }
                let nested = !(state.target?.isGlobal ?? true)
                if head.isBarrier {
                    guard state.inFlight == 0, forwardedBlocksFinished() else { return nil }
                    batch.append(state.pending.popFirst()!)
                    state.barrierActive = true
                    state.inFlight = 1
                    return (state.floor, nested, true, nil)
                }
                // On a global target each drain takes one block, so that every block waits
                // only for a thread, never behind another block of a drain's batch: a block
                // may wait for a later block of its own queue, as Dispatch's concurrent
                // queues allow. Under a serial target the queue's blocks run one at a time
                // anyway, and batches spare the lock when they pile up.
                let limit = nested && state.pending.count >= 4 * WorkQueue.concurrentBatch ? WorkQueue.concurrentBatch : 1
                while batch.count < limit, let next = state.pending.first, !next.isBarrier {
                    batch.append(state.pending.popFirst()!)
                }
                state.inFlight += batch.count
                if state.pending.isEmpty { state.pendingMaxClass = .unspecified }
                return (state.floor, nested, false, state.drainRequestIfNeeded(for: self))
            }
            guard let (floor, nested, barrier, more) = taken else { break }
            WorkQueue.post(more)
            thread.heldQueues.append(HeldQueue(self, exclusive: barrier))
            var finished = 0
            var handedOffBarrier = false
            while let job = batch.popFirst() {
                if let waiter = job.syncWaiter {
                    if nested {
                        waiter.grant(drainerWaits: true)
                        WorkerPool.blocking { waiter.awaitFinish() }
                        finished += 1
                    } else {
                        // The caller runs on its own thread and settles its own accounting.
                        waiter.grant(drainerWaits: false)
                        handedOffBarrier = barrier
                    }
                } else {
                    JobRunner.run(job, floor: floor, drainQoS: drainQoS, thread: thread)
                    finished += 1
                }
                ran += 1
                if pausedCount.load(ordering: .acquiring) > 0 { break }
            }
            thread.heldQueues.removeLast()
            state.locked { state in
                state.inFlight -= finished + batch.count
                state.putBack(&batch)
                if barrier && !handedOffBarrier { state.barrierActive = false }
            }
        }
        // Leaving (quantum used up, paused, or waiting for a barrier): make sure someone
        // comes back for what is left.
        let request = state.locked { $0.drainRequestIfNeeded(for: self) }
        WorkQueue.post(request)
    }
}

extension WorkQueue {
    /// Runs a block this concurrent queue forwarded to its global target — unless the queue
    /// was suspended since, in which case the block goes back to wait in the queue.
    func runForwarded(_ job: consuming Job, thread: ThreadState) {
        #if DEBUG
        QueueTestHooks.runForwardedStarts(self, group: job.group)
        #endif
        if pausedCount.load(ordering: .acquiring) > 0 {
            job.owner = nil
            let request = state.locked(moving: job) { (state: inout QueueState, job: consuming Job) -> (WorkQueue, Job)? in
                if state.pendingMaxClass < job.qos.qosClass { state.pendingMaxClass = job.qos.qosClass }
                state.putBackForwarded(job)
                return state.drainRequestIfNeeded(for: self)
            }
            WorkQueue.post(request)
            forwardedBlockFinished()
            return
        }
        thread.heldQueues.append(HeldQueue(self, exclusive: false))
        JobRunner.runIgnoringOwner(job, floor: .unspecified, drainQoS: nil, thread: thread)
        thread.heldQueues.removeLast()
        forwardedBlockFinished()
    }

    /// Counts a forwarded block out (without the queue lock, through the forward gate: the
    /// producer does not take the lock for a forwarded block, and the consumers would fight
    /// each other for it). The last one out comes back for a barrier that waits for it.
    private func forwardedBlockFinished() {
        guard state.forwardGate.leave() else { return }
        WorkQueue.post(state.locked { $0.drainRequestIfNeeded(for: self) })
    }

    /// Under the queue lock, for a barrier (or barrier `sync`) about to run: true when no
    /// forwarded block runs. Closes the forward gate in the same atomic step as it reads
    /// the count, so that no block gets past the barrier; when blocks still run, the last
    /// one out comes back for the barrier (`ForwardGate.closeForExclusive`).
    func forwardedBlocksFinished() -> Bool {
        state.forwardGate.closeForExclusive()
    }

    /// Concurrent: blocks may go straight to the global target without the lock now.
    var forwardGateIsOpen: Bool { state.forwardGate.isOpen }

    /// Concurrent: blocks forwarded to the global target that have not finished.
    var forwardedBlocks: Int { state.forwardGate.forwardedCount }
}

/// What a serial drain finds when it looks for more blocks.
private enum SerialRefill {
    case batch(ClassMarks)
    /// The inbox counts a block whose slot is not filled yet.
    case producerInFlight
    case none
}

/// A queue the current thread holds: exclusively (a serial drain, a barrier, a `sync`) or
/// as one of several runners of a concurrent queue (or of a global queue, in `sync`).
///
/// `unowned(unsafe)`: an entry lives only while the thread runs inside the queue (a drain,
/// whose job holds the queue; a `sync`, whose caller does), so the queue outlives it, and
/// pushing one costs no reference count.
struct HeldQueue {
    unowned(unsafe) let queue: WorkQueue
    let exclusive: Bool

    init(_ queue: WorkQueue, exclusive: Bool) {
        self.queue = queue
        self.exclusive = exclusive
    }

    var id: ObjectIdentifier { ObjectIdentifier(queue) }
}

/// Where a serial drain is in its batch: the level the next block runs at (see
/// `ClassMarks`), how many blocks ran, and why it stopped.
struct SerialDrainCursor {
    let floor: QoS
    let nested: Bool
    /// The least class blocks run at (a nested drain's parent level).
    let base: QoS.QoSClass
    private(set) var marks: ClassMarks
    /// Position in the batch of the next block.
    private(set) var index = 0
    private var levelUntil = -1
    private var level: QoS?
    private(set) var ran = 0
    /// A `sync` caller the queue is handed to.
    private(set) var handedOff: SyncWaiter?
    /// Handed off, or the queue was suspended.
    private(set) var stopped = false

    init(floor: QoS, nested: Bool, base: QoS.QoSClass, marks: ClassMarks) {
        self.floor = floor
        self.nested = nested
        self.base = base
        self.marks = marks
    }

    mutating func startBatch(_ marks: ClassMarks) {
        self.marks = marks
        index = 0
        levelUntil = -1
    }

    /// Runs one job of the batch (or hands the queue to a `sync` caller).
    mutating func run(_ job: consuming Job, queue: WorkQueue, thread: ThreadState) {
        if index > levelUntil {
            let next = marks.level(at: index)
            levelUntil = next?.until ?? Int.max
            let levelClass = Swift.max(next?.qosClass ?? .unspecified, base)
            if index > 0, levelClass < (level?.qosClass ?? .unspecified) {
                queue.state.locked { $0.ownerLevelFell(to: levelClass, in: queue) }
            }
            level = levelClass == .unspecified ? nil : QoS(levelClass)
        }
        index += 1
        if let waiter = job.syncWaiter {
            if nested {
                // The targets this drain holds must stay held while the caller runs.
                waiter.grant(drainerWaits: true)
                WorkerPool.blocking { waiter.awaitFinish() }
            } else {
                handedOff = waiter
                stopped = true
                return
            }
        } else {
            JobRunner.run(job, floor: floor, drainQoS: level, thread: thread)
        }
        ran += 1
        if queue.pausedCount.load(ordering: .acquiring) > 0 { stopped = true }
    }
}
