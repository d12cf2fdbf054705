import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Tells whether a descriptor number still names the open file (the open file description)
/// that its read and write sources registered, where device and inode cannot: a FIFO or a
/// socket file opened again, a new eventfd (every eventfd shares one anonymous inode).
///
/// epoll forgets a registration when the open file it was made for is closed, and keys what
/// it keeps by open file and number. The witness is a private epoll set, never waited on,
/// with one entry (no events) per descriptor number that has a mux (`DescriptorTable`):
/// adding the number again fails with EEXIST while its open file is the enrolled one, and
/// succeeds once that one was closed — the number now names another open of the file, and
/// the reactor's registration went with the old one.
///
/// The table enrolls and withdraws under its lock, so that the entry of a number always
/// belongs to the mux the table holds for it. The witness is made at first use and lives as
/// long as the process (one descriptor, close-on-exec). Without it (no descriptor free, the
/// epoll watch limit), a number whose device and inode match is taken as the same open file,
/// which is logged once. A forked child shares the set with its parent (an epoll instance
/// is one open file): only the process that made it uses it, and a child's attaches are
/// unverified rather than changing the parent's entries.
final class OpenFileWitness: Sendable {

    enum Verdict: Equatable {
        /// The open file behind the number was not enrolled: it is now.
        case enrolled
        /// The open file behind the number is the one enrolled.
        case stillEnrolled
        /// The witness cannot tell.
        case unverifiable
    }

    /// The epoll set, or -errno when it could not be made; `notMade` until the first enroll
    /// (a program without read or write sources never opens it). It lives as long as the
    /// runtime.
    private let set = Atomic<Int32>(OpenFileWitness.notMade)
    private static let notMade = Int32.min
    /// The process that made the witness.
    private let owner: pid_t

    init() {
        owner = getpid()
    }

    /// The set, made by the first caller (a racing second closes its own).
    private var descriptor: Int32 {
        let current = set.load(ordering: .acquiring)
        if current != OpenFileWitness.notMade { return current }
        let made = lull_witness_create()
        let (exchanged, original) = set.compareExchange(expected: OpenFileWitness.notMade, desired: made,
                                                        ordering: .acquiringAndReleasing)
        if exchanged { return made }
        if made >= 0 { close(made) }
        return original
    }

    private var usable: Bool { getpid() == owner && descriptor >= 0 }

    /// Enrolls the open file behind `number`, saying whether it was enrolled already.
    func enroll(_ number: Int32) -> Verdict {
        guard usable else {
            if descriptor < 0 { unverifiable(SystemError("epoll_create1", code: -descriptor), what: "no epoll set could be made") }
            return .unverifiable
        }
        let result = lull_witness_enroll(descriptor, number)
        switch result {
        case 0:
            return .enrolled
        case -EEXIST:
            return .stillEnrolled
        case -EPERM, -EBADF:
            // epoll cannot watch this file (or it is not open): the reactor refuses it too.
            return .unverifiable
        default:
            unverifiable(SystemError("epoll_ctl", code: -result), what: "descriptor \(number) could not be enrolled")
            return .unverifiable
        }
    }

    /// Withdraws the entry of `number` (none there: nothing to do).
    func withdraw(_ number: Int32) {
        guard usable else { return }
        _ = lull_witness_withdraw(descriptor, number)
    }

    private func unverifiable(_ error: SystemError, what: String) {
        RuntimeLog.once("open-file-witness-\(error.code)") {
            "read and write sources: \(what) (\(error)); a descriptor closed while its source is registered and opened again on the same file is not detected"
        }
    }
}
