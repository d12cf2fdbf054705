/// What the process holds that a source can leak: its open descriptors by what they are
/// (`/proc/self/fd`: pipe, socket, anon_inode:[pidfd], anon_inode:inotify, a file…) and
/// its inotify watches (the `inotify wd:` lines of `/proc/self/fdinfo/<fd>` of every
/// inotify descriptor).
struct ResourceCensus: Equatable, CustomStringConvertible {
    var descriptors: [String: Int] = [:]
    var inotifyWatches = 0

    static func take() -> ResourceCensus {
        let open = ProcessResources.openDescriptors()
        var census = ResourceCensus()
        for target in open.values { census.descriptors[category(of: target), default: 0] += 1 }
        census.inotifyWatches = ProcessResources.inotifyWatches(of: open)
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
}
