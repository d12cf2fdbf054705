import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Watches a directory tree and reports which paths changed and how, in batches coalesced
/// over a latency (as FSEvents' latency does), on a target queue or in a `for await` loop.
///
/// ```swift
/// let watcher = try DirectoryTreeWatcher(path: "/srv/site", latency: .milliseconds(200), queue: queue)
/// watcher.activate()
/// for await batch in watcher.changes {
///     for change in batch { print(change) }     // "created /srv/site/new.html", ...
/// }
/// ```
///
/// - Every directory of the tree is watched (inotify watches are per directory), also those
///   created or moved in after `activate()`; their contents found when they are first
///   scanned are reported as `.created` when the directory itself was just created (an
///   entry made between the `mkdir` and the watch is not missed).
/// - Symbolic links are reported but never followed; a directory reached a second time
///   (a bind mount of an ancestor) is not descended into again, so loops end.
/// - A rename inside the tree is one `.renamed(from:)` change when inotify pairs its two
///   halves (same cookie) before the batch is delivered; a move out of the tree is
///   `.removed`, a move in `.created`.
/// - When the root is removed or moved away, `.removed` is reported for it and the watcher
///   waits, watching the nearest existing ancestor, for a directory to appear at the path
///   again; then it reports it `.created` with its contents and goes on.
/// - If the kernel's queue overflows, `.mustRescan` is reported for the root (like FSEvents'
///   MustScanSubDirs) and the tree is walked again for directories not yet watched.
/// - If a directory cannot be watched (the per-user watch limit reached partway), it is
///   reported as `.notWatched(reason:)` with the reason and the sysctl to raise, and
///   `error` keeps it; the rest of the tree goes on being watched.
///
/// Built on Lull: the watches are leases on the process's inotify instance (`InotifyHub`),
/// events are handled on a private serial queue that targets `queue`, and batches are cut by
/// a timer source with a leeway of a tenth of the latency, so that the watcher's wake-ups
/// coalesce with the process's other timers.
public final class DirectoryTreeWatcher: Sendable {
    /// One change of one path.
    public struct Change: Sendable, Hashable, CustomStringConvertible {
        /// What happened to a path.
        public enum Kind: Sendable, Hashable {
            /// Created, or moved into the tree (also each entry found in a directory just created).
            case created
            /// Its contents were written (a file).
            case modified
            /// Its permissions, owner, times or link count changed.
            case attributesChanged
            /// Removed, or moved out of the tree.
            case removed
            /// Moved inside the tree: `path` is the new path.
            case renamed(from: String)
            /// Events may have been lost under `path`: compare it with what you know.
            case mustRescan
            /// `path` (and what is below it) is not watched, for `reason`.
            case notWatched(reason: String)
        }

        /// The absolute path (for `.renamed`, the new one).
        public let path: String
        /// What happened.
        public let kind: Kind
        /// Whether the path is (or was) a directory.
        public let isDirectory: Bool

        /// A change, as the watcher reports it (for tests and replays).
        public init(path: String, kind: Kind, isDirectory: Bool) {
            self.path = path
            self.kind = kind
            self.isDirectory = isDirectory
        }

        /// "created /path", "renamed /old -> /new", ...
        public var description: String {
            switch kind {
            case .created: "created \(path)"
            case .modified: "modified \(path)"
            case .attributesChanged: "attributes changed \(path)"
            case .removed: "removed \(path)"
            case .renamed(let from): "renamed \(from) -> \(path)"
            case .mustRescan: "must rescan \(path)"
            case .notWatched(let reason): "not watched \(path): \(reason)"
            }
        }
    }

    private let core: TreeWatcherCore

    /// The root of the tree (as given, without trailing slashes).
    public var path: String { core.root }
    /// How long a change waits for others before its batch is delivered.
    public var latency: Duration { core.latency }

    /// Checks that `path` is a directory that can be watched; watching starts at
    /// `activate()`. Throws an `EventSourceError` naming the path and the reason.
    public init(path: String, latency: Duration = .milliseconds(100), queue: WorkQueue? = nil) throws {
        core = try TreeWatcherCore(path: path, latency: latency, queue: queue, hub: .shared)
    }

    init(path: String, latency: Duration, queue: WorkQueue?, hub: InotifyHub) throws(EventSourceError) {
        core = try TreeWatcherCore(path: path, latency: latency, queue: queue, hub: hub)
    }

