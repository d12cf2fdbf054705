import Glibc

/// What the test process holds in the kernel, read from /proc/self: open descriptors, the
/// descriptors epoll sets watch, inotify watches. For leak checks: compare before and after.
enum ProcessResources {
    /// The open descriptor numbers with what each one names (the /proc/self/fd link).
    static func openDescriptors() -> [Int32: String] {
        var found: [Int32: String] = [:]
        guard let directory = opendir("/proc/self/fd") else { return found }
        let own = dirfd(directory)
        defer { closedir(directory) }
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let number = Int32(name), number != own else { continue }
            found[number] = link("/proc/self/fd/\(number)") ?? "?"
        }
        return found
    }

    static var descriptorCount: Int { openDescriptors().count }

    /// How many entries for `descriptor` the process's epoll sets hold (the reactor's, and
    /// Lull's open-file witness): the `tfd:` lines of their fdinfo.
    static func epollEntries(for descriptor: Int32) -> Int {
        var count = 0
        for (number, target) in openDescriptors() where target == "anon_inode:[eventpoll]" {
            for line in fdinfo(number) where line.hasPrefix("tfd:") {
                let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                if fields.count > 1, Int32(fields[1]) == descriptor { count += 1 }
            }
        }
        return count
    }

    /// The inotify watches of every inotify instance of the process.
    static var inotifyWatchCount: Int { inotifyWatches(of: openDescriptors()) }

    /// The inotify watches of the inotify instances among `descriptors` (from
    /// `openDescriptors()`).
    static func inotifyWatches(of descriptors: [Int32: String]) -> Int {
        var count = 0
        for (number, target) in descriptors where target == "anon_inode:inotify" {
            count += fdinfo(number).filter { $0.hasPrefix("inotify wd:") }.count
        }
        return count
    }

    private static func fdinfo(_ descriptor: Int32) -> [Substring] {
        (contents("/proc/self/fdinfo/\(descriptor)") ?? "").split(separator: "\n")
    }

    private static func link(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink(path, &buffer, buffer.count - 1)
        guard count >= 0 else { return nil }
        return String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func contents(_ path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, 4096) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += buffer.prefix(count)
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
