import Synchronization

/// The machinery every source kind shares.
///
/// A source runs its handlers as jobs on its target queue, one job at a time: the
/// registration handler, then event deliveries, then the cancel handler. `scheduled` is the
/// token: only the thread that sets it posts the next job, and the job clears it when done
/// and decides again. So handlers never run concurrently (even on a concurrent target), run
/// in that order, and nothing runs while the source is suspended — without a queue of its
/// own per source, which keeps an idle source small.
///
/// Events merge into `pending` with one atomic operation. Only a merge that finds the
/// source idle takes the lock to post a delivery, so a burst of merges costs no lock and no
/// system call beyond the first. The delivery takes the merged value and runs the handler.
final class SourceCore: Sendable {
    /// The source's class: names it in messages (a metatype is one word; a name string
    /// would be two in every source).
    let kind: EventSourceBase.Type
    var kindName: String { String(describing: kind) }
    let target: WorkQueue
    let mergeRule: SourceMerge
    // The one-byte fields sit together (Swift lays fields out in declaration order): an
    // idle source is a size class smaller.
    private let cancelled = Atomic<Bool>(false)
    /// A job of this source is posted on the target queue or running.
    private let scheduled = Atomic<Bool>(false)
    /// What the source watches and its mask, in 32 bits each (descriptors, signal numbers,
    /// process ids and every mask fit): an idle source is mostly these words.
    private let handleBits: UInt32
    private let maskBits: UInt32
    var handle: UInt { UInt(truncatingIfNeeded: Int32(bitPattern: handleBits)) }
    var mask: UInt { UInt(maskBits) }
    let driver: any SourceDriver

    private let pending = Atomic<UInt>(0)
    private let delivered = Atomic<UInt>(0)
    /// Bumped by every merge and state change: tells a deciding thread that something
    /// happened while it held `scheduled` (no wake-up is lost).
    private let changes = Atomic<UInt>(0)
    private let state = Mutex<State>(State())

    private struct State {
        var eventHandler: SourceHandler?
        var cancelHandler: SourceHandler?
        /// The registration handler and the registration error, boxed: most sources have
        /// neither, and inline they would make every source larger.
        var rare: Rare?

        var registrationHandler: SourceHandler? {
            get { rare?.registrationHandler }
            set { rareBox().registrationHandler = newValue }
        }

        var registrationError: EventSourceError? {
            get { rare?.registrationError }
            set { rareBox().registrationError = newValue }
        }

        private mutating func rareBox() -> Rare {
            if let rare { return rare }
            let box = Rare()
            rare = box
            return box
        }
        var activated = false
        /// The driver is registered: deliveries may run.
        var registered = false
        var registrationHandlerDue = false
        var cancelHandlerDelivered = false
        var suspendCount: Int32 = 0
        /// The step the posted job runs (one job at a time: one slot).
        var postedStep: Step?
    }

    /// `@unchecked Sendable`: only read and written inside `state`'s lock.
    private final class Rare: @unchecked Sendable {
        var registrationHandler: SourceHandler?
        var registrationError: EventSourceError?
    }

    private enum Step {
        case registration
        case delivery
        case cancellation
    }

    /// "<kind> on '<target label>'": how messages name the source (built only when needed).
    var label: String { "\(kindName) on '\(target.label)'" }

    /// The QoS the target queue imposes (the timer's default leeway depends on it).
    var floorQoS: QoS { WorkQueue.floor(ownQoS: .unspecified, target: target) }

    enum HandlerSlot {
        case event, cancel, registration
    }

    init(kind: EventSourceBase.Type, target: WorkQueue?, merge: SourceMerge, handle: UInt, mask: UInt, driver: any SourceDriver) {
        self.kind = kind
        self.target = target ?? WorkQueue.global()
        self.mergeRule = merge
        self.handleBits = UInt32(truncatingIfNeeded: handle)
        self.maskBits = UInt32(truncatingIfNeeded: mask)
        self.driver = driver
    }

    // MARK: Handlers

    func setHandler(_ slot: HandlerSlot, _ handler: SourceHandler?) {
        // After cancellation, handlers are released and not taken again (no retain cycle).
        guard !isCancelled || slot == .cancel else { return }
        // The replaced handler is released after the lock: it may hold the last reference
        // to the source, whose deinit takes the lock again.
        let replaced = state.locked { state -> SourceHandler? in
            switch slot {
            case .event: defer { state.eventHandler = handler }; return state.eventHandler
            case .cancel: defer { state.cancelHandler = handler }; return state.cancelHandler
            case .registration: defer { state.registrationHandler = handler }; return state.registrationHandler
            }
        }
        _ = replaced
    }

    // MARK: Lifecycle

    func activate() {
        let first = state.locked { state -> Bool in
            if state.activated { return false }
            state.activated = true
            // No registration handler, no job: activating a source costs no hand-off.
            state.registrationHandlerDue = !isCancelled && state.registrationHandler != nil
            return true
        }
        guard first else { return }
        if !isCancelled {
            if let error = driver.register(self) {
                fail(error)
            } else {
                state.locked { $0.registered = true }
            }
        }
        changed()
    }

    func suspend() {
        state.locked { $0.suspendCount += 1 }
    }

    func resume() {
        let activateNow = state.locked { state -> Bool in
            if state.suspendCount == 0 {
                if !state.activated { return true }
                lullFatal("over-resume of \(label): resume() without a matching suspend()")
            }
            state.suspendCount -= 1
            return false
        }
        if activateNow { activate() } else { changed() }
    }

