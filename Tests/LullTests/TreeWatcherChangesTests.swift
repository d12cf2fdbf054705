import CLullShims
import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    /// `DirectoryTreeWatcher.changes`: bounded while the consumer is busy.
    @Suite struct TreeWatcherChangesTests {
        typealias Change = DirectoryTreeWatcher.Change
        let queue = WorkQueue(label: "lull.test.fs.changes")

        private func makeWatcher(_ path: String, heldChangeLimit: Int = TreeWatcherCore.defaultHeldChangeLimit) throws -> DirectoryTreeWatcher {
            try DirectoryTreeWatcher(path: path, latency: .milliseconds(10), queue: queue, hub: Runtime.shared.inotify,
                                     heldChangeLimit: heldChangeLimit)
        }

        @Test func changesMadeWhileTheLoopIsBusyMergeIntoItsNextBatch() async throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("changes")
            defer { directory.remove() }
            let watcher = try makeWatcher(directory.path)
            defer { watcher.cancel() }
            var batches = watcher.changes.makeAsyncIterator()
            try FileSystemTestKit.write(directory.at("first"), "x")
            let first = try #require(try await batches.next())
            #expect(first.contains { $0.kind == .created && $0.path == directory.at("first") })
            // The loop is busy: the watcher holds its batch back and merges into it.
            for index in 0..<20 { try FileSystemTestKit.write(directory.at("file\(index)"), "x") }
            let core = watcher.coreForTesting
            #expect(waitUntil { core.heldBatchForTesting()?.count == 20 }, "the changes were not held for the busy loop")
            let merged = try #require(try await batches.next())
            #expect(Set(merged.filter { $0.kind == .created }.map(\.path)) == Set((0..<20).map { directory.at("file\($0)") }))
            #expect(merged.count == 20, "\(merged)")
        }

        @Test func aStormWhileTheLoopIsBusyStaysBoundedAndBecomesMustRescan() async throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("changes")
            defer { directory.remove() }
            let limit = 40
            let watcher = try makeWatcher(directory.path, heldChangeLimit: limit)
            defer { watcher.cancel() }
            var batches = watcher.changes.makeAsyncIterator()
            try FileSystemTestKit.write(directory.at("first"), "x")
            _ = try #require(try await batches.next())
            let core = watcher.coreForTesting
            var largest = 0
            for index in 0..<200 {
                try FileSystemTestKit.write(directory.at("storm\(index)"), "x")
                if index % 20 == 0 { largest = max(largest, core.heldBatchForTesting()?.count ?? 0) }
            }
            let rescan = Change(path: directory.path, kind: .mustRescan, isDirectory: true)
            #expect(waitUntil { core.heldBatchForTesting()?.contains(rescan) == true }, "the storm was not collapsed")
            #expect(keepsHolding(for: .milliseconds(30)) {
                let held = core.heldBatchForTesting()?.count ?? 0
                largest = max(largest, held)
                return held <= limit
            })
            #expect(largest <= limit, "the held batch grew to \(largest) changes")
            let batch = try #require(try await batches.next())
            #expect(batch.contains(rescan), "the overflow was dropped silently")
            #expect(batch.count <= limit)
        }

        @Test func cancellingTheLoopsTaskCancelsTheWatcherAndASecondIterationEndsAtOnce() async throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("changes")
            defer { directory.remove() }
            let watcher = try makeWatcher(directory.path)
            let changes = watcher.changes
            let ended = Flag()
            let loop = Task {
                for await _ in changes {}
                ended.set()
            }
            #expect(waitUntil { watcher.coreForTesting.changesChannel.hasWaitingConsumer })
            var second = watcher.changes.makeAsyncIterator()
            #expect(try await second.next() == nil)
            loop.cancel()
            #expect(waitUntil { ended.isSet })
            #expect(watcher.isCancelled)
        }

        @Test func cancellingTheWatcherEndsTheLoop() async throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("changes")
            defer { directory.remove() }
            let watcher = try makeWatcher(directory.path)
            var batches = watcher.changes.makeAsyncIterator()
            try FileSystemTestKit.write(directory.at("file"), "x")
            #expect(try await batches.next() != nil)
            watcher.cancel()
            #expect(try await batches.next() == nil)
        }
    }
}