    deinit {
        core.cancel()
    }

    /// The handler gets each batch, on `queue`; batches delivered while no handler is set
    /// go to `changes` only.
    public func setEventHandler(_ handler: (@Sendable ([Change]) -> Void)?) {
        core.setHandler(handler)
    }

    /// The batches as an asynchronous sequence (one consumer), from its first use on; it
    /// finishes when the watcher is cancelled.
    public var changes: AsyncStream<[Change]> { core.stream() }

    /// Watches the tree (synchronously: a change made after this returns is reported).
    public func activate() { core.activate() }

    /// Stops watching and finishes `changes`; a batch being delivered completes.
    public func cancel() { core.cancel() }

    /// Whether `cancel()` was called (or the watcher was released).
    public var isCancelled: Bool { core.isCancelled }

    /// The last error met while watching (a directory that could not be watched), or nil.
    public var error: EventSourceError? { core.lastError }
}

/// The watcher's state and logic; the hub holds it (as an observer) while it watches, the
/// program holds the `DirectoryTreeWatcher`, whose release cancels it.
final class TreeWatcherCore: InotifyObserver {
    typealias Change = DirectoryTreeWatcher.Change

    static let observedMask: InotifyMask = [.create, .delete, .movedFrom, .movedTo, .modify, .closeWrite,
                                            .attrib, .deleteSelf, .moveSelf]

    let root: String
    let latency: Duration
    let hub: InotifyHub
    /// Serial; targets the program's queue. Events are handled and batches delivered on it.
    let processing: WorkQueue
    let timer: TimerSource
    private let subject: String

    private struct Directory {
        var path: String
        let lease: InotifyLease
    }

    private struct State {
        var activated = false
        var cancelled = false
        var directories: [ObjectIdentifier: Directory] = [:]
        /// Moves whose MOVED_FROM came and MOVED_TO not yet: cookie → old path.
        var pendingMoves: [UInt32: (path: String, isDirectory: Bool)] = [:]
        var pending: [Change] = []
        var pendingIndex: [String: Int] = [:]
        var timerArmed = false
        /// While the root is missing: the watch on its nearest existing ancestor.
        /// `guardLease` watches the anchor's parent: a removed directory that something
        /// still holds (as a removed root held open holds its parent) gets no event itself.
        var anchor: (path: String, lease: InotifyLease, guardLease: InotifyLease?)?
        /// While the root is watched: the watch on its parent, which tells when the root is
        /// removed or moved even while it is open somewhere (then the root's own watch
        /// hears nothing until it is closed).
        var sentinel: InotifyLease?
        var handler: (@Sendable ([Change]) -> Void)?
        var continuation: AsyncStream<[Change]>.Continuation?
        var stream: AsyncStream<[Change]>?
        var lastError: EventSourceError?
    }

    private let state = Mutex<State>(State())

