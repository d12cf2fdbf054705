#if canImport(Glibc)
import Glibc
#endif

enum TextFile {
    /// The lines of a (small) text file.
    static func lines(of path: String) throws(SystemError) -> [String] {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw SystemError(code: errno) }
        defer { _ = close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                bytes += chunk[0..<count]
            } else if count == 0 {
                break
            } else if errno != EINTR {
                throw SystemError(code: errno)
            }
        }
        return String(decoding: bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    }
}
