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
/// Lifecycle (docs/SourceLifecycle.md has the full model). What depends on the kind is its
/// table of operations (`SourceKind`, reached through `kind`); the lifecycle that calls it
/// is this class's alone, one path for every kind. Under the lock, the registration
/// `RegistrationPhase` goes idle → registering → registered → unregistering → unregistered;
/// a source cancelled before it registered goes idle → unregistered, one whose registration
/// failed registering → unregistered.
/// - `activate()` moves idle to registering and calls `kind.register`. When it returns,
///   the same thread moves the phase on under the lock: to registered; or, if `cancel()`
///   came meanwhile, to unregistering, and it unregisters at once; or, if it failed, to
///   unregistered with the error, and cancels.
/// - `cancel()` sets `cancelled`, then under the lock leaves a registering phase to the
///   registering thread, moves a registered one to unregistering and calls
///   `kind.unregister`, then moves it to unregistered.
/// - Where the kind's operations run is the kind's one choice (`registersUnderLock`):
///   outside the lock, on the thread that moved the phase (a descriptor, a signal, an
///   inotify watch), or under it (a timer, whose registration is its own entry in the
///   engine), so that the registering and unregistering phases open and close inside one
///   lock round trip and cancelling decides the cancel step in that same round trip.
///
/// Invariants, asserted in debug builds: every phase change is a step of the model
/// (`RegistrationPhase.mayBecome`); `kind.unregister` runs once after each successful
/// `kind.register`, never during it; nothing is decided while a thread moves the phase; the
/// cancel step is decided only in the unregistered phase and only once, and nothing runs
/// after it; only the holder of `scheduled` posts, one job at a time, so no handler runs
/// concurrently with itself.
///
/// Subclasses only say where the kind's table and data live: `TimerCore` (a timer is its
/// own kind and its own entry in the timer engine, so the heap fields are in the timer and
/// no other source carries them) and `DrivenSourceCore` (every other kind, whose table is a
/// separate object).
///
/// The layout is counted in bytes, because a million idle timers are mostly these objects
/// and because of where malloc puts them: Swift lays fields out in declaration order, so
/// the small ones come first, packed into one word, the cancel handler lives in the extras
/// box, and the core is 96 bytes — a timer's 120 with its heap fields, a 128-byte chunk,
/// the largest size glibc keeps in its fast bins, whose frees from another thread (the
/// worker that ran the cancel handler frees the core) take no lock (a larger timer spends
/// its creating thread's time in the arena lock it shares with the workers' frees).
/// `SourceFootprintTests` keep it.
///
/// `@unchecked Sendable`: the class is not final (see above); its stored properties are
/// `let`s of `Sendable` types, but for `extras`, read and written only under the lock, and
/// `cancellationLink`, which follows `CancellationIntake`'s rule.
class SourceCore: PostedWork, @unchecked Sendable {
    /// Bumped (by 2) by every merge and state change: tells a deciding thread that something
    /// happened while it held `scheduled` (no wake-up is lost; a wrap of 32 bits while one
    /// thread decides is not a concern). Bit 0 (`suspendedBit`) mirrors "suspended" (the
    /// suspension count above 0), written under the lock wherever the count changes, so that
    /// a change to a suspended source learns it in the same atomic step that counts it, and
    /// decides nothing (see `changed`).
    private let changes = Atomic<UInt32>(0)
    private static let suspendedBit: UInt32 = 1
    private let cancelled = Atomic<Bool>(false)
    /// A job of this source is posted on the target queue or running.
    private let scheduled = Atomic<Bool>(false)
    /// The step the posted job runs (a `Step`'s raw value; 0: none). Written only by the
    /// thread that holds `scheduled`, read by the job it posted: the queue's hand-off orders
    /// the two, and the job reads it without the lock.
    private let postedStep = Atomic<UInt8>(0)
    let mergeRule: SourceMerge
    /// Counted only when it is not a root queue (`livesForever`): a global queue's reference
    /// count is one cache line that every thread making or finishing a source would write.
    /// `unowned(unsafe)` is safe: a root queue is a static, and any other target is retained
    /// in `init` and released in `deinit`, by hand.
    unowned(unsafe) let target: WorkQueue
    private let pending = Atomic<UInt>(0)
    private let delivered = Atomic<UInt>(0)
    /// The core's link in `CancellationIntake`'s lists, read and written only by the intake
    /// (see there for the rule that orders its accesses). `@exclusivity(unchecked)`, as
    /// `extras`: that rule keeps its accesses apart.
    @exclusivity(unchecked) var cancellationLink: UInt = CancellationIntake.unlinked
    /// The cancel and registration handlers, the registration error, what else the kind
    /// keeps only when it has it: boxed, as most sources have none of them or (the cancel
    /// handler) need it once, at the end. Read and written only under the lock (inside
    /// `state.locked` or `withState`), as a part of `State` kept beside it, where a kind's
    /// operations that run under the lock reach it too. `@exclusivity(unchecked)`: the lock
    /// keeps its accesses apart, and the run-time check (a thread-local access set, paid at
    /// every access) could only fire for a body that takes the same lock again, which
    /// deadlocks first.
    @exclusivity(unchecked) private(set) var extras: SourceExtras?
    private let state = Mutex<State>(State())

