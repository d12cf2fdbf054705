import CLibevent
import CLullShims
import LullDiagnosticsFormat
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// How `timerfires --pid` reaches a running program: an abstract-namespace unix socket
/// named `lull-diagnostics.<pid>`, in the reactor while the reactor is polled.
///
/// The listener is in libevent's set only while the reactor's interest is positive (some
/// timer or event source keeps a worker polling): it never makes a worker poll, never
/// keeps one in the loop when the program's own events are gone, and while nobody
/// connects it costs no wake-up. A connection made while nothing is polled waits in the
/// backlog until something is. Only a peer of the same user (or root) is answered: the
/// kernel's credentials of the connecting process (`SO_PEERCRED`) decide, and any other
/// connection is closed unanswered. `LULL_DIAGNOSTICS=off` in the environment turns the
/// socket off: none is bound. The
/// protocol is one line per request: `start <capacity> <trace path>` answers `ok <pid>` or
/// `error <why>`, `stop` answers `ok`; closing the connection also stops the recording it
/// started.
///
/// The socket knows nothing of the reactor: it gets libevent's base for its listener, and
/// `WatchReadable` to have each connection watched (see `listen`).
enum ControlSocket {
    /// The listener's libevent event (its address: libevent serialises every call on it
    /// with the base's lock), whether it is in the base's set, and how connections are
    /// watched.
    private struct Listener {
        var event: UInt = 0
        var added = false
        var watch: WatchReadable?
    }

    private static let listener = Mutex<Listener>(Listener())

    /// Creates the listener on `base` (not yet in the poll set); connections are watched
    /// with `watch`. Failures are logged once (diagnostics are optional, the program runs
    /// on without them). Also starts a recording the environment asks for.
    static func listen(on base: OpaquePointer, watch: @escaping WatchReadable) {
        RuntimeDiagnostics.environmentChecked.touch()
        if let value = getenv(DiagnosticsEnvironment.socketSwitch).map({ String(cString: $0) }),
           DiagnosticsEnvironment.turnsSocketOff(value) {
            return
        }
        let descriptor: Int32
        do throws(SystemError) {
            descriptor = try Syscall.shim("socket") {
                lull_socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            }
        } catch {
            RuntimeLog.once("diagnostics-socket") { "no diagnostics socket: \(error)" }
            return
        }
        var address = ControlSocketAddress.of(pid: getpid())
        do throws(SystemError) {
            _ = try Syscall.posix("bind") {
                withUnsafePointer(to: &address.address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, address.length) }
                }
            }
            _ = try Syscall.posix("listen") { Glibc.listen(descriptor, 4) }
        } catch {
            RuntimeLog.once("diagnostics-socket") { "no diagnostics socket: \(error)" }
            close(descriptor)
            return
        }
        // Never freed: the listener lives as long as the process (and its descriptor too).
        let event = event_new(base, descriptor, Int16(EV_READ | EV_PERSIST | EV_ET),
                              { descriptor, _, _ in ControlSocket.acceptConnections(descriptor) }, nil)
        guard let event else {
            RuntimeLog.once("diagnostics-socket") { "no diagnostics socket: event_new failed" }
            close(descriptor)
            return
        }
        listener.locked(ranked: .diagnosticsListener) { state in
            state.event = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(event)))
            state.watch = watch
        }
    }

    /// Called when the reactor's interest went from or to zero: puts the listener in the
    /// poll set while the reactor is polled, and takes it out when it is not (so that it
    /// never keeps a worker in libevent's loop by itself). `isPolled` is read under the
    /// listener's lock, and libevent is called under it too: the last change to take the
    /// lock reads the latest interest, so concurrent changes cannot leave the listener in
    /// the set of a reactor nobody polls.
    static func pollingMayHaveChanged(isPolled: () -> Bool) {
        listener.locked(ranked: .diagnosticsListener) { state in
            guard let event = OpaquePointer(bitPattern: state.event) else { return }
            let wanted = isPolled()
            guard wanted != state.added else { return }
            if wanted {
                if lull_event_add(LULL_CALL_EVENT_ADD_DIAGNOSTICS, event, nil) != 0 {
                    RuntimeLog.once("diagnostics-socket-add") { "the diagnostics socket could not join the reactor" }
                    return
                }
            } else {
                // Never waits: the callback uses nothing that goes away.
                event_del_noblock(event)
            }
            state.added = wanted
        }
    }

    /// On the poller: takes every pending connection (the listener is edge-triggered).
    private static func acceptConnections(_ listening: Int32) {
        Diagnostics.descriptorEventArrived()
        while true {
            let connection: Int32
            do throws(SystemError) {
                connection = try Syscall.shim("accept4") { lull_accept_nonblocking(listening) }
            } catch {
                if error.code == ECONNABORTED { continue }
                if error.code != EAGAIN && error.code != EWOULDBLOCK {
                    RuntimeLog.once("diagnostics-accept") { "diagnostics socket: \(error)" }
                }
                return
            }
            guard peerIsTrusted(connection), let watch = listener.locked(ranked: .diagnosticsListener, { $0.watch }) else {
                close(connection)
                continue
            }
            ControlConnection.serve(connection, watch: watch)
        }
    }

    private static func peerIsTrusted(_ connection: Int32) -> Bool {
        var uid: UInt32 = 0
        guard lull_peer_uid(connection, &uid) == 0 else { return false }
        return uid == geteuid() || uid == 0
    }
}

