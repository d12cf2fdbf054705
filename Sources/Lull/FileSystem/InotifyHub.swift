import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The process's inotify instance and every watch on it: file-system sources and tree
/// watchers lease watches here, and the hub turns what the kernel reports into merges.
///
/// - One instance (created with the first watch, closed on a utility job when the last
///   watch is gone), non-blocking and close-on-exec, registered with the reactor like any
///   descriptor: edge-triggered and persistent, so every readiness is drained to `EAGAIN`.
///   A drain reads at most `drainBudget` buffers on the polling thread, then goes on from a
///   job on a global queue, so that a storm of changes cannot hold the reactor.
/// - One watch per inode (inotify returns the same watch descriptor for the same inode),
///   counted by leases; the kernel's mask is widened with IN_MASK_ADD and never narrowed.
/// - `/proc/self/mountinfo` is registered too: when the mount table changes, a watched
///   object whose mount is gone (a lazy unmount: the pin keeps a strict one from happening)
///   gets `.revoke`, and its pin is closed so that the file system can go away.
/// - Everything about watches happens under one lock; merges into sources and calls to
///   observers happen after it is released.
final class InotifyHub: Sendable {
    static let shared = InotifyHub()

    /// Buffers of `bufferSize` bytes read per drain pass on the polling thread.
    static let drainBudget = 16
    static let bufferSize = 64 * 1_024

    private struct State {
        var instance: InotifyInstance?
        var watches: [Int32: InotifyWatch] = [:]
        var teardownScheduled = false
        /// Instances taken out of service whose descriptors are not closed yet.
        var closing = 0
    }

    private let state = Mutex<State>(State())
    /// The drain token: one thread reads the inotify descriptor at a time.
    private let draining = Atomic<Bool>(false)
    /// A drain was asked for while the token was taken: the holder drains again.
    private let drainRequested = Atomic<Bool>(false)
    /// Tests hold draining to let the kernel's queue overflow for real.
    private let drainHeld = Atomic<Bool>(false)

    /// Whether instances register with the reactor. Tests make hubs that do not, and drain
    /// them by hand (`requestDrain`), to control exactly when the queue is read.
    private let registersWithReactor: Bool
    /// Tests: refuse watches beyond this many with ENOSPC, as the kernel does at
    /// fs.inotify.max_user_watches (nil: only the kernel's limit).
    private let simulatedWatchLimit: Int?

    init(registersWithReactor: Bool = true, simulatedWatchLimit: Int? = nil) {
        self.registersWithReactor = registersWithReactor
        self.simulatedWatchLimit = simulatedWatchLimit
    }

    /// inotify_add_watch, or ENOSPC past the simulated limit.
    private func addWatch(_ state: inout State, _ instance: InotifyInstance, _ path: RawPath, _ mask: InotifyMask) -> Int32 {
        if let limit = simulatedWatchLimit, state.watches.count >= limit { return -ENOSPC }
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
        return try state.locked { state throws(EventSourceError) -> InotifyLease in
            let instance: InotifyInstance
            do throws(EventSourceError) {
                instance = try ensureInstance(&state, subject: subject)
            } catch {
                close(pin)
                throw error
            }
            let wd = addWatch(&state, instance, RawPath(bytes: InotifyWatch.procPath(of: pin).utf8), mask.union(.maskAdd))
            guard wd >= 0 else {
                close(pin)
                scheduleTeardownIfIdle(&state)
                throw FileSystemErrors.error(subject, code: -wd, step: .watch)
            }
            let watch = adopt(&state, watchDescriptor: wd, status: status, pin: pin, mask: mask)
            return InotifyLease(hub: self, watch: watch)
        }
    }

    /// Watches the directory at `path` without pinning it (for tree watchers, which would
    /// otherwise hold a descriptor per directory): not following a final symbolic link.
    func acquireUnpinned(directory path: RawPath, subject: String, mask: InotifyMask) throws(EventSourceError) -> InotifyLease {
        try state.locked { state throws(EventSourceError) -> InotifyLease in
            let instance = try ensureInstance(&state, subject: subject)
            let wd = addWatch(&state, instance, path, mask.union([.maskAdd, .onlyDirectory, .dontFollow, .excludeUnlinked]))
            guard wd >= 0 else {
                scheduleTeardownIfIdle(&state)
                throw FileSystemErrors.error(subject, code: -wd, step: .watch)
            }
            if let existing = state.watches[wd] {
                existing.leases += 1
                existing.kernelMask.formUnion(mask)
                return InotifyLease(hub: self, watch: existing)
            }
            // No statx: a tree watcher adds thousands of these at once, and an unpinned
            // watch needs only to know that it is a directory (IN_ONLYDIR made sure). Its
            // device and inode stay unknown (0) until a source pins it (`adopt`).
            var status = lull_object_status()
            status.is_directory = 1
            let watch = adopt(&state, watchDescriptor: wd, status: status, pin: -1, mask: mask)
            return InotifyLease(hub: self, watch: watch)
        }
    }

