import Glibc

/// What the process holds that a source can leak: its open descriptors by what they are
/// (`/proc/self/fd`: pipe, socket, anon_inode:[pidfd], anon_inode:inotify, a file…) and
/// its inotify watches (the `inotify wd:` lines of `/proc/self/fdinfo/<fd>` of every
/// inotify descriptor).
struct ResourceCensus: Equatable, CustomStringConvertible {
    var descriptors: [String: Int] = [:]
    var inotifyWatches = 0

    static func take() -> ResourceCensus {
        var census = ResourceCensus()
        guard let directory = opendir("/proc/self/fd") else { return census }
        defer { closedir(directory) }
        let own = dirfd(directory)
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let number = Int32(name), number != own else { continue }
            let target = linkTarget("/proc/self/fd/\(name)")
            census.descriptors[category(of: target), default: 0] += 1
            if target == "anon_inode:inotify" {
                census.inotifyWatches += watchCount(fdinfo: "/proc/self/fdinfo/\(name)")
            }
        }
        return census
    }

    /// What is open now beyond `baseline` (empty when nothing leaked).
    func excess(over baseline: ResourceCensus) -> [String] {
        var found: [String] = []
        for (category, count) in descriptors.sorted(by: { $0.key < $1.key }) where count > baseline.descriptors[category, default: 0] {
            found.append("\(count - baseline.descriptors[category, default: 0]) more \(category) descriptor(s)")
        }
        if inotifyWatches > baseline.inotifyWatches {
            found.append("\(inotifyWatches - baseline.inotifyWatches) more inotify watch(es)")
        }
        return found
    }

    var description: String {
        descriptors.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ")
            + ", inotify watches: \(inotifyWatches)"
    }

    /// `pipe:[123]` → `pipe`, `/tmp/x` → `file`, anonymous inodes by name.
    private static func category(of target: String) -> String {
        if target.hasPrefix("anon_inode:") { return target }
        if target.hasPrefix("/") { return "file" }
        return String(target.prefix { $0 != ":" })
    }

    private static func linkTarget(_ path: String) -> String {
        var buffer = [CChar](repeating: 0, count: 4_096)
        let length = readlink(path, &buffer, buffer.count - 1)
        guard length > 0 else { return "closed" }
        return String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func watchCount(fdinfo path: String) -> Int {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return 0 }
        defer { close(descriptor) }
        var text: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4_096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                text += chunk[0..<count]
            } else if count < 0 && errno == EINTR {
                continue
            } else {
                break
            }
        }
        return String(decoding: text, as: UTF8.self).split(separator: "\n").filter { $0.hasPrefix("inotify wd:") }.count
    }
}
