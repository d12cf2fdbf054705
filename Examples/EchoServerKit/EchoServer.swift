import Lull
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A TCP echo server on 127.0.0.1, built on Lull's event sources: a read source on the
/// listening socket accepts connections; each connection (see `EchoConnection`) has a
/// serial queue of its own with a read source, a write source and an idle timer.
///
/// ```swift
/// let server = try EchoServer(configuration: .init(port: 0, idleTimeout: .seconds(30)))
/// server.start()
/// print("listening on port \(server.port)")
/// // later, from a SIGTERM source:
/// server.shutdown { exit(0) }
/// ```
public final class EchoServer: Sendable {
    /// Receives the server's messages (connections opened and closed, errors).
    public typealias Log = @Sendable (String) -> Void

    /// How the server listens and treats its connections.
    public struct Configuration: Sendable {
        /// The port on 127.0.0.1; 0 lets the kernel pick a free one (see `EchoServer.port`).
        public var port: UInt16
        /// A connection that sends nothing for this long is closed.
        public var idleTimeout: Duration
        /// The bytes a connection reads ahead of what its client has read back; reading
        /// stops while they are all waiting (backpressure).
        public var bufferBytes: Int
        /// Where the server says what it does; nil: silent (the load test).
        public var log: Log?

        public init(port: UInt16 = 0, idleTimeout: Duration = .seconds(30), bufferBytes: Int = 64 * 1024,
                    log: Log? = nil) {
            self.port = port
            self.idleTimeout = idleTimeout
            self.bufferBytes = bufferBytes
            self.log = log
        }
    }

    private struct State {
        var connections: [Int: EchoConnection] = [:]
        var nextID = 1
        var isShuttingDown = false
    }

    /// The port the server listens on (the one picked by the kernel when asked for 0).
    public let port: UInt16
    private let configuration: Configuration
    private let listener: Int32
    private let acceptSource: ReadSource
    private let state = Mutex(State())
    /// Entered by the listening socket and by each connection until their socket is closed.
    private let open = WorkGroup()

    /// Binds and listens (so a client may connect as soon as this returns; it is accepted
    /// once `start()` was called). Throws when the port is taken or sockets are exhausted.
    public init(configuration: Configuration) throws(SocketError) {
        let (listener, port) = try LoopbackSocket.listen(port: configuration.port)
        self.listener = listener
        self.port = port
        self.configuration = configuration
        acceptSource = EventSource.makeReadSource(fileDescriptor: listener,
                                                  queue: WorkQueue(label: "echo.accept"))
        // Set here, not in start(): a server dropped without being started still closes its
        // socket (a source that is no longer referenced is cancelled).
        open.enter()
        acceptSource.setCancelHandler { [listener, open] in
            _ = Glibc.close(listener)
            open.leave()
        }
    }

    /// The connections open now.
    public var connectionCount: Int {
        state.locked { $0.connections.count }
    }

    /// Starts accepting connections.
    public func start() {
        acceptSource.setEventHandler { [weak self] in self?.acceptWaitingConnections() }
        acceptSource.activate()
    }

    /// Stops accepting, lets each connection write back what it has read, then closes it;
    /// connections still open after `grace` are closed at once. `completion` runs (on a
    /// global queue) once every socket is closed.
    public func shutdown(grace: Duration = .seconds(2), completion: @escaping @Sendable () -> Void) {
        let connections = state.locked { state in
            state.isShuttingDown = true
            return Array(state.connections.values)
        }
        acceptSource.cancel()
        for connection in connections { connection.finish(reason: "server shutting down") }
        WorkQueue.global().asyncAfter(deadline: .now() + grace) { [weak self] in
            let stragglers = self?.state.locked { Array($0.connections.values) } ?? []
            for connection in stragglers { connection.abort(reason: "still open \(grace) after shutdown") }
        }
        open.notify(queue: .global(), execute: completion)
    }

    /// The listening socket is readable: takes every waiting connection.
    private func acceptWaitingConnections() {
        while true {
            switch LoopbackSocket.accept(from: listener) {
            case .accepted(let descriptor):
                admit(descriptor)
            case .wouldBlock:
                return
            case .failed(let error):
                // EMFILE and the like: say so and try again on the next event, rather than
                // spin on a connection that cannot be taken.
                configuration.log?("accept failed: \(error)")
                return
            }
        }
    }

    private func admit(_ descriptor: Int32) {
        let admitted = state.locked { state in
            guard !state.isShuttingDown else { return false }
            let id = state.nextID
            state.nextID += 1
            let connection = EchoConnection(id: id, descriptor: descriptor, configuration: configuration) {
                [weak self, open] closed in
                self?.forget(closed)
                open.leave()
            }
            state.connections[id] = connection
            // Started under the lock: a shutdown that sees the connection finds its start
            // already queued ahead of its finish.
            open.enter()
            connection.start()
            return true
        }
        if !admitted { _ = Glibc.close(descriptor) }
    }

    private func forget(_ connection: EchoConnection) {
        _ = state.locked { $0.connections.removeValue(forKey: connection.id) }
    }
}
