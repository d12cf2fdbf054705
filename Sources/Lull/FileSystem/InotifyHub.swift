import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The process's inotify instance and every watch on it: file-system sources and tree
/// watchers lease watches here, and the hub turns what the kernel reports into merges. The
/// design (one instance, one watch per inode, pins, draining, revocation, the mapping) is in
/// docs/FileSystem.md; this comment states the hub's locking.
///
/// ## Locks (order: `kernel`, then `state`; both sleeping `Mutex`es, never a spin lock)
///
/// - `state`: the instance, the watch table, leases, subscriptions, baselines and parent
///   links. It is held for table work, and the one system call made under it is the status
///   read through a pin (an `fstat` of an `O_PATH` descriptor, in the mapping and when
///   baselines are refreshed). That read stays under `state` because the baseline it updates
///   must be the one the next event is compared with, and because holding `state` keeps the
///   pin from being closed (and its number reused by another open) during the read.
/// - `kernel`: held around each change of the kernel's watch set (`inotify_init1` and the
///   instance's registration, `inotify_add_watch`, `inotify_rm_watch`, closing a pin, opening
///   a watched directory's parent) together with the table update its result decides. These
///   calls stay under it because inotify gives one watch descriptor per inode: "add a watch,
///   count a lease" and "count the last lease down, remove the watch" must not interleave, or
///   an add that lands between a release's decision and its `inotify_rm_watch` gets back the
///   descriptor that `inotify_rm_watch` then removes, and the new lease holds a watch the
///   kernel no longer has. `kernel` is held for one object's calls at a time, never across a
///   walk: a tree watcher takes it once per directory, so other watchers and sources go on
///   between two of its directories. The draining thread takes it only for an event that
///   may let a lease go or move a parent link (`needsKernel`), and for a mount-table change.
/// - A new watch descriptor is entered in the table just after `inotify_add_watch`, under
///   `state`; an event the draining thread reads for it before that is dropped, which loses
///   nothing: nobody subscribes to a watch before its lease is returned.
/// - A pin is closed only with `kernel` held, after `state` set it to -1: a pin read under
///   `state` by the holder of `kernel` stays open until `kernel` is released.
/// - A `state` section returns what it decided (`AfterState`: watches to remove, pins to
///   close, a teardown); the caller does it after `state` is released. Merges into sources,
///   calls to observers and jobs come after both locks; log lines after `state`.
///
/// Debug builds assert that no system call of the hub is made by a thread holding `state`,
/// that every change of the kernel's watch set holds `kernel`, and after every `state`
/// section the table's invariants: each watch in it is live, has a lease and sits under its
/// own descriptor; parent links go both ways; no watch is left without an instance.
final class InotifyHub: Sendable {

    /// Buffers of `bufferSize` bytes read per drain pass on the polling thread.
    static let drainBudget = 16
    static let bufferSize = 64 * 1_024

    private struct State {
        /// Set and cleared only with `kernel` held too.
        var instance: InotifyInstance?
        var watches: [Int32: InotifyWatch] = [:]
        var teardownScheduled = false
        /// Instances taken out of service whose descriptors are not closed yet.
        var closing = 0
    }

    /// What a `state` section decided, for its caller to do once `state` is released.
    private struct AfterState {
        /// Kernel watches to remove (`inotify_rm_watch`): with `kernel` held.
        var removals: [(instance: InotifyInstance, watchDescriptor: Int32)] = []
        /// Pins to close: with `kernel` held.
        var pins: [Int32] = []
        var teardown: Teardown?

        var needsKernel: Bool { !removals.isEmpty || !pins.isEmpty }
    }

    private enum Teardown {
        /// A utility job closes the instance if no watch came back meanwhile.
        case schedule
        /// A test's hub (no registration): closed by the caller, which holds `kernel` and the
        /// drain token; `state.closing` counts it until then.
        case closeNow(InotifyInstance)
    }

    private let state = Mutex<State>(State())
    /// Serializes the changes of the kernel's watch set; see "Locks".
    /// Counts the sections held (a value of its own: a zero-sized one shares its address with
    /// the next stored property, which ThreadSanitizer then takes for the same variable).
    private let kernel = Mutex<UInt>(0)
    /// The drain token: one thread reads the inotify descriptor at a time.
    private let draining = Atomic<Bool>(false)
    /// A drain was asked for while the token was taken: the holder drains again.
    private let drainRequested = Atomic<Bool>(false)
    /// Tests hold draining to let the kernel's queue overflow for real.
    private let drainHeld = Atomic<Bool>(false)
    #if DEBUG
    /// The thread inside `state` and inside `kernel` (0: none), for the assertions.
    private let stateOwner = Atomic<UInt>(0)
    private let kernelOwner = Atomic<UInt>(0)
    #endif

    /// Whether instances register with the reactor. Tests make hubs that do not, and drain
    /// them by hand (`requestDrain`), to control exactly when the queue is read.
    private let registersWithReactor: Bool
    /// Tests: refuse watches beyond this many with ENOSPC, as the kernel does at
    /// fs.inotify.max_user_watches (nil: only the kernel's limit).
    private let simulatedWatchLimit: Int?

