#if canImport(Glibc)
import Glibc
#endif

/// The file the program records into: created empty (mode 0600) by the tool, sized and
/// filled by the program's runtime, removed after the report unless the user keeps it.
struct TraceFile {
    let path: String
    let kept: Bool

    init(keepingAt path: String?) throws {
        if let path {
            self.path = path
            kept = true
        } else {
            let directory = getenv("TMPDIR").map { String(cString: $0) } ?? "/tmp"
            self.path = "\(directory)/timerfires.\(getpid()).\(monotonicNow() % 1_000_000_000).trace"
            kept = false
        }
        let descriptor = open(self.path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw ToolError("cannot create the trace file \(self.path): \(String(cString: strerror(errno)))")
        }
        close(descriptor)
    }

    func discard() {
        if !kept { unlink(path) }
    }

    /// Whether the file at `path` starts with `prefix` (false if it cannot be read): a kept
    /// kernel trace is text, Lull's trace is binary.
    static func starts(_ path: String, with prefix: String) -> Bool {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        let expected = Array(prefix.utf8)
        var bytes = [UInt8](repeating: 0, count: expected.count)
        var filled = 0
        while filled < bytes.count {
            let count = bytes.withUnsafeMutableBytes { read(descriptor, $0.baseAddress! + filled, $0.count - filled) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return false }
            filled += count
        }
        return bytes == expected
    }
}
