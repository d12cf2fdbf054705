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
///
/// Lifecycle (docs/SourceLifecycle.md has the full model). Under the lock, the registration
/// `RegistrationPhase` goes idle → registering → registered → unregistering → unregistered;
/// a kind that registers and unregisters under the lock (a timer) goes idle → registered →
/// unregistered, each in one step, and a source cancelled first goes idle → unregistered.
/// `activate()` moves idle to registering and registers outside the lock; when that returns
/// the same thread moves on to registered, or — if `cancel()` came meanwhile — unregisters
/// at once, or, if it failed, to unregistered with the error. `cancel()` sets `cancelled`,
/// then under the lock leaves a registering phase to the registering thread and moves a
/// registered one to unregistering (and unregisters outside the lock). Invariants, asserted
/// in debug builds: `unregisterKind()` runs once after each successful `registerKind()`,
/// never during it; nothing is decided while a thread moves the phase; the cancel step is
/// decided only in the unregistered phase and only once, and nothing runs after it; only
/// the holder of `scheduled` posts, one job at a time, so no handler runs concurrently with
/// itself.
///
/// What depends on the kind is in the subclass: `TimerCore` (a timer: the core is its own
/// entry in the timer engine, which is why every core is a `TimerEntry`) and
/// `DrivenSourceCore` (every other kind, through a `SourceDriver`).
///
/// The layout is counted in bytes, because a million idle timers are mostly these objects
/// and because of where malloc puts them: Swift lays fields out in declaration order, so
/// the small ones sit in the gaps after the entry's 36 bytes and each other, the cancel
/// handler lives in the extras box, and the core is 112 bytes — a timer's 120, a 128-byte
/// chunk, the largest size glibc keeps in its fast bins, whose frees from another thread
/// (the worker that ran the cancel handler frees the core) take no lock; a core one size
/// class larger makes the creating thread contend for the arena lock with the workers'
/// frees (measured with `lull-bench timer-churn`: Benchmarks/README.md).
/// `SourceFootprintTests` keep it.
///
/// `@unchecked Sendable`: the class is not final (see above); its own stored properties are
/// `let`s of `Sendable` types, and the inherited entry fields follow `TimerEntry`'s rule.
class SourceCore: TimerEntry, @unchecked Sendable {
    /// Bumped by every merge and state change: tells a deciding thread that something
    /// happened while it held `scheduled` (no wake-up is lost; a wrap of 32 bits while one
    /// thread decides is not a concern).
    private let changes = Atomic<UInt32>(0)
    /// Counted only when it is not a root queue (`livesForever`): a global queue's reference
    /// count is one cache line that every thread making or finishing a source would write.
    /// `unowned(unsafe)` is safe: a root queue is a static, and any other target is retained
    /// in `init` and released in `deinit`, by hand.
    unowned(unsafe) let target: WorkQueue
    let mergeRule: SourceMerge
    private let cancelled = Atomic<Bool>(false)
    /// A job of this source is posted on the target queue or running.
    private let scheduled = Atomic<Bool>(false)
    /// The step the posted job runs (a `Step`'s raw value; 0: none). Written only by the
    /// thread that holds `scheduled`, read by the job it posted: the queue's hand-off orders
    /// the two, and the job reads it without the lock.
    private let postedStep = Atomic<UInt8>(0)
    /// 32 bits the kind keeps here, in what would be padding (a timer's site and flag, a
    /// descriptor source's handle).
    let kindWord: UInt32
    private let pending = Atomic<UInt>(0)
    private let delivered = Atomic<UInt>(0)
    private let state = Mutex<State>(State())

    /// Fields in declaration order, each small one in the padding after a larger one (32
    /// bytes in all).
    struct State {
        var eventHandler: SourceHandler?
        var flags: Flags = []
        var suspendCount: Int32 = 0
        /// The cancel and registration handlers, the registration error: boxed, as most
        /// sources have none of them or (the cancel handler) need it once, at the end.
        var extras: SourceExtras?

