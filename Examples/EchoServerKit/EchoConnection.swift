import Lull

#if canImport(Glibc)
import Glibc
#endif

/// One client of the echo server: a serial queue, a read source and a write source on the
/// socket, and an idle timer, all delivering to that queue, so the connection's state needs
/// no lock.
///
/// - Backpressure: what is read is written back at once as far as the socket takes it
///   (`EchoBuffer.echo(on:)`); the rest waits in a bounded `EchoBuffer` for the write source.
///   When the buffer is full the read source is suspended, and resumed once the client has
///   read half of it. An idle connection holds no buffer memory.
/// - The write source runs only while there is something to write (it is level-triggered:
///   an idle writable socket would call it again and again).
/// - Idle timeout: the timer is not rescheduled on every message; it fires at the first
///   possible expiry, with a leeway of a tenth of the timeout (so the timers of thousands of
///   connections share wake-ups), and then either closes the connection or aims at the new
///   expiry.
/// - The socket is closed in the cancel handlers, once both sources have let it go.
///
/// The mutable state lives in a `QueueBound` owned by `queue` (the handlers of the three
/// sources target it, and `start`/`finish` hop onto it): every access checks that it runs
/// there, so the connection is `Sendable` without a lock and without `@unchecked`.
final class EchoConnection: Sendable {
    private enum Phase {
        case open
        /// No more reading; closes once the buffer is written out.
        case draining
        case closed
    }

    /// What changes while the connection lives, reachable only on `queue`.
    private struct State {
        let buffer: EchoBuffer
        var phase = Phase.open
        var isReadingPaused = false
        var isReadCancelled = false
        /// The write source starts inactive, which counts as paused: `resume()` activates it.
        var isWriteArmed = false
        var lastActivity = Deadline.now()
        /// The sources whose cancel handler has not run yet; the socket closes at 0.
        var sourcesHoldingSocket = 2
        var closeReason = ""
        var bytesEchoed = 0
    }

    let id: Int
    let descriptor: Int32
    let peer: String
    private let queue: WorkQueue
    private let readSource: ReadSource
    private let writeSource: WriteSource
    private let idleTimer: TimerSource
    private let idleTimeout: Duration
    private let log: EchoServer.Log?
    /// Called on `queue` once the socket is closed.
    private let onClosed: @Sendable (EchoConnection) -> Void
    private let state: QueueBound<State>

    // The state's fields, read and written on `queue` (checked).
    private var buffer: EchoBuffer { state.value.buffer }
    private var phase: Phase {
        get { state.value.phase }
        set { state.value.phase = newValue }
    }
    private var isReadingPaused: Bool {
        get { state.value.isReadingPaused }
        set { state.value.isReadingPaused = newValue }
    }
    private var isReadCancelled: Bool {
        get { state.value.isReadCancelled }
        set { state.value.isReadCancelled = newValue }
    }
    private var isWriteArmed: Bool {
        get { state.value.isWriteArmed }
        set { state.value.isWriteArmed = newValue }
    }
    private var lastActivity: Deadline {
        get { state.value.lastActivity }
        set { state.value.lastActivity = newValue }
    }
    private var sourcesHoldingSocket: Int {
        get { state.value.sourcesHoldingSocket }
        set { state.value.sourcesHoldingSocket = newValue }
    }
    private var closeReason: String {
        get { state.value.closeReason }
        set { state.value.closeReason = newValue }
    }
    private var bytesEchoed: Int {
        get { state.value.bytesEchoed }
        set { state.value.bytesEchoed = newValue }
    }

    init(id: Int, descriptor: Int32, configuration: EchoServer.Configuration,
         onClosed: @escaping @Sendable (EchoConnection) -> Void) {
        self.id = id
        self.descriptor = descriptor
        self.peer = LoopbackSocket.peerName(of: descriptor)
        self.idleTimeout = configuration.idleTimeout
        self.log = configuration.log
        self.onClosed = onClosed
        queue = WorkQueue(label: "echo.connection.\(id)")
        readSource = EventSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
        writeSource = EventSource.makeWriteSource(fileDescriptor: descriptor, queue: queue)
        idleTimer = EventSource.makeTimerSource(queue: queue)
        state = QueueBound(State(buffer: EchoBuffer(capacity: configuration.bufferBytes)), on: queue)
    }

