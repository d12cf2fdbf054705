import CLibevent
import CLullShims
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
/// backlog until something is. Only a peer of the same user (or root) is answered. The
/// protocol is one line per request: `start <capacity> <trace path>` answers `ok <pid>` or
/// `error <why>`, `stop` answers `ok`; closing the connection also stops the recording it
/// started.
package enum ControlSocket {
    package static func name(pid: Int32) -> String { "lull-diagnostics.\(pid)" }

    /// The listener's libevent event (its address: libevent serialises every call on it
    /// with the base's lock) and whether it is in the base's set.
    private struct Listener {
        var event: UInt = 0
        var added = false
    }

    private static let listener = Mutex<Listener>(Listener())

    /// Creates the listener (not yet in the poll set); failures are logged once
    /// (diagnostics are optional, the program runs on without them). Also starts a
    /// recording the environment asks for.
    static func listen(on base: OpaquePointer) {
        RuntimeDiagnostics.environmentChecked.touch()
        let descriptor: Int32
        do throws(SystemError) {
            descriptor = try Syscall.shim("socket") {
                lull_socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            }
        } catch {
            RuntimeLog.once("diagnostics-socket") { "no diagnostics socket: \(error)" }
            return
        }
        var address = abstractAddress(name(pid: getpid()))
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
        listener.locked { $0.event = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(event))) }
    }

    /// Called when the reactor's interest went from or to zero: puts the listener in the
    /// poll set while the reactor is polled, and takes it out when it is not (so that it
    /// never keeps a worker in libevent's loop by itself).
    static func pollingMayHaveChanged(_ reactor: Reactor) {
        listener.locked { state in
            guard let event = OpaquePointer(bitPattern: state.event) else { return }
            let wanted = reactor.needsPoller
            guard wanted != state.added else { return }
            if wanted {
                if lull_event_add(event, nil) != 0 {
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

    /// An abstract `sockaddr_un` (leading NUL, no file) and its length.
    package static func abstractAddress(_ name: String) -> (address: sockaddr_un, length: socklen_t) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(name.utf8.prefix(100))
        withUnsafeMutableBytes(of: &address.sun_path) { path in
            path[0] = 0
            for (index, byte) in bytes.enumerated() { path[index + 1] = byte }
        }
        let length = MemoryLayout<sa_family_t>.size + 1 + bytes.count
        return (address, socklen_t(length))
    }

    /// On the poller: takes every pending connection (the listener is edge-triggered).
    private static func acceptConnections(_ listener: Int32) {
        Diagnostics.descriptorEventArrived()
        while true {
            let connection: Int32
            do throws(SystemError) {
                connection = try Syscall.shim("accept4") { lull_accept_nonblocking(listener) }
            } catch {
                if error.code == ECONNABORTED { continue }
                if error.code != EAGAIN && error.code != EWOULDBLOCK {
                    RuntimeLog.once("diagnostics-accept") { "diagnostics socket: \(error)" }
                }
                return
            }
            guard peerIsTrusted(connection) else {
                close(connection)
                continue
            }
            ControlConnection.serve(connection)
        }
    }

    private static func peerIsTrusted(_ connection: Int32) -> Bool {
        var uid: UInt32 = 0
        guard lull_peer_uid(connection, &uid) == 0 else { return false }
        return uid == geteuid() || uid == 0
    }
}

/// One `timerfires` connected to this process.
final class ControlConnection: ReactorEventHandler {
    private struct State {
        var registration: DescriptorRegistration?
        var pending: [UInt8] = []
        var startedRecording = false
        var closed = false
    }

    private let descriptor: Int32
    private let state = Mutex<State>(State())

    private init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    static func serve(_ descriptor: Int32) {
        let connection = ControlConnection(descriptor: descriptor)
        do throws(ReactorError) {
            let registration = try Runtime.shared.reactor.register(descriptor: descriptor, forWriting: false, handler: connection)
            connection.state.locked { $0.registration = registration }
            // Edge-triggered: a request that arrived before the registration is read now.
            connection.reactorEvent(readable: true, writable: false)
        } catch {
            close(descriptor)
        }
    }

    func reactorEvent(readable: Bool, writable: Bool) {
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
        let registration = state.locked { state -> DescriptorRegistration? in
            guard !state.closed else { return nil }
            state.closed = true
            defer { state.registration = nil }
            return state.registration
        }
        guard let registration else { return }
        registration.remove()
        close(descriptor)
    }
}
