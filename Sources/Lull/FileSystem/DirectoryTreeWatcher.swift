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
///   scanned are reported as `.created` when the directory itself just came (an entry made
///   between the `mkdir` and the watch is not missed).
/// - Symbolic links are reported but never followed; a directory reached a second time
///   (a bind mount of an ancestor) is not descended into again, so loops end.
/// - Moves: a rename inside the tree is one `.renamed(from:)` change (inotify's two halves
///   paired by their cookie); a move out of the tree is `.removed`, a move in `.created`
///   with the contents. Each change sits in the batch where it happened, so a batch ends in
///   the tree's state: a subtree moved out and straight back is "removed, created" and is
///   watched again. Halves without a partner are definite (the other end is outside the
///   tree). The state model (pending moves, departed subtrees, held events, re-walks) is in
///   docs/FileSystem.md.
/// - When the root is removed or moved away, `.removed` is reported for it and the watcher
///   waits, watching the nearest existing ancestor, for a directory to appear at the path
///   again; then it reports it `.created` with its contents and goes on.
/// - If the kernel's queue overflows, `.mustRescan` is reported for the root (like FSEvents'
///   MustScanSubDirs) and the tree is walked again for directories not yet watched; a
///   subtree whose events could not all be kept while it was between the halves of a move is
///   `.mustRescan` at its new path.
/// - If a directory cannot be watched (the per-user watch limit reached partway), it is
///   reported as `.notWatched(reason:)` with the reason and the sysctl to raise, and
///   `error` keeps it; the rest of the tree goes on being watched.
/// - Names need not be UTF-8: paths are kept as bytes, and reported as Strings in a lossless
///   form (bytes that are not UTF-8 become U+EF80...U+EFFF, one code point per byte; see
///   `fileSystemRepresentation(of:)`), so every directory is watched and every reported path
///   names its file.
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

        /// The absolute path (for `.renamed`, the new one), lossless for names that are not
        /// UTF-8: `DirectoryTreeWatcher.fileSystemRepresentation(of:)` gives its bytes.
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

    /// A watcher on `hub` whose batches go to `queue` (the public initializer picks the
    /// process runtime's); tests give a hook called in the walk as each directory is watched.
    init(path: String, latency: Duration, queue: WorkQueue, hub: InotifyHub,
         walkHook: (@Sendable (String) -> Void)? = nil,
         heldChangeLimit: Int = TreeWatcherCore.defaultHeldChangeLimit) throws(EventSourceError) {
        core = try TreeWatcherCore(path: path, latency: latency, queue: queue, hub: hub, walkHook: walkHook,
                                   heldChangeLimit: heldChangeLimit)
    }

    /// The core, for tests.
    var coreForTesting: TreeWatcherCore { core }

    /// The bytes a reported path stands for, NUL-terminated, for `open(2)` and the other
    /// calls that take a path: `open(DirectoryTreeWatcher.fileSystemRepresentation(of: change.path), O_RDONLY)`.
    ///
    /// Linux names are bytes; a path is reported as its UTF-8 where it is UTF-8, and each
    /// byte that is not part of valid UTF-8 as the code point U+EF00 + byte (U+EF80...U+EFFF,
    /// in the Private Use Area). This gives back exactly the bytes of every reported path
    /// (and of `renamed(from:)`); a String without those code points gives its UTF-8.
    public static func fileSystemRepresentation(of path: String) -> [CChar] {
        PathEncoding.bytes(of: path).map { CChar(bitPattern: $0) } + [0]
    }

    /// The String the watcher reports for a path's bytes (no NUL): to compare with what it
    /// reports, or to give a root whose name is not UTF-8 to `init(path:)`.
    public static func path(fileSystemRepresentation bytes: some Sequence<UInt8>) -> String {
        PathEncoding.string(of: Array(bytes))
    }

    deinit {
        core.cancel()
    }

    /// The handler gets each batch, on `queue`; batches delivered while no handler is set
    /// go to `changes` only. While a `changes` loop runs, the handler gets the batches the
    /// loop gets, when the loop gets them.
    public func setEventHandler(_ handler: (@Sendable ([Change]) -> Void)?) {
        core.setHandler(handler)
    }

    /// The batches as an asynchronous sequence (one consumer), from its first use on; it
    /// finishes when the watcher is cancelled.
    ///
    /// Bounded: while the loop's body runs, the watcher holds the next batch back and merges
    /// new changes into it (per path, as within a batch), and the loop's next iteration gets
    /// them all at once. A held batch that grows past 16,384 changes becomes one
    /// `.mustRescan` of the root (the tree stays watched), so memory stays bounded and
    /// nothing is dropped silently. Iterating activates the watcher; cancelling the loop's
    /// task, or leaving the loop early, cancels the watcher; a second iteration ends at once.
    public var changes: some AsyncSequence<[Change], Never> & Sendable {
        core.changesChannel.attach()
        return TreeWatcherChanges(watcher: self, core: core)
    }

    /// Watches the tree (synchronously: a change made after this returns is reported).
    public func activate() { core.activate() }

    /// Stops watching and finishes `changes`; a batch being delivered completes.
    public func cancel() { core.cancel() }

    /// Whether `cancel()` was called (or the watcher was released).
    public var isCancelled: Bool { core.isCancelled }

    /// The last error met while watching (a directory that could not be watched), or nil.
    public var error: EventSourceError? { core.lastError }
}

