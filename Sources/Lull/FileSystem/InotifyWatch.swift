import CLullShims
#if canImport(Glibc)
import Glibc
#endif

/// One inotify watch: one inode, shared by every source and observer on it.
///
/// inotify identifies an inode by its watch descriptor (adding a watch on an inode that
/// already has one returns the same descriptor), so `InotifyHub` keeps one `InotifyWatch`
/// per descriptor and counts its leases; the kernel watch goes when the last lease does.
///
/// A watch that serves a source holds a *pin*: an `O_PATH` descriptor of the object, which
/// reads nothing and writes nothing but lets Lull `fstat` the inode wherever it moved and
/// after it was unlinked. inotify reports a link-count change only as `IN_ATTRIB`, and
/// reports the unlink of an object still open (the pin keeps it open) only when the last
/// descriptor closes: the link count read through the pin is how `.link` is told apart
/// from `.attrib` and how `.delete` is seen at the unlink.
///
/// `@unchecked Sendable`: the watch is handed between threads inside `InotifyHub`'s state
/// and leases; every mutable property is read and written only with the hub's `state` lock
/// held (the `let`s are set before the watch is published).
final class InotifyWatch: @unchecked Sendable {
    struct SourceSubscription {
        let core: SourceCore
        let mask: FileSystemEvent
    }

    struct ObserverSubscription {
        let observer: any InotifyObserver
        let mask: InotifyMask
    }

    let watchDescriptor: Int32
    /// 0 (unknown) for a watch nobody pinned yet: set when a source pins it.
    var device: UInt64
    var inode: UInt64
    let isDirectory: Bool

    /// The O_PATH descriptor, or -1 (a watch for observers only, or one that is gone).
    var pin: Int32 = -1
    /// The mount the pin was opened through (0: unknown), to notice a lazy unmount.
    var mountID: UInt64 = 0
    /// The events asked of the kernel so far (widened with IN_MASK_ADD, never narrowed).
    var kernelMask: InotifyMask = []
    var leases = 0
    /// False once the kernel dropped the watch (IN_IGNORED), the hub removed it, or its
    /// file system went away.
    var isLive = true

    // Baselines for the mapping, refreshed from the pin.
    var linkCount: UInt64 = 0
    var size: Int64 = 0
    /// Mode, owner and group: a change of these is `.attrib` even when the same IN_ATTRIB
    /// also carried a link-count change.
    var ownership: (mode: UInt32, owner: UInt32, group: UInt32) = (0, 0, 0)
    var deleteReported = false
    var revokeReported = false

    var sources: [SourceSubscription] = []
    var observers: [ObserverSubscription] = []

    /// For a directory whose sources want `.delete`: its parent's watch. A directory still
    /// open somewhere (the pin is enough) gets no inotify event of its own when it is
    /// removed; its parent gets `IN_DELETE`, on which the link count is read.
    var parent: InotifyWatch?
    /// The directories that watch this one as their parent.
    var childDirectories: [InotifyWatch] = []

    init(watchDescriptor: Int32, status: lull_object_status) {
        self.watchDescriptor = watchDescriptor
        self.device = status.device
        self.inode = status.inode
        self.isDirectory = status.is_directory != 0
        self.linkCount = status.link_count
        self.size = status.size
        self.mountID = status.mount_id
        self.ownership = (status.mode, status.owner, status.group)
    }

    /// The sources on this watch want the link count of their directory followed through
    /// its parent.
    var needsParent: Bool {
        isDirectory && sources.contains { !$0.mask.isDisjoint(with: [.delete, .link]) }
    }

    /// Reads the object's status through the pin; nil without a pin or when it fails.
    func currentStatus() -> lull_object_status? {
        guard pin >= 0 else { return nil }
        var status = lull_object_status()
        return lull_object_status_of(pin, &status) == 0 ? status : nil
    }

    /// Re-reads the link count and size (after a gap in what was observed).
    func refreshBaselines() {
        guard let status = currentStatus() else { return }
        linkCount = status.link_count
        size = status.size
        ownership = (status.mode, status.owner, status.group)
    }

    /// "/proc/self/fd/N": the magic link through which inotify_add_watch reaches the
    /// pinned object itself, wherever it is now.
    static func procPath(of descriptor: Int32) -> String {
        "/proc/self/fd/\(descriptor)"
    }
}

/// Receives raw inotify events of the watches it leased (the tree watcher).
protocol InotifyObserver: AnyObject, Sendable {
    /// On the polling thread (or the thread that drains), outside the hub's lock: the hub
    /// may be called from here. `watch` is the watch the event belongs to (held, so that its
    /// identity cannot be reused by a new watch while the events are in flight).
    func inotifyEvents(_ events: [(watch: InotifyWatch, event: InotifyEvent)])
    /// The kernel's queue overflowed: events were lost, for every watch.
    func inotifyOverflowed()
}
