import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// File-system object sources: kqueue's EVFILT_VNODE on inotify.
//
// Design (see also docs/ARCHITECTURE.md, "File-system sources"):
//
// - One inotify instance for the process (`InotifyHub.shared`), non-blocking and
//   close-on-exec, registered with the reactor like any descriptor (edge-triggered and
//   persistent) and drained to EAGAIN on every readiness; a drain does at most 16 reads of
//   64 KiB on the polling thread and goes on from a queued job, so that a storm of changes
//   neither loses its end nor holds the reactor. The instance is created with the first
//   watch and closed (from a utility job) when the last one is gone.
// - One watch per inode, shared by every source on it: inotify returns the same watch
//   descriptor for the same inode, so the hub keys its watches by watch descriptor and
//   counts leases; the kernel's mask is the union of what the sources need (IN_MASK_ADD),
//   and the watch goes (inotify_rm_watch) with its last lease.
// - Each watched object is *pinned*: an O_PATH | O_CLOEXEC descriptor that reads and
//   writes nothing, through which the hub adds the watch (/proc/self/fd/N, so the watch
//   and the pin are the same inode even if the path changes meanwhile) and reads the link
//   count and size. That is how `.link` is told from `.attrib` (inotify reports both as
//   IN_ATTRIB) and how `.delete` is seen at the unlink (inotify says IN_DELETE_SELF only
//   when the last descriptor closes). A removed directory gets no inotify event at all
//   while it is open, so a directory whose sources want `.delete` or `.link` also leases a
//   watch on its parent (re-found through the pin's ".." after every move) and reads its
//   own link count when the parent reports a removed subdirectory.
// - The pin holds the file system busy, as an open descriptor does on Darwin: a strict
//   unmount fails with EBUSY. A lazy unmount (umount -l, MNT_DETACH: how Linux unmounts a
//   busy file system) is `.revoke`: the hub also watches /proc/self/mountinfo and, when
//   the mount of a pinned object is gone from it, reports `.revoke` and lets the pin go.
//   IN_UNMOUNT is mapped to `.revoke` as well.
// - Mapping (VnodeEventMapping has the table): IN_MODIFY → .write (+ .extend if the size
//   grew); IN_ATTRIB → .link if the link count grew, .delete + .link if it fell (Darwin
//   posts both on every unlink), else .attrib; IN_MOVE_SELF → .rename; IN_DELETE_SELF →
//   .delete (once); entries created, removed or moved in a watched directory → .write,
//   and + .link for a subdirectory (not for a rename inside the directory); IN_UNMOUNT →
//   .revoke. The merge rule is OR; `events` is `data` masked by the source's mask.
// - Overflow (IN_Q_OVERFLOW): nothing is silently lost. Every source gets every event of
//   its mask that may have happened — all but `.delete` and `.revoke`, which are reported
//   only when confirmed (link count 0; mount gone) — baselines are re-read, and
//   `FileSystemDiagnostics.overflowCount` counts it.
// - Errors: the path-based factory opens and watches at once, and throws an
//   `EventSourceError` whose description names the path, the system's reason and, for the
//   limits, the sysctl to raise (fs.inotify.max_user_watches for ENOSPC,
//   fs.inotify.max_user_instances for EMFILE). The descriptor-based factory watches at
//   activation and, on failure, cancels the source with the reason in `registrationError`.
// - Threads: the hub's state is under one lock; inotify events are mapped there, on the
//   polling thread, and merged into sources after the lock is released; sources are
//   unsubscribed at cancel (no merge after) and release their lease after the cancel
//   handler ran.
// - The recursive `DirectoryTreeWatcher` leases unpinned watches (one per directory) from
//   the same hub and observes their raw events on a private serial queue; see its file.
//
// Files: FileSystemObjectSource (this: the design, the public type, the factories, the
// driver), InotifyHub (instance, leases, draining, dispatch, revocation), InotifyWatch
// (one watch), InotifyEvent (the kernel's bits and records), VnodeEventMapping (inotify →
// kqueue), FileSystemErrors (reasons and limits), FileSystemDiagnostics (counters),
// DirectoryTreeWatcher. Test hooks (internal): private hubs that do not register with the
// reactor or refuse watches past a limit, `holdDraining`, `injectOverflow`.

/// Events of a file-system object, with kqueue's EVFILT_VNODE values (NOTE_*).
public struct FileSystemEvent: OptionSet, Sendable, Hashable {
    /// The bits of the file-system events.
    public let rawValue: UInt
    /// The file-system events with these bits.
    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// The object was unlinked (reported at the unlink, even while a descriptor keeps it).
    public static let delete = FileSystemEvent(rawValue: 0x1)
    /// Its contents changed; for a directory, entries were added, removed or renamed.
    public static let write = FileSystemEvent(rawValue: 0x2)
    /// The file grew.
    public static let extend = FileSystemEvent(rawValue: 0x4)
    /// Its metadata changed (mode, owner, times, extended attributes).
    public static let attrib = FileSystemEvent(rawValue: 0x8)
    /// Its link count changed (also when a subdirectory of a watched directory is created
    /// or removed).
    public static let link = FileSystemEvent(rawValue: 0x10)
    /// It was moved (the source follows the object, not the name).
    public static let rename = FileSystemEvent(rawValue: 0x20)
    /// Its file system went away (unmounted).
    public static let revoke = FileSystemEvent(rawValue: 0x40)
    /// Every file-system event.
    public static let all: FileSystemEvent = [.delete, .write, .extend, .attrib, .link, .rename, .revoke]
}

