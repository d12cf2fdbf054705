#if canImport(Glibc)
import Glibc
#endif

/// The bytes a connection has read and not yet written back: a fixed-size buffer, filled from
/// the socket and drained into it. Its size bounds the memory of a connection whose client
/// sends faster than it reads: when it is full the server stops reading (backpressure).
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
    private let storage: UnsafeMutableRawPointer
    /// The unsent bytes are storage[start..<end].
    private var start = 0
    private var end = 0

    public init(capacity: Int) {
        precondition(capacity > 0, "an echo buffer needs room for at least one byte")
        self.capacity = capacity
        storage = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
    }

    deinit {
        storage.deallocate()
    }

    /// Bytes waiting to be written back.
    public var count: Int { end - start }
    public var isEmpty: Bool { start == end }
    public var isFull: Bool { count == capacity }

    /// Reads once from `descriptor` into the free space; `.wouldBlock` when the buffer is full.
    public func fill(from descriptor: Int32) -> Transfer {
        guard !isFull else { return .wouldBlock }
        if end == capacity { compact() }
        while true {
            let result = read(descriptor, storage + end, capacity - end)
            if result > 0 {
                end += result
                return .moved(result)
            }
            if result == 0 { return .endOfFile }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            default: return .failed(errno)
            }
        }
    }

    /// Writes the waiting bytes to `descriptor` until they are gone or the socket is full.
    public func drain(to descriptor: Int32) -> Transfer {
        var written = 0
        while !isEmpty {
            // MSG_NOSIGNAL: a peer that went away is an EPIPE for this connection, not a
            // SIGPIPE for the whole server.
            let result = send(descriptor, storage + start, count, Int32(MSG_NOSIGNAL))
            if result > 0 {
                start += result
                written += result
                continue
            }
            if result < 0 && errno == EINTR { continue }
            if result < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
            return .failed(result < 0 ? errno : EPIPE)
        }
        if isEmpty { start = 0; end = 0 }
        return written > 0 ? .moved(written) : .wouldBlock
    }

    /// Moves the waiting bytes to the front, to make room at the end.
    private func compact() {
        guard start > 0 else { return }
        storage.copyMemory(from: storage + start, byteCount: count)
        end -= start
        start = 0
    }
}