    /// One lease fewer on `watch`; the last one removes the kernel watch and the pin.
    func release(_ watch: InotifyWatch) {
        state.locked { state in
            releaseLocked(&state, watch)
            scheduleTeardownIfIdle(&state)
        }
    }

    // MARK: Subscriptions

    /// From now on the source gets the events of its watch within `mask`.
    func subscribe(_ core: SourceCore, mask: FileSystemEvent, to lease: InotifyLease) {
        state.locked { state in
            let watch = lease.watch
            guard watch.isLive else { return }
            watch.refreshBaselines()
            watch.sources.append(InotifyWatch.SourceSubscription(core: core, mask: mask))
            widen(&state, watch, to: VnodeEventMapping.kernelMask(for: mask, isDirectory: watch.isDirectory))
            if watch.needsParent, watch.parent == nil { linkParent(&state, watch) }
        }
    }

    /// When this returns, the source gets nothing more from the hub.
    func unsubscribe(_ core: SourceCore, from lease: InotifyLease) {
        state.locked { state in
            let watch = lease.watch
            watch.sources.removeAll { $0.core === core }
            if !watch.needsParent, watch.parent != nil { unlinkParent(&state, watch) }
        }
    }

    func observe(_ observer: any InotifyObserver, mask: InotifyMask, on lease: InotifyLease) {
        state.locked { state in
            let watch = lease.watch
            guard watch.isLive else { return }
            watch.observers.append(InotifyWatch.ObserverSubscription(observer: observer, mask: mask))
            widen(&state, watch, to: mask)
        }
    }

    func stopObserving(_ observer: any InotifyObserver, on lease: InotifyLease) {
        state.locked { _ in
            lease.watch.observers.removeAll { $0.observer === observer }
        }
    }

    // MARK: Draining

    /// The inotify descriptor is readable (or a test asks): drain it, on this thread unless
    /// another one is at it already (then that one drains again).
    func requestDrain() {
        drainRequested.store(true, ordering: .releasing)
        if drainHeld.load(ordering: .acquiring) { return }
        while !draining.exchange(true, ordering: .acquiringAndReleasing) {
            drainRequested.store(false, ordering: .releasing)
            let complete = drainPass()
            draining.store(false, ordering: .releasing)
            if !complete {
                // A storm: let the reactor go on and continue from a job.
                FileSystemDiagnostics.recordContinuation()
                WorkQueue.global().async { [self] in requestDrain() }
                return
            }
            if !drainRequested.load(ordering: .acquiring) { return }
        }
    }

    /// Reads up to the budget; true when the queue was found empty.
    private func drainPass() -> Bool {
        guard let instance = state.locked({ $0.instance }) else { return true }
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
        guard let instance = state.locked({ $0.instance }) else { return }
        mountTableChanged(instance)
    }