    /// Fields in declaration order, each small one in the padding after a larger one (24
    /// bytes in all; the rest of the locked state is `extras`).
    struct State {
        var eventHandler: SourceHandler?
        var flags: Flags = []
        var suspendCount: Int32 = 0

        var phase: RegistrationPhase {
            RegistrationPhase(rawValue: (flags.rawValue & Flags.phaseBits.rawValue) >> Flags.phaseShift)!
        }

        /// Moves the registration phase, asserting (in debug builds) that the lifecycle
        /// allows the step.
        mutating func enter(_ next: RegistrationPhase) {
            assert(phase.mayBecome(next), "source registration phase \(phase) -> \(next) is not a step of the lifecycle")
            flags = Flags(rawValue: (flags.rawValue & ~Flags.phaseBits.rawValue) | next.rawValue << Flags.phaseShift)
        }
    }

    struct Flags: OptionSet {
        let rawValue: UInt8
        static let activated = Flags(rawValue: 1 << 0)
        static let registrationHandlerDue = Flags(rawValue: 1 << 1)
        static let cancelHandlerDelivered = Flags(rawValue: 1 << 2)
        /// Bits 3-5 are the `RegistrationPhase`.
        static let phaseBits = Flags(rawValue: 0b0011_1000)
        static let phaseShift: UInt8 = 3
        /// `events` was iterated (once: a later iteration ends at once).
        static let eventsIterated = Flags(rawValue: 1 << 6)
        /// The cancel step took its handlers: an `events` channel claimed now is finished.
        static let cancelStepTaken = Flags(rawValue: 1 << 7)
    }

    /// Where the source's registration with what it watches stands (see the type's doc
    /// comment for who moves it and the invariants). Kept in three bits of `Flags`.
    enum RegistrationPhase: UInt8 {
        /// Not registered, and no thread is registering it.
        case idle
        /// The activating thread is in `kind.register` (outside the lock, or under it for a
        /// kind that `registersUnderLock`).
        case registering
        /// In the reactor (or the engine, the hub): events merge, deliveries may run.
        case registered
        /// `cancel()` or the registering thread is in `kind.unregister`.
        case unregistering
        /// Out for good (or it never got in): the cancel step may be decided.
        case unregistered

