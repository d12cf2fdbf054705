#if canImport(Glibc)
import Glibc
#endif

/// Where a Lull program's diagnostics control socket listens: the abstract-namespace unix
/// address `lull-diagnostics.<pid>` (no file), which the runtime binds and `timerfires
/// --pid` connects to.
public enum ControlSocketAddress {
    public static func name(pid: Int32) -> String { "lull-diagnostics.\(pid)" }

    /// The abstract `sockaddr_un` of process `pid` (leading NUL, no file) and its length.
    public static func of(pid: Int32) -> (address: sockaddr_un, length: socklen_t) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(name(pid: pid).utf8.prefix(100))
        withUnsafeMutableBytes(of: &address.sun_path) { path in
            path[0] = 0
            for (index, byte) in bytes.enumerated() { path[index + 1] = byte }
        }
        let length = MemoryLayout<sa_family_t>.size + 1 + bytes.count
        return (address, socklen_t(length))
    }
}
