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
/// A tree watcher leases one unpinned watch per directory, thousands at once, so a watch
/// keeps inline only what every watch needs (its descriptor, kind, kernel mask, leases and
/// first observer: 72 bytes, an 80-byte malloc chunk) and boxes the rest (`Details`: the
/// pin, the baselines, the sources, further observers, the parent links), made when a
/// source pins it or a second observer comes. The accessors below read the defaults when
/// there is no box and make it only to store something else.
///
/// `@unchecked Sendable`: the watch is handed between threads inside `InotifyHub`'s state
/// and leases; every mutable property (and its box's) is read and written only with the
/// hub's `state` lock held (the `let`s are set before the watch is published).
final class InotifyWatch: @unchecked Sendable {
    struct SourceSubscription {
        let core: SourceCore
        let mask: FileSystemEvent
    }

    struct ObserverSubscription {
        let observer: any InotifyObserver
        let mask: InotifyMask
    }

    /// What pinned watches need and unpinned ones do not; see the type's comment.
    private final class Details {
        var device: UInt64 = 0
        var inode: UInt64 = 0
        var pin: Int32 = -1
        var mountID: UInt64 = 0
        var linkCount: UInt64 = 0
        var size: Int64 = 0
        var ownership: (mode: UInt32, owner: UInt32, group: UInt32) = (0, 0, 0)
        var deleteReported = false
        var revokeReported = false
        var sources: [SourceSubscription] = []
        /// The observers after `firstObserver`.
        var moreObservers: [ObserverSubscription] = []
        var parent: InotifyWatch?
        var childDirectories: [InotifyWatch] = []
    }

    private var firstObserver: ObserverSubscription?
    private var details: Details?
    let watchDescriptor: Int32
    /// The events asked of the kernel so far (widened with IN_MASK_ADD, never narrowed).
    var kernelMask: InotifyMask = []
    let isDirectory: Bool
    /// False once the kernel dropped the watch (IN_IGNORED), the hub removed it, or its
    /// file system went away.
    var isLive = true
    var leases = 0

    /// The box, made on first use.
    private var madeDetails: Details {
        if let details { return details }
        let made = Details()
        details = made
        return made
    }

    /// 0 (unknown) for a watch nobody pinned yet: set when a source pins it.
    var device: UInt64 {
        get { details?.device ?? 0 }
        set { if newValue != 0 || details != nil { madeDetails.device = newValue } }
    }

    var inode: UInt64 {
        get { details?.inode ?? 0 }
        set { if newValue != 0 || details != nil { madeDetails.inode = newValue } }
    }

    /// The O_PATH descriptor, or -1 (a watch for observers only, or one that is gone).
    var pin: Int32 {
        get { details?.pin ?? -1 }
        set { if newValue != -1 || details != nil { madeDetails.pin = newValue } }
    }

    /// The mount the pin was opened through (0: unknown), to notice a lazy unmount.
    var mountID: UInt64 {
        get { details?.mountID ?? 0 }
        set { if newValue != 0 || details != nil { madeDetails.mountID = newValue } }
    }

    // Baselines for the mapping, refreshed from the pin.
    var linkCount: UInt64 {
        get { details?.linkCount ?? 0 }
        set { if newValue != 0 || details != nil { madeDetails.linkCount = newValue } }
    }

    var size: Int64 {
        get { details?.size ?? 0 }
        set { if newValue != 0 || details != nil { madeDetails.size = newValue } }
    }

    /// Mode, owner and group: a change of these is `.attrib` even when the same IN_ATTRIB
    /// also carried a link-count change.
    var ownership: (mode: UInt32, owner: UInt32, group: UInt32) {
        get { details?.ownership ?? (0, 0, 0) }
        set { if newValue != (0, 0, 0) || details != nil { madeDetails.ownership = newValue } }
    }

    var deleteReported: Bool {
        get { details?.deleteReported ?? false }
        set { if newValue || details != nil { madeDetails.deleteReported = newValue } }
    }

    var revokeReported: Bool {
        get { details?.revokeReported ?? false }
        set { if newValue || details != nil { madeDetails.revokeReported = newValue } }
    }

    var sources: [SourceSubscription] {
        get { details?.sources ?? [] }
        set { if !newValue.isEmpty || details != nil { madeDetails.sources = newValue } }
    }

    /// For a directory whose sources want `.delete`: its parent's watch. A directory still
    /// open somewhere (the pin is enough) gets no inotify event of its own when it is
    /// removed; its parent gets `IN_DELETE`, on which the link count is read.
    var parent: InotifyWatch? {
        get { details?.parent }
        set { if newValue != nil || details != nil { madeDetails.parent = newValue } }
    }

    /// The directories that watch this one as their parent.
    var childDirectories: [InotifyWatch] {
        get { details?.childDirectories ?? [] }
        set { if !newValue.isEmpty || details != nil { madeDetails.childDirectories = newValue } }
    }

    init(watchDescriptor: Int32, status: lull_object_status) {
        self.watchDescriptor = watchDescriptor
        self.isDirectory = status.is_directory != 0
        // An unpinned watch's status is all zeros: no box.
        device = status.device
        inode = status.inode
        linkCount = status.link_count
        size = status.size
        mountID = status.mount_id
        ownership = (status.mode, status.owner, status.group)
    }

    // MARK: Observers

    var hasObservers: Bool { firstObserver != nil }

    /// Calls `body` with each observer subscription, in the order they came.
    func forEachObserver(_ body: (ObserverSubscription) -> Void) {
        if let firstObserver { body(firstObserver) }
        if let details { details.moreObservers.forEach(body) }
    }

    func addObserver(_ subscription: ObserverSubscription) {
        if firstObserver == nil {
            firstObserver = subscription
        } else {
            madeDetails.moreObservers.append(subscription)
        }
    }

    /// Removes every subscription of `observer`.
    func removeObservers(_ observer: any InotifyObserver) {
        details?.moreObservers.removeAll { $0.observer === observer }
        if let first = firstObserver, first.observer === observer {
            if let details, !details.moreObservers.isEmpty {
                firstObserver = details.moreObservers.removeFirst()
            } else {
                firstObserver = nil
            }
        }
    }

    func removeAllObservers() {
        firstObserver = nil
        details?.moreObservers.removeAll()
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
