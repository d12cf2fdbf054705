import Synchronization

/// The machinery every source kind shares.
///
/// A source owns a private serial queue that targets the user's queue, as in Dispatch where
/// a source *is* a queue: the registration handler, every event delivery and the cancel
/// handler are jobs on it, so they never run concurrently (even on a concurrent target),
/// run in that order, and stop while the source is suspended.
///
/// Events merge into `pending` with one atomic operation; only the merge that makes the
/// source pending posts a delivery, so a burst of merges costs no lock and no system call
/// beyond the first. The delivery takes the merged value and runs the handler with it.
final class SourceCore: Sendable {
    let kindName: String
    let target: WorkQueue
    let queue: WorkQueue
    let mergeRule: SourceMerge
    let handle: UInt
    let mask: UInt
    let driver: any SourceDriver

    private let pending = Atomic<UInt>(0)
    private let deliveryPosted = Atomic<Bool>(false)
    private let delivered = Atomic<UInt>(0)
    private let cancelled = Atomic<Bool>(false)
    /// Set once the registration job is queued: from then on merges post deliveries.
    private let accepting = Atomic<Bool>(false)
    private let state = Mutex<State>(State())

    private struct State {
        var eventHandler: SourceHandler?
        var cancelHandler: SourceHandler?
        var registrationHandler: SourceHandler?
        var activated = false
        var suspendCount = 0
        var registrationError: (any Error)?
    }

    /// "<kind> on '<target label>'": how messages name the source (built only when needed).
    var label: String { "\(kindName) on '\(target.label)'" }

    enum HandlerSlot {
        case event, cancel, registration
    }

    init(kindName: String, target: WorkQueue?, merge: SourceMerge, handle: UInt, mask: UInt, driver: any SourceDriver) {
        let target = target ?? WorkQueue.global()
        self.kindName = kindName
        self.target = target
        // The kind name is a literal: no string is allocated per source.
        self.queue = WorkQueue(label: kindName, attributes: .initiallyInactive, target: target)
        self.mergeRule = merge
        self.handle = handle
        self.mask = mask
        self.driver = driver
    }

    // MARK: Handlers

    func setHandler(_ slot: HandlerSlot, _ handler: SourceHandler?) {
        // After cancellation, handlers are released and not taken again (no retain cycle).
        guard !isCancelled || slot == .cancel else { return }
        // The replaced handler is released after the lock: it may hold the last reference
        // to the source, whose deinit takes the lock again.
        let replaced = state.withLock { state -> SourceHandler? in
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
        let first = state.withLock { state -> Bool in
            if state.activated { return false }
            state.activated = true
            return true
        }
        guard first else { return }
        if !isCancelled {
            let registrationQoS = state.withLock { $0.registrationHandler?.propagatedQoS ?? .unspecified }
            queue.enqueue(Job(work: .block({ [self] in runRegistrationHandler() }), qos: registrationQoS,
                              flags: [], context: .empty, group: nil))
            if let error = driver.register(self) {
                state.withLock { $0.registrationError = error }
                cancel()
            } else {
                accepting.store(true, ordering: .releasing)
                if pending.load(ordering: .acquiring) != 0 { scheduleDelivery() }
            }
        }
        queue.activate()
    }

    func suspend() {
        state.withLock { $0.suspendCount += 1 }
        queue.suspend()
    }

    func resume() {
        enum Action { case activate, resume }
        let action = state.withLock { state -> Action in
            if state.suspendCount == 0 {
                if !state.activated { return .activate }
                lullFatal("over-resume of \(label): resume() without a matching suspend()")
            }
            state.suspendCount -= 1
            return .resume
        }
        switch action {
        case .activate: activate()
        case .resume: queue.resume()
        }
    }

    /// Asynchronous, not preemptive: a running handler finishes; no event handler starts
    /// after this; the cancel handler runs once, after the source left the reactor.
    func cancel() {
        guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        driver.unregister(self)
        let cancelQoS = state.withLock { $0.cancelHandler?.propagatedQoS ?? .unspecified }
        queue.enqueue(Job(work: .block({ [self] in finishCancellation() }), qos: cancelQoS,
                          flags: [], context: .empty, group: nil))
    }

    /// The program dropped its last reference: cancel, and let the cancel handler run even
    /// if the source was never activated or is suspended (that is not an error).
    func releasedByProgram() {
        cancel()
        let suspensions = state.withLock { state -> Int in
            defer { state.suspendCount = 0 }
            return state.suspendCount
        }
        for _ in 0..<suspensions { queue.resume() }
        activate()
    }

    var isCancelled: Bool { cancelled.load(ordering: .acquiring) }
    var data: UInt { delivered.load(ordering: .acquiring) }
    var registrationError: (any Error)? { state.withLock { $0.registrationError } }

    /// Records why the source stops and cancels it (for failures found after activation).
    func fail(_ error: any Error) {
        state.withLock { state in
            if state.registrationError == nil { state.registrationError = error }
        }
        cancel()
    }

    // MARK: Events

    /// Merges `value` into the pending data and makes sure a delivery is on its way.
    /// Lock-free; costs a queue operation only when the source was not pending yet.
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
        scheduleDelivery()
    }

    private func scheduleDelivery() {
        guard accepting.load(ordering: .acquiring), !isCancelled else { return }
        guard !deliveryPosted.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let qos = state.withLock { $0.eventHandler?.propagatedQoS ?? .unspecified }
        queue.enqueue(Job(work: .block({ [self] in deliver() }), qos: qos, flags: [], context: .empty, group: nil))
    }

    /// One delivery, on the source's queue: take the merged value, run the handler.
    private func deliver() {
        deliveryPosted.store(false, ordering: .releasing)
        guard !isCancelled else { return }
        let merged = pending.exchange(0, ordering: .acquiringAndReleasing)
        guard merged != 0 else { return }
        guard let value = driver.dataForDelivery(self, merged: merged) else { return }
        // Events that arrive while no handler is set are dropped.
        guard let handler = state.withLock({ $0.eventHandler }) else { return }
        delivered.store(value, ordering: .releasing)
        handler.run(thread: ThreadState.current)
        if !isCancelled { driver.handlerReturned(self) }
    }

    private func runRegistrationHandler() {
        guard !isCancelled, let handler = state.withLock({ $0.registrationHandler }) else { return }
        handler.run(thread: ThreadState.current)
    }

    private func finishCancellation() {
        // Handlers leave the state under the lock but are released after it (see setHandler).
        var released = state.withLock { state -> [SourceHandler?] in
            defer {
                state.eventHandler = nil
                state.cancelHandler = nil
                state.registrationHandler = nil
            }
            return [state.cancelHandler, state.eventHandler, state.registrationHandler]
        }
        released[0]?.run(thread: ThreadState.current)
        driver.finished(self)
        released.removeAll()
    }
}