    /// The reactor the instance registers with, and the queues its jobs go to (a drain that
    /// goes on, an idle instance's teardown).
    private let reactor: Reactor
    private let queues: QueueServices

    /// A hub on `reactor`; a test's hub may leave its instance out of the reactor
    /// (`registersWithReactor: false`: the test drains it) and simulate the watch limit.
    init(reactor: Reactor, queues: QueueServices, registersWithReactor: Bool = true, simulatedWatchLimit: Int? = nil) {
        self.reactor = reactor
        self.queues = queues
        self.registersWithReactor = registersWithReactor
        self.simulatedWatchLimit = simulatedWatchLimit
    }

    // MARK: The two locks

    private func withState<Result, E: Error>(_ body: (inout State) throws(E) -> sending Result) throws(E) -> sending Result {
        try state.locked(ranked: .inotifyState) { (state: inout sending State) throws(E) -> sending Result in
            #if DEBUG
            stateOwner.store(Self.currentThread, ordering: .relaxed)
            defer {
                Self.assertInvariants(state)
                stateOwner.store(0, ordering: .relaxed)
            }
            #endif
            return try body(&state)
        }
    }

    private func withKernel<Result, E: Error>(_ body: () throws(E) -> sending Result) throws(E) -> sending Result {
        assertOutsideState()
        return try kernel.locked(ranked: .inotifyKernel) { (sections: inout sending UInt) throws(E) -> sending Result in
            sections &+= 1
            #if DEBUG
            kernelOwner.store(Self.currentThread, ordering: .relaxed)
            defer { kernelOwner.store(0, ordering: .relaxed) }
            #endif
            return try body()
        }
    }

    /// Debug builds: the calling thread does not hold `state` (before a system call).
    private func assertOutsideState() {
        #if DEBUG
        assert(stateOwner.load(ordering: .relaxed) != Self.currentThread,
               "a system call with the inotify hub's state lock held")
        #endif
    }

    /// Debug builds: the calling thread holds `kernel` and not `state`.
    private func assertKernelSide() {
        assertOutsideState()
        #if DEBUG
        assert(kernelOwner.load(ordering: .relaxed) == Self.currentThread,
               "the kernel's watch set changed without the inotify hub's kernel lock")
        #endif
    }

    #if DEBUG
    private static var currentThread: UInt { UInt(pthread_self()) }

    private static func assertInvariants(_ state: State) {
        assert(state.instance != nil || state.watches.isEmpty, "inotify watches without an instance")
        for (descriptor, watch) in state.watches {
            assert(watch.watchDescriptor == descriptor && watch.isLive && watch.leases > 0,
                   "an inotify watch in the table that is gone, unleased or under another descriptor")
            if let parent = watch.parent {
                assert(parent.childDirectories.contains { $0 === watch }, "a parent link one way only")
            }
            for child in watch.childDirectories {
                assert(child.parent === watch, "a child link one way only")
            }
        }
    }
    #endif

    /// Does what a `state` section decided; with `kernel` held when it removes watches or
    /// closes pins. Returns whether a teardown job is to be queued: the caller queues it
    /// (`scheduleTeardown`) once it holds no lock.
    @discardableResult
    private func finish(_ after: AfterState) -> Bool {
        if after.needsKernel { assertKernelSide() } else { assertOutsideState() }
        for removal in after.removals { _ = lull_inotify_rm_watch(removal.instance.descriptor, removal.watchDescriptor) }
        for pin in after.pins { close(pin) }
        switch after.teardown {
        case .schedule?:
            return true
        case .closeNow(let instance)?:
            assertKernelSide()
            instance.close()
            draining.store(false, ordering: .releasing)
            withState { $0.closing -= 1 }
        case nil:
            break
        }
        return false
    }

    /// Queues the job that closes the instance if it is still idle (with no lock held: the
    /// job may start a worker thread).
    private func scheduleTeardown() {
        assertOutsideState()
        #if DEBUG
        assert(kernelOwner.load(ordering: .relaxed) != Self.currentThread, "a job queued with the inotify hub's kernel lock held")
        #endif
        queues.roots.global(.utility).async { [self] in teardownIfIdle() }
    }

    /// inotify_add_watch, or ENOSPC past the simulated limit.
    private func addWatch(_ instance: InotifyInstance, _ path: RawPath, _ mask: InotifyMask) -> Int32 {
        assertKernelSide()
        if let limit = simulatedWatchLimit, withState({ $0.watches.count }) >= limit { return -ENOSPC }
        return path.withCString { lull_inotify_add_watch(instance.descriptor, $0, mask.rawValue) }
    }

    // MARK: Leases

    /// Pins `path` (following symbolic links, as open(2) does) and watches it.
    func acquire(path: String, subject: String, mask: (_ isDirectory: Bool) -> InotifyMask) throws(EventSourceError) -> InotifyLease {
        let pin = lull_open_object(path, 1)
        guard pin >= 0 else { throw FileSystemErrors.error(subject, code: -pin, step: .open) }
        return try acquire(pin: pin, subject: subject, mask: mask)
    }