        var phase: RegistrationPhase {
            RegistrationPhase(rawValue: (flags.rawValue & Flags.phaseBits.rawValue) >> Flags.phaseShift)!
        }

        /// Moves the registration phase, asserting (in debug builds) that the lifecycle
        /// allows the step.
        mutating func enter(_ next: RegistrationPhase) {
            assert(phase.mayBecome(next), "source registration phase \(phase) -> \(next) is not a step of the lifecycle")
            flags = Flags(rawValue: (flags.rawValue & ~Flags.phaseBits.rawValue) | next.rawValue << Flags.phaseShift)
        }

        var cancelHandler: SourceHandler? { extras?.cancelHandler }
        var registrationHandler: SourceHandler? { extras?.registrationHandler }
        var registrationError: EventSourceError? { extras?.registrationError }
    }

    struct Flags: OptionSet {
        let rawValue: UInt8
        static let activated = Flags(rawValue: 1 << 0)
        static let registrationHandlerDue = Flags(rawValue: 1 << 1)
        static let cancelHandlerDelivered = Flags(rawValue: 1 << 2)
        /// Bits 3-5 are the `RegistrationPhase`.
        static let phaseBits = Flags(rawValue: 0b0011_1000)
        static let phaseShift: UInt8 = 3
        /// Bits 6-7 are the subclass's (`TimerCore`'s schedule state).
        static let kindBit0 = Flags(rawValue: 1 << 6)
        static let kindBit1 = Flags(rawValue: 1 << 7)
    }

    /// Where the source's registration with what it watches stands (see the type's doc
    /// comment for who moves it and the invariants). Kept in three bits of `Flags`.
    enum RegistrationPhase: UInt8 {
        /// Not registered, and no thread is registering it.
        case idle
        /// `activate()` registers it outside the lock (`registerKind()`).
        case registering
        /// In the reactor (or the engine, the hub): events merge, deliveries may run.
        case registered
        /// `cancel()` or the registering thread unregisters it outside the lock.
        case unregistering
        /// Out for good (or it never got in): the cancel step may be decided.
        case unregistered

        /// The transitions the lifecycle allows.
        func mayBecome(_ next: RegistrationPhase) -> Bool {
            switch (self, next) {
            case (.idle, .registering), (.idle, .registered), (.idle, .unregistered),
                 (.registering, .registered), (.registering, .unregistering), (.registering, .unregistered),
                 (.registered, .unregistering), (.registered, .unregistered),
                 (.unregistering, .unregistered):
                return true
            default:
                return false
            }
        }
    }

    fileprivate enum Step: UInt8 {
        case registration = 1
        case delivery
        case cancellation
    }

    /// "<kind> on '<target label>'": how messages name the source (built only when needed).
    var name: String { "\(kindName) on '\(target.label)'" }
    var kindName: String { String(describing: kind) }

    /// The QoS the target queue imposes (the timer's default leeway depends on it).
    var floorQoS: QoS {
        // A root target (most sources) answers without a reference to it being counted.
        if case .root(let qosClass) = target.kind { return qosClass == .default ? .unspecified : QoS(qosClass) }
        return WorkQueue.floor(ownQoS: .unspecified, target: target)
    }

    enum HandlerSlot {
        case event, cancel, registration
    }

    init(target: WorkQueue?, merge: SourceMerge, kindWord: UInt32) {
        let target = target ?? WorkQueue.global()
        if !target.livesForever { _ = Unmanaged.passUnretained(target).retain() }
        self.target = target
        self.mergeRule = merge
        self.kindWord = kindWord
        super.init()
    }

    deinit {
        if !target.livesForever { Unmanaged.passUnretained(target).release() }
    }

    // MARK: What the kind decides (overridden)