/// Has `descriptor` watched by the reactor: `readable` runs on the poller each time it
/// becomes readable (edge-triggered), and while watched the descriptor keeps the reactor
/// polled. Returns the function that stops watching (when it returns, no call of `readable`
/// runs or will run), or nil when the reactor refuses the descriptor.
typealias WatchReadable = @Sendable (_ descriptor: Int32, _ readable: @escaping @Sendable () -> Void)
    -> (@Sendable () -> Void)?

/// One `timerfires` connected to this process.
final class ControlConnection: Sendable {
    private struct State {
        /// Stops the reactor's watch of the connection (nil: not watched, or finished).
        var stopWatching: (@Sendable () -> Void)?
        var pending: [UInt8] = []
        var startedRecording = false
        var closed = false
    }

    private let descriptor: Int32
    private let state = Mutex<State>(State())

    private init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    /// On the poller (so that no call of `readable` runs before the watch is stored: the
    /// reactor calls it on the poller too).
    static func serve(_ descriptor: Int32, watch: WatchReadable) {
        let connection = ControlConnection(descriptor: descriptor)
        guard let stop = watch(descriptor, { connection.readable() }) else {
            close(descriptor)
            return
        }
        connection.state.locked { $0.stopWatching = stop }
        // Edge-triggered: a request that arrived before the watch is read now.
        connection.readable()
    }

    private func readable() {
        var buffer = [UInt8](repeating: 0, count: 1024)
        var finished = false
        while true {
            let count: Int
            do throws(SystemError) {
                count = try Syscall.posix("read") { buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) } }
            } catch {
                finished = error.code != EAGAIN && error.code != EWOULDBLOCK
                break
            }
            if count > 0 {
                state.locked { $0.pending += buffer[0..<count] }
                continue
            }
            finished = true
            break
        }
        while let line = nextLine() { answer(line) }
        if finished { finish() }
    }

    private func nextLine() -> String? {
        state.locked { state -> String? in
            guard let end = state.pending.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
            let line = String(decoding: state.pending[..<end], as: UTF8.self)
            state.pending.removeSubrange(...end)
            return line
        }
    }

    private func answer(_ line: String) {
        let words = line.split(separator: " ", maxSplits: 2).map(String.init)
        switch words.first {
        case "start" where words.count == 3:
            guard let capacity = Int(words[1]) else { return reply("error bad capacity \(words[1])") }
            do throws(DiagnosticsError) {
                try RuntimeDiagnostics.startRecording(file: words[2], capacity: capacity)
                state.locked { $0.startedRecording = true }
                reply("ok \(getpid())")
            } catch {
                reply("error \(error.description)")
            }
        case "stop":
            stopOwnRecording()
            reply("ok")
        default:
            reply("error unknown request")
        }
    }

    private func stopOwnRecording() {
        let started = state.locked { state -> Bool in
            defer { state.startedRecording = false }
            return state.startedRecording
        }
        if started { RuntimeDiagnostics.stopRecording() }
    }

    private func reply(_ text: String) {
        let bytes = Array((text + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            let written = (try? Syscall.posix("write") { bytes[offset...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) } }) ?? 0
            if written <= 0 { return }  // the peer is gone or not reading: it gets nothing
            offset += written
        }
    }

    private func finish() {
        stopOwnRecording()
        let stopWatching = state.locked { state -> (@Sendable () -> Void)? in
            guard !state.closed else { return nil }
            state.closed = true
            defer { state.stopWatching = nil }
            return state.stopWatching
        }
        guard let stopWatching else { return }
        stopWatching()
        close(descriptor)
    }
}