    /// Pins the object open as `descriptor` (through /proc/self/fd) and watches it.
    func acquire(descriptor: Int32, subject: String, mask: (_ isDirectory: Bool) -> InotifyMask) throws(EventSourceError) -> InotifyLease {
        guard descriptor >= 0 else {
            throw EventSourceError(subject: subject, code: EBADF, reason: "\(String(cString: strerror(EBADF))): negative descriptor")
        }
        let check = lull_fd_check(descriptor)
        guard check == 0 else { throw FileSystemErrors.error(subject, code: -check, step: .descriptor) }
        let pin = lull_open_object(InotifyWatch.procPath(of: descriptor), 1)
        guard pin >= 0 else { throw FileSystemErrors.error(subject, code: -pin, step: .descriptor) }
        return try acquire(pin: pin, subject: subject, mask: mask)
    }

    /// Watches the object `pin` refers to, for the events `mask` gives for its kind; takes
    /// ownership of `pin` (closed on failure, or at once when the inode is already pinned by
    /// another lease).
    func acquire(pin: Int32, subject: String, mask: (_ isDirectory: Bool) -> InotifyMask) throws(EventSourceError) -> InotifyLease {
        var status = lull_object_status()
        let statusError = lull_object_status_of(pin, &status)
        guard statusError == 0 else {
            close(pin)
            throw FileSystemErrors.error(subject, code: -statusError, step: .open)
        }
        let mask = mask(status.is_directory != 0)
        var schedulesTeardown = false
        defer { if schedulesTeardown { scheduleTeardown() } }
        return try withKernel { () throws(EventSourceError) -> InotifyLease in
            let instance: InotifyInstance
            do throws(EventSourceError) {
                instance = try ensureInstance(subject: subject)
            } catch {
                close(pin)
                throw error
            }
            let wd = addWatch(instance, RawPath(bytes: InotifyWatch.procPath(of: pin).utf8), mask.union(.maskAdd))
            guard wd >= 0 else {
                close(pin)
                schedulesTeardown = finish(withState { state in AfterState(teardown: teardownDecision(&state, holdingKernel: true)) })
                throw FileSystemErrors.error(subject, code: -wd, step: .watch)
            }
            let (watch, after) = withState { state -> (InotifyWatch, AfterState) in
                var after = AfterState()
                let watch = adopt(&state, &after, watchDescriptor: wd, status: status, pin: pin, mask: mask)
                return (watch, after)
            }
            finish(after)
            return InotifyLease(hub: self, watch: watch)
        }
    }

    /// Watches the directory at `path` without pinning it (for tree watchers, which would
    /// otherwise hold a descriptor per directory): not following a final symbolic link.
    func acquireUnpinned(directory path: RawPath, subject: String, mask: InotifyMask) throws(EventSourceError) -> InotifyLease {
        InotifyLease(hub: self, watch: try acquireUnpinnedWatch(directory: path, subject: subject, mask: mask))
    }

    /// `acquireUnpinned` without the lease object, for a tree watcher's thousands of
    /// directories (an object each would cost 48 bytes): the caller keeps the watch and
    /// gives its lease back exactly once, with `release(_:)`.
    func acquireUnpinnedWatch(directory path: RawPath, subject: String, mask: InotifyMask) throws(EventSourceError) -> InotifyWatch {
        var schedulesTeardown = false
        defer { if schedulesTeardown { scheduleTeardown() } }
        return try withKernel { () throws(EventSourceError) -> InotifyWatch in
            let instance = try ensureInstance(subject: subject)
            let wd = addWatch(instance, path, mask.union([.maskAdd, .onlyDirectory, .dontFollow, .excludeUnlinked]))
            guard wd >= 0 else {
                schedulesTeardown = finish(withState { state in AfterState(teardown: teardownDecision(&state, holdingKernel: true)) })
                throw FileSystemErrors.error(subject, code: -wd, step: .watch)
            }
            let (watch, after) = withState { state -> (InotifyWatch, AfterState) in
                var after = AfterState()
                if let existing = state.watches[wd] {
                    existing.leases += 1
                    existing.kernelMask.formUnion(mask)
                    return (existing, after)
                }
                // No statx: a tree watcher adds thousands of these at once, and an unpinned
                // watch needs only to know that it is a directory (IN_ONLYDIR made sure). Its
                // device and inode stay unknown (0) until a source pins it (`adopt`).
                var status = lull_object_status()
                status.is_directory = 1
                let watch = adopt(&state, &after, watchDescriptor: wd, status: status, pin: -1, mask: mask)
                return (watch, after)
            }
            finish(after)
            return watch
        }
    }

    /// One lease fewer on `watch`; the last one removes the kernel watch and the pin.
    func release(_ watch: InotifyWatch) {
        let schedulesTeardown = withKernel {
            finish(withState { state in
                var after = AfterState()
                releaseLocked(&state, &after, watch)
                after.teardown = teardownDecision(&state, holdingKernel: true)
                return after
            })
        }
        if schedulesTeardown { scheduleTeardown() }
    }

    // MARK: Subscriptions

