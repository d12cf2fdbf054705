import Glibc
import Synchronization

/// What one stress source watches and the harness must give back: the watched descriptor
/// (closed in the cancel handler, the one safe place), the peer end the stimuli write to or
/// drain, the child a process source watches, the file a file-system source watches.
///
/// Every descriptor is taken out exactly once before it is closed, so a second cancel
/// handler (an invariant violation the probe reports) cannot close a reused number. The
/// peer is used under its lock: a stimulus never writes to a number another thread closed.
final class StressResources: Sendable {
    private let watched: Mutex<Int32>
    private let peer: Mutex<Int32>
    /// The child a process source watches (0: none). The runner ends and reaps it after
    /// the cancel handlers ran: process sources never reap.
    let child: pid_t
    /// The file a file-system source watches ("" for other kinds).
    let path: String

    init(watched: Int32 = -1, peer: Int32 = -1, child: pid_t = 0, path: String = "") {
        self.watched = Mutex(watched)
        self.peer = Mutex(peer)
        self.child = child
        self.path = path
    }

    /// The watched descriptor while it is open (-1 after `closeAll`); for reading inside a
    /// handler, which runs before the cancel handler closes it.
    var watchedDescriptor: Int32 { watched.locked { $0 } }

    /// Runs `body` with the open peer descriptor, holding it open; false if it is closed.
    @discardableResult
    func withPeer(_ body: (Int32) -> Void) -> Bool {
        peer.locked { descriptor in
            guard descriptor >= 0 else { return false }
            body(descriptor)
            return true
        }
    }

    func closePeer() {
        let descriptor = peer.locked { descriptor -> Int32 in
            defer { descriptor = -1 }
            return descriptor
        }
        if descriptor >= 0 { close(descriptor) }
    }

    /// Closes what is still open (the cancel handler's work): the peer first, under its
    /// lock, so that no stimulus writes to a pipe whose read end is closed (SIGPIPE).
    func closeAll() {
        closePeer()
        let descriptor = watched.locked { descriptor -> Int32 in
            defer { descriptor = -1 }
            return descriptor
        }
        if descriptor >= 0 { close(descriptor) }
    }
}
