import Glibc
import Testing
@testable import Lull

extension LullSuite {
    /// The tree watcher's model of moves: cookies paired into renames, subtrees that leave
    /// the tree and come back, and batches that end in the tree's final state.
    @Suite struct TreeWatcherMoveTests {
        let queue = WorkQueue(label: "lull.test.fs.watcher.moves")

        /// A watched tree, a directory outside it, and what the watcher reported.
        struct Scene {
            let tree: FileSystemTestKit.TemporaryDirectory
            let outside: FileSystemTestKit.TemporaryDirectory
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)
            let log = TreeChangeLog()
            let watcher: DirectoryTreeWatcher

            /// Makes `directories` and then `files` (paths starting "out/" go outside the
            /// tree), and watches the tree.
            init(queue: WorkQueue, directories: [String], files: [String] = []) throws {
                tree = try FileSystemTestKit.TemporaryDirectory("tree")
                outside = try FileSystemTestKit.TemporaryDirectory("outside")
                watcher = try DirectoryTreeWatcher(path: tree.path, latency: .milliseconds(20), queue: queue, hub: hub)
                for name in directories { try FileSystemTestKit.check(mkdir(at(name), 0o755), "mkdir") }
                for name in files { try FileSystemTestKit.write(at(name), "x") }
                watcher.setEventHandler { [log] in log.record($0) }
                watcher.activate()
            }

            func at(_ name: String) -> String {
                name.hasPrefix("out/") ? outside.at(String(name.dropFirst(4))) : tree.at(name)
            }

            func move(_ from: String, _ to: String) throws {
                try FileSystemTestKit.check(rename(at(from), at(to)), "rename")
            }

            /// Runs `body` with the hub's queue held, so that every event it causes is read
            /// in one drain and lands in one batch.
            func inOneBatch(_ body: () throws -> Void) rethrows {
                hub.holdDraining(true)
                defer { hub.holdDraining(false) }
                try body()
            }

            /// The kinds reported for `name`, in order.
            func kinds(_ name: String) -> [DirectoryTreeWatcher.Change.Kind] {
                log.all.filter { $0.path == at(name) }.map(\.kind)
            }

            func finish() {
                watcher.cancel()
                tree.remove()
                outside.remove()
            }
        }

        @Test func aSubtreeMovedOutAndStraightBackIsRemovedThenCreatedAndStaysWatched() throws {
            let scene = try Scene(queue: queue, directories: ["sub", "sub/inner"])
            defer { scene.finish() }
            let log = scene.log

            try scene.inOneBatch {
                try scene.move("sub", "out/sub")
                try scene.move("out/sub", "sub")
            }
            #expect(log.waitFor(.created, scene.at("sub")), "\(log.summary)")
            #expect(keepsHolding(for: .milliseconds(100)) { scene.kinds("sub").last == .created },
                    "the last word on sub is that it exists: \(log.summary)")
            #expect(scene.kinds("sub") == [.removed, .created], "\(log.summary)")
            #expect(log.contains(.created, scene.at("sub/inner")), "its contents are reported: \(log.summary)")