    /// Asynchronous, not preemptive: a running handler finishes; no event handler starts
    /// after this; the cancel handler runs once, after the source left the reactor.
    func cancel() {
        guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        driver.unregister(self)
        changed()
    }

    /// The program dropped its last reference: cancel, and let the cancel handler run even
    /// if the source was never activated or is suspended (that is not an error).
    func releasedByProgram() {
        cancel()
        state.locked { $0.suspendCount = 0 }
        activate()
        changed()
    }

    var isCancelled: Bool { cancelled.load(ordering: .acquiring) }
    var data: UInt { delivered.load(ordering: .acquiring) }
    var registrationError: (any Error)? { state.locked { $0.registrationError } }

    /// Records why the source stops and cancels it (for failures found after activation).
    func fail(_ error: any Error) {
        let sourceError = error as? EventSourceError
            ?? EventSourceError(subject: label, code: 0, reason: "\(error)")
        state.locked { state in
            if state.registrationError == nil { state.registrationError = sourceError }
        }
        cancel()
    }

    // MARK: Events

    /// Merges `value` into the pending data and makes sure a delivery is on its way.
    /// Lock-free while a job of the source is already posted or running.
    func merge(_ value: UInt) {
        switch mergeRule {
        case .add:
            guard value != 0 else { return }
            pending.wrappingAdd(value, ordering: .acquiringAndReleasing)
        case .or:
            guard value != 0 else { return }
            pending.bitwiseOr(value, ordering: .acquiringAndReleasing)
        case .replace:
            pending.store(value, ordering: .releasing)
            guard value != 0 else { return }
        case .readiness:
            pending.store(1, ordering: .releasing)
        }
        changed()
    }

    /// Forgets what merged and was not delivered yet (a timer that is rescheduled).
    func discardPending() {
        pending.store(0, ordering: .releasing)
    }

    /// Something happened: post the next job unless one is posted or running (that one
    /// decides again when it is done).
    private func changed() {
        changes.wrappingAdd(1, ordering: .acquiringAndReleasing)
        if scheduled.load(ordering: .acquiring) { return }
        scheduleNext()
    }

    private func scheduleNext() {
        while true {
            guard !scheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
            let seen = changes.load(ordering: .acquiring)
            let qos = state.locked { state -> QoS? in
                guard let (step, qos) = nextStep(&state) else { return nil }
                state.postedStep = step
                return qos
            }
            if let qos {
                target.enqueue(Job(work: .source(self), qos: qos, flags: [], context: .empty, group: nil))
                return
            }
            scheduled.store(false, ordering: .releasing)
            // Nothing to do as of `seen`; if anything changed since, decide again.
            if changes.load(ordering: .acquiring) == seen { return }
        }
    }

    /// What runs next, if anything (under the lock). Nothing runs before activation or
    /// while suspended; the registration handler comes first, the cancel handler last.
    private func nextStep(_ state: inout State) -> (Step, QoS)? {
        guard state.activated, state.suspendCount == 0 else { return nil }
        if state.registrationHandlerDue {
            state.registrationHandlerDue = false
            let handler = state.registrationHandler
            return (.registration, handler?.propagatedQoS ?? .unspecified)
        }
        if isCancelled {
            guard !state.cancelHandlerDelivered else { return nil }
            state.cancelHandlerDelivered = true
            return (.cancellation, state.cancelHandler?.propagatedQoS ?? .unspecified)
        }
        guard state.registered, pending.load(ordering: .acquiring) != 0 else { return nil }
        return (.delivery, state.eventHandler?.propagatedQoS ?? .unspecified)
    }

    /// The job `scheduleNext` posted, on the target queue; then the next decision.
    func runPostedStep() {
        guard let step = state.locked({ $0.postedStep.take() }) else {
            lullFatal("\(label): a job ran with no step posted")
        }
        switch step {
        case .registration:
            if !isCancelled, let handler = state.locked({ $0.registrationHandler }) {
                handler.run(thread: ThreadState.current)
            }
        case .delivery:
            deliver()
        case .cancellation:
            finishCancellation()
        }
        scheduled.store(false, ordering: .releasing)
        scheduleNext()
    }

    /// One delivery: take the merged value, run the handler.
    private func deliver() {
        guard !isCancelled else { return }
        let merged = pending.exchange(0, ordering: .acquiringAndReleasing)
        guard merged != 0 else { return }
        guard let value = driver.dataForDelivery(self, merged: merged) else { return }
        // Events that arrive while no handler is set are dropped.
        guard let handler = state.locked({ $0.eventHandler }) else { return }
        delivered.store(value, ordering: .releasing)
        handler.run(thread: ThreadState.current)
        if !isCancelled { driver.handlerReturned(self) }
    }

    private func finishCancellation() {
        // Handlers leave the state under the lock but are released after it (see setHandler).
        var released = state.locked { state -> (cancel: SourceHandler?, others: (SourceHandler?, SourceHandler?)) in
            defer {
                state.eventHandler = nil
                state.cancelHandler = nil
                state.rare?.registrationHandler = nil
            }
            return (state.cancelHandler, (state.eventHandler, state.registrationHandler))
        }
        released.cancel?.run(thread: ThreadState.current)
        driver.finished(self)
        released = (nil, (nil, nil))
    }
}
