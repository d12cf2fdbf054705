import Synchronization
#if canImport(Glibc)
import Glibc
#endif

// File-system object sources: kqueue's EVFILT_VNODE on inotify. The design (the hub, pins,
// revocation, overflow, the mapping table, threads) is in docs/FileSystem.md.

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
/// inotify: see docs/FileSystem.md).
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
    init(descriptor: Int32, eventMask: FileSystemEvent, queue: WorkQueue, hub: InotifyHub) {
        let mask = eventMask.intersection(.all)
        super.init(core: DrivenSourceCore(kind: FileSystemObjectSource.self, target: queue, merge: .or,
                                          handle: UInt(truncatingIfNeeded: descriptor), mask: mask.rawValue,
                                          driver: FileSystemObjectDriver(target: .descriptor(descriptor), mask: mask, hub: hub)))
    }

    init(path: String, eventMask: FileSystemEvent, queue: WorkQueue, hub: InotifyHub) throws(EventSourceError) {
        let mask = eventMask.intersection(.all)
        let label = queue.label
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

/// `for await event in source.events`: the events of each handler invocation, as an
/// asynchronous sequence (see ``SourceEvents``); inside a handler, `events` is the typed value.
extension FileSystemObjectSource: _TypedEventsSource {
    public typealias _Event = FileSystemEvent
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