            // Watched again, down to the directory below it.
            try FileSystemTestKit.write(scene.at("sub/file"), "x")
            #expect(log.waitFor(.created, scene.at("sub/file")), "\(log.summary)")
            try FileSystemTestKit.write(scene.at("sub/inner/deeper"), "x")
            #expect(log.waitFor(.created, scene.at("sub/inner/deeper")), "\(log.summary)")
            #expect(waitUntil { scene.hub.snapshot.watches == 4 }, "root, sub, inner and the root's parent: \(scene.hub.snapshot.watches)")
        }

        @Test func aSubtreeBackInALaterBatchIsCreatedWithItsContentsAndWatched() throws {
            let scene = try Scene(queue: queue, directories: ["sub", "sub/inner"])
            defer { scene.finish() }
            let log = scene.log

            try scene.move("sub", "out/sub")
            #expect(log.waitFor(.removed, scene.at("sub")), "\(log.summary)")
            try FileSystemTestKit.write(scene.at("out/sub/inner/while-out"), "x")
            try scene.move("out/sub", "sub")
            #expect(log.waitFor(.created, scene.at("sub/inner/while-out")), "\(log.summary)")
            #expect(scene.kinds("sub") == [.removed, .created], "\(log.summary)")
            try FileSystemTestKit.write(scene.at("sub/inner/after"), "x")
            #expect(log.waitFor(.created, scene.at("sub/inner/after")), "\(log.summary)")
            #expect(waitUntil { scene.hub.snapshot.watches == 4 }, "root, sub, inner and the root's parent: \(scene.hub.snapshot.watches)")
        }

        @Test func changesMadeWhileASubtreeWasOutsideAreReportedWhenItComesBack() throws {
            let scene = try Scene(queue: queue, directories: ["sub", "sub/gone"])
            defer { scene.finish() }
            let log = scene.log

            try scene.inOneBatch {
                try scene.move("sub", "out/sub")
                try FileSystemTestKit.write(scene.at("out/sub/made-outside"), "x")
                try FileSystemTestKit.check(mkdir(scene.at("out/sub/new"), 0o755), "mkdir")
                try scene.move("out/sub/gone", "out/gone")
                try scene.move("out/sub", "back")
            }
            #expect(log.waitFor(.created, scene.at("back/made-outside")), "\(log.summary)")
            #expect(scene.kinds("sub") == [.removed], "\(log.summary)")
            #expect(scene.kinds("back") == [.created], "\(log.summary)")
            #expect(!log.all.contains { $0.path.contains("gone") && $0.kind != .removed }, "\(log.summary)")
            #expect(!log.all.contains { $0.path.hasPrefix(scene.outside.path) }, "\(log.summary)")
            // The directory made outside is watched; the one moved away is not.
            #expect(waitUntil { scene.hub.snapshot.watches == 4 }, "root, back, back/new and the root's parent: \(scene.hub.snapshot.watches)")
            try FileSystemTestKit.write(scene.at("back/new/file"), "x")
            #expect(log.waitFor(.created, scene.at("back/new/file")), "\(log.summary)")
            try FileSystemTestKit.write(scene.at("out/gone/file"), "x")
            #expect(keepsHolding(for: .milliseconds(100)) { !log.all.contains { $0.path.hasSuffix("gone/file") } }, "\(log.summary)")
        }

        @Test func aDifferentDirectoryMovedInUnderTheSameNameIsANewOne() throws {
            let scene = try Scene(queue: queue, directories: ["sub", "out/other"], files: ["sub/old", "out/other/new"])
            defer { scene.finish() }
            let log = scene.log

            try scene.inOneBatch {
                try scene.move("sub", "out/sub")
                try scene.move("out/other", "sub")
            }
            #expect(log.waitFor(.created, scene.at("sub/new")), "\(log.summary)")
            #expect(scene.kinds("sub") == [.removed, .created], "\(log.summary)")
            #expect(scene.kinds("sub/old").isEmpty, "\(log.summary)")
            // The old one is let go, the new one watched.
            #expect(waitUntil { scene.hub.snapshot.watches == 3 }, "root, sub and the root's parent: \(scene.hub.snapshot.watches)")
            try FileSystemTestKit.write(scene.at("out/sub/ignored"), "x")
            try FileSystemTestKit.write(scene.at("sub/seen"), "x")
            #expect(log.waitFor(.created, scene.at("sub/seen")), "\(log.summary)")
            #expect(!log.all.contains { $0.path.hasSuffix("ignored") }, "\(log.summary)")
        }

        @Test func aSubtreeMovedOutAndDeletedIsRemovedAndItsWatchesAreLetGo() throws {
            let scene = try Scene(queue: queue, directories: ["sub", "sub/inner"], files: ["sub/inner/file"])
            defer { scene.finish() }

            try scene.inOneBatch {
                try scene.move("sub", "out/sub")
                FileSystemTestKit.removeTree(scene.at("out/sub"))
            }
            #expect(scene.log.waitFor(.removed, scene.at("sub")), "\(scene.log.summary)")
            #expect(waitUntil { scene.hub.snapshot.watches == 2 }, "the root and its parent: \(scene.hub.snapshot.watches)")
            #expect(scene.log.all.filter { $0.path.hasPrefix(scene.at("sub")) }.map(\.kind) == [.removed], "\(scene.log.summary)")
        }

        /// A directory keeps its parent and its name, not its path: a subtree moved under
        /// another branch, with names longer than the 15 bytes kept inline, reports what
        /// happens below it under the new path, and nothing under the old one.
        @Test func aSubtreeMovedUnderAnotherBranchIsReportedWhereItIsNow() throws {
            let long = "a-directory-name-longer-than-fifteen-bytes"
            let scene = try Scene(queue: queue, directories: ["left", "left/\(long)", "left/\(long)/inner",
                                                              "right", "right/deeper"])
            defer { scene.finish() }
            let log = scene.log

            try scene.move("left/\(long)", "right/deeper/\(long)-moved")
            #expect(log.waitFor(.renamed(from: scene.at("left/\(long)")), scene.at("right/deeper/\(long)-moved")),
                    "\(log.summary)")
            try FileSystemTestKit.write(scene.at("right/deeper/\(long)-moved/inner/file"), "x")
            #expect(log.waitFor(.created, scene.at("right/deeper/\(long)-moved/inner/file")), "\(log.summary)")
            try FileSystemTestKit.check(mkdir(scene.at("right/deeper/\(long)-moved/inner/new"), 0o755), "mkdir")
            #expect(log.waitFor(.created, scene.at("right/deeper/\(long)-moved/inner/new")), "\(log.summary)")
            try FileSystemTestKit.write(scene.at("right/deeper/\(long)-moved/inner/new/leaf"), "x")
            #expect(log.waitFor(.created, scene.at("right/deeper/\(long)-moved/inner/new/leaf")), "\(log.summary)")
            #expect(!log.all.contains { $0.path.hasPrefix(scene.at("left/\(long)/")) }, "\(log.summary)")
            #expect(!log.all.contains { $0.kind == .mustRescan }, "\(log.summary)")
            // root, left, right, deeper, the moved directory, inner, new and the root's parent.
            #expect(waitUntil { scene.hub.snapshot.watches == 8 }, "\(scene.hub.snapshot.watches)")
        }

        @Test func renamesInsideTheTreeArePairsAndTheSubtreeFollowsThem() throws {
            let scene = try Scene(queue: queue, directories: ["a", "a/inner"])
            defer { scene.finish() }
            let log = scene.log

            try scene.inOneBatch {
                try scene.move("a", "b")
                try FileSystemTestKit.write(scene.at("b/inner/file"), "x")
                try scene.move("b", "c")
            }
            #expect(log.waitFor(.renamed(from: scene.at("b")), scene.at("c")), "\(log.summary)")
            #expect(log.contains(.renamed(from: scene.at("a")), scene.at("b")), "\(log.summary)")
            #expect(log.contains(.created, scene.at("b/inner/file")), "\(log.summary)")
            #expect(!log.all.contains { $0.kind == .removed || $0.kind == .mustRescan }, "\(log.summary)")
            try FileSystemTestKit.write(scene.at("c/inner/later"), "x")
            #expect(log.waitFor(.created, scene.at("c/inner/later")), "\(log.summary)")
            #expect(scene.hub.snapshot.watches == 4)
        }
    }
}