    /// From now on the source gets the events of its watch within `mask`.
    func subscribe(_ core: SourceCore, mask: FileSystemEvent, to lease: InotifyLease) {
        let watch = lease.watch
        withKernel {
            let needs = withState { _ -> (kernelMask: InotifyMask, parent: Bool)? in
                guard watch.isLive else { return nil }
                watch.refreshBaselines()
                watch.sources.append(InotifyWatch.SourceSubscription(core: core, mask: mask))
                return (VnodeEventMapping.kernelMask(for: mask, isDirectory: watch.isDirectory),
                        watch.needsParent && watch.parent == nil)
            }
            guard let needs else { return }
            widen(watch, to: needs.kernelMask)
            if needs.parent { linkParent(watch) }
        }
    }

    /// When this returns, the source gets nothing more from the hub.
    func unsubscribe(_ core: SourceCore, from lease: InotifyLease) {
        let watch = lease.watch
        withKernel {
            _ = finish(withState { state in
                var after = AfterState()
                watch.sources.removeAll { $0.core === core }
                if !watch.needsParent, watch.parent != nil { unlinkParent(&state, &after, watch) }
                return after
            })
        }
    }

    func observe(_ observer: any InotifyObserver, mask: InotifyMask, on lease: InotifyLease) {
        observe(observer, mask: mask, on: lease.watch)
    }

    /// `observe(_:mask:on:)` for a watch leased with `acquireUnpinnedWatch`.
    func observe(_ observer: any InotifyObserver, mask: InotifyMask, on watch: InotifyWatch) {
        let widens = withState { _ -> Bool in
            guard watch.isLive else { return false }
            watch.addObserver(InotifyWatch.ObserverSubscription(observer: observer, mask: mask))
            return watch.pin >= 0 && !watch.kernelMask.isSuperset(of: mask)
        }
        // An unpinned watch is leased with its full mask: a walk takes no lock here.
        if widens { withKernel { widen(watch, to: mask) } }
    }

    func stopObserving(_ observer: any InotifyObserver, on lease: InotifyLease) {
        stopObserving(observer, on: lease.watch)
    }

    func stopObserving(_ observer: any InotifyObserver, on watch: InotifyWatch) {
        withState { _ in
            watch.removeObservers(observer)
        }
    }

    // MARK: Draining

    /// The inotify descriptor is readable (or a test asks): drain it, on this thread unless
    /// another one is at it already (then that one drains again).
    ///
    /// The request and the token form a store-then-load pair on each side: the requester
    /// stores `drainRequested` and then tries the token; the drainer gives the token back
    /// and then reads `drainRequested`. Both are sequentially consistent, so that either
    /// the requester takes the token or the drainer sees the request (with release and
    /// acquire alone, both could miss the other's store, and a request would wait for the
    /// next readiness).
    func requestDrain() {
        drainRequested.store(true, ordering: .sequentiallyConsistent)
        if drainHeld.load(ordering: .acquiring) { return }
        while !draining.exchange(true, ordering: .sequentiallyConsistent) {
            drainRequested.store(false, ordering: .releasing)
            let complete = drainPass()
            draining.store(false, ordering: .sequentiallyConsistent)
            if !complete {
                // A storm: let the reactor go on and continue from a job.
                FileSystemDiagnostics.recordContinuation()
                queues.roots.global(.default).async { [self] in requestDrain() }
                return
            }
            if !drainRequested.load(ordering: .sequentiallyConsistent) { return }
        }
    }

