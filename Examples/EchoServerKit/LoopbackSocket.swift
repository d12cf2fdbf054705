// The socket calls of the echo server, runtime-neutral: the Lull server of the example and
// the Dispatch server of the load test (Benchmarks/) make and accept their sockets here, so
// that they differ only in how they are driven.

import CEchoShims

#if canImport(Glibc)
import Glibc
#endif

/// A failed socket call: which one, and the system's reason.
public struct SocketError: Error, CustomStringConvertible, Sendable {
    /// The call that failed, with its argument ("bind 127.0.0.1:8080").
    public let operation: String
    /// The `errno` it failed with.
    public let code: Int32

    public init(operation: String, code: Int32) {
        self.operation = operation
        self.code = code
    }

    public var description: String {
        "\(operation): \(String(cString: strerror(code)))"
    }
}

/// What a non-blocking `accept` gave.
public enum AcceptResult: Sendable {
    /// A connection: a non-blocking, close-on-exec descriptor with TCP_NODELAY set.
    case accepted(Int32)
    /// No connection is waiting.
    case wouldBlock
    /// The call failed for another reason than an empty backlog.
    case failed(SocketError)
}

/// TCP sockets on 127.0.0.1.
public enum LoopbackSocket {
    /// A non-blocking, close-on-exec socket listening on 127.0.0.1:`port` (0: the kernel picks
    /// a free port), and the port it got.
    public static func listen(port: UInt16, backlog: Int32 = 1024) throws(SocketError) -> (descriptor: Int32, port: UInt16) {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw SocketError(operation: "socket", code: errno) }
        do {
            var reuse: Int32 = 1
            try check("setsockopt SO_REUSEADDR",
                      setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size)))
            var address = loopbackAddress(port: port)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            try check("bind 127.0.0.1:\(port)", bound)
            try check("listen", Glibc.listen(descriptor, backlog))
            return (descriptor, try localPort(of: descriptor))
        } catch {
            _ = close(descriptor)
            throw error
        }
    }

    /// Accepts one waiting connection, if any.
    public static func accept(from listener: Int32) -> AcceptResult {
        while true {
            let descriptor = echo_accept_nonblocking(listener)
            if descriptor >= 0 {
                setNoDelay(descriptor)
                return .accepted(descriptor)
            }
            switch -descriptor {
            case EINTR, ECONNABORTED:
                continue  // a connection that was reset before we took it: take the next one
            case EAGAIN, EWOULDBLOCK:
                return .wouldBlock
            default:
                return .failed(SocketError(operation: "accept", code: -descriptor))
            }
        }
    }

    /// A blocking, close-on-exec connection to 127.0.0.1:`port`, with TCP_NODELAY set (for
    /// clients: the load test's and the tests').
    public static func connect(port: UInt16) throws(SocketError) -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw SocketError(operation: "socket", code: errno) }
        var address = loopbackAddress(port: port)
        var result: Int32
        repeat {
            result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        } while result != 0 && errno == EINTR
        guard result == 0 else {
            let code = errno
            _ = close(descriptor)
            throw SocketError(operation: "connect 127.0.0.1:\(port)", code: code)
        }
        setNoDelay(descriptor)
        return descriptor
    }

    /// The peer's address as "127.0.0.1:port", or "?" when the socket has none any more.
    public static func peerName(of descriptor: Int32) -> String {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let result = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(descriptor, $0, &length) }
        }
        guard result == 0 else { return "?" }
        let host = UInt32(bigEndian: address.sin_addr.s_addr)
        let dotted = [24, 16, 8, 0].map { String((host >> UInt32($0)) & 0xFF) }.joined(separator: ".")
        return "\(dotted):\(UInt16(bigEndian: address.sin_port))"
    }

    /// Small messages go out at once: an echo answers one message with one write, and Nagle's
    /// algorithm would hold it back while an earlier answer is unacknowledged.
    private static func setNoDelay(_ descriptor: Int32) {
        var on: Int32 = 1
        // Best effort: without it the server is slower, not wrong.
        _ = setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
    }

    private static func loopbackAddress(port: UInt16) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }

    private static func localPort(of descriptor: Int32) throws(SocketError) -> UInt16 {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let result = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        try check("getsockname", result)
        return UInt16(bigEndian: address.sin_port)
    }

    private static func check(_ operation: String, _ result: Int32) throws(SocketError) {
        if result != 0 { throw SocketError(operation: operation, code: errno) }
    }
}