    init(path: String, latency: Duration, queue: WorkQueue?, hub: InotifyHub) throws(EventSourceError) {
        var trimmed = path
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed.removeLast() }
        // Symbolic links are never followed inside the tree; the root's are resolved once.
        if let resolved = realpath(trimmed, nil) {
            trimmed = String(cString: resolved)
            free(resolved)
        }
        root = trimmed
        self.latency = latency
        self.hub = hub
        let target = queue ?? WorkQueue.global()
        subject = FileSystemErrors.subject(kind: "DirectoryTreeWatcher", queueLabel: target.label, path: trimmed)
        var status = lull_object_status()
        let pin = lull_open_object(trimmed, 1)
        guard pin >= 0 else { throw FileSystemErrors.error(subject, code: -pin, step: .open) }
        let statusError = lull_object_status_of(pin, &status)
        close(pin)
        guard statusError == 0 else { throw FileSystemErrors.error(subject, code: statusError, step: .open) }
        guard status.is_directory != 0 else {
            throw EventSourceError(subject: subject, code: ENOTDIR, reason: String(cString: strerror(ENOTDIR)))
        }
        processing = WorkQueue(label: "lull.directory-tree-watcher", target: target)
        timer = EventSource.makeTimerSource(queue: processing)
    }

    var isCancelled: Bool { state.locked { $0.cancelled } }
    var lastError: EventSourceError? { state.locked { $0.lastError } }

    func setHandler(_ handler: (@Sendable ([Change]) -> Void)?) {
        let replaced = state.locked { state -> (@Sendable ([Change]) -> Void)? in
            defer { state.handler = state.cancelled ? nil : handler }
            return state.handler
        }
        _ = replaced
    }

    func stream() -> AsyncStream<[Change]> {
        state.locked { state in
            if let stream = state.stream { return stream }
            let (stream, continuation) = AsyncStream<[Change]>.makeStream()
            state.stream = stream
            if state.cancelled {
                continuation.finish()
            } else {
                state.continuation = continuation
            }
            return stream
        }
    }

    func activate() {
        timer.setEventHandler { [self] in flush() }
        let first = state.locked { state -> Bool in
            guard !state.activated, !state.cancelled else { return false }
            state.activated = true
            return true
        }
        guard first else { return }
        timer.activate()
        state.locked { state in
            switch addTree(root, reportContents: false, &state) {
            case .watched: watchParent(&state)
            case .missing: anchorRoot(&state)
            case .failed: break
            }
            armTimer(&state)  // directories that could not be watched are reported at once
        }
    }

    func cancel() {
        let (leases, continuation) = state.locked { state -> ([InotifyLease], AsyncStream<[Change]>.Continuation?) in
            guard !state.cancelled else { return ([], nil) }
            state.cancelled = true
            var leases = state.directories.values.map(\.lease)
            if let anchor = state.anchor { leases += [anchor.lease] + (anchor.guardLease.map { [$0] } ?? []) }
            if let sentinel = state.sentinel { leases.append(sentinel) }
            state.directories.removeAll()
            state.anchor = nil
            state.sentinel = nil
            state.handler = nil
            state.pending.removeAll()
            state.pendingIndex.removeAll()
            defer { state.continuation = nil }
            return (leases, state.continuation)
        }
        for lease in leases {
            hub.stopObserving(self, on: lease)
            lease.release()
        }
        timer.cancel()
        // A timer never activated delivers its cancellation (and lets its handler go) only
        // once activated.
        timer.activate()
        continuation?.finish()
    }

    // MARK: Events (from the hub, on the draining thread)

    func inotifyEvents(_ events: [(watch: InotifyWatch, event: InotifyEvent)]) {
        processing.async { [self] in
            state.locked { state in
                guard !state.cancelled else { return }
                for (watch, event) in events { handle(event, on: ObjectIdentifier(watch), &state) }
                armTimer(&state)
            }
        }
    }

    func inotifyOverflowed() {
        processing.async { [self] in
            state.locked { state in
                guard !state.cancelled else { return }
                rescan(&state)
                armTimer(&state)
            }
        }
    }

    // MARK: Under the lock, on the processing queue (or in activate)

    private func handle(_ event: InotifyEvent, on watch: ObjectIdentifier, _ state: inout State) {
        if let anchor = state.anchor, ObjectIdentifier(anchor.lease.watch) == watch {
            // Something appeared in the ancestor we wait in (maybe the way to the root), or
            // the ancestor itself went: look again.
            if let name = event.name {
                // Only the next component on the way to the root matters.
                let candidate = anchor.path == "/" ? "/\(name)" : "\(anchor.path)/\(name)"
                if !event.mask.isDisjoint(with: [.create, .movedTo]), root == candidate || root.hasPrefix(candidate + "/") {
                    anchorRoot(&state)
                }
            } else if !event.mask.isDisjoint(with: [.ignored, .unmount, .moveSelf, .deleteSelf]) {
                anchorRoot(&state)
            }
            return
        }
        if let anchor = state.anchor, let guardLease = anchor.guardLease, ObjectIdentifier(guardLease.watch) == watch {
            if Self.isRemoval(of: anchor.path, event) { anchorRoot(&state) }
            return
        }
        if let sentinel = state.sentinel, ObjectIdentifier(sentinel.watch) == watch {
            if Self.isRemoval(of: root, event) { rootWentAway(&state) }
            return
        }
        guard let directory = state.directories[watch] else { return }
        let mask = event.mask
        let isDirectory = mask.contains(.isDirectory)
        guard let name = event.name else {
            // About the directory itself.
            if mask.contains(.ignored) || mask.contains(.unmount) {
                drop(watch, &state)
                if directory.path == root { rootWentAway(&state) }
            } else if directory.path == root {
                if !mask.isDisjoint(with: [.deleteSelf, .moveSelf]) {
                    rootWentAway(&state)
                } else if mask.contains(.attrib) {
                    record(Change(path: root, kind: .attributesChanged, isDirectory: true), &state)
                }
            }
            return
        }
        let path = directory.path == "/" ? "/\(name)" : "\(directory.path)/\(name)"
        if mask.contains(.create) {
            record(Change(path: path, kind: .created, isDirectory: isDirectory), &state)
            if isDirectory { _ = addTree(path, reportContents: true, &state) }
        }
        if mask.contains(.movedFrom) {
            if event.cookie != 0 {
                state.pendingMoves[event.cookie] = (path, isDirectory)
            } else {
                movedOut(path, isDirectory: isDirectory, &state)
            }
        }
        if mask.contains(.movedTo) {
            if let from = state.pendingMoves.removeValue(forKey: event.cookie) {
                record(Change(path: path, kind: .renamed(from: from.path), isDirectory: isDirectory), &state)
                if isDirectory { rebase(from: from.path, to: path, &state) }
            } else {
                record(Change(path: path, kind: .created, isDirectory: isDirectory), &state)
                if isDirectory { _ = addTree(path, reportContents: false, &state) }
            }
        }
        if mask.contains(.delete) {
            record(Change(path: path, kind: .removed, isDirectory: isDirectory), &state)
        }
        if !mask.isDisjoint(with: [.modify, .closeWrite]), !isDirectory {
            record(Change(path: path, kind: .modified, isDirectory: false), &state)
        }
        if mask.contains(.attrib) {
            record(Change(path: path, kind: .attributesChanged, isDirectory: isDirectory), &state)
        }
    }

    /// Adds a change to the batch, coalescing repeats of one path.
    private func record(_ change: Change, _ state: inout State) {
        if let index = state.pendingIndex[change.path] {
            let earlier = state.pending[index].kind
            switch (earlier, change.kind) {
            case (.created, .modified), (.created, .attributesChanged),
                 (.modified, .modified), (.attributesChanged, .attributesChanged),
                 (.renamed, .modified), (.renamed, .attributesChanged),
                 (.created, .created), (.mustRescan, .mustRescan):
                return
            default:
                break
            }
        }
        state.pendingIndex[change.path] = state.pending.count
        state.pending.append(change)
    }

    private func armTimer(_ state: inout State) {
        guard !state.timerArmed, !state.pending.isEmpty || !state.pendingMoves.isEmpty else { return }
        state.timerArmed = true
        let nanoseconds = latency.components.seconds * 1_000_000_000 + latency.components.attoseconds / 1_000_000_000
        let delay = Duration.nanoseconds(max(nanoseconds, 0))
        timer.schedule(deadline: .now() + delay, leeway: delay / 10)
    }

    /// The timer fired (on the processing queue): moves without a second half left the
    /// tree; the batch goes to the handler and the stream.
    private func flush() {
        let (batch, handler, continuation) = state.locked { state -> ([Change], (@Sendable ([Change]) -> Void)?, AsyncStream<[Change]>.Continuation?) in
            state.timerArmed = false
            guard !state.cancelled else { return ([], nil, nil) }
            for (_, move) in state.pendingMoves { movedOut(move.path, isDirectory: move.isDirectory, &state) }
            state.pendingMoves.removeAll()
            defer {
                state.pending.removeAll()
                state.pendingIndex.removeAll()
            }
            return (state.pending, state.handler, state.continuation)
        }
        guard !batch.isEmpty else { return }
        handler?(batch)
        continuation?.yield(batch)
    }

    private enum TreeResult {
        case watched, missing, failed
    }

    /// Watches `top` and every directory below it; says whether `top` itself is watched,
    /// missing (it does not exist, any more) or could not be watched (reported).
    ///
    /// A tree of thousands of directories is the common case at `activate()`: each directory
    /// costs its inotify_add_watch, one open and its getdents64 calls into one buffer for the
    /// whole walk, and a path string only for what goes on the stack or into the batch.
    @discardableResult
    private func addTree(_ top: String, reportContents: Bool, _ state: inout State) -> TreeResult {
        var stack = [top]
        var visited = Set<ObjectIdentifier>()
        var topResult = TreeResult.missing
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: Self.listingBufferSize, alignment: 8)
        defer { buffer.deallocate() }
        while let directoryPath = stack.popLast() {
            let lease: InotifyLease
            do throws(EventSourceError) {
                lease = try hub.acquireUnpinned(directory: directoryPath, subject: subject, mask: Self.observedMask)
            } catch {
                if error.code == ENOENT || error.code == ENOTDIR { continue }  // gone again, or not a directory
                if directoryPath == top { topResult = .failed }
                let reason = FileSystemErrors.reason(code: error.code, step: .watch)
                state.lastError = EventSourceError(subject: FileSystemErrors.subject(kind: "DirectoryTreeWatcher", queueLabel: processing.label, path: directoryPath),
                                                   code: error.code, reason: reason)
                record(Change(path: directoryPath, kind: .notWatched(reason: reason), isDirectory: true), &state)
                if error.code == ENOSPC {
                    // The limit stays reached for the rest: say so once per directory left.
                    for rest in stack { record(Change(path: rest, kind: .notWatched(reason: reason), isDirectory: true), &state) }
                    break
                }
                continue
            }
            let key = ObjectIdentifier(lease.watch)
            if directoryPath == top { topResult = .watched }
            guard visited.insert(key).inserted else {
                lease.release()  // reached twice in this walk: a loop
                continue
            }
            if let existing = state.directories[key] {
                lease.release()
                // The same directory under another path (a bind mount of an ancestor): stop.
                guard existing.path == directoryPath else { continue }
            } else {
                hub.observe(self, mask: Self.observedMask, on: lease)
                state.directories[key] = Directory(path: directoryPath, lease: lease)
            }
            // List it after the watch exists: nothing created meanwhile is missed.
            let descriptor = lull_open_directory(AT_FDCWD, directoryPath)
            guard descriptor >= 0 else { continue }  // gone again: its IN_IGNORED follows
            let prefix = directoryPath == "/" ? "/" : directoryPath + "/"
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
                    let entry = prefix + String(cString: name)
                    if reportContents { record(Change(path: entry, kind: .created, isDirectory: isDirectory), &state) }
                    if isDirectory { stack.append(entry) }
                }
            }
            close(descriptor)
        }
        return topResult
    }

    /// The getdents64 buffer of a walk (the size glibc's readdir uses).
    private static let listingBufferSize = 32 * 1_024

    /// A directory moved inside the tree: its watches keep following it, under new paths.
    private func rebase(from old: String, to new: String, _ state: inout State) {
        for (key, directory) in state.directories where directory.path == old || directory.path.hasPrefix(old + "/") {
            state.directories[key]?.path = new + directory.path.dropFirst(old.count)
        }
        // Directories below that were not watched yet (a move during a scan) are found now.
        _ = addTree(new, reportContents: false, &state)
    }

    /// `path` left the tree (moved out, or a move whose other half never came).
    private func movedOut(_ path: String, isDirectory: Bool, _ state: inout State) {
        record(Change(path: path, kind: .removed, isDirectory: isDirectory), &state)
        guard isDirectory else { return }
        for (key, directory) in state.directories where directory.path == path || directory.path.hasPrefix(path + "/") {
            drop(key, &state)
        }
    }

    private func drop(_ key: ObjectIdentifier, _ state: inout State) {
        guard let directory = state.directories.removeValue(forKey: key) else { return }
        hub.stopObserving(self, on: directory.lease)
        directory.lease.release()
    }

    /// The root was removed or moved away: report it, let every watch go, wait for it.
    private func rootWentAway(_ state: inout State) {
        guard state.anchor == nil else { return }
        record(Change(path: root, kind: .removed, isDirectory: true), &state)
        for key in Array(state.directories.keys) { drop(key, &state) }
        if let sentinel = state.sentinel {
            state.sentinel = nil
            hub.stopObserving(self, on: sentinel)
            sentinel.release()
        }
        state.pendingMoves.removeAll()
        anchorRoot(&state)
    }

    /// Watches the nearest existing ancestor of the root for the next component to appear;
    /// when the root exists again, watches it and reports it created, with its contents.
    private func anchorRoot(_ state: inout State) {
        while true {
            if let anchor = state.anchor {
                for lease in [anchor.lease] + (anchor.guardLease.map { [$0] } ?? []) {
                    hub.stopObserving(self, on: lease)
                    lease.release()
                }
                state.anchor = nil
            }
            var status = lull_object_status()
            if lull_object_status_at(AT_FDCWD, root, &status) == 0, status.is_directory != 0 {
                switch addTree(root, reportContents: true, &state) {
                case .watched:
                    record(Change(path: root, kind: .created, isDirectory: true), &state)
                    watchParent(&state)
                    return
                case .failed:
                    return
                case .missing:
                    break
                }
            }
            // Find the nearest ancestor that exists and watch it.
            var ancestor = root
            var anchored = false
            while let slash = ancestor.lastIndex(of: "/") {
                ancestor = slash == ancestor.startIndex ? "/" : String(ancestor[..<slash])
                do throws(EventSourceError) {
                    let mask: InotifyMask = [.create, .movedTo, .moveSelf, .deleteSelf]
                    let lease = try hub.acquireUnpinned(directory: ancestor, subject: subject, mask: mask)
                    hub.observe(self, mask: mask, on: lease)
                    state.anchor = (ancestor, lease, watchForRemoval(of: ancestor))
                    anchored = true
                    break
                } catch {
                    if error.code == ENOENT || error.code == ENOTDIR {
                        if ancestor == "/" { break }
                        continue
                    }
                    let reason = FileSystemErrors.reason(code: error.code, step: .watch)
                    state.lastError = EventSourceError(subject: subject, code: error.code, reason: reason)
                    record(Change(path: root, kind: .notWatched(reason: reason), isDirectory: true), &state)
                    return
                }
            }
            guard anchored else { return }
            // The next directory on the way to the root (or the root) may have appeared
            // before the anchor's watch existed, unseen by it: then look again from there.
            if lull_object_status_at(AT_FDCWD, nextStep(below: ancestor), &status) != 0 || status.is_directory == 0 { return }
        }
    }

    /// The path one component below `ancestor` on the way to the root.
    private func nextStep(below ancestor: String) -> String {
        let remainder = root.dropFirst(ancestor == "/" ? 1 : ancestor.count + 1)
        let component = remainder.prefix { $0 != "/" }
        return ancestor == "/" ? "/\(component)" : "\(ancestor)/\(component)"
    }

    /// Watches the root's parent for the root's removal or move (see `State.sentinel`).
    private func watchParent(_ state: inout State) {
        guard state.sentinel == nil else { return }
        state.sentinel = watchForRemoval(of: root)
    }

    private static let removalMask: InotifyMask = [.delete, .movedFrom, .moveSelf, .deleteSelf]

    /// A watch on the parent of `path` that reports `path`'s removal or move (see
    /// `isRemoval`); nil for "/" or when it cannot be had.
    private func watchForRemoval(of path: String) -> InotifyLease? {
        guard path != "/", let slash = path.lastIndex(of: "/") else { return nil }
        let parent = slash == path.startIndex ? "/" : String(path[..<slash])
        do throws(EventSourceError) {
            let lease = try hub.acquireUnpinned(directory: parent, subject: subject, mask: Self.removalMask)
            hub.observe(self, mask: Self.removalMask, on: lease)
            return lease
        } catch {
            // Without it, a removal is still seen once nothing keeps the directory open.
            RuntimeLog.once("tree-watcher-parent-\(error.code)") {
                "DirectoryTreeWatcher: cannot watch the parent of \(path) (\(error)); its removal while it is open elsewhere is reported when it is closed"
            }
            return nil
        }
    }

    /// Whether `event`, from the watch on `path`'s parent, says that `path` is no longer
    /// there: its entry removed or moved away, or the parent itself gone or moved.
    private static func isRemoval(of path: String, _ event: InotifyEvent) -> Bool {
        if let name = event.name {
            let last = path.split(separator: "/").last.map(String.init) ?? "/"
            return name == last && !event.mask.isDisjoint(with: [.delete, .movedFrom])
        }
        return !event.mask.isDisjoint(with: [.moveSelf, .deleteSelf, .ignored, .unmount])
    }

    /// After an overflow: say so, forget directories that are gone, and walk the tree for
    /// directories not yet watched.
    private func rescan(_ state: inout State) {
        guard state.anchor == nil else {
            anchorRoot(&state)
            return
        }
        record(Change(path: root, kind: .mustRescan, isDirectory: true), &state)
        for (key, directory) in state.directories {
            var status = lull_object_status()
            if lull_object_status_at(AT_FDCWD, directory.path, &status) != 0 || status.is_directory == 0 {
                drop(key, &state)
            }
        }
        if addTree(root, reportContents: false, &state) == .missing { rootWentAway(&state) }
    }
}