    /// Reads up to the budget; true when the queue was found empty.
    private func drainPass() -> Bool {
        guard let instance = withState({ $0.instance }) else { return true }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.bufferSize, alignment: 8)
        defer { buffer.deallocate() }
        var events: [InotifyEvent] = []
        for _ in 0..<Self.drainBudget {
            let count = lull_inotify_read(instance.descriptor, buffer.baseAddress, UInt(buffer.count))
            if count == -Int(EAGAIN) || count == 0 { return true }
            if count < 0 {
                RuntimeLog.once("inotify-read") {
                    "reading the inotify descriptor failed: \(SystemError("read", code: Int32(-count))); file-system events may be late"
                }
                return true
            }
            events.removeAll(keepingCapacity: true)
            InotifyEvent.parse(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), into: &events)
            FileSystemDiagnostics.recordRead(events: events.count)
            dispatch(events, from: instance)
        }
        return false
    }

    /// Test hook: while held, the inotify queue is not read (so that it can overflow).
    func holdDraining(_ hold: Bool) {
        drainHeld.store(hold, ordering: .releasing)
        if !hold { requestDrain() }
    }

    /// Test hook: reads the mount table now, as when it changes.
    func checkMountsNow() {
        guard let instance = withState({ $0.instance }) else { return }
        mountTableChanged(instance)
    }

    /// Test hook: handles a synthetic overflow exactly as a real IN_Q_OVERFLOW.
    func injectOverflow() {
        guard let instance = withState({ $0.instance }) else { return }
        dispatch([InotifyEvent(watchDescriptor: -1, mask: .queueOverflow, cookie: 0, name: nil)], from: instance)
    }

    // MARK: Dispatch

    private struct Deliveries {
        /// OR-ed per source: one merge per source per batch.
        var merges: [ObjectIdentifier: (core: SourceCore, value: UInt)] = [:]
        var observed: [ObjectIdentifier: (observer: any InotifyObserver, events: [(watch: InotifyWatch, event: InotifyEvent)])] = [:]
        var overflowed: [ObjectIdentifier: any InotifyObserver] = [:]

        mutating func merge(_ events: FileSystemEvent, into watch: InotifyWatch) {
            guard !events.isEmpty else { return }
            for source in watch.sources {
                let wanted = events.intersection(source.mask)
                if !wanted.isEmpty { merges[ObjectIdentifier(source.core), default: (source.core, 0)].value |= wanted.rawValue }
            }
        }

        mutating func observe(_ event: InotifyEvent, on watch: InotifyWatch) {
            watch.forEachObserver { subscription in
                guard !subscription.mask.isDisjoint(with: event.mask) || !event.mask.isDisjoint(with: [.ignored, .unmount]) else { return }
                let key = ObjectIdentifier(subscription.observer)
                observed[key, default: (subscription.observer, [])].events.append((watch, event))
            }
        }

        func deliver() {
            for (core, value) in merges.values { core.merge(value) }
            for (observer, events) in observed.values { observer.inotifyEvents(events) }
            for observer in overflowed.values { observer.inotifyOverflowed() }
        }
    }

    /// Maps one read's events, in order. Runs of events that only read and update the table
    /// are handled under `state`; an event that may let a lease go or move a parent link
    /// (`needsKernel`) is handled alone with `kernel` held too, and its parent links are made
    /// again before the next event is handled, as if under one lock.
    private func dispatch(_ events: [InotifyEvent], from instance: InotifyInstance) {
        if events.contains(where: { $0.mask.contains(.queueOverflow) }) {
            RuntimeLog.once("inotify-overflow") {
                "the inotify queue overflowed (fs.inotify.max_queued_events = \(lull_read_proc_integer("/proc/sys/fs/inotify/max_queued_events"))); file-system sources were sent every event that may have happened"
            }
        }
        // Moves whose two halves are in the same directory (renames inside it).
        var movedFrom: [Int32: Set<UInt32>] = [:]
        var movedTo: [Int32: Set<UInt32>] = [:]
        for event in events where event.cookie != 0 {
            if event.mask.contains(.movedFrom) { movedFrom[event.watchDescriptor, default: []].insert(event.cookie) }
            if event.mask.contains(.movedTo) { movedTo[event.watchDescriptor, default: []].insert(event.cookie) }
        }
        var internalMoves: [Int32: Set<UInt32>] = [:]
        for (descriptor, from) in movedFrom {
            if let to = movedTo[descriptor] { internalMoves[descriptor] = from.intersection(to) }
        }
        var deliveries = Deliveries()
        var next = 0
        while next < events.count {
            let (end, after) = withState { state -> (Int, AfterState) in
                guard state.instance === instance else { return (events.count, AfterState()) }
                var index = next
                var after = AfterState()
                var relinks: [InotifyWatch] = []
                while index < events.count, !needsKernel(events[index], state) {
                    handle(events[index], &state, &deliveries, &after, &relinks, internalMoves: internalMoves)
                    index += 1
                }
                assert(!after.needsKernel && relinks.isEmpty, "an event that needs the kernel lock handled without it")
                after.teardown = teardownDecision(&state, holdingKernel: false)
                return (index, after)
            }
            if finish(after) { scheduleTeardown() }
            guard end < events.count else { break }
            let event = events[end]
            next = end + 1
            let schedulesTeardown = withKernel { () -> Bool in
                var relinks: [InotifyWatch] = []
                let schedules = finish(withState { state -> AfterState in
                    var after = AfterState()
                    guard state.instance === instance else { return after }
                    handle(event, &state, &deliveries, &after, &relinks, internalMoves: internalMoves)
                    after.teardown = teardownDecision(&state, holdingKernel: true)
                    return after
                })
                for watch in relinks { linkParent(watch) }
                return schedules
            }
            if schedulesTeardown { scheduleTeardown() }
        }
        deliveries.deliver()
    }

    /// Whether handling `event` may let a lease go (and so remove a kernel watch or close a
    /// pin) or must make a parent link again: then it is handled with `kernel` held.
    private func needsKernel(_ event: InotifyEvent, _ state: State) -> Bool {
        if event.mask.contains(.queueOverflow) { return true }
        guard let watch = state.watches[event.watchDescriptor], watch.isLive, watch.parent != nil else { return false }
        return !event.mask.isDisjoint(with: [.moveSelf, .ignored])
    }

    private func handle(_ event: InotifyEvent, _ state: inout State, _ deliveries: inout Deliveries,
                        _ after: inout AfterState, _ relinks: inout [InotifyWatch], internalMoves: [Int32: Set<UInt32>]) {
        if event.mask.contains(.queueOverflow) {
            handleOverflow(&state, &deliveries, &after, &relinks)
            return
        }
        guard let watch = state.watches[event.watchDescriptor], watch.isLive else { return }
        if !watch.sources.isEmpty {
            deliveries.merge(VnodeEventMapping.events(for: event, on: watch, internalMoves: internalMoves[event.watchDescriptor] ?? []),
                             into: watch)
        }
        deliveries.observe(event, on: watch)
        if !watch.childDirectories.isEmpty, event.name != nil, event.mask.contains(.isDirectory),
           !event.mask.isDisjoint(with: [.delete, .movedTo]) {
            for child in watch.childDirectories {
                deliveries.merge(VnodeEventMapping.removalOfDirectory(child), into: child)
            }
        }
        if event.mask.contains(.moveSelf), watch.parent != nil {
            // It may have moved to another directory: follow it there.
            unlinkParent(&state, &after, watch)
            relinks.append(watch)
        }
        if event.mask.contains(.ignored) {
            forget(&state, &after, watch)
        }
    }

    /// IN_Q_OVERFLOW: events were lost for every watch. Sources get what may have happened;
    /// observers are told to rescan; the directory links are made again.
    private func handleOverflow(_ state: inout State, _ deliveries: inout Deliveries,
                                _ after: inout AfterState, _ relinks: inout [InotifyWatch]) {
        FileSystemDiagnostics.recordOverflow()
        for watch in Array(state.watches.values) where watch.isLive {
            if !watch.sources.isEmpty {
                deliveries.merge(VnodeEventMapping.conservativeEvents(for: watch), into: watch)
            }
            watch.forEachObserver { subscription in
                deliveries.overflowed[ObjectIdentifier(subscription.observer)] = subscription.observer
            }
            if watch.parent != nil {
                unlinkParent(&state, &after, watch)
                relinks.append(watch)
            }
        }
    }

    // MARK: Revocation

    /// The mount table changed: a watched object whose mount is no longer in it was on a
    /// file system that went away (a lazy unmount).
    func mountTableChanged(_ instance: InotifyInstance) {
        var text: UnsafeMutablePointer<CChar>?
        var length: UInt = 0
        guard lull_read_small_file("/proc/self/mountinfo", &text, &length) == 0, let text else { return }
        defer { lull_free(text) }
        let mounted = MountTable.mountIDs(UnsafeRawBufferPointer(start: text, count: Int(length)))
        guard !mounted.isEmpty else { return }
        let (deliveries, schedulesTeardown) = withKernel { () -> (Deliveries, Bool) in
            var deliveries = Deliveries()
            let schedules = finish(withState { state -> AfterState in
                var after = AfterState()
                guard state.instance === instance else { return after }
                for watch in Array(state.watches.values)
                where watch.isLive && watch.pin >= 0 && watch.mountID != 0 && !mounted.contains(watch.mountID) {
                    watch.revokeReported = true
                    deliveries.merge(.revoke, into: watch)
                    deliveries.observe(InotifyEvent(watchDescriptor: watch.watchDescriptor, mask: .unmount, cookie: 0, name: nil), on: watch)
                    // Let the file system go: drop the kernel watch and the pin now.
                    after.removals.append((instance, watch.watchDescriptor))
                    forget(&state, &after, watch)
                    after.pins.append(watch.pin)
                    watch.pin = -1
                }
                after.teardown = teardownDecision(&state, holdingKernel: true)
                return after
            })
            return (deliveries, schedules)
        }
        if schedulesTeardown { scheduleTeardown() }
        deliveries.deliver()
    }

    // MARK: With `kernel` held, outside `state`

    private func ensureInstance(subject: String) throws(EventSourceError) -> InotifyInstance {
        assertKernelSide()
        if let instance = withState({ $0.instance }) { return instance }
        let descriptor = lull_inotify_init()
        guard descriptor >= 0 else { throw FileSystemErrors.error(subject, code: -descriptor, step: .instance) }
        let mountTable = lull_open_read_only("/proc/self/mountinfo", 1)
        if mountTable < 0 {
            RuntimeLog.once("mountinfo") {
                "cannot open /proc/self/mountinfo (\(SystemError("open", code: -mountTable))): a lazy unmount of a watched file system will not be reported as .revoke"
            }
        }
        let instance = InotifyInstance(descriptor: descriptor, mountTable: max(mountTable, -1))
        if registersWithReactor {
            do throws(ReactorError) {
                try instance.register(hub: self, on: reactor)
            } catch {
                instance.close()
                throw EventSourceError(subject: subject, code: error.errno,
                                       reason: "the reactor refused the inotify descriptor: \(String(cString: strerror(error.errno)))")
            }
        }
        withState { $0.instance = instance }
        return instance
    }

    /// Widens the kernel mask of a pinned watch to `mask` (through its pin).
    private func widen(_ watch: InotifyWatch, to mask: InotifyMask) {
        assertKernelSide()
        let target = withState { state -> (pin: Int32, instance: InotifyInstance)? in
            // Unpinned watches are leased with their full mask; nothing to widen through.
            guard watch.isLive, !watch.kernelMask.isSuperset(of: mask), watch.pin >= 0, let instance = state.instance else { return nil }
            return (watch.pin, instance)
        }
        guard let target else { return }
        let wd = lull_inotify_add_watch(target.instance.descriptor, InotifyWatch.procPath(of: target.pin),
                                        mask.union(.maskAdd).rawValue)
        if wd == watch.watchDescriptor {
            withState { _ in
                watch.kernelMask.formUnion(mask)
                watch.refreshBaselines()
            }
        } else if wd < 0 {
            RuntimeLog.once("inotify-widen-\(-wd)") {
                "widening an inotify watch failed: \(FileSystemErrors.reason(code: -wd, step: .watch))"
            }
        }
    }

    /// Watches the parent of a watched directory for its removal (see `InotifyWatch.parent`).
    private func linkParent(_ watch: InotifyWatch) {
        assertKernelSide()
        let target = withState { state -> (pin: Int32, device: UInt64, inode: UInt64, instance: InotifyInstance)? in
            guard watch.isLive, watch.pin >= 0, watch.parent == nil, watch.needsParent, let instance = state.instance else { return nil }
            return (watch.pin, watch.device, watch.inode, instance)
        }
        guard let target else { return }
        let parentPin = lull_open_parent_directory(target.pin)
        guard parentPin >= 0 else { return }
        var status = lull_object_status()
        guard lull_object_status_of(parentPin, &status) == 0,
              status.device == target.device, status.inode != target.inode else {
            // The root, or a mount point's root (which cannot be removed while mounted).
            close(parentPin)
            return
        }
        let mask: InotifyMask = [.delete, .movedTo]
        let wd = lull_inotify_add_watch(target.instance.descriptor, InotifyWatch.procPath(of: parentPin),
                                        mask.union(.maskAdd).rawValue)
        guard wd >= 0 else {
            close(parentPin)
            RuntimeLog.once("inotify-parent-\(-wd)") {
                "watching the parent of a watched directory failed (\(FileSystemErrors.reason(code: -wd, step: .watch))); its removal will be reported when its last descriptor closes"
            }
            return
        }
        finish(withState { state -> AfterState in
            var after = AfterState()
            let parent = adopt(&state, &after, watchDescriptor: wd, status: status, pin: parentPin, mask: mask)
            watch.parent = parent
            parent.childDirectories.append(watch)
            // Gone or unsubscribed while the parent was opened: let the parent go again.
            if !watch.isLive || !watch.needsParent { unlinkParent(&state, &after, watch) }
            return after
        })
    }

    /// Closes the instance if no watch came back meanwhile.
    private func teardownIfIdle() {
        let idle = withKernel {
            withState { state -> InotifyInstance? in
                state.teardownScheduled = false
                guard state.watches.isEmpty, let instance = state.instance else { return nil }
                state.instance = nil
                state.closing += 1
                return instance
            }
        }
        guard let idle else { return }
        // Take the drain token, so that nobody reads the descriptor while it closes.
        while draining.exchange(true, ordering: .sequentiallyConsistent) { sched_yield() }
        idle.close()
        draining.store(false, ordering: .sequentiallyConsistent)  // see `requestDrain`
        withState { $0.closing -= 1 }
        if drainRequested.load(ordering: .sequentiallyConsistent) { requestDrain() }
    }

    // MARK: Under `state`

    private func adopt(_ state: inout State, _ after: inout AfterState, watchDescriptor wd: Int32,
                       status: lull_object_status, pin: Int32, mask: InotifyMask) -> InotifyWatch {
        if let existing = state.watches[wd] {
            let sameObject = existing.device == status.device && existing.inode == status.inode
            if sameObject || status.inode == 0 || existing.inode == 0 {
                existing.leases += 1
                existing.kernelMask.formUnion(mask)
                if pin >= 0 {
                    if existing.pin < 0 {
                        existing.pin = pin
                        existing.device = status.device
                        existing.inode = status.inode
                        existing.mountID = status.mount_id
                        existing.refreshBaselines()
                    } else {
                        after.pins.append(pin)
                    }
                }
                return existing
            }
            // The kernel dropped that watch and reused its number before its IN_IGNORED
            // was read: the old one is gone.
            forget(&state, &after, existing)
        }
        let watch = InotifyWatch(watchDescriptor: wd, status: status)
        watch.pin = pin
        watch.leases = 1
        watch.kernelMask = mask
        state.watches[wd] = watch
        return watch
    }

    private func releaseLocked(_ state: inout State, _ after: inout AfterState, _ watch: InotifyWatch) {
        watch.leases -= 1
        guard watch.leases <= 0 else { return }
        if watch.isLive, state.watches[watch.watchDescriptor] === watch, let instance = state.instance {
            after.removals.append((instance, watch.watchDescriptor))
        }
        forget(&state, &after, watch)
        if watch.pin >= 0 {
            after.pins.append(watch.pin)
            watch.pin = -1
        }
        watch.sources.removeAll()
        watch.removeAllObservers()
    }

    /// The kernel watch is gone (or being removed): out of the table, no more events.
    private func forget(_ state: inout State, _ after: inout AfterState, _ watch: InotifyWatch) {
        watch.isLive = false
        if state.watches[watch.watchDescriptor] === watch {
            state.watches[watch.watchDescriptor] = nil
        }
        unlinkParent(&state, &after, watch)
        for child in watch.childDirectories where child.parent === watch {
            child.parent = nil
        }
        watch.childDirectories.removeAll()
    }

    private func unlinkParent(_ state: inout State, _ after: inout AfterState, _ watch: InotifyWatch) {
        guard let parent = watch.parent else { return }
        watch.parent = nil
        parent.childDirectories.removeAll { $0 === watch }
        releaseLocked(&state, &after, parent)
    }

    /// Whether the last watch is gone: then the instance is closed (at once for a test's
    /// hub when the caller holds `kernel` and nobody drains, else from a utility job).
    private func teardownDecision(_ state: inout State, holdingKernel: Bool) -> Teardown? {
        guard state.watches.isEmpty, let instance = state.instance, !state.teardownScheduled else { return nil }
        if !registersWithReactor, holdingKernel, !draining.exchange(true, ordering: .acquiringAndReleasing) {
            // No registration to remove (a test's hub): the caller closes it, on this thread.
            state.instance = nil
            state.closing += 1
            return .closeNow(instance)
        }
        state.teardownScheduled = true
        return .schedule
    }

    /// For tests: whether the hub has an instance open (or still closing), and how many
    /// watches.
    var snapshot: (hasInstance: Bool, watches: Int) {
        withState { ($0.instance != nil || $0.closing > 0, $0.watches.count) }
    }
}

