import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The tree watcher's state and logic; the hub holds it (as an observer) while it watches,
/// the program holds the `DirectoryTreeWatcher`, whose release cancels it.
///
/// The state model (who owns what, why a walk holds no lock and how changes during it are
/// reconciled, moves: watched, pending, departed and outside directories) is in
/// docs/FileSystem.md, "The tree watcher". In short: `control` (a mutex, never held over a
/// system call) has the public state; `tree` is confined (to `activate()`'s walk before the
/// processing queue starts, then to that serial queue) and never locked; events that arrive
/// during a walk wait as jobs behind it. A directory is a small record (its watch, its
/// parent's key, its name), not a path: paths are built from the chain of parents when an
/// event needs one ("The tree watcher: memory").
///
/// Invariants (asserted in debug builds): no two threads are inside `tree` at once; a
/// departed directory with a `move` has that move in `pendingMoves`; a watch is in at most
/// one of `directories` and `departed`; the batch's index names the last live change of
/// each path.
final class TreeWatcherCore: InotifyObserver {
    typealias Change = DirectoryTreeWatcher.Change

    static let observedMask: InotifyMask = [.create, .delete, .movedFrom, .movedTo, .modify, .closeWrite,
                                            .attrib, .deleteSelf, .moveSelf]
    /// Events held for one pending move before it only remembers that some were let go.
    static let heldEventLimit = 4_096
    /// Changes a batch held back for a busy `changes` loop may gather before it becomes
    /// `.mustRescan` of the root.
    static let defaultHeldChangeLimit = 16_384

    /// The root, as reported (`PathEncoding`'s String of `rootPath`).
    let root: String
    let rootPath: RawPath
    let latency: Duration
    let hub: InotifyHub
    /// Serial, created inactive (see "Who owns what"); targets the program's queue. Events
    /// are handled and batches delivered on it.
    let processing: WorkQueue
    let timer: TimerSource
    private let subject: String
    private let walkHook: (@Sendable (String) -> Void)?
    private let heldChangeLimit: Int
    /// The hand-off to the `changes` loop (docs/FileSystem.md, "changes with backpressure").
    let changesChannel = TreeWatcherChangesChannel()

    private struct Control {
        var activated = false
        var cancelled = false
        var handler: (@Sendable ([Change]) -> Void)?
        var lastError: EventSourceError?
    }

    private let control = Mutex<Control>(Control())
    private let tree = Tree()

