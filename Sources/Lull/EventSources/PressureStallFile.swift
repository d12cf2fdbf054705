#if canImport(Glibc)
import Glibc
#endif

/// Linux's memory pressure-stall information (PSI) file: where it is for this process,
/// opening it with a trigger, and reading its stall total.
///
/// The file is the cgroup v2 `memory.pressure` of the process's cgroup when that cgroup has
/// the memory controller (its pressure is what limits the process), otherwise the system's
/// `/proc/pressure/memory`. Each trigger needs a descriptor of its own (the kernel takes one
/// per open file), opened O_RDWR | O_NONBLOCK | O_CLOEXEC.
enum PressureStallFile {
    static let systemPath = "/proc/pressure/memory"

    /// The file this process's memory pressure is read from.
    static func memoryPressurePath() -> String {
        guard let cgroup = unifiedCgroupDirectory(),
              let controllers = readSmallFile("\(cgroup)/cgroup.controllers"),
              controllers.split(whereSeparator: { $0 == " " || $0 == "\n" }).contains("memory"),
              access("\(cgroup)/memory.pressure", F_OK) == 0
        else { return systemPath }
        return "\(cgroup)/memory.pressure"
    }

    /// The directory of this process's cgroup in the cgroup v2 hierarchy: the mount point of
    /// `cgroup2` (from /proc/self/mountinfo) joined with the `0::` line of /proc/self/cgroup.
    static func unifiedCgroupDirectory() -> String? {
        guard let membership = readSmallFile("/proc/self/cgroup"),
              let line = membership.split(separator: "\n").first(where: { $0.hasPrefix("0::") }),
              let mounts = readSmallFile("/proc/self/mountinfo")
        else { return nil }
        let relative = String(line.dropFirst(3))
        for mount in mounts.split(separator: "\n") {
            // "id parent major:minor root mountpoint options... - fstype source superoptions"
            let halves = mount.split(separator: " - ", maxSplits: 1)
            guard halves.count == 2, halves[1].hasPrefix("cgroup2 ") else { continue }
            let fields = halves[0].split(separator: " ")
            guard fields.count >= 5 else { continue }
            let mountPoint = String(fields[4])
            return relative == "/" ? mountPoint : mountPoint + relative
        }
        return nil
    }

    /// Opens `path` and writes `trigger` to it: the descriptor, which polls with EPOLLPRI
    /// each time the trigger fires. The error names what failed, in a user's words.
    static func openTrigger(path: String, trigger: String, subject: String) throws(EventSourceError) -> Int32 {
        let descriptor: Int32
        do throws(SystemError) {
            descriptor = try Syscall.posix("open") { open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC) }
        } catch {
            let reason = switch error.code {
            case ENOENT: "\(path) is missing: this kernel has no pressure-stall information (CONFIG_PSI, or booted with psi=0)"
            case EACCES, EPERM: "not allowed to open \(path) for writing (PSI triggers need write access)"
            default: "cannot open \(path): \(SystemError.describe(error.code))"
            }
            throw EventSourceError(subject: subject, code: error.code, reason: reason)
        }
        var line = Array(trigger.utf8)
        line.append(0)
        do throws(SystemError) {
            _ = try Syscall.posix("write") { line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) } }
        } catch {
            close(descriptor)
            let reason = switch error.code {
            case EINVAL: "the kernel refused the PSI trigger \"\(trigger)\" in \(path)"
            case EPERM, EACCES: "not allowed to create the PSI trigger \"\(trigger)\" in \(path)"
            case EOPNOTSUPP: "pressure-stall information is disabled in this kernel (psi=0)"
            default: "cannot write the PSI trigger \"\(trigger)\" to \(path): \(SystemError.describe(error.code))"
            }
            throw EventSourceError(subject: subject, code: error.code, reason: reason)
        }
        return descriptor
    }

    /// The cumulative "some" stall time (µs) read from `descriptor`, or nil when it cannot
    /// be read or parsed.
    static func someTotal(descriptor: Int32) -> UInt64? {
        var buffer = [UInt8](repeating: 0, count: 512)
        let count: Int
        do throws(SystemError) {
            count = try Syscall.posix("pread") { buffer.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, 0) } }
        } catch {
            return nil
        }
        return someTotal(in: String(decoding: buffer[0..<count], as: UTF8.self))
    }

    /// The `total=` of the "some" line of a PSI file's text.
    static func someTotal(in text: String) -> UInt64? {
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("some ") }) else { return nil }
        for field in line.split(separator: " ") where field.hasPrefix("total=") {
            return UInt64(field.dropFirst(6))
        }
        return nil
    }

    /// The contents of a small text file (under 64 KiB), or nil.
    static func readSmallFile(_ path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while bytes.count < 65_536 {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += chunk[0..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