    /// Test hook: handles a synthetic overflow exactly as a real IN_Q_OVERFLOW.
    func injectOverflow() {
        guard let instance = state.locked({ $0.instance }) else { return }
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
            for subscription in watch.observers
            where !subscription.mask.isDisjoint(with: event.mask) || !event.mask.isDisjoint(with: [.ignored, .unmount]) {
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

    private func dispatch(_ events: [InotifyEvent], from instance: InotifyInstance) {
        let deliveries = state.locked { state -> Deliveries in
            var deliveries = Deliveries()
            guard state.instance === instance else { return deliveries }
            // Moves whose two halves are in the same directory (renames inside it).
            var movedFrom: [Int32: Set<UInt32>] = [:]
            var movedTo: [Int32: Set<UInt32>] = [:]
            for event in events where event.cookie != 0 {
                if event.mask.contains(.movedFrom) { movedFrom[event.watchDescriptor, default: []].insert(event.cookie) }
                if event.mask.contains(.movedTo) { movedTo[event.watchDescriptor, default: []].insert(event.cookie) }
            }
            for event in events {
                if event.mask.contains(.queueOverflow) {
                    handleOverflow(&state, &deliveries)
                    continue
                }
                guard let watch = state.watches[event.watchDescriptor], watch.isLive else { continue }
                if !watch.sources.isEmpty {
                    let internalMoves = (movedFrom[event.watchDescriptor] ?? []).intersection(movedTo[event.watchDescriptor] ?? [])
                    deliveries.merge(VnodeEventMapping.events(for: event, on: watch, internalMoves: internalMoves), into: watch)
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
                    unlinkParent(&state, watch)
                    linkParent(&state, watch)
                }
                if event.mask.contains(.ignored) {
                    forget(&state, watch)
                }
            }
            scheduleTeardownIfIdle(&state)
            return deliveries
        }
        deliveries.deliver()
    }

    /// IN_Q_OVERFLOW: events were lost for every watch. Sources get what may have happened;
    /// observers are told to rescan; the directory links are re-established.
    private func handleOverflow(_ state: inout State, _ deliveries: inout Deliveries) {
        FileSystemDiagnostics.recordOverflow()
        RuntimeLog.once("inotify-overflow") {
            "the inotify queue overflowed (fs.inotify.max_queued_events = \(lull_read_proc_integer("/proc/sys/fs/inotify/max_queued_events"))); file-system sources were sent every event that may have happened"
        }
        for watch in Array(state.watches.values) where watch.isLive {
            if !watch.sources.isEmpty {
                deliveries.merge(VnodeEventMapping.conservativeEvents(for: watch), into: watch)
            }
            for subscription in watch.observers {
                deliveries.overflowed[ObjectIdentifier(subscription.observer)] = subscription.observer
            }
            if watch.parent != nil {
                unlinkParent(&state, watch)
                linkParent(&state, watch)
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
        let deliveries = state.locked { state -> Deliveries in
            var deliveries = Deliveries()
            guard state.instance === instance else { return deliveries }
            for watch in Array(state.watches.values)
            where watch.isLive && watch.pin >= 0 && watch.mountID != 0 && !mounted.contains(watch.mountID) {
                watch.revokeReported = true
                deliveries.merge(.revoke, into: watch)
                deliveries.observe(InotifyEvent(watchDescriptor: watch.watchDescriptor, mask: .unmount, cookie: 0, name: nil), on: watch)
                // Let the file system go: drop the kernel watch and the pin now.
                if let instance = state.instance { _ = lull_inotify_rm_watch(instance.descriptor, watch.watchDescriptor) }
                forget(&state, watch)
                close(watch.pin)
                watch.pin = -1
            }
            scheduleTeardownIfIdle(&state)
            return deliveries
        }
        deliveries.deliver()
    }

    // MARK: Under the lock

    private func ensureInstance(_ state: inout State, subject: String) throws(EventSourceError) -> InotifyInstance {
        if let instance = state.instance { return instance }
        let descriptor = lull_inotify_init()
        guard descriptor >= 0 else { throw FileSystemErrors.error(subject, code: -descriptor, step: .instance) }
        let mountTable = lull_open_read_only("/proc/self/mountinfo", 1)
        if mountTable < 0 {
            RuntimeLog.once("mountinfo") {
                "cannot open /proc/self/mountinfo (\(SystemError("open", code: -mountTable))): a lazy unmount of a watched file system will not be reported as .revoke"
            }
        }
        let instance = InotifyInstance(descriptor: descriptor, mountTable: max(mountTable, -1))
        guard registersWithReactor else {
            state.instance = instance
            return instance
        }
        do throws(ReactorError) {
            try instance.register(hub: self)
        } catch {
            instance.close()
            throw EventSourceError(subject: subject, code: error.errno,
                                   reason: "the reactor refused the inotify descriptor: \(String(cString: strerror(error.errno)))")
        }
        state.instance = instance
        return instance
    }

    private func adopt(_ state: inout State, watchDescriptor wd: Int32, status: lull_object_status,
                       pin: Int32, mask: InotifyMask) -> InotifyWatch {
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
                        close(pin)
                    }
                }
                return existing
            }
            // The kernel dropped that watch and reused its number before its IN_IGNORED
            // was read: the old one is gone.
            forget(&state, existing)
        }
        let watch = InotifyWatch(watchDescriptor: wd, status: status)
        watch.pin = pin
        watch.leases = 1
        watch.kernelMask = mask
        state.watches[wd] = watch
        return watch
    }

    private func widen(_ state: inout State, _ watch: InotifyWatch, to mask: InotifyMask) {
        guard !watch.kernelMask.isSuperset(of: mask), let instance = state.instance else { return }
        guard watch.pin >= 0 else {
            // Unpinned watches are leased with their full mask; nothing to widen through.
            return
        }
        let wd = lull_inotify_add_watch(instance.descriptor, InotifyWatch.procPath(of: watch.pin),
                                        mask.union(.maskAdd).rawValue)
        if wd == watch.watchDescriptor {
            watch.kernelMask.formUnion(mask)
            watch.refreshBaselines()
        } else if wd < 0 {
            RuntimeLog.once("inotify-widen-\(-wd)") {
                "widening an inotify watch failed: \(FileSystemErrors.reason(code: -wd, step: .watch))"
            }
        }
    }

