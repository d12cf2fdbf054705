// The echo server of Examples/EchoServerKit written on Apple's Dispatch, as a Darwin
// programmer would write it: the peer of the echo load test. Same sockets (LoopbackSocket),
// same buffer (EchoBuffer), same structure — a serial queue per connection with a read
// source, a write source armed only while there is something to write, backpressure by
// suspending the read source, an idle timer with a tenth of the timeout as leeway — so
// that the two differ only in the runtime under them. It logs nothing (the load test's
// Lull server is silent too).

import Dispatch
import EchoServerKit
import Glibc
import Synchronization

/// `@unchecked Sendable`: `acceptSource` is a Dispatch source, a thread-safe object whose
/// Swift overlay is not marked Sendable; every other property is immutable, a Mutex or an Atomic.
final class DispatchEchoServer: @unchecked Sendable {
    let port: UInt16
    private let listener: Int32
    private let idleTimeout: Duration
    private let acceptSource: any DispatchSourceRead
    private let connections = Mutex<[Int: DispatchEchoConnection]>([:])
    private let nextID = Atomic(1)
    private let open = DispatchGroup()

    init(idleTimeout: Duration) throws(SocketError) {
        (listener, port) = try LoopbackSocket.listen(port: 0)
        self.idleTimeout = idleTimeout
        acceptSource = DispatchSource.makeReadSource(fileDescriptor: listener,
                                                     queue: DispatchQueue(label: "echo.accept"))
    }

    func start() {
        open.enter()
        acceptSource.setEventHandler { [weak self] in self?.acceptWaitingConnections() }
        acceptSource.setCancelHandler { [listener, open] in
            _ = Glibc.close(listener)
            open.leave()
        }
        acceptSource.activate()
    }

    /// Closes every connection (the load test's clients are gone by then) and calls
    /// `completion` once every socket is closed.
    func shutdown(completion: @escaping @Sendable () -> Void) {
        acceptSource.cancel()
        for connection in connections.locked({ Array($0.values) }) { connection.close() }
        open.notify(queue: .global(), execute: completion)
    }

    private func acceptWaitingConnections() {
        while case .accepted(let descriptor) = LoopbackSocket.accept(from: listener) {
            let id = nextID.wrappingAdd(1, ordering: .relaxed).oldValue
            let connection = DispatchEchoConnection(descriptor: descriptor, idleTimeout: idleTimeout) {
                [weak self, open] in
                _ = self?.connections.locked { $0.removeValue(forKey: id) }
                open.leave()
            }
            connections.locked { $0[id] = connection }
            open.enter()
            connection.start()
        }
    }
}

/// `@unchecked Sendable`: the mutable state is touched only by blocks on `queue` (the three
/// sources deliver to it; `start` and `close` hop onto it), a serial queue.
final class DispatchEchoConnection: @unchecked Sendable {
    private let descriptor: Int32
    private let queue = DispatchQueue(label: "echo.connection")
    private let readSource: any DispatchSourceRead
    private let writeSource: any DispatchSourceWrite
    private let idleTimer: any DispatchSourceTimer
    private let idleTimeout: Duration
    private let buffer = EchoBuffer(capacity: 64 * 1024)
    private let onClosed: @Sendable () -> Void
    private var isOpen = true
    private var isReadingPaused = false
    private var isWriteArmed = false
    private var lastActivity = DispatchTime.now()
    private var sourcesHoldingSocket = 2

    init(descriptor: Int32, idleTimeout: Duration, onClosed: @escaping @Sendable () -> Void) {
        self.descriptor = descriptor
        self.idleTimeout = idleTimeout
        self.onClosed = onClosed
        readSource = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
        writeSource = DispatchSource.makeWriteSource(fileDescriptor: descriptor, queue: queue)
        idleTimer = DispatchSource.makeTimerSource(queue: queue)
    }

    func start() {
        readSource.setEventHandler { [self] in readable() }
        writeSource.setEventHandler { [self] in if isOpen { writeBack() } }
        idleTimer.setEventHandler { [self] in idleTimerFired() }
        readSource.setCancelHandler { [self] in socketReleased() }
        writeSource.setCancelHandler { [self] in socketReleased() }
        queue.async { [self] in
            lastActivity = .now()
            scheduleIdleTimer(at: lastActivity + Self.interval(idleTimeout))
            idleTimer.activate()
            readSource.activate()
        }
    }

    func close() {
        queue.async { [self] in closeNow() }
    }

    private func readable() {
        guard isOpen else { return }
        let (read, write) = buffer.echo(on: descriptor)
        switch read {
        case .moved:
            lastActivity = .now()
            wrote(write)
            if isOpen && buffer.isFull && !isReadingPaused {
                isReadingPaused = true
                readSource.suspend()
            }
        case .wouldBlock:
            break
        case .endOfFile, .failed:
            closeNow()  // the load test's clients close only when done: nothing left to write
        }
    }

    private func writeBack() {
        wrote(buffer.drain(to: descriptor))
    }

    private func wrote(_ write: EchoBuffer.Transfer) {
        if case .failed = write {
            closeNow()
            return
        }
        if buffer.isEmpty && isWriteArmed {
            isWriteArmed = false
            writeSource.suspend()
        } else if !buffer.isEmpty && !isWriteArmed {
            isWriteArmed = true
            writeSource.resume()
        }
        if isReadingPaused && buffer.count <= buffer.capacity / 2 {
            isReadingPaused = false
            readSource.resume()
        }
    }

    private func idleTimerFired() {
        guard isOpen else { return }
        let expiry = lastActivity + Self.interval(idleTimeout)
        if expiry <= .now() { closeNow() } else { scheduleIdleTimer(at: expiry) }
    }

    private func scheduleIdleTimer(at expiry: DispatchTime) {
        idleTimer.schedule(deadline: expiry, leeway: Self.interval(idleTimeout / 10))
    }

    private func closeNow() {
        guard isOpen else { return }
        isOpen = false
        idleTimer.cancel()
        // Suspended sources deliver their cancel handler only once resumed.
        if isReadingPaused { readSource.resume() }
        if !isWriteArmed { writeSource.resume() }  // also activates a never-armed one
        readSource.cancel()
        writeSource.cancel()
    }

    private func socketReleased() {
        sourcesHoldingSocket -= 1
        guard sourcesHoldingSocket == 0 else { return }
        _ = Glibc.close(descriptor)
        onClosed()
    }

    private static func interval(_ duration: Duration) -> DispatchTimeInterval {
        .nanoseconds(Int(duration.components.seconds) * 1_000_000_000 + Int(duration.components.attoseconds / 1_000_000_000))
    }
}
