import CLullTestSupport
import Glibc
import Testing
@testable import Lull

/// What watching a tree costs in heap per directory, so that a field or an object added
/// per directory shows here and not in `lull-bench fs-tree-watch` months later. Issue #18
/// asks 10,000 directories to cost no more RSS than `inotifywait -r` (about 250 B a
/// directory). A directory costs the hub's unpinned watch (an 80-byte chunk), its slot in
/// the hub's table and the tree's record (name, parent, watch) with its slot: about 190 B
/// measured here; an object per lease and a full path per directory cost over 450 B.
extension LullSuite {
    @Suite struct TreeWatcherFootprintTests {
        /// 384 directories: a debug build checks the hub's whole table after each watch it
        /// adds, so its walk is quadratic, and 384 keep the test fast.
        static let top = 12
        static let below = 31
        /// Directories below the root.
        static var directories: Int { top * (1 + below) }
        /// Heap bytes per watched directory the test allows: about 190 are measured; the
        /// bound leaves room for other tests' allocations meanwhile (they run alongside the
        /// serialized suite) and fails long before the 450 B of an object per lease and a
        /// full path per directory.
        static let boundPerDirectory = 280

        /// A new directory on /dev/shm (a tmpfs: 2,000 mkdir(2) take seconds on a busy disk),
        /// or under /tmp where there is none.
        static func makeScratch() throws -> String {
            let base = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp"
            var template = Array("\(base)/lull-footprint-XXXXXX".utf8CString)
            let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) != nil }
            guard made else { throw FileSystemTestKit.SystemError(call: "mkdtemp", code: errno) }
            return String(decoding: template.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }

        @Test func watchingATreeCostsLittleHeapPerDirectory() throws {
            let scratch = try Self.makeScratch()
            defer { FileSystemTestKit.removeTree(scratch) }
            let (empty, root) = ("\(scratch)/empty", "\(scratch)/tree")
            try FileSystemTestKit.check(mkdir(empty, 0o755), "mkdir")
            try FileSystemTestKit.check(mkdir(root, 0o755), "mkdir")
            for index in 0..<Self.top {
                let directory = "\(root)/d\(index)"
                try FileSystemTestKit.check(mkdir(directory, 0o755), "mkdir")
                for subindex in 0..<Self.below {
                    try FileSystemTestKit.check(mkdir("\(directory)/s\(subindex)", 0o755), "mkdir")
                }
            }
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)
            let queue = WorkQueue(label: "lull.test.fs.footprint")
            // A watcher on an empty directory first: the inotify instance, its registration
            // and a watcher's own objects are not what a directory costs.
            let warm = try DirectoryTreeWatcher(path: empty, latency: .milliseconds(20), queue: queue, hub: hub)
            warm.activate()
            defer { warm.cancel() }
            // Two rounds: the first pays what a process pays once (the tables' first growth,
            // caches of the runtime and of malloc); the second is measured.
            var perDirectory = 0
            var measured = false
            for _ in 0..<2 {
                let before = lull_heap_bytes_in_use()
                let watcher = try DirectoryTreeWatcher(path: root, latency: .milliseconds(20), queue: queue, hub: hub)
                watcher.activate()
                let after = lull_heap_bytes_in_use()
                #expect(watcher.error == nil)
                // The empty directory, the sentinel on the scratch directory (both watchers'),
                // the tree's root and its directories.
                #expect(hub.snapshot.watches == 2 + 1 + Self.directories)
                // A sanitizer's allocator (ThreadSanitizer's) leaves glibc's statistics at 0.
                measured = after != before
                perDirectory = (Int(after) - Int(before)) / Self.directories
                watcher.cancel()
                // The teardown job lets the watches go and frees the records: done once a
                // job queued after it on the same target has run.
                queue.sync {}
                #expect(waitUntil { hub.snapshot.watches == 2 })
            }
            guard measured else {
                print("TreeWatcherFootprintTests: malloc keeps no glibc statistics here (a sanitizer's allocator); not measured")
                return
            }
            #expect(perDirectory <= Self.boundPerDirectory,
                    "watching \(Self.directories) directories took \(perDirectory) B of heap each")
            print("TreeWatcherFootprintTests: \(perDirectory) B of heap per watched directory")
        }
    }
}