    /// The source's class: names it in messages.
    var kind: EventSourceBase.Type { lullFatal("SourceCore.kind must be overridden") }
    /// What the source watches: a descriptor, a signal number, a process id; 0 for none.
    var handle: UInt { 0 }
    /// The events the source was created to watch.
    var mask: UInt { 0 }
    /// Starts watching, for a kind that can do it under the core's lock (a timer, whose
    /// registration is its own entry in the engine): returns true when done (the phase goes
    /// from idle to registered in one step). The default, false, registers outside the lock
    /// with `registerKind()`, in the registering phase.
    func registerKind(_ state: inout State) -> Bool { false }
    /// Starts watching (outside the lock, in the registering phase). Returns why it could
    /// not, or nil; a kind that fails leaves nothing registered.
    func registerKind() -> (any Error)? { nil }
    /// Stops watching (outside the lock, in the unregistering phase), once after every
    /// `registerKind()` that succeeded: when this returns, nothing merges into the source.
    func unregisterKind() {}
    /// The kind stops watching under the core's lock (a timer: its engine entry), with
    /// `unregisterKind(_:)`; cancelling then decides its cancel step in the same round trip.
    var unregistersUnderLock: Bool { false }
    /// Stops watching, under the core's lock, for a kind whose `unregistersUnderLock`.
    func unregisterKind(_ state: inout State) { lullFatal("SourceCore.unregisterKind(_:) must be overridden") }
    /// The value of `data` for a delivery whose merged value is `merged`; nil when there is
    /// nothing to deliver after all (a readiness that went away).
    func dataForDelivery(merged: UInt) -> UInt? { merged }
    /// After the event handler returned: re-signal if the condition still holds.
    func handlerReturned() {}
    /// After the cancel handler ran: release what the kind owns (descriptors it opened).
    func finished() {}
    /// The box for `State.extras` (a kind may keep more in it).
    func makeExtras() -> SourceExtras { SourceExtras() }

    /// The locked state, for a kind that keeps its own bits in it (its flag bits, its extras).
    @inline(__always)
    func withState<R>(_ body: (inout sending State) -> sending R) -> sending R {
        state.locked(body)
    }

    /// The extras box, made on first use (under the lock).
    func extras(_ state: inout State) -> SourceExtras {
        if let extras = state.extras { return extras }
        let extras = makeExtras()
        state.extras = extras
        return extras
    }

    // MARK: Handlers

    func setHandler(_ slot: HandlerSlot, _ handler: consuming SourceHandler?) {
        // After cancellation, handlers are released and not taken again (no retain cycle).
        guard !isCancelled || slot == .cancel else { return }
        // Swapped in, not copied: the closure is retained once, when the handler is made.
        // The replaced handler comes back in `swapped` and is released after the lock: it
        // may hold the last reference to the source, whose deinit takes the lock again.
        var swapped = consume handler
        state.locked { state in
            switch slot {
            case .event:
                swap(&state.eventHandler, &swapped)
            case .cancel:
                if swapped == nil && state.extras == nil { return }
                swap(&extras(&state).cancelHandler, &swapped)
            case .registration:
                if swapped == nil && state.extras == nil { return }
                swap(&extras(&state).registrationHandler, &swapped)
            }
        }
        _ = consume swapped
    }

    // MARK: Lifecycle

    func activate() {
        let (first, registersOutside, decides) = state.locked { state -> (Bool, Bool, Bool) in
            if state.flags.contains(.activated) { return (false, false, false) }
            state.flags.insert(.activated)
            // No registration handler, no job: activating a source costs no hand-off.
            if !isCancelled && state.registrationHandler != nil { state.flags.insert(.registrationHandlerDue) }
            // Cancelled first: `cancel()` moves (or moved) the idle phase to unregistered.
            guard !isCancelled, state.phase == .idle else { return (true, false, true) }
            if registerKind(&state) {
                state.enter(.registered)
                return (true, false, state.flags.contains(.registrationHandlerDue))
            }
            state.enter(.registering)
            return (true, true, true)
        }
        guard first else { return }
        if registersOutside { finishRegistering(registerKind()) }
        // Registered under the lock with nothing due (no registration handler, no cancel,
        // nothing merged before activation: a merge then found the source inactive and left
        // the pending value for this check), there is no decision to make.
        if decides || isCancelled || pending.load(ordering: .acquiring) != 0 { changed() }
    }

