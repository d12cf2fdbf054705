import CEchoShims

#if canImport(Glibc)
import Glibc
#endif

/// The bytes a connection has read and not yet written back. Its capacity bounds the memory
/// of a connection whose client sends faster than it reads: when it holds that many bytes the
/// server stops reading (backpressure).
///
/// An idle connection costs no buffer: `echo(on:)` reads into its thread's scratch space and
/// writes straight back, and storage is allocated only for bytes the socket did not take at
/// once (and freed again once they are written out), so the common case — an echo that fits
/// the socket's send buffer — allocates nothing.
///
/// Not thread-safe: a connection uses it from its own serial queue only.
public final class EchoBuffer {
    /// What one read or write did.
    public enum Transfer: Equatable, Sendable {
        /// Moved this many bytes (> 0).
        case moved(Int)
        /// The socket has nothing to read, or no room to write, right now.
        case wouldBlock
        /// The peer closed its side (read only).
        case endOfFile
        /// The call failed with this errno (ECONNRESET, EPIPE...).
        case failed(Int32)
    }

    public let capacity: Int
    /// Allocated while bytes wait (capacity bytes), nil otherwise.
    private var storage: UnsafeMutableRawPointer?
    /// The unsent bytes are storage[start..<end].
    private var start = 0
    private var end = 0

    public init(capacity: Int) {
        precondition(capacity > 0, "an echo buffer needs room for at least one byte")
        self.capacity = capacity
    }

    deinit {
        storage?.deallocate()
    }

    /// Bytes waiting to be written back.
    public var count: Int { end - start }
    public var isEmpty: Bool { start == end }
    public var isFull: Bool { count == capacity }

    /// Reads once from `descriptor` and writes what it read back to it at once; what the
    /// socket does not take waits here (for `drain(to:)`). With bytes already waiting, the
    /// new ones go behind them. Returns the read's transfer and the write's (`.wouldBlock`
    /// when nothing was written, or nothing was read).
    public func echo(on descriptor: Int32) -> (read: Transfer, write: Transfer) {
        // Behind waiting bytes, or without scratch space: through the connection's storage.
        guard isEmpty, let scratch = echo_thread_scratch(capacity) else {
            let read = fill(from: descriptor)
            guard case .moved = read else { return (read, .wouldBlock) }
            return (read, drain(to: descriptor))
        }
        let read = Self.read(descriptor, into: scratch, count: capacity)
        guard case .moved(let readCount) = read else { return (read, .wouldBlock) }
        let write = Self.send(descriptor, from: scratch, count: readCount)
        let sent: Int
        switch write {
        case .moved(let count): sent = count
        case .wouldBlock, .endOfFile: sent = 0
        case .failed: return (read, write)  // the connection closes: nothing waits
        }
        if sent < readCount {
            let waiting = readCount - sent
            allocatedStorage().copyMemory(from: scratch + sent, byteCount: waiting)
            start = 0
            end = waiting
        }
        return (read, write)
    }

    /// Reads once from `descriptor` into the free space; `.wouldBlock` when the buffer is full.
    public func fill(from descriptor: Int32) -> Transfer {
        guard !isFull else { return .wouldBlock }
        let buffer = allocatedStorage()
        if end == capacity { compact() }
        let read = Self.read(descriptor, into: buffer + end, count: capacity - end)
        if case .moved(let count) = read { end += count }
        releaseIfEmpty()
        return read
    }

    /// Writes the waiting bytes to `descriptor` until they are gone or the socket is full.
    public func drain(to descriptor: Int32) -> Transfer {
        guard let storage, !isEmpty else { return .wouldBlock }
        let write = Self.send(descriptor, from: storage + start, count: count)
        if case .moved(let count) = write { start += count }
        releaseIfEmpty()
        return write
    }

    private func allocatedStorage() -> UnsafeMutableRawPointer {
        if let storage { return storage }
        let allocated = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
        storage = allocated
        return allocated
    }

    /// Frees the storage once nothing waits in it: an idle connection holds no buffer.
    private func releaseIfEmpty() {
        guard isEmpty, let storage else { return }
        storage.deallocate()
        self.storage = nil
        start = 0
        end = 0
    }

    /// Moves the waiting bytes to the front, to make room at the end.
    private func compact() {
        guard start > 0, let storage else { return }
        storage.copyMemory(from: storage + start, byteCount: count)
        end -= start
        start = 0
    }

    /// One read(2), retried on EINTR.
    private static func read(_ descriptor: Int32, into buffer: UnsafeMutableRawPointer, count: Int) -> Transfer {
        while true {
            let result = Glibc.read(descriptor, buffer, count)
            if result > 0 { return .moved(result) }
            if result == 0 { return .endOfFile }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            default: return .failed(errno)
            }
        }
    }

    /// send(2) until `count` bytes are written or the socket is full.
    private static func send(_ descriptor: Int32, from buffer: UnsafeRawPointer, count: Int) -> Transfer {
        var written = 0
        while written < count {
            // MSG_NOSIGNAL: a peer that went away is an EPIPE for this connection, not a
            // SIGPIPE for the whole server.
            let result = Glibc.send(descriptor, buffer + written, count - written, Int32(MSG_NOSIGNAL))
            if result > 0 {
                written += result
                continue
            }
            if result < 0 && errno == EINTR { continue }
            if result < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
            return .failed(result < 0 ? errno : EPIPE)
        }
        return written > 0 ? .moved(written) : .wouldBlock
    }
}