/// A claim on one watch: the watch (and its pin) lives while a lease does.
final class InotifyLease: Sendable {
    let hub: InotifyHub
    let watch: InotifyWatch
    private let released = Atomic<Bool>(false)

    init(hub: InotifyHub, watch: InotifyWatch) {
        self.hub = hub
        self.watch = watch
    }

    /// Idempotent; also done when the lease is dropped.
    func release() {
        guard !released.exchange(true, ordering: .acquiringAndReleasing) else { return }
        hub.release(watch)
    }

    deinit {
        release()
    }
}

/// One inotify descriptor and the mount-table descriptor, with their registrations.
final class InotifyInstance: Sendable {
    let descriptor: Int32
    let mountTable: Int32
    private let registrations = Mutex<[DescriptorRegistration]>([])

    init(descriptor: Int32, mountTable: Int32) {
        self.descriptor = descriptor
        self.mountTable = mountTable
    }

    func register(hub: InotifyHub, on reactor: Reactor) throws(ReactorError) {
        let events = try reactor.register(descriptor: descriptor, forWriting: false,
                                                 handler: InotifyReadable(hub: hub))
        registrations.locked { $0.append(events) }
        guard mountTable >= 0 else { return }
        do throws(ReactorError) {
            let mounts = try reactor.register(descriptor: mountTable, forWriting: false,
                                                     handler: MountTableChanged(hub: hub, instance: self))
            registrations.locked { $0.append(mounts) }
        } catch {
            RuntimeLog.once("mountinfo-register") {
                "the reactor refused /proc/self/mountinfo (\(error)); a lazy unmount of a watched file system will not be reported as .revoke"
            }
        }
    }