    /// The registering thread, when `registerKind()` returned: registered, or — if
    /// `cancel()` came meanwhile — unregistered again by this thread (cancel left it to
    /// it), or failed. The caller decides next (`changed()`): nothing was decided while
    /// the phase was registering.
    private func finishRegistering(_ error: (any Error)?) {
        let unregisters = state.locked { state -> Bool in
            assert(state.phase == .registering, "\(name): registration finished in phase \(state.phase)")
            if let error {
                // Nothing is registered: the kind undid what it had done.
                record(error, &state)
                state.enter(.unregistered)
                return false
            }
            guard isCancelled else {
                state.enter(.registered)
                return false
            }
            state.enter(.unregistering)
            return true
        }
        if unregisters { finishUnregistering() }
        if error != nil { cancel() }
    }

    /// Unregisters outside the lock, by the one thread that moved the phase to
    /// unregistering; the caller decides next.
    private func finishUnregistering() {
        unregisterKind()
        state.locked { state in
            assert(state.phase == .unregistering, "\(name): unregistration finished in phase \(state.phase)")
            state.enter(.unregistered)
        }
    }

    /// Under the lock, once, by `cancel()`: what becomes of the registration. True when the
    /// caller unregisters outside the lock (`finishUnregistering`).
    private func cancelRegistration(_ state: inout State) -> Bool {
        switch state.phase {
        case .idle:
            // Never registered, and `activate()` will not register a cancelled source.
            state.enter(.unregistered)
        case .registering:
            // The registering thread unregisters when its registration returns.
            break
        case .registered:
            if unregistersUnderLock {
                unregisterKind(&state)
                state.enter(.unregistered)
            } else {
                state.enter(.unregistering)
                return true
            }
        case .unregistering:
            // The registering thread saw the cancellation first and unregisters it.
            break
        case .unregistered:
            // Its registration failed: nothing to undo.
            break
        }
        return false
    }

    func suspend() {
        state.locked { $0.suspendCount += 1 }
    }

    func resume() {
        let activateNow = state.locked { state -> Bool in
            if state.suspendCount == 0 {
                if !state.flags.contains(.activated) { return true }
                lullFatal("over-resume of \(name): resume() without a matching suspend()")
            }
            state.suspendCount -= 1
            return false
        }
        if activateNow { activate() } else { changed() }
    }

    /// Asynchronous, not preemptive: a running handler finishes; no event handler starts
    /// after this; the cancel handler runs once, after the source left the reactor (this
    /// thread unregisters it, or the thread whose `activate()` is registering it does when
    /// its registration returns).
    func cancel() {
        guard !isCancelled, !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        guard unregistersUnderLock else {
            if state.locked({ cancelRegistration(&$0) }) { finishUnregistering() }
            changed()
            return
        }
        changes.wrappingAdd(1, ordering: .acquiringAndReleasing)
        guard !scheduled.load(ordering: .acquiring), !scheduled.exchange(true, ordering: .acquiringAndReleasing) else {
            // A job of the source is posted or running, and decides again when it is done:
            // unregistered first, the cancel handler comes after the source left the reactor.
            _ = withState { cancelRegistration(&$0) }
            changed()
            return
        }
        // This thread decides what runs next: the unregistration and the decision share one
        // lock round trip (cancelling is most of a timeout's life).
        let seen = changes.load(ordering: .acquiring)
        let decided = state.locked { state -> (Step, QoS)? in
            _ = cancelRegistration(&state)
            return nextStep(&state)
        }
        if !post(decided, seen: seen) { scheduleNext() }
    }

    /// The program dropped its last reference: cancel, and let the cancel handler run even
    /// if the source was never activated or is suspended (that is not an error).
    func releasedByProgram() {
        // Cancelled by the program with its cancel step already posted (a timeout dropped
        // right after `cancel()`): nothing is left to decide — suspension and activation
        // were settled when the step was, and nothing decides after it.
        if isCancelled && postedStep.load(ordering: .acquiring) == Step.cancellation.rawValue { return }
        cancel()
        let activated = state.locked { state -> Bool in
            state.suspendCount = 0
            return state.flags.contains(.activated)
        }
        if !activated { activate() }
        changed()
    }

