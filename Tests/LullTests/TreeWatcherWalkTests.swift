import Glibc
import Synchronization
import Testing
@testable import Lull

/// A tree watcher's walk at `activate()` holds no lock: other watchers, sources and the
/// watcher's own public calls go on while it is held at a directory (the walk hook is the
/// gate), and what changes in the tree meanwhile is watched and reported, or let go.
extension LullSuite {
    @Suite struct TreeWatcherWalkTests {
        let queue = WorkQueue(label: "lull.test.fs.walk")

        /// A watcher on `root` whose walk stops at the `stopAt`-th directory below the root
        /// (1: the first) until `proceed` opens; `walked` lists the directories below the
        /// root in the order the walk watched them.
        private final class HeldWalk: Sendable {
            let watcher: DirectoryTreeWatcher
            let log = TreeChangeLog()
            let inWalk = Gate()
            let proceed = Gate()
            let activated = Flag()
            private let order = WalkOrder()

            final class WalkOrder: Sendable {
                let paths = Mutex<[String]>([])
            }

            /// The directories below the root, in the order the walk watched them.
            var walked: [String] { order.paths.locked { $0 } }

            init(root: String, stopAt: Int = 1, hub: InotifyHub, queue: WorkQueue) throws {
                let (inWalk, proceed, order) = (inWalk, proceed, order)
                watcher = try DirectoryTreeWatcher(path: root, latency: .milliseconds(20), queue: queue, hub: hub) { path in
                    guard path != root else { return }
                    let count = order.paths.locked { paths -> Int in
                        paths.append(path)
                        return paths.count
                    }
                    guard count == stopAt else { return }
                    inWalk.open()
                    proceed.wait()
                }
                let log = log
                watcher.setEventHandler { log.record($0) }
            }

            /// Activates on another thread and waits until the walk is held.
            func start() -> Bool {
                let (watcher, activated) = (watcher, activated)
                WorkQueue.global().async {
                    watcher.activate()
                    activated.set()
                }
                return inWalk.wait()
            }

            func finishWalk() -> Bool {
                proceed.open()
                return activated.await()
            }
        }

        @Test func anotherWatcherAndASourceOnTheSameHubGoOnWhileAWalkIsHeld() throws {
            let slowTree = try FileSystemTestKit.TemporaryDirectory("slow")
            defer { slowTree.remove() }
            let otherTree = try FileSystemTestKit.TemporaryDirectory("other")
            defer { otherTree.remove() }
            for name in ["a", "b"] { try FileSystemTestKit.check(mkdir(slowTree.at(name), 0o755), "mkdir") }
            try FileSystemTestKit.check(mkdir(otherTree.at("sub"), 0o755), "mkdir")
            try FileSystemTestKit.write(otherTree.at("watched"), "x")
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)
            let held = try HeldWalk(root: slowTree.path, hub: hub, queue: queue)
            defer { held.watcher.cancel() }
            #expect(held.start())

            // A second watcher's activate, on the same hub, completes while the walk is held.
            let other = try DirectoryTreeWatcher(path: otherTree.path, latency: .milliseconds(20), queue: queue, hub: hub)
            defer { other.cancel() }
            let otherLog = TreeChangeLog()
            other.setEventHandler { otherLog.record($0) }
            let otherActivated = Flag()
            WorkQueue.global().async {
                other.activate()
                otherActivated.set()
            }
            #expect(otherActivated.await(timeout: .seconds(3)), "a watcher's activate waited for another tree's walk")
            try FileSystemTestKit.write(otherTree.at("sub/new"), "x")
            #expect(otherLog.waitFor(.created, otherTree.at("sub/new")), "\(otherLog.summary)")

            // A source on the same hub is made, fires and is cancelled while the walk is held.
            let source = WatchedObject(try FileSystemObjectSource(path: otherTree.at("watched"), eventMask: .write, queue: queue, hub: hub))
            #expect(source.registered.isSet)
            try FileSystemTestKit.write(otherTree.at("watched"), "more", append: true)
            #expect(source.log.waitFor(.write))
            #expect(source.finish(), "a source's cancel waited for another tree's walk")