    /// Removes the registrations (no callback runs once this returns), then closes both
    /// descriptors, each exactly once.
    func close() {
        let removed = registrations.locked { registered -> [DescriptorRegistration] in
            defer { registered.removeAll() }
            return registered
        }
        for registration in removed { registration.remove() }
        _ = Glibc.close(descriptor)
        if mountTable >= 0 { _ = Glibc.close(mountTable) }
    }
}

/// The inotify descriptor became readable (on the polling thread).
final class InotifyReadable: ReactorEventHandler {
    let hub: InotifyHub

    init(hub: InotifyHub) {
        self.hub = hub
    }

    func reactorEvent(readable: Bool, writable: Bool) {
        hub.requestDrain()
    }
}

/// The mount table changed (on the polling thread).
final class MountTableChanged: ReactorEventHandler {
    let hub: InotifyHub
    let instance: InotifyInstance

    init(hub: InotifyHub, instance: InotifyInstance) {
        self.hub = hub
        self.instance = instance
    }

    func reactorEvent(readable: Bool, writable: Bool) {
        hub.mountTableChanged(instance)
    }
}

/// /proc/self/mountinfo, as far as revocation needs it.
enum MountTable {
    /// The mount ids (first field of each line).
    static func mountIDs(_ text: UnsafeRawBufferPointer) -> Set<UInt64> {
        var result = Set<UInt64>()
        var value: UInt64 = 0
        var inFirstField = true
        var sawDigit = false
        for byte in text {
            if byte == UInt8(ascii: "\n") {
                inFirstField = true
                value = 0
                sawDigit = false
                continue
            }
            guard inFirstField else { continue }
            if byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") {
                value = value &* 10 &+ UInt64(byte - UInt8(ascii: "0"))
                sawDigit = true
            } else {
                if sawDigit { result.insert(value) }
                inFirstField = false
            }
        }
        return result
    }
}