    var isCancelled: Bool { cancelled.load(ordering: .acquiring) }
    var data: UInt { delivered.load(ordering: .acquiring) }
    var registrationError: (any Error)? { state.locked { $0.registrationError } }

    /// Records why the source stops and cancels it (for failures found after activation).
    func fail(_ error: any Error) {
        state.locked { record(error, &$0) }
        cancel()
    }

    /// Keeps the first reason the source stopped, as its `registrationError`.
    private func record(_ error: any Error, _ state: inout State) {
        let box = extras(&state)
        if box.registrationError == nil {
            box.registrationError = error as? EventSourceError
                ?? EventSourceError(subject: name, code: 0, reason: "\(error)")
        }
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

    /// Adds to the pending data without signalling: for a kind that merges under its lock
    /// and calls `changed()` after it.
    func addPending(_ value: UInt) {
        pending.wrappingAdd(value, ordering: .acquiringAndReleasing)
    }

    /// Something happened: post the next job unless one is posted or running (that one
    /// decides again when it is done).
    func changed() {
        changes.wrappingAdd(1, ordering: .acquiringAndReleasing)
        if scheduled.load(ordering: .acquiring) { return }
        scheduleNext()
    }

    private func scheduleNext() {
        while true {
            guard !scheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
            let seen = changes.load(ordering: .acquiring)
            if post(state.locked { state -> (Step, QoS)? in nextStep(&state) }, seen: seen) { return }
        }
    }

    /// By the holder of `scheduled`, after deciding as of the change count `seen`: posts the
    /// job decided, or gives the token back. False when something changed since `seen` and
    /// nothing was posted: the caller decides again.
    private func post(_ decided: (Step, QoS)?, seen: UInt32) -> Bool {
        if let (step, qos) = decided {
            assert(postedStep.load(ordering: .acquiring) == 0, "\(name): a job posted while another is")
            postedStep.store(step.rawValue, ordering: .releasing)
            if step == .cancellation, qos.isUnspecified, case .root(let rootClass) = target.kind {
                CancellationIntake.intake(for: rootClass).post(self)
            } else {
                target.enqueue(Job(work: .source(self), qos: qos, flags: [], context: .empty, group: nil))
            }
            return true
        }
        scheduled.store(false, ordering: .releasing)
        // Nothing to do as of `seen`; if anything changed since, decide again.
        return changes.load(ordering: .acquiring) == seen
    }

    /// What runs next, if anything (under the lock). Nothing runs before activation or
    /// while suspended, nor while a thread moves the registration (it decides again when
    /// done); the registration handler comes first (once registered), the cancel handler
    /// last (once unregistered).
    private func nextStep(_ state: inout State) -> (Step, QoS)? {
        guard state.flags.contains(.activated), state.suspendCount == 0 else { return nil }
        let phase = state.phase
        if phase == .registering || phase == .unregistering { return nil }
        if state.flags.contains(.registrationHandlerDue) {
            state.flags.remove(.registrationHandlerDue)
            // A source that never registered (cancelled first, or failed) skips it.
            if phase == .registered && !isCancelled {
                return (.registration, state.registrationHandler?.propagatedQoS ?? .unspecified)
            }
        }
        if isCancelled {
            // Still registered: `cancel()` is about to unregister, and decides after it.
            guard phase == .unregistered, !state.flags.contains(.cancelHandlerDelivered) else { return nil }
            state.flags.insert(.cancelHandlerDelivered)
            return (.cancellation, state.cancelHandler?.propagatedQoS ?? .unspecified)
        }
        guard phase == .registered, pending.load(ordering: .acquiring) != 0 else { return nil }
        return (.delivery, state.eventHandler?.propagatedQoS ?? .unspecified)
    }

    /// The job `scheduleNext` posted, on the target queue; then the next decision.
    func runPostedStep() {
        guard let step = Step(rawValue: postedStep.exchange(0, ordering: .acquiring)) else {
            lullFatal("\(name): a job ran with no step posted")
        }
        // One job at a time: only the holder of `scheduled` posts, and it keeps it until the
        // job is done. Nothing but the cancellation runs after the cancel step was decided.
        assert(scheduled.load(ordering: .acquiring), "\(name): a job ran without the token")
        #if DEBUG
        let (phase, cancelDecided) = state.locked { ($0.phase, $0.flags.contains(.cancelHandlerDelivered)) }
        assert(cancelDecided == (step == .cancellation), "\(name): \(step) step with the cancel step decided: \(cancelDecided)")
        assert(step != .cancellation || phase == .unregistered, "\(name): cancel step in phase \(phase)")
        #endif
        switch step {
        case .registration:
            if !isCancelled, let handler = state.locked({ $0.registrationHandler }) {
                handler.run(thread: ThreadState.current)
            }
        case .delivery:
            deliver()
        case .cancellation:
            // The last step there is: the source keeps `scheduled` for good, so that
            // nothing decides or posts again.
            finishCancellation()
            return
        }
        scheduled.store(false, ordering: .releasing)
        scheduleNext()
    }

    /// One delivery: take the merged value, run the handler.
    private func deliver() {
        guard !isCancelled else { return }
        let merged = pending.exchange(0, ordering: .acquiringAndReleasing)
        guard merged != 0 else { return }
        guard let value = dataForDelivery(merged: merged) else { return }
        // Events that arrive while no handler is set are dropped.
        guard let handler = state.locked({ $0.eventHandler }) else { return }
        delivered.store(value, ordering: .releasing)
        handler.run(thread: ThreadState.current)
        if !isCancelled { handlerReturned() }
    }

    private func finishCancellation() {
        // Handlers leave the state under the lock but are released after it (see setHandler).
        var released = state.locked { state -> (cancel: SourceHandler?, others: (SourceHandler?, SourceHandler?)) in
            defer {
                state.eventHandler = nil
                state.extras?.cancelHandler = nil
                state.extras?.registrationHandler = nil
            }
            return (state.cancelHandler, (state.eventHandler, state.registrationHandler))
        }
        released.cancel?.run(thread: ThreadState.current)
        finished()
        released = (nil, (nil, nil))
    }
}

/// What a source keeps only when it has it: the registration handler and error (a kind
/// may subclass it for more, see `TimerCore`).
///
/// `@unchecked Sendable`: only read and written inside its core's lock.
class SourceExtras: @unchecked Sendable {
    var cancelHandler: SourceHandler?
    var registrationHandler: SourceHandler?
    var registrationError: EventSourceError?
}

/// The core of every kind but timers: what depends on the kind is in its `SourceDriver`.
final class DrivenSourceCore: SourceCore, @unchecked Sendable {  // Sendable: see SourceCore; adds `let`s of Sendable types
    private let kindType: EventSourceBase.Type
    let driver: any SourceDriver
    /// The mask in 32 bits (every mask fits); the handle is the core's `kindWord`
    /// (descriptors, signal numbers and process ids fit).
    private let maskBits: UInt32

    init(kind: EventSourceBase.Type, target: WorkQueue?, merge: SourceMerge, handle: UInt, mask: UInt, driver: any SourceDriver) {
        kindType = kind
        self.driver = driver
        maskBits = UInt32(truncatingIfNeeded: mask)
        super.init(target: target, merge: merge, kindWord: UInt32(truncatingIfNeeded: handle))
    }

    override var kind: EventSourceBase.Type { kindType }
    override var handle: UInt { UInt(truncatingIfNeeded: Int32(bitPattern: kindWord)) }
    override var mask: UInt { UInt(maskBits) }
    override func registerKind() -> (any Error)? { driver.register(self) }
    override func unregisterKind() { driver.unregister(self) }
    override func dataForDelivery(merged: UInt) -> UInt? { driver.dataForDelivery(self, merged: merged) }
    override func handlerReturned() { driver.handlerReturned(self) }
    override func finished() { driver.finished(self) }
}
