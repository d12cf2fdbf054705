import CLullShims
import Glibc
import Synchronization
import Testing
@testable import Lull

/// What a tree watcher delivered: its batches, in order.
final class TreeChangeLog: Sendable {
    typealias Change = DirectoryTreeWatcher.Change
    private let batches = Mutex<[(at: UInt64, changes: [Change])]>([])

    func record(_ batch: [Change]) {
        let now = monotonicNanoseconds()
        batches.locked { $0.append((now, batch)) }
    }

    var all: [Change] { batches.locked { $0.flatMap(\.changes) } }
    var batchCount: Int { batches.locked { $0.count } }
    var firstBatchTime: UInt64? { batches.locked { $0.first?.at } }

    func reset() { batches.locked { $0.removeAll() } }

    func contains(_ kind: Change.Kind, _ path: String) -> Bool {
        all.contains { $0.kind == kind && $0.path == path }
    }

    /// Waits until a change of `kind` for `path` was delivered.
    @discardableResult
    func waitFor(_ kind: Change.Kind, _ path: String) -> Bool {
        waitUntil { contains(kind, path) }
    }

    var summary: String { all.map(\.description).joined(separator: "; ") }
}

extension LullSuite {
    /// The recursive directory watcher, on trees that change while they are watched.
    @Suite struct FileSystemWatcherTests {
        let queue = WorkQueue(label: "lull.test.fs.watcher")

        private func makeWatcher(_ path: String, latency: Duration = .milliseconds(20),
                                 hub: InotifyHub = Runtime.shared.inotify) throws -> (DirectoryTreeWatcher, TreeChangeLog) {
            let watcher = try DirectoryTreeWatcher(path: path, latency: latency, queue: queue, hub: hub)
            let log = TreeChangeLog()
            watcher.setEventHandler { log.record($0) }
            watcher.activate()
            return (watcher, log)
        }

        @Test func filesCreatedModifiedAndRemovedAreReportedWithTheirPaths() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            try FileSystemTestKit.check(mkdir(directory.at("existing"), 0o755), "mkdir")
            try FileSystemTestKit.write(directory.at("existing/old"), "x")
            let (watcher, log) = try makeWatcher(directory.path)
            defer { watcher.cancel() }
            #expect(watcher.path == directory.path)

