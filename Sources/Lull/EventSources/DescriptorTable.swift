import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The open file behind a descriptor number, to tell a reused number from the original.
struct DescriptorIdentity: Equatable, Sendable {
    let device: UInt64
    let inode: UInt64
    let isRegularFile: Bool

    /// nil (with errno set) when the descriptor is not open.
    init?(_ descriptor: Int32) {
        var device: UInt64 = 0
        var inode: UInt64 = 0
        var regular: Int32 = 0
        let result = lull_fd_identity(descriptor, &device, &inode, &regular)
        guard result == 0 else {
            errno = result
            return nil
        }
        self.device = device
        self.inode = inode
        self.isRegularFile = regular != 0
    }

    /// Device and inode in one word (a collision would only skip a stale-source check).
    var folded: UInt64 {
        device &* 0x9E37_79B9_7F4A_7C15 ^ inode
    }
}

/// Which sources watch which descriptor numbers.
///
/// epoll forgets a descriptor silently when the program closes it, while libevent still
/// believes it is registered and would not register the number again for a new file. So
/// when a number comes back for a different file, the sources still registered on the old
/// one are cancelled first, with the reason in `registrationError`.
///
/// Indexed by descriptor number (descriptors are small, dense integers), with 16 bytes per
/// slot: the common case of one source per descriptor needs no allocation of its own.
final class DescriptorTable: Sendable {
    static let shared = DescriptorTable()

    private struct Watcher {
        /// The file's device and inode, folded into one word.
        let file: UInt64
        let core: SourceCore
    }

    private struct Slot {
        var first: Watcher?
        /// Further sources on the same descriptor (a read and a write source, say).
        var others: [Watcher] = []
    }

    private let slots = Mutex<[Slot]>([])

    func claim(_ descriptor: Int32, identity: DescriptorIdentity, for core: SourceCore) {
        let index = Int(descriptor)
        let file = identity.folded
        let watcher = Watcher(file: file, core: core)
        // In place and without temporaries: registering thousands of sources must not churn
        // the allocator (the holes it leaves stay in the process's memory).
        let stale = slots.withLock { slots -> [SourceCore] in
            if index >= slots.count {
                slots.append(contentsOf: repeatElement(Slot(), count: max(index + 1 - slots.count, slots.count)))
            }
            var stale: [SourceCore] = []
            if let first = slots[index].first, first.file != file {
                stale.append(first.core)
                slots[index].first = nil
            }
            if slots[index].others.contains(where: { $0.file != file }) {
                stale.append(contentsOf: slots[index].others.lazy.filter { $0.file != file }.map(\.core))
                slots[index].others.removeAll { $0.file != file }
            }
            if slots[index].first == nil {
                slots[index].first = slots[index].others.isEmpty ? watcher : slots[index].others.removeFirst()
                if slots[index].first?.core !== core { slots[index].others.append(watcher) }
            } else {
                slots[index].others.append(watcher)
            }
            return stale
        }
        for old in stale {
            old.fail(EventSourceError(subject: "\(old.label): descriptor \(descriptor)", code: EBADF,
                                      reason: "the descriptor was closed while its source was registered, and its number reused"))
        }
    }

    func release(_ descriptor: Int32, for core: SourceCore) {
        let index = Int(descriptor)
        slots.withLock { slots in
            guard index < slots.count else { return }
            if slots[index].first?.core === core {
                slots[index].first = slots[index].others.isEmpty ? nil : slots[index].others.removeFirst()
            } else {
                slots[index].others.removeAll { $0.core === core }
            }
        }
    }
}