/// Fires when the file or directory it watches changes; `events` is what happened since
/// the handler last ran, within the source's mask (kqueue's EVFILT_VNODE meaning, on
/// inotify: see the design notes at the top of this file).
///
/// The source watches the *object*: after a rename it keeps following it under its new
/// name, and after `.delete` it stays registered (and silent) until cancelled, like a
/// kqueue source. Lull holds an `O_PATH` descriptor of the object while a source is on it
/// (a strict unmount of its file system fails with EBUSY until the source is cancelled; a
/// lazy unmount is reported as `.revoke`).
///
/// `handle` is the descriptor given to the descriptor-based factory; a source made from a
/// path has no descriptor of the program's and its handle is `UInt.max` (-1 as `Int32`).
public final class FileSystemObjectSource: EventSourceBase, EventSourceProtocol, @unchecked Sendable {  // Sendable: see EventSourceBase
    init(descriptor: Int32, eventMask: FileSystemEvent, queue: WorkQueue?, hub: InotifyHub = .shared) {
        let mask = eventMask.intersection(.all)
        super.init(core: DrivenSourceCore(kind: FileSystemObjectSource.self, target: queue, merge: .or,
                                          handle: UInt(truncatingIfNeeded: descriptor), mask: mask.rawValue,
                                          driver: FileSystemObjectDriver(target: .descriptor(descriptor), mask: mask, hub: hub)))
    }

    init(path: String, eventMask: FileSystemEvent, queue: WorkQueue?, hub: InotifyHub = .shared) throws(EventSourceError) {
        let mask = eventMask.intersection(.all)
        let label = (queue ?? WorkQueue.global()).label
        let subject = FileSystemErrors.subject(kind: "FileSystemObjectSource", queueLabel: label, path: path)
        let lease = try hub.acquire(path: path, subject: subject) {
            VnodeEventMapping.kernelMask(for: mask, isDirectory: $0)
        }
        let driver = FileSystemObjectDriver(target: .path(path), mask: mask, hub: hub, lease: lease)
        super.init(core: DrivenSourceCore(kind: FileSystemObjectSource.self, target: queue, merge: .or,
                                          handle: UInt.max, mask: mask.rawValue, driver: driver))
    }

    /// The events seen since the handler last ran, within the mask (the typed `data`).
    public var events: FileSystemEvent {
        FileSystemEvent(rawValue: data & mask)
    }
}

extension EventSource {
    /// A source for the file or directory open as `fileDescriptor` (any open mode, O_PATH
    /// too). The descriptor must stay open until the cancel handler ran. A descriptor that
    /// is not open (or an object that cannot be watched) cancels the source at activation,
    /// with the reason in `registrationError`.
    public static func makeFileSystemObjectSource(fileDescriptor: Int32, eventMask: FileSystemEvent,
                                                  queue: WorkQueue? = nil) -> FileSystemObjectSource {
        FileSystemObjectSource(descriptor: fileDescriptor, eventMask: eventMask, queue: queue)
    }

    /// A source for the file or directory at `path` (symbolic links followed), opened and
    /// watched at once: throws an `EventSourceError` naming the path and the system's
    /// reason when it cannot be (no such file, no permission, the inotify limits — with the
    /// sysctl to raise).
    public static func makeFileSystemObjectSource(path: String, eventMask: FileSystemEvent,
                                                  queue: WorkQueue? = nil) throws -> FileSystemObjectSource {
        try FileSystemObjectSource(path: path, eventMask: eventMask, queue: queue)
    }
}

/// Watches one object for a file-system source: leases its watch (at creation for a path,
/// at activation for a descriptor), subscribes at activation, unsubscribes at cancel and
/// releases the lease after the cancel handler.
final class FileSystemObjectDriver: SourceKind {
    enum Target: Sendable {
        case descriptor(Int32)
        case path(String)
    }

    let target: Target
    let mask: FileSystemEvent
    let hub: InotifyHub
    private let lease: Mutex<InotifyLease?>

    init(target: Target, mask: FileSystemEvent, hub: InotifyHub, lease: InotifyLease? = nil) {
        self.target = target
        self.mask = mask
        self.hub = hub
        self.lease = Mutex(lease)
    }

    func register(_ core: SourceCore) -> (any Error)? {
        var current = lease.locked { $0 }
        if current == nil, case .descriptor(let descriptor) = target {
            let subject = FileSystemErrors.subject(kind: core.kindName, queueLabel: core.target.label, descriptor: descriptor)
            do throws(EventSourceError) {
                let acquired = try hub.acquire(descriptor: descriptor, subject: subject) { [mask] in
                    VnodeEventMapping.kernelMask(for: mask, isDirectory: $0)
                }
                lease.locked { $0 = acquired }
                current = acquired
            } catch {
                return error
            }
        }
        guard let current else { return nil }
        hub.subscribe(core, mask: mask, to: current)
        return nil
    }

    func unregister(_ core: SourceCore) {
        guard let current = lease.locked({ $0 }) else { return }
        hub.unsubscribe(core, from: current)
    }

    func dataForDelivery(_ core: SourceCore, merged: UInt) -> UInt? {
        let value = merged & mask.rawValue
        return value == 0 ? nil : value
    }

    func finished(_ core: SourceCore) {
        let released = lease.locked { current -> InotifyLease? in
            defer { current = nil }
            return current
        }
        released?.release()
    }
}