            #expect(!held.activated.isSet, "the walk is still held")
            #expect(held.finishWalk())
            try FileSystemTestKit.write(slowTree.at("a/after"), "x")
            #expect(held.log.waitFor(.created, slowTree.at("a/after")), "\(held.log.summary)")
        }

        @Test func cancellingDuringTheWalkReturnsAtOnceAndLeavesNoWatch() throws {
            let tree = try FileSystemTestKit.TemporaryDirectory("cancel")
            defer { tree.remove() }
            for name in ["a", "b", "c"] { try FileSystemTestKit.check(mkdir(tree.at(name), 0o755), "mkdir") }
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)
            let held = try HeldWalk(root: tree.path, hub: hub, queue: queue)
            #expect(held.start())

            let cancelled = Flag()
            WorkQueue.global().async {
                held.watcher.cancel()
                cancelled.set()
            }
            #expect(cancelled.await(timeout: .seconds(3)), "cancel waited for the walk")
            #expect(held.watcher.isCancelled)
            #expect(!held.activated.isSet, "the walk is still held")
            #expect(hub.snapshot.watches >= 2, "the root and the directory the walk is at are watched")

            #expect(held.finishWalk())
            // The walk's watches, and the teardown after it, let every one go.
            #expect(waitUntil { hub.snapshot.watches == 0 }, "\(hub.snapshot.watches) watches left")
            try FileSystemTestKit.check(mkdir(tree.at("later"), 0o755), "mkdir")
            #expect(keepsHolding { held.log.all.isEmpty }, "a cancelled watcher reported \(held.log.summary)")
        }

        @Test func directoriesCreatedAndRemovedDuringTheWalkAreWatchedOrLetGo() throws {
            let tree = try FileSystemTestKit.TemporaryDirectory("race")
            defer { tree.remove() }
            let names = ["d0", "d1", "d2", "d3"]
            for name in names { try FileSystemTestKit.check(mkdir(tree.at(name), 0o755), "mkdir") }
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)
            // Held at the second directory: the root is listed, the first directory watched
            // and listed, the second watched but not listed, the other two not yet watched.
            let held = try HeldWalk(root: tree.path, stopAt: 2, hub: hub, queue: queue)
            defer { held.watcher.cancel() }
            #expect(held.start())
            let walked = held.walked
            try #require(walked.count == 2)
            let (listed, unlisted) = (walked[0], walked[1])
            let pending = names.map { tree.at($0) }.filter { !walked.contains($0) }
            try #require(pending.count == 2)

            try FileSystemTestKit.check(mkdir(tree.at("new"), 0o755), "mkdir")          // in the listed root
            try FileSystemTestKit.check(rmdir(listed), "rmdir")                          // watched and listed
            try FileSystemTestKit.check(mkdir("\(unlisted)/inner", 0o755), "mkdir")     // watched, not listed
            try FileSystemTestKit.check(mkdir("\(pending[0])/deep", 0o755), "mkdir")   // not watched yet
            try FileSystemTestKit.check(rmdir(pending[1]), "rmdir")                      // not watched yet
            #expect(held.finishWalk())

            // Created during the walk: reported (their parents were watched) and watched.
            #expect(held.log.waitFor(.created, tree.at("new")), "\(held.log.summary)")
            #expect(held.log.waitFor(.created, "\(unlisted)/inner"), "\(held.log.summary)")
            #expect(held.log.waitFor(.removed, listed), "\(held.log.summary)")
            #expect(held.log.waitFor(.removed, pending[1]), "\(held.log.summary)")
            for directory in [tree.at("new"), "\(unlisted)/inner", "\(pending[0])/deep"] {
                try FileSystemTestKit.write("\(directory)/file", "x")
                #expect(held.log.waitFor(.created, "\(directory)/file"), "\(held.log.summary)")
            }
            // Removed during the walk: no watch kept. The root, new, the unlisted directory
            // and inner, the pending one and deep, and the root's parent.
            #expect(waitUntil { hub.snapshot.watches == 7 }, "\(hub.snapshot.watches) watches")
            held.watcher.cancel()
            #expect(waitUntil { hub.snapshot.watches == 0 }, "\(hub.snapshot.watches) watches left")
        }
    }
}