            try FileSystemTestKit.write(directory.at("new"), "x")
            #expect(log.waitFor(.created, directory.at("new")), "\(log.summary)")
            try FileSystemTestKit.write(directory.at("existing/old"), "more", append: true)
            #expect(log.waitFor(.modified, directory.at("existing/old")), "\(log.summary)")
            try FileSystemTestKit.check(chmod(directory.at("existing/old"), 0o600), "chmod")
            #expect(log.waitFor(.attributesChanged, directory.at("existing/old")), "\(log.summary)")
            try FileSystemTestKit.check(unlink(directory.at("new")), "unlink")
            #expect(log.waitFor(.removed, directory.at("new")), "\(log.summary)")
            #expect(log.all.first { $0.path == directory.at("existing") && $0.kind == .created } == nil,
                    "what existed at activation is not reported")
            #expect(watcher.error == nil)
        }

        @Test func activateWatchesEveryDirectoryOfALargeTreeBeforeItReturns() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            // Enough entries that listing the root takes several getdents64 buffers, with
            // subdirectories in every one of them.
            let subdirectories = 300
            for index in 0..<subdirectories {
                try FileSystemTestKit.check(mkdir(directory.at("d\(index)"), 0o755), "mkdir")
                try FileSystemTestKit.check(mkdir(directory.at("d\(index)/nested"), 0o755), "mkdir")
                for file in 0..<5 {
                    try FileSystemTestKit.write(directory.at("file-with-a-long-name-\(index)-\(file)"), "x")
                }
            }
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)
            let (watcher, log) = try makeWatcher(directory.path, hub: hub)
            defer { watcher.cancel() }
            // The root, every directory below it, and the root's parent (for its removal).
            #expect(hub.snapshot.watches == 1 + 2 * subdirectories + 1)
            #expect(watcher.error == nil)

            // Watched already when activate() returned: the first and the last directory.
            try FileSystemTestKit.write(directory.at("d0/nested/first"), "x")
            try FileSystemTestKit.write(directory.at("d\(subdirectories - 1)/nested/last"), "x")
            #expect(log.waitFor(.created, directory.at("d0/nested/first")), "\(log.summary)")
            #expect(log.waitFor(.created, directory.at("d\(subdirectories - 1)/nested/last")), "\(log.summary)")
            #expect(!log.all.contains { $0.kind == .created && $0.path.hasSuffix("-0") },
                    "what existed at activation is not reported")
        }

        @Test func theWalkAtActivateHoldsNoLockAndWhatChangesDuringItIsReported() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            for name in ["a", "b"] { try FileSystemTestKit.check(mkdir(directory.at(name), 0o755), "mkdir") }
            let inWalk = Gate()
            let proceed = Gate()
            let root = directory.path
            // The walk stops at the first directory below the root until the test says so.
            let watcher = try DirectoryTreeWatcher(path: root, latency: .milliseconds(20), queue: queue, hub: InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)) { path in
                guard path != root, !inWalk.isOpen else { return }
                inWalk.open()
                proceed.wait()
            }
            defer { watcher.cancel() }
            let log = TreeChangeLog()
            let activated = Flag()
            WorkQueue.global().async {
                watcher.activate()
                activated.set()
            }
            #expect(inWalk.wait())

            // The watcher answers while it walks.
            let answered = Flag()
            WorkQueue.global().async {
                _ = watcher.isCancelled
                _ = watcher.error
                watcher.setEventHandler { log.record($0) }
                answered.set()
            }
            #expect(answered.await(timeout: .seconds(3)), "a public call waited for the walk")
            // A change made during the walk in a directory it watches already: reported once
            // the walk is done.
            try FileSystemTestKit.write(directory.at("during"), "x")
            #expect(!activated.isSet)
            proceed.open()
            #expect(activated.await())
            #expect(answered.await())
            #expect(log.waitFor(.created, directory.at("during")), "\(log.summary)")
            // Both subdirectories are watched.
            for name in ["a", "b"] {
                try FileSystemTestKit.write(directory.at("\(name)/after"), "x")
                #expect(log.waitFor(.created, directory.at("\(name)/after")), "\(log.summary)")
            }
        }

        @Test func directoriesCreatedAfterTheStartAreFollowedEvenWhenMadeQuickly() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            let (watcher, log) = try makeWatcher(directory.path)
            defer { watcher.cancel() }

            try FileSystemTestKit.check(mkdir(directory.at("a"), 0o755), "mkdir")
            #expect(log.waitFor(.created, directory.at("a")))
            try FileSystemTestKit.write(directory.at("a/file"), "x")
            #expect(log.waitFor(.created, directory.at("a/file")), "\(log.summary)")

            // A chain made at once: the entries made before the watcher got to them are
            // found by its scan and reported as created too.
            try FileSystemTestKit.check(mkdir(directory.at("p"), 0o755), "mkdir")
            try FileSystemTestKit.check(mkdir(directory.at("p/q"), 0o755), "mkdir")
            try FileSystemTestKit.check(mkdir(directory.at("p/q/r"), 0o755), "mkdir")
            try FileSystemTestKit.write(directory.at("p/q/r/early"), "x")
            #expect(log.waitFor(.created, directory.at("p/q/r/early")), "\(log.summary)")
            try FileSystemTestKit.write(directory.at("p/q/r/late"), "x")
            #expect(log.waitFor(.created, directory.at("p/q/r/late")), "\(log.summary)")
            let chain = log.all.filter { $0.path == directory.at("p/q/r") && $0.kind == .created }
            #expect(chain.allSatisfy { $0.isDirectory })
        }

        @Test func renamesCarryTheOldAndTheNewPathAndDirectoriesKeepBeingFollowed() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            let outside = try FileSystemTestKit.TemporaryDirectory("outside")
            defer { outside.remove() }
            try FileSystemTestKit.write(directory.at("file"), "x")
            try FileSystemTestKit.check(mkdir(directory.at("dir"), 0o755), "mkdir")
            try FileSystemTestKit.check(mkdir(directory.at("dir/inner"), 0o755), "mkdir")
            try FileSystemTestKit.write(outside.at("incoming"), "x")
            let (watcher, log) = try makeWatcher(directory.path)
            defer { watcher.cancel() }

            try FileSystemTestKit.check(rename(directory.at("file"), directory.at("dir/file2")), "rename")
            #expect(log.waitFor(.renamed(from: directory.at("file")), directory.at("dir/file2")), "\(log.summary)")

            try FileSystemTestKit.check(rename(directory.at("dir"), directory.at("moved")), "rename")
            #expect(log.waitFor(.renamed(from: directory.at("dir")), directory.at("moved")), "\(log.summary)")
            // The moved directory's subdirectory is still watched, under its new path.
            try FileSystemTestKit.write(directory.at("moved/inner/x"), "x")
            #expect(log.waitFor(.created, directory.at("moved/inner/x")), "\(log.summary)")

            // Out of the tree: removed. Into it: created.
            try FileSystemTestKit.check(rename(directory.at("moved/file2"), outside.at("gone")), "rename")
            #expect(log.waitFor(.removed, directory.at("moved/file2")), "\(log.summary)")
            try FileSystemTestKit.check(rename(outside.at("incoming"), directory.at("arrived")), "rename")
            #expect(log.waitFor(.created, directory.at("arrived")), "\(log.summary)")
        }

        @Test func changesAreCoalescedOverTheLatency() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            let (watcher, log) = try makeWatcher(directory.path, latency: .milliseconds(300))
            defer { watcher.cancel() }
            #expect(watcher.latency == .milliseconds(300))
            let start = monotonicNanoseconds()
            for index in 0..<20 {
                try FileSystemTestKit.write(directory.at("f\(index % 4)"), "line \(index)\n", append: true)
            }
            #expect(waitUntil { log.all.count >= 4 })
            #expect(keepsHolding(for: .milliseconds(100)) { log.batchCount == 1 }, "\(log.batchCount) batches")
            // Delivered once the latency passed after the first change, not before.
            let delay = (log.firstBatchTime ?? 0) &- start
            #expect(delay >= 290_000_000, "delivered after \(delay / 1_000_000) ms")
            // One change per path: created, and the writes that followed folded into it.
            #expect(log.all.count == 4, "\(log.summary)")
            #expect(log.all.allSatisfy { $0.kind == .created })
        }

        @Test func theRootCanBeRemovedAndCreatedAgain() throws {
            let parent = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { parent.remove() }
            let root = parent.at("root")
            try FileSystemTestKit.check(mkdir(root, 0o755), "mkdir")
            try FileSystemTestKit.check(mkdir("\(root)/sub", 0o755), "mkdir")
            let (watcher, log) = try makeWatcher(root)
            defer { watcher.cancel() }

            FileSystemTestKit.removeTree(root)
            #expect(log.waitFor(.removed, root), "\(log.summary)")
            try FileSystemTestKit.check(mkdir(root, 0o755), "mkdir")
            #expect(log.waitFor(.created, root), "\(log.summary)")
            try FileSystemTestKit.write("\(root)/again", "x")
            #expect(log.waitFor(.created, "\(root)/again"), "\(log.summary)")

            // Moved away counts as gone too; the old tree is no longer reported.
            try FileSystemTestKit.check(rename(root, parent.at("elsewhere")), "rename")
            log.reset()
            #expect(log.waitFor(.removed, root), "\(log.summary)")
            try FileSystemTestKit.write(parent.at("elsewhere/ignored"), "x")
            #expect(keepsHolding(for: .milliseconds(150)) { !log.all.contains { $0.path.contains("ignored") } })
            try FileSystemTestKit.check(mkdir(root, 0o755), "mkdir")
            #expect(log.waitFor(.created, root), "\(log.summary)")

            // Removed while a descriptor keeps it open: seen through its parent.
            let held = try FileSystemTestKit.openDirectory(root)
            defer { close(held) }
            log.reset()
            try FileSystemTestKit.check(rmdir(root), "rmdir")
            #expect(log.waitFor(.removed, root), "\(log.summary)")

            // Its parent removed too: waiting goes on from further up, and comes back down.
            FileSystemTestKit.removeTree(parent.path)
            try FileSystemTestKit.check(mkdir(parent.path, 0o700), "mkdir")
            try FileSystemTestKit.check(mkdir(root, 0o755), "mkdir")
            #expect(log.waitFor(.created, root), "\(log.summary)")
            try FileSystemTestKit.write("\(root)/last", "x")
            #expect(log.waitFor(.created, "\(root)/last"), "\(log.summary)")
        }

        @Test func symbolicLinkLoopsAreNotFollowed() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)
            try FileSystemTestKit.check(mkdir(directory.at("a"), 0o755), "mkdir")
            try FileSystemTestKit.check(symlink(directory.path, directory.at("a/loop")), "symlink")
            try FileSystemTestKit.check(symlink("..", directory.at("a/up")), "symlink")
            let (watcher, log) = try makeWatcher(directory.path, hub: hub)
            defer { watcher.cancel() }
            // The root, a/ and the root's parent (for the root's removal): links are not followed.
            #expect(hub.snapshot.watches == 3, "\(hub.snapshot.watches) watches")
            try FileSystemTestKit.write(directory.at("a/file"), "x")
            #expect(log.waitFor(.created, directory.at("a/file")))
            // Nothing under the links (the temporary directory's own name may hold "up/").
            let underLinks = [directory.at("a/loop/"), directory.at("a/up/")]
            #expect(!log.all.contains { event in underLinks.contains { event.path.hasPrefix($0) } }, "\(log.summary)")
            try FileSystemTestKit.check(symlink(directory.path, directory.at("a/another")), "symlink")
            #expect(log.waitFor(.created, directory.at("a/another")))
            #expect(!(log.all.first { $0.path == directory.at("a/another") }?.isDirectory ?? true))
            #expect(hub.snapshot.watches == 3)
        }

        @Test(.enabled(if: getuid() == 0, "bind mounts need root"))
        func aBindMountOfAnAncestorIsNotDescendedTwice() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)
            try FileSystemTestKit.check(mkdir(directory.at("a"), 0o755), "mkdir")
            try FileSystemTestKit.check(mkdir(directory.at("a/mirror"), 0o755), "mkdir")
            guard mount(directory.path, directory.at("a/mirror"), "", UInt(MS_BIND), nil) == 0 else { return }
            defer { umount2(directory.at("a/mirror"), Int32(MNT_DETACH)) }
            let (watcher, log) = try makeWatcher(directory.path, hub: hub)
            // root, a and the root's parent; a/mirror is the root again: not descended.
            #expect(hub.snapshot.watches == 3, "\(hub.snapshot.watches) watches")
            try FileSystemTestKit.write(directory.at("a/file"), "x")
            #expect(log.waitFor(.created, directory.at("a/file")))
            watcher.cancel()
            #expect(waitUntil { hub.snapshot.watches == 0 })
        }

        @Test func anOverflowIsMustRescanAndNewDirectoriesAreFoundByTheWalk() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)
            let (watcher, log) = try makeWatcher(directory.path, hub: hub)
            defer { watcher.cancel() }
            #expect(hub.snapshot.watches == 2)  // the root and its parent
            hub.holdDraining(true)
            try FileSystemTestKit.check(mkdir(directory.at("unseen"), 0o755), "mkdir")
            hub.injectOverflow()
            #expect(log.waitFor(.mustRescan, directory.path), "\(log.summary)")
            hub.holdDraining(false)
            #expect(waitUntil { hub.snapshot.watches == 3 }, "the walk watches the new directory")
            try FileSystemTestKit.write(directory.at("unseen/file"), "x")
            #expect(log.waitFor(.created, directory.at("unseen/file")), "\(log.summary)")
        }

        @Test func batchesCanBeConsumedWithForAwait() async throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            let watcher = try DirectoryTreeWatcher(path: directory.path, latency: .milliseconds(20), queue: queue)
            let stream = watcher.changes
            watcher.activate()
            let consumer = Task { () -> [DirectoryTreeWatcher.Change] in
                var seen: [DirectoryTreeWatcher.Change] = []
                for await batch in stream {
                    seen += batch
                    if seen.contains(where: { $0.path.hasSuffix("/second") }) { break }
                }
                return seen
            }
            try FileSystemTestKit.write(directory.at("first"), "x")
            try FileSystemTestKit.write(directory.at("second"), "x")
            let seen = await consumer.value
            #expect(seen.contains { $0.kind == .created && $0.path == directory.at("first") })
            #expect(seen.contains { $0.kind == .created && $0.path == directory.at("second") })

            // Cancelling finishes the sequence.
            let finished = Task { () -> Int in
                var count = 0
                for await _ in stream { count += 1 }
                return count
            }
            watcher.cancel()
            #expect(watcher.isCancelled)
            _ = await finished.value
        }

        @Test func cancellingReleasesEveryWatch() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            for name in ["a", "a/b", "c"] { try FileSystemTestKit.check(mkdir(directory.at(name), 0o755), "mkdir") }
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues)
            do {
                let (watcher, _) = try makeWatcher(directory.path, hub: hub)
                #expect(hub.snapshot.watches == 5)  // four directories and the root's parent
                _ = watcher
            }
            // Dropping the watcher cancels it.
            #expect(waitUntil { hub.snapshot.watches == 0 && !hub.snapshot.hasInstance })
        }

        @Test func aRootThatIsNotADirectoryThrows() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            try FileSystemTestKit.write(directory.at("file"), "x")
            for (path, code) in [(directory.at("file"), ENOTDIR), (directory.at("missing"), ENOENT)] {
                do {
                    _ = try DirectoryTreeWatcher(path: path, queue: queue)
                    Issue.record("no error for \(path)")
                } catch {
                    #expect("\(error)".contains(path), "\(error)")
                    #expect((error as? EventSourceError)?.code == code)
                }
            }
        }

        @Test func reachingTheWatchLimitPartwayIsReportedWithTheSysctl() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("tree")
            defer { directory.remove() }
            for name in ["a", "b", "c", "d", "e"] { try FileSystemTestKit.check(mkdir(directory.at(name), 0o755), "mkdir") }
            // The kernel's limit, per user, is tested with a source in a child process (see
            // FileSystemSourceTests); here the hub refuses the fourth watch the same way.
            let hub = InotifyHub(reactor: Runtime.shared.reactor, queues: Runtime.shared.queues, simulatedWatchLimit: 3)
            let (watcher, log) = try makeWatcher(directory.path, hub: hub)
            defer { watcher.cancel() }
            let error = try #require(watcher.error)
            #expect(error.code == ENOSPC)
            #expect("\(error)".contains("fs.inotify.max_user_watches"), "\(error)")
            #expect("\(error)".contains(directory.path), "\(error)")
            #expect(waitUntil { log.all.filter { if case .notWatched = $0.kind { true } else { false } }.count == 3 }, "\(log.summary)")
            let refused = log.all.first { if case .notWatched = $0.kind { true } else { false } }
            if case .notWatched(let reason)? = refused?.kind {
                #expect(reason.contains("sysctl"), "\(reason)")
            }
            // What is watched goes on being watched.
            #expect(hub.snapshot.watches == 3)
            let watchedChild = ["a", "b", "c", "d", "e"].first { name in
                log.all.allSatisfy { $0.path != directory.at(name) }
            }
            let child = try #require(watchedChild)
            try FileSystemTestKit.write(directory.at("\(child)/file"), "x")
            #expect(log.waitFor(.created, directory.at("\(child)/file")), "\(log.summary)")
        }
    }
}
