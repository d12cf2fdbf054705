#if canImport(Glibc)
import Glibc
#endif

/// `-o FILE`: the report written to a file (created, or emptied when it exists). Opened
/// before anything runs, so that a path that cannot be written fails at once.
final class ReportFile {
    let path: String
    /// What the file holds, for the errors ("the report", "the trace").
    let contents: String
    private let descriptor: Int32

    init(path: String, contents: String = "the report") throws {
        self.path = path
        self.contents = contents
        descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw ToolError("cannot write \(contents) to \(path): \(String(cString: strerror(errno)))")
        }
    }

    deinit {
        close(descriptor)
    }

    func write(_ text: String) throws {
        var remaining = Array(text.utf8)[...]
        while !remaining.isEmpty {
            let written = remaining.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if written < 0 {
                if errno == EINTR { continue }
                throw ToolError("cannot write \(contents) to \(path): \(String(cString: strerror(errno)))")
            }
            remaining = remaining.dropFirst(written)
        }
    }
}
