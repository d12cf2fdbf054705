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
}

/// Which sources watch which descriptor numbers.
///
/// epoll forgets a descriptor silently when the program closes it, while libevent still
/// believes it is registered and would not register the number again for a new file. So
/// when a number comes back for a different file, the sources still registered on the old
/// one are cancelled first, with the reason in `registrationError`.
final class DescriptorTable: Sendable {
    static let shared = DescriptorTable()

    private struct Entry {
        let identity: DescriptorIdentity
        let core: SourceCore
    }

    private let entries = Mutex<[Int32: [Entry]]>([:])

    func claim(_ descriptor: Int32, identity: DescriptorIdentity, for core: SourceCore) {
        let stale = entries.withLock { table -> [SourceCore] in
            let current = table[descriptor] ?? []
            let staleEntries = current.filter { $0.identity != identity }
            table[descriptor] = current.filter { $0.identity == identity } + [Entry(identity: identity, core: core)]
            return staleEntries.map(\.core)
        }
        for old in stale {
            old.fail(EventSourceError(subject: "\(old.label): descriptor \(descriptor)", code: EBADF,
                                      reason: "the descriptor was closed while its source was registered, and its number reused"))
        }
    }

    func release(_ descriptor: Int32, for core: SourceCore) {
        entries.withLock { table in
            guard var current = table[descriptor] else { return }
            current.removeAll { $0.core === core }
            table[descriptor] = current.isEmpty ? nil : current
        }
    }
}