    private func releaseLocked(_ state: inout State, _ watch: InotifyWatch) {
        watch.leases -= 1
        guard watch.leases <= 0 else { return }
        if watch.isLive, state.watches[watch.watchDescriptor] === watch, let instance = state.instance {
            _ = lull_inotify_rm_watch(instance.descriptor, watch.watchDescriptor)
        }
        forget(&state, watch)
        if watch.pin >= 0 {
            close(watch.pin)
            watch.pin = -1
        }
        watch.sources.removeAll()
        watch.observers.removeAll()
    }

    /// The kernel watch is gone (or being removed): out of the table, no more events.
    private func forget(_ state: inout State, _ watch: InotifyWatch) {
        watch.isLive = false
        if state.watches[watch.watchDescriptor] === watch {
            state.watches[watch.watchDescriptor] = nil
        }
        unlinkParent(&state, watch)
        for child in watch.childDirectories where child.parent === watch {
            child.parent = nil
        }
        watch.childDirectories.removeAll()
    }

    /// Watches the parent of a watched directory for its removal (see `InotifyWatch.parent`).
    private func linkParent(_ state: inout State, _ watch: InotifyWatch) {
        guard watch.isLive, watch.pin >= 0, let instance = state.instance else { return }
        let parentPin = lull_open_parent_directory(watch.pin)
        guard parentPin >= 0 else { return }
        var status = lull_object_status()
        guard lull_object_status_of(parentPin, &status) == 0,
              status.device == watch.device, status.inode != watch.inode else {
            // The root, or a mount point's root (which cannot be removed while mounted).
            close(parentPin)
            return
        }
        let mask: InotifyMask = [.delete, .movedTo]
        let wd = lull_inotify_add_watch(instance.descriptor, InotifyWatch.procPath(of: parentPin),
                                        mask.union(.maskAdd).rawValue)
        guard wd >= 0 else {
            close(parentPin)
            RuntimeLog.once("inotify-parent-\(-wd)") {
                "watching the parent of a watched directory failed (\(FileSystemErrors.reason(code: -wd, step: .watch))); its removal will be reported when its last descriptor closes"
            }
            return
        }
        let parent = adopt(&state, watchDescriptor: wd, status: status, pin: parentPin, mask: mask)
        watch.parent = parent
        parent.childDirectories.append(watch)
    }

    private func unlinkParent(_ state: inout State, _ watch: InotifyWatch) {
        guard let parent = watch.parent else { return }
        watch.parent = nil
        parent.childDirectories.removeAll { $0 === watch }
        releaseLocked(&state, parent)
    }

    private func scheduleTeardownIfIdle(_ state: inout State) {
        guard state.watches.isEmpty, let instance = state.instance, !state.teardownScheduled else { return }
        if !registersWithReactor, !draining.exchange(true, ordering: .acquiringAndReleasing) {
            // No registration to remove (a test's hub): close at once, on this thread.
            state.instance = nil
            instance.close()
            draining.store(false, ordering: .releasing)
            return
        }
        state.teardownScheduled = true
        WorkQueue.global(qos: .utility).async { [self] in teardownIfIdle() }
    }

    /// Closes the instance if no watch came back meanwhile.
    private func teardownIfIdle() {
        let idle = state.locked { state -> InotifyInstance? in
            state.teardownScheduled = false
            guard state.watches.isEmpty, let instance = state.instance else { return nil }
            state.instance = nil
            state.closing += 1
            return instance
        }
        guard let idle else { return }
        // Take the drain token, so that nobody reads the descriptor while it closes.
        while draining.exchange(true, ordering: .acquiringAndReleasing) { sched_yield() }
        idle.close()
        draining.store(false, ordering: .releasing)
        state.locked { $0.closing -= 1 }
        if drainRequested.load(ordering: .acquiring) { requestDrain() }
    }

    /// For tests: whether the hub has an instance open (or still closing), and how many
    /// watches.
    var snapshot: (hasInstance: Bool, watches: Int) {
        state.locked { ($0.instance != nil || $0.closing > 0, $0.watches.count) }
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

    func register(hub: InotifyHub) throws(ReactorError) {
        let events = try Reactor.shared.register(descriptor: descriptor, forWriting: false,
                                                 handler: InotifyReadable(hub: hub))
        registrations.locked { $0.append(events) }
        guard mountTable >= 0 else { return }
        do throws(ReactorError) {
            let mounts = try Reactor.shared.register(descriptor: mountTable, forWriting: false,
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