    func start() {
        // The handlers capture the connection: the cycle is broken when the sources are
        // cancelled (a cancelled source lets its handlers go).
        readSource.setEventHandler { [self] in readable() }
        writeSource.setEventHandler { [self] in writable() }
        idleTimer.setEventHandler { [self] in idleTimerFired() }
        readSource.setCancelHandler { [self] in socketReleased() }
        writeSource.setCancelHandler { [self] in socketReleased() }
        queue.async { [self] in
            log?("#\(id) connected from \(peer)")
            lastActivity = .now()
            scheduleIdleTimer(at: lastActivity + idleTimeout)
            idleTimer.activate()
            readSource.activate()
        }
    }

    /// Stops reading, writes back what was read, then closes (the server's shutdown).
    func finish(reason: String) {
        queue.async { [self] in stopReading(reason: reason) }
    }

    /// Closes now, dropping what was not written back.
    func abort(reason: String) {
        queue.async { [self] in close(reason: reason) }
    }

    // MARK: Handlers (on `queue`)

    private func readable() {
        guard phase == .open else { return }
        let (read, write) = buffer.echo(on: descriptor)
        switch read {
        case .moved:
            lastActivity = .now()
            wrote(write)
            if phase == .open && buffer.isFull { pauseReading() }
        case .wouldBlock:
            break
        case .endOfFile:
            stopReading(reason: "client closed the connection")
        case .failed(let code):
            close(reason: "read failed: \(String(cString: strerror(code)))")
        }
    }

    private func writable() {
        guard phase != .closed else { return }
        writeBack()
    }

    private func idleTimerFired() {
        guard phase != .closed else { return }
        let expiry = lastActivity + idleTimeout
        if expiry <= .now() {
            close(reason: "idle for \(idleTimeout)")
        } else {
            scheduleIdleTimer(at: expiry)
        }
    }

    private func socketReleased() {
        sourcesHoldingSocket -= 1
        guard sourcesHoldingSocket == 0 else { return }
        // Both sources have removed the descriptor from the reactor: closing it is safe even
        // if its number is reused at once.
        _ = Glibc.close(descriptor)
        log?("#\(id) closed (\(closeReason); \(bytesEchoed) bytes echoed)")
        onClosed(self)
    }

    // MARK: Steps (on `queue`)

    private func writeBack() {
        wrote(buffer.drain(to: descriptor))
    }

    /// After a write of waiting (or just read) bytes: arms the write source while bytes
    /// wait, resumes reading once half the buffer is free.
    private func wrote(_ write: EchoBuffer.Transfer) {
        switch write {
        case .moved(let count):
            bytesEchoed += count
        case .wouldBlock, .endOfFile:
            break
        case .failed(let code):
            close(reason: "write failed: \(String(cString: strerror(code)))")
            return
        }
        if buffer.isEmpty {
            disarmWrite()
            if phase == .draining { close(reason: closeReason) }
        } else {
            armWrite()
        }
        if isReadingPaused && buffer.count <= buffer.capacity / 2 { resumeReading() }
    }

    private func stopReading(reason: String) {
        guard phase == .open else { return }
        phase = .draining
        closeReason = reason
        cancelReadSource()
        if buffer.isEmpty { close(reason: reason) } else { armWrite() }
    }

    private func close(reason: String) {
        guard phase != .closed else { return }
        if phase == .open { closeReason = reason }
        phase = .closed
        idleTimer.cancel()
        cancelReadSource()
        armWrite()  // a suspended source delivers its cancel handler only once resumed
        writeSource.cancel()
    }

    private func cancelReadSource() {
        guard !isReadCancelled else { return }
        isReadCancelled = true
        resumeReading()
        readSource.cancel()
    }

    private func scheduleIdleTimer(at expiry: Deadline) {
        idleTimer.schedule(deadline: expiry, leeway: idleTimeout / 10)
    }

    private func pauseReading() {
        guard !isReadingPaused else { return }
        isReadingPaused = true
        readSource.suspend()
    }

    private func resumeReading() {
        guard isReadingPaused else { return }
        isReadingPaused = false
        readSource.resume()
    }

    private func armWrite() {
        guard !isWriteArmed else { return }
        isWriteArmed = true
        writeSource.resume()
    }

    private func disarmWrite() {
        guard isWriteArmed else { return }
        isWriteArmed = false
        writeSource.suspend()
    }
}