    init(path: String, latency: Duration, queue: WorkQueue, hub: InotifyHub,
         walkHook: (@Sendable (String) -> Void)?, heldChangeLimit: Int = TreeWatcherCore.defaultHeldChangeLimit) throws(EventSourceError) {
        self.heldChangeLimit = max(heldChangeLimit, 1)
        var trimmed = RawPath(path)
        while trimmed.bytes.count > 1, trimmed.bytes.last == UInt8(ascii: "/") {
            trimmed = RawPath(bytes: trimmed.bytes.dropLast())
        }
        // Symbolic links are never followed inside the tree; the root's are resolved once.
        if let resolved = trimmed.withCString({ realpath($0, nil) }) {
            trimmed = RawPath(bytes: UnsafeRawBufferPointer(start: resolved, count: strlen(resolved)))
            free(resolved)
        }
        rootPath = trimmed
        root = trimmed.string
        self.latency = latency
        self.hub = hub
        self.walkHook = walkHook
        let target = queue
        subject = FileSystemErrors.subject(kind: "DirectoryTreeWatcher", queueLabel: target.label, path: root)
        var status = lull_object_status()
        let pin = trimmed.withCString { lull_open_object($0, 1) }
        guard pin >= 0 else { throw FileSystemErrors.error(subject, code: -pin, step: .open) }
        let statusError = lull_object_status_of(pin, &status)
        close(pin)
        guard statusError == 0 else { throw FileSystemErrors.error(subject, code: -statusError, step: .open) }
        guard status.is_directory != 0 else {
            throw EventSourceError(subject: subject, code: ENOTDIR, reason: String(cString: strerror(ENOTDIR)))
        }
        processing = WorkQueue(label: "lull.directory-tree-watcher", qos: .unspecified, attributes: .initiallyInactive,
                               resolvedTarget: target)
        timer = TimerSource(flags: [], queue: processing, site: TimerSite(file: #fileID, line: #line))
    }

    var isCancelled: Bool { control.locked { $0.cancelled } }
    var lastError: EventSourceError? { control.locked { $0.lastError } }

    func setHandler(_ handler: (@Sendable ([Change]) -> Void)?) {
        let replaced = control.locked { control -> (@Sendable ([Change]) -> Void)? in
            defer { control.handler = control.cancelled ? nil : handler }
            return control.handler
        }
        _ = replaced  // released here, outside the lock
    }

    /// The batch held back for a busy `changes` loop, if one is (for tests).
    func heldBatchForTesting() -> [Change]? {
        processing.sync { confined { tree.held ? tree.batch.peek() : nil } }
    }

    /// The `changes` loop's `next()`: the next batch (all that merged while the loop was
    /// busy), or nil once the watcher is cancelled. Cancelling the task cancels the watcher.
    func nextBatch(isolation actor: isolated (any Actor)?) async -> [Change]? {
        await withTaskCancellationHandler {
            await changesChannel.next(isolation: actor) {
                processing.async { [self] in deliver() }
            }
        } onCancel: {
            cancel()
        }
    }

    /// Decides under `control`, walks with no lock held (the processing queue is still
    /// inactive, so the tree is this thread's), then lets the events that came meanwhile in.
    func activate() {
        let first = control.locked { control -> Bool in
            guard !control.activated, !control.cancelled else { return false }
            control.activated = true
            return true
        }
        guard first else { return }
        timer.setEventHandler { [self] in flush() }
        timer.activate()
        confined {
            switch addTree(rootPath, parent: nil, reportContents: false) {
            case .watched: watchParent()
            case .missing: anchorRoot()
            case .failed: break
            }
            armTimer()  // directories that could not be watched are reported at once
        }
        processing.activate()
    }

    func cancel() {
        let (first, activatesQueue) = control.locked { control -> (Bool, Bool) in
            guard !control.cancelled else { return (false, false) }
            control.cancelled = true
            control.handler = nil
            // Never activated: nobody else will start the processing queue.
            let activatesQueue = !control.activated
            control.activated = true
            return (true, activatesQueue)
        }
        guard first else { return }
        // After every job queued so far (and after a walk in activate(), which activates
        // the queue when it is done).
        processing.async { [self] in tearDown() }
        timer.cancel()
        // A timer never activated delivers its cancellation (and lets its handler go) only
        // once activated.
        timer.activate()
        if activatesQueue { processing.activate() }
        changesChannel.finish()
    }

    /// On the processing queue, after `cancel()`: every watch let go; later jobs do nothing.
    private func tearDown() {
        let (watches, leases) = confined { () -> ([InotifyWatch], [InotifyLease]) in
            guard !tree.stopped else { return ([], []) }
            tree.stopped = true
            tree.held = false
            let watches = tree.directories.values.map(\.watch) + tree.departed.values.map(\.directory.watch)
            var leases: [InotifyLease] = []
            if let anchor = tree.anchor { leases += [anchor.lease] + (anchor.guardLease.map { [$0] } ?? []) }
            if let sentinel = tree.sentinel { leases.append(sentinel) }
            tree.directories.removeAll()
            tree.departed.removeAll()
            tree.pendingMoves.removeAll()
            tree.anchor = nil
            tree.sentinel = nil
            _ = tree.batch.take()
            return (watches, leases)
        }
        for watch in watches {
            hub.stopObserving(self, on: watch)
            hub.release(watch)
        }
        for lease in leases {
            hub.stopObserving(self, on: lease)
            lease.release()
        }
    }

    // MARK: Events (from the hub, on the draining thread)

    func inotifyEvents(_ events: [(watch: InotifyWatch, event: InotifyEvent)]) {
        processing.async { [self] in
            confined {
                guard !tree.stopped else { return }
                for (watch, event) in events { handle(event, on: ObjectIdentifier(watch)) }
                boundHeldBatch()
                armTimer()
            }
        }
    }

    func inotifyOverflowed() {
        processing.async { [self] in
            confined {
                guard !tree.stopped else { return }
                rescan()
                boundHeldBatch()
                armTimer()
            }
        }
    }

    // MARK: Confined to the processing queue (or to activate's walk, before it runs)

    /// The tree's state; see "Who owns what".
    ///
    /// `@unchecked Sendable`: it is reached only through `confined`, which is called only by
    /// `activate()` before `processing` is activated and by jobs on `processing`, a serial
    /// queue; the queue's activation and its jobs' hand-offs order those accesses (and debug
    /// builds assert that they never overlap).
    private final class Tree: @unchecked Sendable {
        var stopped = false
        var directories: [ObjectIdentifier: Directory] = [:]
        var departed: [ObjectIdentifier: Departed] = [:]
        var pendingMoves: [UInt32: PendingMove] = [:]
        var batch = Batch()
        /// Flushes so far: when a departed directory left the tree for good.
        var flushes: UInt64 = 0
        var timerArmed = false
        /// The batch is held back for a busy `changes` loop (it goes when the loop asks).
        var held = false
        /// While the root is missing: the watch on its nearest existing ancestor.
        /// `guardLease` watches the anchor's parent: a removed directory that something
        /// still holds (as a removed root held open holds its parent) gets no event itself.
        var anchor: (path: RawPath, lease: InotifyLease, guardLease: InotifyLease?)?
        /// While the root is watched: the watch on its parent, which tells when the root is
        /// removed or moved even while it is open somewhere (then the root's own watch
        /// hears nothing until it is closed).
        var sentinel: InotifyLease?
        #if DEBUG
        let inUse = Atomic<Bool>(false)
        #endif
    }

    /// A watched directory: its watch (one lease, given back when it is let go) and where
    /// it is, as its parent's key and its name there; the root's parent is its own key.
    /// Paths are built from the chain when an event needs one (docs/FileSystem.md, "The
    /// tree watcher: memory").
    private struct Directory {
        var name: PathComponent
        let watch: InotifyWatch
        var parent: ObjectIdentifier
    }

    /// A directory moved away (see "Moves"): its record as it was before the move.
    private struct Departed {
        var directory: Directory
        /// The cookie of its pending move; nil once that move left the tree (outside).
        var move: UInt32?
        /// The flush at which it went outside.
        var leftAt: UInt64 = 0
    }

    /// An IN_MOVED_FROM waiting for its IN_MOVED_TO.
    private struct PendingMove {
        let path: RawPath
        let isDirectory: Bool
        /// The watched directories of that name that moved (one, or none for a file; more
        /// when a directory of the name was replaced and the old one is not let go yet).
        let directories: [ObjectIdentifier]
        /// Where its `.removed` sits in the batch (`Int.max` once that batch was collapsed).
        var slot: Int
        var held: [(watch: ObjectIdentifier, event: InotifyEvent)] = []
        var letSomeGo = false
    }

    /// The changes of the batch being built, in order, one slot each; a slot is emptied when
    /// its change is retracted (a placeholder whose move turned out to be a rename).
    private struct Batch {
        private var slots: [(path: RawPath, change: Change)?] = []
        /// The slot of the last live change of each path.
        private var latest: [RawPath: Int] = [:]
        private var live = 0

        var isEmpty: Bool { live == 0 }
        /// The live changes.
        var count: Int { live }

        /// Adds a change (or folds it into the last one of its path); returns its slot.
        @discardableResult
        mutating func record(_ change: Change, at path: RawPath) -> Int {
            if let index = latest[path], let earlier = slots[index]?.change.kind {
                switch (earlier, change.kind) {
                case (.created, .modified), (.created, .attributesChanged),
                     (.modified, .modified), (.attributesChanged, .attributesChanged),
                     (.renamed, .modified), (.renamed, .attributesChanged),
                     (.created, .created), (.mustRescan, .mustRescan):
                    return index
                default:
                    break
                }
            }
            latest[path] = slots.count
            slots.append((path, change))
            live += 1
            return slots.count - 1
        }

        mutating func retract(_ slot: Int) {
            guard slot < slots.count, let entry = slots[slot] else { return }
            slots[slot] = nil
            live -= 1
            if latest[entry.path] == slot { latest[entry.path] = nil }
        }

        func peek() -> [Change] {
            slots.compactMap { $0?.change }
        }

        mutating func take() -> [Change] {
            defer {
                slots.removeAll()
                latest.removeAll()
                live = 0
            }
            return slots.compactMap { $0?.change }
        }
    }

    /// Runs `body` with the tree; see "Who owns what".
    private func confined<Result>(_ body: () -> Result) -> Result {
        #if DEBUG
        let overlapping = tree.inUse.exchange(true, ordering: .acquiringAndReleasing)
        assert(!overlapping, "a DirectoryTreeWatcher's tree was used by two threads at once")
        defer {
            assertInvariants()
            tree.inUse.store(false, ordering: .releasing)
        }
        #endif
        return body()
    }

    #if DEBUG
    private func assertInvariants() {
        for (key, departed) in tree.departed {
            assert(tree.directories[key] == nil, "a watch both watched and departed")
            if let move = departed.move { assert(tree.pendingMoves[move] != nil, "a departed directory's move is not pending") }
        }
    }
    #endif

    private func record(_ kind: Change.Kind, _ path: RawPath, isDirectory: Bool) {
        tree.batch.record(Change(path: path.string, kind: kind, isDirectory: isDirectory), at: path)
    }

    private func handle(_ event: InotifyEvent, on watch: ObjectIdentifier) {
        if let anchor = tree.anchor, ObjectIdentifier(anchor.lease.watch) == watch {
            // Something appeared in the ancestor we wait in (maybe the way to the root), or
            // the ancestor itself went: look again.
            if let name = event.name {
                // Only the next component on the way to the root matters.
                if !event.mask.isDisjoint(with: [.create, .movedTo]), rootPath.isWithin(anchor.path.appending(name)) {
                    anchorRoot()
                }
            } else if !event.mask.isDisjoint(with: [.ignored, .unmount, .moveSelf, .deleteSelf]) {
                anchorRoot()
            }
            return
        }
        if let anchor = tree.anchor, let guardLease = anchor.guardLease, ObjectIdentifier(guardLease.watch) == watch {
            if Self.isRemoval(of: anchor.path, event) { anchorRoot() }
            return
        }
        if let sentinel = tree.sentinel, ObjectIdentifier(sentinel.watch) == watch {
            if Self.isRemoval(of: rootPath, event) { rootWentAway() }
            return
        }
        if let departed = tree.departed[watch] {
            handleDeparted(event, on: watch, departed)
            return
        }
        guard let directory = tree.directories[watch] else { return }
        let isRoot = directory.parent == watch
        let mask = event.mask
        let isDirectory = mask.contains(.isDirectory)
        guard let name = event.name else {
            // About the directory itself.
            if mask.contains(.ignored) || mask.contains(.unmount) {
                drop(watch)
                if isRoot { rootWentAway() }
            } else if isRoot {
                if !mask.isDisjoint(with: [.deleteSelf, .moveSelf]) {
                    rootWentAway()
                } else if mask.contains(.attrib) {
                    record(.attributesChanged, rootPath, isDirectory: true)
                }
            }
            return
        }
        // A directory whose chain is broken (an ancestor let go) is about to be let go too.
        guard let path = self.path(of: watch)?.appending(name) else { return }
        if mask.contains(.create) {
            record(.created, path, isDirectory: isDirectory)
            if isDirectory { addTree(path, parent: watch, reportContents: true) }
        }
        if mask.contains(.movedFrom) { movedFrom(path, in: watch, name: name, cookie: event.cookie, isDirectory: isDirectory) }
        if mask.contains(.movedTo) { movedTo(path, in: watch, name: name, cookie: event.cookie, isDirectory: isDirectory) }
        if mask.contains(.delete) {
            record(.removed, path, isDirectory: isDirectory)
        }
        if !mask.isDisjoint(with: [.modify, .closeWrite]), !isDirectory {
            record(.modified, path, isDirectory: false)
        }
        if mask.contains(.attrib) {
            record(.attributesChanged, path, isDirectory: isDirectory)
        }
    }

    /// An event on a directory that was moved away: held for its move, or (outside) not
    /// reported; its watch gone: let go.
    private func handleDeparted(_ event: InotifyEvent, on watch: ObjectIdentifier, _ departed: Departed) {
        if !event.mask.isDisjoint(with: [.ignored, .unmount]) {
            dropDeparted(watch)
            return
        }
        guard let cookie = departed.move else { return }
        if tree.pendingMoves[cookie]!.held.count < Self.heldEventLimit {
            tree.pendingMoves[cookie]!.held.append((watch, event))
        } else {
            tree.pendingMoves[cookie]!.letSomeGo = true
        }
    }

    /// `name` left the directory `parent` (at `path`).
    private func movedFrom(_ path: RawPath, in parent: ObjectIdentifier, name: [UInt8], cookie: UInt32, isDirectory: Bool) {
        let moved = isDirectory ? children(named: PathComponent(name), in: parent) : []
        guard cookie != 0 else {
            record(.removed, path, isDirectory: isDirectory)
            for key in subtrees(of: moved) { drop(key) }
            return
        }
        let slot = tree.batch.record(Change(path: path.string, kind: .removed, isDirectory: isDirectory), at: path)
        tree.pendingMoves[cookie] = PendingMove(path: path, isDirectory: isDirectory, directories: moved, slot: slot)
        for key in subtrees(of: moved) {
            guard let directory = tree.directories.removeValue(forKey: key) else { continue }
            tree.departed[key] = Departed(directory: directory, move: cookie)
        }
    }

    /// `name` came into the directory `parent` (at `path`).
    private func movedTo(_ path: RawPath, in parent: ObjectIdentifier, name: [UInt8], cookie: UInt32, isDirectory: Bool) {
        guard cookie != 0, let move = tree.pendingMoves.removeValue(forKey: cookie) else {
            // Came in from outside (or back): new to the tree, with what is in it.
            record(.created, path, isDirectory: isDirectory)
            if isDirectory { addTree(path, parent: parent, reportContents: true) }
            return
        }
        tree.batch.retract(move.slot)
        record(.renamed(from: move.path.string), path, isDirectory: isDirectory)
        guard isDirectory else { return }
        // Its watches follow it: the directory that moved hangs under its new parent with
        // its new name, and the ones below it come back with it.
        var returning = Set<ObjectIdentifier>()
        for (key, departed) in tree.departed where departed.move == cookie {
            var directory = departed.directory
            if move.directories.contains(key) {
                directory.parent = parent
                directory.name = PathComponent(name)
            }
            tree.departed[key] = nil
            tree.directories[key] = directory
            returning.insert(key)
        }
        if move.letSomeGo {
            record(.mustRescan, path, isDirectory: true)
        } else {
            for (watch, event) in move.held where returning.contains(watch) { handle(event, on: watch) }
        }
        // Directories below that were not watched yet (a move during a walk) are found now.
        addTree(path, parent: parent, reportContents: false)
    }

    /// A batch held for a busy loop that grew past the limit becomes `.mustRescan` of the
    /// root: the consumer compares the tree with what it knows, and memory stays bounded.
    /// Pending moves keep pairing; their placeholders went with the collapsed batch.
    private func boundHeldBatch() {
        guard tree.held, tree.batch.count > heldChangeLimit else { return }
        _ = tree.batch.take()
        for cookie in Array(tree.pendingMoves.keys) { tree.pendingMoves[cookie]?.slot = Int.max }
        record(.mustRescan, rootPath, isDirectory: true)
    }

    private func armTimer() {
        // A held batch waits for the loop, not for the timer: only moves need a flush then.
        let batchDue = !tree.batch.isEmpty && !tree.held
        guard !tree.timerArmed, batchDue || !tree.pendingMoves.isEmpty || !tree.departed.isEmpty else { return }
        tree.timerArmed = true
        let nanoseconds = latency.components.seconds * 1_000_000_000 + latency.components.attoseconds / 1_000_000_000
        let delay = Duration.nanoseconds(max(nanoseconds, 0))
        timer.schedule(deadline: .now() + delay, leeway: delay / 10)
    }

    /// The timer fired (on the processing queue): moves without a second half left the
    /// tree; the batch goes to the handler and the `changes` loop.
    private func flush() {
        confined {
            tree.timerArmed = false
            guard !tree.stopped else { return }
            tree.flushes += 1
            for (key, departed) in tree.departed where departed.move == nil && departed.leftAt < tree.flushes {
                dropDeparted(key)
            }
            for (key, departed) in tree.departed where departed.move != nil {
                tree.departed[key]?.move = nil
                tree.departed[key]?.leftAt = tree.flushes
            }
            tree.pendingMoves.removeAll()
        }
        deliver()
        confined { if !tree.stopped { armTimer() } }  // outside directories are let go at the next flush
    }

    /// On the processing queue: hands the batch to the handler and the `changes` loop,
    /// unless the loop is busy; then the batch is held and merges what comes next, until
    /// the loop's `next()` asks for it (with a job that calls this again).
    private func deliver() {
        let ready = confined { !tree.stopped && !tree.batch.isEmpty }
        guard ready else { return }
        let offer = changesChannel.offer()
        let batch = confined { () -> [Change] in
            if case .hold = offer {
                tree.held = true
                boundHeldBatch()
                return []
            }
            tree.held = false
            return tree.batch.take()
        }
        switch offer {
        case .hold, .finished:
            return
        case .handlerOnly, .consumer:
            let handler = control.locked { $0.handler }
            handler?(batch)
            if case .consumer(let waiting) = offer { waiting.resume(returning: batch) }
        }
    }

    private enum TreeResult {
        case watched, missing, failed
    }

    /// Watches `top` (in the directory `parent`; nil: `top` is the root) and every directory
    /// below it; says whether `top` itself is watched, missing (it does not exist, any
    /// more) or could not be watched (reported). A departed directory met on the way is
    /// watched again, where it is now.
    ///
    /// A tree of thousands of directories is the common case at `activate()`: each directory
    /// costs its inotify_add_watch, one open and its getdents64 calls into one buffer for the
    /// whole walk, a path only for what goes on the stack or into the batch, and a record
    /// of 32 bytes in `tree.directories`. A directory met twice (a bind mount of an
    /// ancestor: a loop) is known by its watch, already recorded under another path.
    @discardableResult
    private func addTree(_ top: RawPath, parent: ObjectIdentifier?, reportContents: Bool) -> TreeResult {
        var stack: [(path: RawPath, parent: ObjectIdentifier?)] = [(top, parent)]
        var topResult = TreeResult.missing
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: Self.listingBufferSize, alignment: 8)
        defer { buffer.deallocate() }
        var walked = 0
        while let (directoryPath, parentKey) = stack.popLast() {
            walked += 1
            // A cancelled watcher's walk stops early; the teardown job that follows lets go.
            if walked % 256 == 0, isCancelled { break }
            let watch: InotifyWatch
            do throws(EventSourceError) {
                watch = try hub.acquireUnpinnedWatch(directory: directoryPath, subject: subject, mask: Self.observedMask)
            } catch {
                if error.code == ENOENT || error.code == ENOTDIR { continue }  // gone again, or not a directory
                if directoryPath == top { topResult = .failed }
                notWatched(directoryPath, code: error.code)
                if error.code == ENOSPC {
                    // The limit stays reached for the rest: say so once per directory left.
                    for rest in stack { notWatched(rest.path, code: error.code) }
                    break
                }
                continue
            }
            let key = ObjectIdentifier(watch)
            if directoryPath == top { topResult = .watched }
            let name = parentKey == nil ? PathComponent.none : PathComponent(directoryPath.lastComponent)
            if tree.departed.removeValue(forKey: key) != nil {
                // Moved out and back in: the same directory, watched as it is, where it is.
                hub.release(watch)
                tree.directories[key] = Directory(name: name, watch: watch, parent: parentKey ?? key)
            } else if tree.directories[key] != nil {
                hub.release(watch)
                if let known = path(of: key) {
                    // The same directory under another path (a bind mount of an ancestor): stop.
                    guard known == directoryPath else { continue }
                } else {
                    // Its chain broke (an ancestor let go, a move half seen): it is here.
                    tree.directories[key] = Directory(name: name, watch: watch, parent: parentKey ?? key)
                }
            } else {
                hub.observe(self, mask: Self.observedMask, on: watch)
                tree.directories[key] = Directory(name: name, watch: watch, parent: parentKey ?? key)
            }
            walkHook?(directoryPath.string)
            // List it after the watch exists: nothing created meanwhile is missed.
            let descriptor = directoryPath.withCString { lull_open_directory(AT_FDCWD, $0) }
            guard descriptor >= 0 else { continue }  // gone again: its IN_IGNORED follows
            // A read error ends the listing, as the end does (a directory removed meanwhile).
            while case let length = lull_read_directory_entries(descriptor, buffer, UInt(Self.listingBufferSize)), length > 0 {
                var offset = 0
                var entryIsDirectory: Int32 = 0
                while let name = lull_next_directory_entry(buffer, length, &offset, &entryIsDirectory) {
                    var isDirectory = entryIsDirectory == 1
                    if entryIsDirectory < 0 {
                        var status = lull_object_status()
                        isDirectory = lull_object_status_at(descriptor, name, &status) == 0 && status.is_directory != 0
                    }
                    guard isDirectory || reportContents else { continue }
                    let entry = directoryPath.appending(UnsafeRawBufferPointer(start: name, count: strlen(name)))
                    if reportContents { record(.created, entry, isDirectory: isDirectory) }
                    if isDirectory { stack.append((entry, key)) }
                }
            }
            close(descriptor)
        }
        return topResult
    }

    /// The getdents64 buffer of a walk (the size glibc's readdir uses).
    private static let listingBufferSize = 32 * 1_024

    /// `path` could not be watched: reported, and kept as `error`.
    private func notWatched(_ path: RawPath, code: Int32) {
        let reason = FileSystemErrors.reason(code: code, step: .watch)
        let error = EventSourceError(subject: FileSystemErrors.subject(kind: "DirectoryTreeWatcher", queueLabel: processing.label, path: path.string),
                                     code: code, reason: reason)
        control.locked { $0.lastError = error }
        record(.notWatched(reason: reason), path, isDirectory: true)
    }

    // MARK: The records' chains

    /// The path of a watched directory, built from its chain of parents; nil when the chain
    /// is broken (an ancestor was let go: its own removal or move is on its way).
    private func path(of key: ObjectIdentifier) -> RawPath? {
        guard let directory = tree.directories[key] else { return nil }
        if directory.parent == key { return rootPath }
        var names = [directory.name]
        var current = directory.parent
        while true {
            // A chain longer than the table would be a loop.
            guard let next = tree.directories[current], names.count <= tree.directories.count else { return nil }
            if next.parent == current { break }
            names.append(next.name)
            current = next.parent
        }
        var path = rootPath
        for name in names.reversed() { path.append(name) }
        return path
    }

    /// Whether the directory `key` is `ancestor` or below it.
    private func isWithin(_ key: ObjectIdentifier, _ ancestor: ObjectIdentifier) -> Bool {
        var current = key
        for _ in 0...tree.directories.count {
            if current == ancestor { return true }
            guard let directory = tree.directories[current], directory.parent != current else { return false }
            current = directory.parent
        }
        return false
    }

    /// The watched directories `name` in the directory `parent`: one, or more while one
    /// that was replaced is not let go yet.
    private func children(named name: PathComponent, in parent: ObjectIdentifier) -> [ObjectIdentifier] {
        tree.directories.compactMap { $0.value.parent == parent && $0.key != parent && $0.value.name == name ? $0.key : nil }
    }

    /// `tops` and every watched directory below them.
    private func subtrees(of tops: [ObjectIdentifier]) -> [ObjectIdentifier] {
        guard !tops.isEmpty else { return [] }
        return tree.directories.keys.filter { key in tops.contains { isWithin(key, $0) } }
    }

    private func drop(_ key: ObjectIdentifier) {
        guard let directory = tree.directories.removeValue(forKey: key) else { return }
        hub.stopObserving(self, on: directory.watch)
        hub.release(directory.watch)
    }

    private func dropDeparted(_ key: ObjectIdentifier) {
        guard let departed = tree.departed.removeValue(forKey: key) else { return }
        hub.stopObserving(self, on: departed.directory.watch)
        hub.release(departed.directory.watch)
    }

    /// The root was removed or moved away: report it, let every watch go, wait for it.
    private func rootWentAway() {
        guard tree.anchor == nil else { return }
        record(.removed, rootPath, isDirectory: true)
        for key in Array(tree.directories.keys) { drop(key) }
        for key in Array(tree.departed.keys) { dropDeparted(key) }
        tree.pendingMoves.removeAll()
        if let sentinel = tree.sentinel {
            tree.sentinel = nil
            hub.stopObserving(self, on: sentinel)
            sentinel.release()
        }
        anchorRoot()
    }

    /// Watches the nearest existing ancestor of the root for the next component to appear;
    /// when the root exists again, watches it and reports it created, with its contents.
    private func anchorRoot() {
        while true {
            if let anchor = tree.anchor {
                for lease in [anchor.lease] + (anchor.guardLease.map { [$0] } ?? []) {
                    hub.stopObserving(self, on: lease)
                    lease.release()
                }
                tree.anchor = nil
            }
            if Self.isDirectory(rootPath) {
                switch addTree(rootPath, parent: nil, reportContents: true) {
                case .watched:
                    record(.created, rootPath, isDirectory: true)
                    watchParent()
                    return
                case .failed:
                    return
                case .missing:
                    break
                }
            }
            // Find the nearest ancestor that exists and watch it.
            var ancestor = rootPath
            var anchored = false
            while let parent = ancestor.parent {
                ancestor = parent
                do throws(EventSourceError) {
                    let mask: InotifyMask = [.create, .movedTo, .moveSelf, .deleteSelf]
                    let lease = try hub.acquireUnpinned(directory: ancestor, subject: subject, mask: mask)
                    hub.observe(self, mask: mask, on: lease)
                    tree.anchor = (ancestor, lease, watchForRemoval(of: ancestor))
                    anchored = true
                    break
                } catch {
                    if error.code == ENOENT || error.code == ENOTDIR { continue }
                    let reason = FileSystemErrors.reason(code: error.code, step: .watch)
                    let failure = EventSourceError(subject: subject, code: error.code, reason: reason)
                    control.locked { $0.lastError = failure }
                    record(.notWatched(reason: reason), rootPath, isDirectory: true)
                    return
                }
            }
            guard anchored else { return }
            // The next directory on the way to the root (or the root) may have appeared
            // before the anchor's watch existed, unseen by it: then look again from there.
            if !Self.isDirectory(rootPath.nextStep(below: ancestor)) { return }
        }
    }

    private static func isDirectory(_ path: RawPath) -> Bool {
        var status = lull_object_status()
        return path.withCString { lull_object_status_at(AT_FDCWD, $0, &status) } == 0 && status.is_directory != 0
    }

    /// Watches the root's parent for the root's removal or move (see `Tree.sentinel`).
    private func watchParent() {
        guard tree.sentinel == nil else { return }
        tree.sentinel = watchForRemoval(of: rootPath)
    }

    private static let removalMask: InotifyMask = [.delete, .movedFrom, .moveSelf, .deleteSelf]

    /// A watch on the parent of `path` that reports `path`'s removal or move (see
    /// `isRemoval`); nil for "/" or when it cannot be had.
    private func watchForRemoval(of path: RawPath) -> InotifyLease? {
        guard let parent = path.parent else { return nil }
        do throws(EventSourceError) {
            let lease = try hub.acquireUnpinned(directory: parent, subject: subject, mask: Self.removalMask)
            hub.observe(self, mask: Self.removalMask, on: lease)
            return lease
        } catch {
            // Without it, a removal is still seen once nothing keeps the directory open.
            RuntimeLog.once("tree-watcher-parent-\(error.code)") {
                "DirectoryTreeWatcher: cannot watch the parent of \(path.string) (\(error)); its removal while it is open elsewhere is reported when it is closed"
            }
            return nil
        }
    }

    /// Whether `event`, from the watch on `path`'s parent, says that `path` is no longer
    /// there: its entry removed or moved away, or the parent itself gone or moved.
    private static func isRemoval(of path: RawPath, _ event: InotifyEvent) -> Bool {
        if let name = event.name {
            return name.elementsEqual(path.lastComponent) && !event.mask.isDisjoint(with: [.delete, .movedFrom])
        }
        return !event.mask.isDisjoint(with: [.moveSelf, .deleteSelf, .ignored, .unmount])
    }

    /// After an overflow: say so, forget directories that are gone, and walk the tree for
    /// directories not yet watched (taking back departed ones it meets).
    private func rescan() {
        guard tree.anchor == nil else {
            anchorRoot()
            return
        }
        record(.mustRescan, rootPath, isDirectory: true)
        // Every path is read before any directory is let go (which breaks its children's chain).
        let gone = tree.directories.keys.filter { key in path(of: key).map { !Self.isDirectory($0) } ?? true }
        for key in gone { drop(key) }
        if addTree(rootPath, parent: nil, reportContents: false) == .missing { rootWentAway() }
    }
}
