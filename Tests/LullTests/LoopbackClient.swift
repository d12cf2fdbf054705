import Glibc

/// The client end of a loopback TCP connection, for the tests that talk to the echo-server
/// example (a child process: the example's own code lives in the examples package).
enum LoopbackClient {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// A blocking, close-on-exec connection to 127.0.0.1:`port`, with TCP_NODELAY set.
    static func connect(port: UInt16) throws -> Int32 {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue | SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw Failure(description: "socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var result: Int32
        repeat {
            result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        } while result != 0 && errno == EINTR
        guard result == 0 else {
            let reason = String(cString: strerror(errno))
            _ = close(descriptor)
            throw Failure(description: "connect 127.0.0.1:\(port): \(reason)")
        }
        var on: Int32 = 1
        // Best effort: without it the exchange is slower, not wrong.
        _ = setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
        return descriptor
    }
}
