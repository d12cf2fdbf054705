#if canImport(Glibc)
import Glibc
#endif

/// The process's wake-ups as the kernel counts them: the voluntary context switches of its
/// threads (`/proc/PID/task/*/status`). A thread that exited takes its count with it.
public enum KernelSwitches {
    /// The sum over the live threads of `pid`, and how many there are; nil if the process
    /// is gone or not readable.
    public static func voluntary(pid: Int32) -> (total: Int, threads: Int)? {
        guard let directory = opendir("/proc/\(pid)/task") else { return nil }
        defer { closedir(directory) }
        var total = 0
        var threads = 0
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let tid = Int32(name) else { continue }
            guard let switches = voluntary(pid: pid, tid: tid) else { continue }  // exited meanwhile
            total += switches
            threads += 1
        }
        return threads == 0 ? nil : (total, threads)
    }

    private static func voluntary(pid: Int32, tid: Int32) -> Int? {
        guard let text = readSmallFile("/proc/\(pid)/task/\(tid)/status") else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("voluntary_ctxt_switches:") {
            return Int(line.dropFirst("voluntary_ctxt_switches:".count).trimmingPrefix { $0 == " " || $0 == "\t" })
        }
        return nil
    }

    /// The text of a small file (a /proc entry), or nil if it cannot be read.
    public static func readSmallFile(_ path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return nil }
            if count == 0 { break }
            bytes += chunk[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