        /// The transitions the lifecycle allows.
        func mayBecome(_ next: RegistrationPhase) -> Bool {
            switch (self, next) {
            case (.idle, .registering), (.idle, .unregistered),
                 (.registering, .registered), (.registering, .unregistering), (.registering, .unregistered),
                 (.registered, .unregistering),
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

    /// Set in `postedStep` beside a delivery posted on the global queue for the serial target
    /// it claimed: the job runs inside the target (`deliverEnteringTarget`).
    private static let entersTargetBit: UInt8 = 0x80

    /// "<kind> on '<target label>'": how messages name the source (built only when needed).
    var name: String { "\(kindName) on '\(target.label)'" }
    var kindName: String { String(describing: sourceType) }

    /// The QoS the target queue imposes (the timer's default leeway depends on it).
    var floorQoS: QoS {
        // A root target (most sources) answers without a reference to it being counted.
        if case .root(let qosClass) = target.kind { return qosClass == .default ? .unspecified : QoS(qosClass) }
        return WorkQueue.floor(ownQoS: .unspecified, target: target)
    }

    enum HandlerSlot {
        case event, cancel, registration
    }

    init(target: WorkQueue, merge: SourceMerge) {
        if !target.livesForever { _ = Unmanaged.passUnretained(target).retain() }
        self.target = target
        self.mergeRule = merge
    }

    deinit {
        if !target.livesForever { Unmanaged.passUnretained(target).release() }
    }

    // MARK: Where the kind is (overridden)

    /// The kind's table of operations (see `SourceKind`).
    var kind: any SourceKind { lullFatal("SourceCore.kind must be overridden") }
    /// The source's class: names it in messages.
    var sourceType: EventSourceBase.Type { lullFatal("SourceCore.sourceType must be overridden") }
    /// What the source watches: a descriptor, a signal number, a process id; 0 for none.
    var handle: UInt { 0 }
    /// The events the source was created to watch.
    var mask: UInt { 0 }

    /// The locked state, for a kind that keeps its own state under the core's lock.
    @inline(__always)
    func withState<R>(_ body: (inout sending State) -> sending R) -> sending R {
        state.locked(ranked: .sourceCore, body)
    }

    /// The extras box, made on first use (under the lock).
    func extrasBox() -> SourceExtras {
        if let extras { return extras }
        let made = SourceExtras()
        extras = made
        return made
    }

    /// Replaces the extras box (under the lock) with `box`, which took over its contents: a
    /// kind's larger box (see `TimerCore`).
    func replaceExtras(with box: SourceExtras) {
        extras = box
    }

    // MARK: Handlers

    func setHandler(_ slot: HandlerSlot, _ handler: consuming SourceHandler?) {
        // After cancellation, handlers are released and not taken again (no retain cycle).
        guard !isCancelled || slot == .cancel else { return }
        // Swapped in, not copied: the closure is retained once, when the handler is made.
        // The replaced handler comes back in `swapped` and is released after the lock: it
        // may hold the last reference to the source, whose deinit takes the lock again.
        var swapped = consume handler
        state.locked(ranked: .sourceCore) { state in
            switch slot {
            case .event:
                swap(&state.eventHandler, &swapped)
                // The program's handler: deliveries are jobs again (see `setEventsLoopHandler`).
                extras?.eventsLoopHandles = false
            case .cancel:
                if swapped == nil && extras == nil { return }
                swap(&extrasBox().cancelHandler, &swapped)
            case .registration:
                if swapped == nil && extras == nil { return }
                swap(&extrasBox().registrationHandler, &swapped)
            }
        }
        _ = consume swapped
    }

    /// Installs the `events` loop's event handler (by its channel, once): while it is the
    /// handler, a delivery may be made without a job (see `post`). A handler the program
    /// sets later takes that away again.
    func setEventsLoopHandler(_ handler: consuming SourceHandler) {
        guard !isCancelled else { return }
        var swapped: SourceHandler? = consume handler
        state.locked(ranked: .sourceCore) { state in
            swap(&state.eventHandler, &swapped)
            extrasBox().eventsLoopHandles = true
        }
        _ = consume swapped
    }

    // MARK: Lifecycle

    func activate() {
        activate(with: kind)
    }

    /// `activate()` with the kind's table given: generic, so that a kind known statically (a
    /// timer is its own) costs no existential and no reference count.
    final func activate<Kind: SourceKind>(with kind: Kind) {
        let (first, registersOutside, failed, decides) = state.locked(ranked: .sourceCore) { state -> (Bool, Bool, Bool, Bool) in
            if state.flags.contains(.activated) { return (false, false, false, false) }
            state.flags.insert(.activated)
            // No registration handler, no job: activating a source costs no hand-off.
            if !isCancelled && extras?.registrationHandler != nil { state.flags.insert(.registrationHandlerDue) }
            // Cancelled first: `cancel()` moves (or moved) the idle phase to unregistered.
            guard !isCancelled, state.phase == .idle else { return (true, false, false, true) }
            state.enter(.registering)
            guard kind.registersUnderLock else { return (true, true, false, true) }
            switch registrationReturned(kind.register(self), &state) {
            case .registered:
                return (true, false, false, state.flags.contains(.registrationHandlerDue))
            case .unregisters:
                kind.unregister(self)
                state.enter(.unregistered)
                return (true, false, false, true)
            case .failed:
                return (true, false, true, true)
            }
        }
        guard first else { return }
        if registersOutside { finishRegistering(kind, kind.register(self)) }
        if failed { cancel() }
        // Registered under the lock with nothing due (no registration handler, no cancel,
        // nothing merged before activation: a merge then found the source inactive and left
        // the pending value for this check), there is no decision to make.
        if decides || isCancelled || pending.load(ordering: .acquiring) != 0 { changed() }
    }

    /// What becomes of a registration when `kind.register` returned.
    private enum RegistrationOutcome {
        /// The phase is registered.
        case registered
        /// `cancel()` came meanwhile and left it to the registering thread: the phase is
        /// unregistering, and that thread unregisters.
        case unregisters
        /// Nothing is registered (the kind undid its work): the phase is unregistered, the
        /// error recorded, and the registering thread cancels the source.
        case failed
    }

    /// Under the lock, by the registering thread when `kind.register` returned (under this
    /// same lock or outside it): moves the phase on. Nothing was decided while it was
    /// registering; the caller decides next.
    private func registrationReturned(_ error: (any Error)?, _ state: inout State) -> RegistrationOutcome {
        assert(state.phase == .registering, "\(name): registration finished in phase \(state.phase)")
        if let error {
            record(error, &state)
            state.enter(.unregistered)
            return .failed
        }
        guard isCancelled else {
            state.enter(.registered)
            return .registered
        }
        state.enter(.unregistering)
        return .unregisters
    }

    /// The registering thread, when `kind.register` returned outside the lock.
    private func finishRegistering<Kind: SourceKind>(_ kind: Kind, _ error: (any Error)?) {
        switch state.locked(ranked: .sourceCore, { registrationReturned(error, &$0) }) {
        case .registered:
            break
        case .unregisters:
            finishUnregistering(kind)
        case .failed:
            cancel()
        }
    }

    /// Unregisters outside the lock, by the one thread that moved the phase to
    /// unregistering; the caller decides next.
    private func finishUnregistering<Kind: SourceKind>(_ kind: Kind) {
        kind.unregister(self)
        state.locked(ranked: .sourceCore) { state in
            assert(state.phase == .unregistering, "\(name): unregistration finished in phase \(state.phase)")
            state.enter(.unregistered)
        }
    }

    /// Under the lock, once, by `cancel()`: what becomes of the registration. True when the
    /// caller unregisters outside the lock (`finishUnregistering`); a kind that
    /// `registersUnderLock` is unregistered here.
    private func cancelRegistration<Kind: SourceKind>(_ kind: Kind, _ state: inout State) -> Bool {
        switch state.phase {
        case .idle:
            // Never registered, and `activate()` will not register a cancelled source.
            state.enter(.unregistered)
        case .registering:
            // The registering thread unregisters when its registration returns.
            break
        case .registered:
            state.enter(.unregistering)
            guard kind.registersUnderLock else { return true }
            kind.unregister(self)
            state.enter(.unregistered)
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
        state.locked(ranked: .sourceCore) { state in
            state.suspendCount += 1
            if state.suspendCount == 1 { changes.bitwiseOr(Self.suspendedBit, ordering: .sequentiallyConsistent) }
        }
    }

    func resume() {
        let activateNow = state.locked(ranked: .sourceCore) { state -> Bool in
            if state.suspendCount == 0 {
                if !state.flags.contains(.activated) { return true }
                lullFatal("over-resume of \(name): resume() without a matching suspend()")
            }
            state.suspendCount -= 1
            if state.suspendCount == 0 { changes.bitwiseAnd(~Self.suspendedBit, ordering: .sequentiallyConsistent) }
            return false
        }
        if activateNow { activate() } else { changed() }
    }

    /// Asynchronous, not preemptive: a running handler finishes; no event handler starts
    /// after this; the cancel handler runs once, after the source left the reactor (this
    /// thread unregisters it, or the thread whose `activate()` is registering it does when
    /// its registration returns).
    func cancel() {
        cancel(with: kind)
    }

    /// `cancel()` with the kind's table given (see `activate(with:)`).
    final func cancel<Kind: SourceKind>(with kind: Kind) {
        guard !isCancelled, !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        guard kind.registersUnderLock else {
            if state.locked(ranked: .sourceCore, { cancelRegistration(kind, &$0) }) { finishUnregistering(kind) }
            changed()
            return
        }
        changes.wrappingAdd(2, ordering: .sequentiallyConsistent)  // see `post`
        guard !scheduled.load(ordering: .sequentiallyConsistent), !scheduled.exchange(true, ordering: .acquiringAndReleasing) else {
            // A job of the source is posted or running, and decides again when it is done:
            // unregistered first, the cancel handler comes after the source left the reactor.
            _ = withState { cancelRegistration(kind, &$0) }
            changed()
            return
        }
        // This thread decides what runs next: the unregistration and the decision share one
        // lock round trip (cancelling is most of a timeout's life).
        let seen = changes.load(ordering: .acquiring)
        let decided = state.locked(ranked: .sourceCore) { state -> Decision? in
            _ = cancelRegistration(kind, &state)
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
        let activated = state.locked(ranked: .sourceCore) { state -> Bool in
            state.suspendCount = 0
            changes.bitwiseAnd(~Self.suspendedBit, ordering: .sequentiallyConsistent)
            return state.flags.contains(.activated)
        }
        if !activated { activate() }
        changed()
    }

    var isCancelled: Bool { cancelled.load(ordering: .acquiring) }
    /// The token's state at one instant, for failure messages: who holds `scheduled`, what
    /// is pending, what step is posted.
    var tokenDescription: String {
        "scheduled \(scheduled.load(ordering: .acquiring)), pending \(pending.load(ordering: .acquiring)), posted step \(postedStep.load(ordering: .acquiring))"
    }
    var data: UInt {
        let value = delivered.load(ordering: .acquiring)
        guard value == Self.dataOnRequest, mergeRule == .readiness else { return value }
        // Computed once per delivery, when first read: a handler that never reads `data`
        // costs the kind no system call for it.
        let computed = kind.dataRequested(self)
        delivered.store(computed, ordering: .releasing)
        return computed
    }

    /// What `dataForDelivery` returns for a value the kind computes only when the handler
    /// reads `data` (`SourceKind.dataRequested`). Only readiness kinds return it, whose
    /// values (byte counts) never reach it; any other kind's value is delivered as it is.
    static let dataOnRequest = UInt.max
    var registrationError: (any Error)? { state.locked(ranked: .sourceCore) { _ in extras?.registrationError } }

    /// Records why the source stops and cancels it (for failures found after activation).
    func fail(_ error: any Error) {
        state.locked(ranked: .sourceCore) { record(error, &$0) }
        cancel()
    }

    /// Keeps the first reason the source stopped, as its `registrationError`.
    private func record(_ error: any Error, _ state: inout State) {
        let box = extrasBox()
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
            let value = max(value, 1)
            var seen = pending.load(ordering: .relaxed)
            while seen < value {
                let (exchanged, original) = pending.weakCompareExchange(expected: seen, desired: value,
                                                                        ordering: .acquiringAndReleasing)
                if exchanged { break }
                seen = original
            }
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
    /// decides again when it is done), or the source is suspended.
    ///
    /// A suspended source runs nothing (`nextStep`), and the resume that ends its suspension
    /// decides after clearing `suspendedBit`; so a change that reads the bit set in the
    /// count's own atomic step decides nothing. Either its step comes before the clearing one
    /// in the count's order — the resuming thread then sees what the change wrote, and
    /// decides — or after it, and it reads the bit clear. This keeps a stream of merges into
    /// a source held by its `events` loop's busy consumer to one atomic operation each.
    func changed() {
        // Sequentially consistent, as the token's give-back: see `post`.
        let counted = changes.wrappingAdd(2, ordering: .sequentiallyConsistent).newValue
        if scheduled.load(ordering: .sequentiallyConsistent) { return }
        if counted & Self.suspendedBit != 0 { return }
        scheduleNext()
    }

    private func scheduleNext() {
        while true {
            guard !scheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
            let seen = changes.load(ordering: .acquiring)
            if post(state.locked(ranked: .sourceCore) { state -> Decision? in nextStep(&state) }, seen: seen) { return }
        }
    }

    /// By the holder of `scheduled`, after deciding as of the change count `seen`: posts the
    /// job decided, or gives the token back. False when something changed since `seen` and
    /// nothing was posted: the caller decides again.
    ///
    /// Giving the token back is one side of a store-then-load pair whose other side is a
    /// change (`changed`: count the change, then look at the token): the holder stores
    /// `false` and then reads the count; the changer bumps the count and then reads the
    /// token. With release and acquire alone both reads may miss the other side's write (a
    /// store may wait in its CPU's store buffer while the load after it runs, on x86 too),
    /// and the change is lost: pending data, no token holder, no job ever posted. Both
    /// pairs are sequentially consistent, so one of the two sees the other: the changer
    /// finds the token free and decides, or the holder finds the count moved and decides
    /// again.
    ///
    /// A delivery to an `events` loop (`Decision.loop`) whose target hierarchy is idle is
    /// made here, on the calling thread, without a job: the loop's handler only hands the
    /// value to the waiting task, whose resumption is its executor's job, so a job would
    /// only add a hand-off between threads. The token is held throughout, as by a job.
    private func post(_ decided: Decision?, seen: UInt32) -> Bool {
        if let decided, decided.step == .delivery, let loop = decided.loop, target.isIdleForPostedJob {
            deliverWithoutJob(to: loop)
            scheduled.store(false, ordering: .releasing)
            scheduleNext()
            return true
        }
        if let (step, qos, _) = decided {
            assert(postedStep.load(ordering: .acquiring) == 0, "\(name): a job posted while another is")
            #if DEBUG
            // The cancel step comes after the kind unregistered: a timer is out of the engine.
            if step == .cancellation, let entry = self as? any TimerEntry {
                assert(!entry.isScheduled, "\(name): cancel step posted while the timer is in the engine")
            }
            #endif
            // A delivery the poller decides for an idle serial target claims the queue and
            // joins the poller's inline batch, to run inside the claimed queue with no drain
            // around it (`WorkQueue.runClaimed`). The batch runs after this poll: the step
            // stored now is the one its job reads.
            if step == .delivery, target.kind == .serial {
                postedStep.store(step.rawValue | Self.entersTargetBit, ordering: .releasing)
                if target.claimForInlineJob(qos: qos, work: self) { return true }
            }
            postedStep.store(step.rawValue, ordering: .releasing)
            if step == .cancellation, qos.isUnspecified, case .root(let rootClass) = target.kind {
                CancellationIntake.intake(for: rootClass).post(self)
            } else {
                target.enqueue(Job(work: .posted(self), qos: qos, flags: [], context: .empty, group: nil))
            }
            return true
        }
        scheduled.store(false, ordering: .sequentiallyConsistent)
        // Nothing to do as of `seen`; if anything changed since, decide again.
        return changes.load(ordering: .sequentiallyConsistent) == seen
    }

    /// What runs next, if anything (under the lock). Nothing runs before activation or
    /// while suspended, nor while a thread moves the registration (it decides again when
    /// done); the registration handler comes first (once registered), the cancel handler
    /// last (once unregistered).
    private func nextStep(_ state: inout State) -> Decision? {
        guard state.flags.contains(.activated), state.suspendCount == 0 else { return nil }
        let phase = state.phase
        if phase == .registering || phase == .unregistering { return nil }
        if state.flags.contains(.registrationHandlerDue) {
            state.flags.remove(.registrationHandlerDue)
            // A source that never registered (cancelled first, or failed) skips it.
            if phase == .registered && !isCancelled {
                return (.registration, extras?.registrationHandler?.propagatedQoS ?? .unspecified, nil)
            }
        }
        if isCancelled {
            // Still registered: `cancel()` is about to unregister, and decides after it.
            guard phase == .unregistered, !state.flags.contains(.cancelHandlerDelivered) else { return nil }
            state.flags.insert(.cancelHandlerDelivered)
            return (.cancellation, extras?.cancelHandler?.propagatedQoS ?? .unspecified, nil)
        }
        guard phase == .registered, pending.load(ordering: .acquiring) != 0 else { return nil }
        let loop = extras?.eventsLoopHandles == true ? extras?.eventsChannel : nil
        return (.delivery, state.eventHandler?.propagatedQoS ?? .unspecified, loop)
    }

    /// A step decided: what runs, at what QoS, and for a delivery whose handler is an
    /// `events` loop's, that loop's channel (the delivery may skip the job, see `post`).
    private typealias Decision = (step: Step, qos: QoS, loop: SourceEventsChannel?)

    override func performPostedWork() {
        runPostedStep()
    }

    override var isSourceDelivery: Bool {
        postedStep.load(ordering: .acquiring) & ~Self.entersTargetBit == Step.delivery.rawValue
    }

    /// The job `scheduleNext` posted, on the target queue (or a drain of the
    /// `CancellationIntake`); then the next decision.
    func runPostedStep() {
        let posted = postedStep.exchange(0, ordering: .acquiring)
        guard let step = Step(rawValue: posted & ~Self.entersTargetBit) else {
            lullFatal("\(name): a job ran with no step posted")
        }
        // One job at a time: only the holder of `scheduled` posts, and it keeps it until the
        // job is done. Nothing but the cancellation runs after the cancel step was decided.
        assert(scheduled.load(ordering: .acquiring), "\(name): a job ran without the token")
        #if DEBUG
        let (phase, cancelDecided) = state.locked(ranked: .sourceCore) { ($0.phase, $0.flags.contains(.cancelHandlerDelivered)) }
        assert(cancelDecided == (step == .cancellation), "\(name): \(step) step with the cancel step decided: \(cancelDecided)")
        assert(step != .cancellation || phase == .unregistered, "\(name): cancel step in phase \(phase)")
        #endif
        switch step {
        case .registration:
            if !isCancelled, let handler = state.locked(ranked: .sourceCore, { _ in extras?.registrationHandler }) {
                handler.run(thread: ThreadState.current)
            }
        case .delivery:
            let before = changes.load(ordering: .sequentiallyConsistent)
            let deferred: Bool
            if posted & Self.entersTargetBit == 0 {
                deferred = deliver()
            } else if let ranInside = deliverEnteringTarget() {
                deferred = ranInside
            } else {
                return  // queued on the target after all: that job runs the delivery
            }
            // A deferred level check keeps the token until it completes (it gives it back
            // and decides the next step, `completeDeferredCheck`).
            if deferred { return }
            givePostedDeliveryBack(changesBefore: before)
            return
        case .cancellation:
            // The last step there is: the source keeps `scheduled` for good, so that
            // nothing decides or posts again.
            finishCancellation()
            return
        }
        scheduled.store(false, ordering: .releasing)
        scheduleNext()
    }

    /// The token's give-back after a delivery job, deciding again only when it may find
    /// something to do: when the count of changes moved since the job began (`before`, read
    /// before the delivery took the merged value), or the source was cancelled.
    ///
    /// Otherwise the next decision would find nothing: what merged before `before` is what
    /// the delivery took (the load that read `before` acquires each merge's counted change,
    /// so the exchange after it sees its value); the registration handler was decided before
    /// any delivery; suspension, resumption and handlers decide nothing without something
    /// pending; and a cancel shows in `isCancelled`. A change counted after `before` moves
    /// the count: either this thread reads it moved and decides, or the change reads the
    /// token given back and decides itself (both sides store, then load, sequentially
    /// consistent, as in `post`). A delivery whose level check re-signals counts a change,
    /// and decides. A delivery that found the source suspended left what merged pending: the
    /// resume that ends the suspension counts a change and decides. So a delivery that leaves
    /// nothing behind gives the token back without the lock.
    private func givePostedDeliveryBack(changesBefore before: UInt32) {
        scheduled.store(false, ordering: .sequentiallyConsistent)
        if isCancelled || changes.load(ordering: .sequentiallyConsistent) != before { scheduleNext() }
    }

    /// One delivery: take the merged value, run the handler. True when the kind's level
    /// check after the handler was deferred to the thread's batch (`DeferredLevelChecks`):
    /// the token stays held until it completes.
    private func deliver() -> Bool {
        guard !isCancelled else { return false }
        // Suspended since the job was posted (by a block queued ahead of it, or another
        // handler): no handler runs, as Dispatch's source does not start while suspended.
        // What merged stays pending for the resume, which counts a change and decides.
        guard changes.load(ordering: .acquiring) & Self.suspendedBit == 0 else { return false }
        let merged = pending.exchange(0, ordering: .acquiringAndReleasing)
        guard merged != 0 else { return false }
        let kind = self.kind
        guard let value = kind.dataForDelivery(self, merged: merged) else { return false }
        // Events that arrive while no handler is set are dropped.
        guard let handler = state.locked(ranked: .sourceCore, { $0.eventHandler }) else { return false }
        delivered.store(value, ordering: .releasing)
        let thread = ThreadState.current
        handler.run(thread: thread)
        guard !isCancelled else { return false }
        if let checks = thread.deferredChecks, kind.deferLevelCheck(self) {
            checks.add(self)
            return true
        }
        kind.handlerReturned(self)
        return false
    }

    /// A delivery posted on the global queue for the serial target it claimed (see `post`):
    /// runs inside the target, and returns what `deliver()` returned (true: its level check
    /// was deferred). When the target was suspended since, the delivery waits in it as a job
    /// of the queue (still holding the token) and this returns nil.
    private func deliverEnteringTarget() -> Bool? {
        let thread = ThreadState.current
        var deferred = false
        let ran = target.runClaimed(thread: thread, job: {
            postedStep.store(Step.delivery.rawValue, ordering: .releasing)
            return Job(work: .posted(self), qos: thread.ownQoS, flags: [], context: .empty, group: nil)
        }, { deferred = deliver() })
        return ran ? deferred : nil
    }

    /// A delivery to the `events` loop, on the thread that decided it (see `post`): as
    /// `deliver()`, with the loop's handler called directly.
    private func deliverWithoutJob(to loop: SourceEventsChannel) {
        guard !isCancelled else { return }
        let merged = pending.exchange(0, ordering: .acquiringAndReleasing)
        guard merged != 0 else { return }
        let kind = self.kind
        guard let value = kind.dataForDelivery(self, merged: merged) else { return }
        delivered.store(value, ordering: .releasing)
        loop.delivered(value, withoutJob: true)
        if !isCancelled { kind.handlerReturned(self) }
    }

    private func finishCancellation() {
        // Handlers leave the state under the lock but are released after it (see setHandler).
        var (released, channel) = state.locked(ranked: .sourceCore) { state -> ((cancel: SourceHandler?, others: (SourceHandler?, SourceHandler?)), SourceEventsChannel?) in
            defer {
                state.eventHandler = nil
                extras?.cancelHandler = nil
                extras?.registrationHandler = nil
                extras?.eventsChannel = nil  // it holds the core: no cycle survives the cancel
                state.flags.insert(.cancelStepTaken)
            }
            return ((extras?.cancelHandler, (state.eventHandler, extras?.registrationHandler)), extras?.eventsChannel)
        }
        released.cancel?.run(thread: ThreadState.current)
        kind.finished(self)
        released = (nil, (nil, nil))
        // The `events` loop ends last: after the user's cancel handler, with what the kind
        // owned let go.
        channel?.sourceFinished()
        channel = nil
    }

    // MARK: The events sequence

    /// For the `events` loop's `next()`: takes the next delivery on the calling thread,
    /// without a job, when it is the source's next step — no job of the source posted or
    /// running (the caller takes `scheduled`), activated, registered, not cancelled, the
    /// registration handler done, something pending — and the only suspensions are the
    /// loop's own `loopSuspensions` (the source stays suspended by them: the consumer is busy
    /// again once it has the value). Returns the value the handler would have seen as
    /// `data`; nil when the caller must resume and wait as usual. The kind's
    /// `dataForDelivery` and `handlerReturned` run as for a delivery job, and the steps stay
    /// one at a time (the token).
    func takeDeliveryInline(loopSuspensions: Int) -> UInt? {
        guard !isCancelled, pending.load(ordering: .acquiring) != 0,
              !scheduled.load(ordering: .acquiring), !scheduled.exchange(true, ordering: .acquiringAndReleasing) else { return nil }
        let seen = changes.load(ordering: .acquiring)
        let due = state.locked(ranked: .sourceCore) { state -> Bool in
            state.flags.contains(.activated) && Int(state.suspendCount) == loopSuspensions
                && state.phase == .registered && !state.flags.contains(.registrationHandlerDue)
        }
        var value: UInt?
        if due && !isCancelled {
            assert(postedStep.load(ordering: .acquiring) == 0, "\(name): a delivery taken inline while a job is posted")
            let merged = pending.exchange(0, ordering: .acquiringAndReleasing)
            if merged != 0, let data = kind.dataForDelivery(self, merged: merged) {
                delivered.store(data, ordering: .releasing)
                value = data
                if !isCancelled { kind.handlerReturned(self) }
            }
        }
        // The token's give-back, sequentially consistent for the reason `post` gives.
        scheduled.store(false, ordering: .sequentiallyConsistent)
        // What changed while this thread held the token is decided now (a cancel that found
        // the token taken left the decision to its holder).
        if changes.load(ordering: .sequentiallyConsistent) != seen { scheduleNext() }
        return value
    }

    /// Claims the source for its one `events` iteration (docs/EventSources.md, "Events as an
    /// async sequence"): the channel the loop, the event handler and the cancel step share,
    /// or nil when the source was iterated before (that iteration ends at once). A source
    /// whose cancel step already took its handlers gets a finished channel.
    func claimEventsIteration() -> SourceEventsChannel? {
        state.locked(ranked: .sourceCore) { state -> SourceEventsChannel? in
            guard !state.flags.contains(.eventsIterated) else { return nil }
            state.flags.insert(.eventsIterated)
            kind.eventsIterationClaimed()
            let finished = state.flags.contains(.cancelStepTaken)
            let channel = SourceEventsChannel(core: self, finished: finished)
            if !finished { extrasBox().eventsChannel = channel }
            return channel
        }
    }
}

/// What a source keeps only when it has it: the cancel and registration handlers and the
/// registration error (a kind may subclass it for more, see `TimerCore`).
///
/// `@unchecked Sendable`: only read and written inside its core's lock.
class SourceExtras: @unchecked Sendable {
    var cancelHandler: SourceHandler?
    var registrationHandler: SourceHandler?
    var registrationError: EventSourceError?
    /// The `events` loop's channel, told after the cancel handler ran (then let go).
    var eventsChannel: SourceEventsChannel?
    /// The event handler is the `events` loop's (`setEventsLoopHandler`), not the program's.
    var eventsLoopHandles = false
}

/// The core of every kind but timers: the kind's table of operations is a separate object
/// (`driver`), which holds what the kind keeps per source.
final class DrivenSourceCore: SourceCore, @unchecked Sendable {  // Sendable: see SourceCore; adds `let`s of Sendable types
    private let kindType: EventSourceBase.Type
    let driver: any SourceKind
    /// The mask and the handle in 32 bits each (every mask fits; so do descriptors, signal
    /// numbers and process ids).
    private let maskBits: UInt32
    private let handleBits: UInt32

    init(kind: EventSourceBase.Type, target: WorkQueue, merge: SourceMerge, handle: UInt, mask: UInt, driver: any SourceKind) {
        kindType = kind
        self.driver = driver
        maskBits = UInt32(truncatingIfNeeded: mask)
        handleBits = UInt32(truncatingIfNeeded: handle)
        super.init(target: target, merge: merge)
    }

    override var kind: any SourceKind { driver }
    override var sourceType: EventSourceBase.Type { kindType }
    override var handle: UInt { UInt(truncatingIfNeeded: Int32(bitPattern: handleBits)) }
    override var mask: UInt { UInt(maskBits) }
}

/// A delivery whose level check waits in its thread's batch (see `DeferredLevelChecks`).
/// The source holds its token from the delivery until the check completes: no other
/// delivery, and no cancel handler, runs in between, so the check means what it means when
/// made at once. A cancel, suspend or resume meanwhile counts a change and finds the token
/// taken; the completion gives it back and decides, seeing them.
extension SourceCore: DeferredLevelCheck {
    var deferredCheckPoll: (descriptor: Int32, events: Int16) { kind.deferredCheckPoll }

    func completeDeferredCheck(revents: Int16?) {
        assert(scheduled.load(ordering: .acquiring), "\(name): a deferred level check completed without the token")
        assert(postedStep.load(ordering: .acquiring) == 0, "\(name): a job posted while its delivery's check was deferred")
        // Cancelled meanwhile: nothing more to deliver (the descriptor may be closed already).
        if !isCancelled { kind.completeLevelCheck(self, revents: revents) }
        scheduled.store(false, ordering: .releasing)
        scheduleNext()
    }
}
