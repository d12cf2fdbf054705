import Glibc
import Synchronization
import Testing
@testable import Lull

/// A source cancelled between the poller's claim of its idle serial queue and the claimed
/// job's run (docs/Queues.md, "Direct entry"): the delivery runs no handler, the queue is
/// given back, and the cancel handler runs once — after the queue's resume when the queue was
/// suspended in that window too.
extension LullSuite {
    @Suite struct SourceDirectEntryCancelTests {
        /// A read source on a pipe whose handler reads one byte.
        final class Watched: Sendable {
            let queue: WorkQueue
            let pipe: (read: Int32, write: Int32)
            let source: ReadSource
            let handled = Counter()
            let cancelled = Counter()

            init(qos: QoS) throws {
                queue = WorkQueue(label: "lull.test.direct-cancel.\(qos.qosClass)", qos: qos)
                pipe = try SourceTestKit.makePipe()
                source = EventSource.makeReadSource(fileDescriptor: pipe.read, queue: queue)
                let (readEnd, handled, cancelled) = (pipe.read, handled, cancelled)
                source.setEventHandler {
                    _ = SourceTestKit.readSome(readEnd, max: 1)
                    handled.increment()
                }
                source.setCancelHandler { cancelled.increment() }
                source.activate()
            }

            func close() {
                source.cancel()
                _ = cancelled.await { $0 == 1 }
                Glibc.close(pipe.read)
                Glibc.close(pipe.write)
            }
        }

        /// Writes a byte to each source in turn until the hook saw a claim: the source whose
        /// queue was claimed (its delivery held by the hook's action), or nil.
        private static func claim(_ watched: [Watched], taken: SourceDirectEntryTests.FirstClaim) -> Watched? {
            for _ in 0..<200 {
                for item in watched {
                    let before = item.handled.value
                    guard SourceTestKit.writeAll(item.pipe.write, [1]) == 1 else { return nil }
                    waitUntil { item.handled.value > before || taken.queue === item.queue }
                    if taken.queue === item.queue { return item }
                }
            }
            return nil
        }

        @Test func aSourceCancelledAfterTheClaimRunsItsCancelHandlerAndGivesTheQueueBack() throws {
            #if DEBUG
            let watched = try [QoS.default, .userInitiated, .userInteractive].map { try Watched(qos: $0) }
            let taken = SourceDirectEntryTests.FirstClaim()
            DirectEntryTestHooks.beforeClaimedJob.locked { hook in
                hook = { claimed in
                    guard let item = watched.first(where: { $0.queue === claimed }), taken.take(claimed) else { return }
                    item.source.cancel()
                }
            }
            defer { SourceDirectEntryTests.stopWatching() }
            let held = Self.claim(watched, taken: taken)
            #expect(held != nil, "no delivery took the claim")
            if let held {
                let handledAtClaim = held.handled.value
                #expect(held.cancelled.await { $0 == 1 })
                // The queue was given back: a block and a `sync` run.
                let ran = Flag()
                held.queue.async { ran.set() }
                held.queue.sync {}
                #expect(ran.isSet)
                #expect(keepsHolding(for: .milliseconds(20)) { held.handled.value == handledAtClaim && held.cancelled.value == 1 })
            }
            for item in watched where item !== held { item.close() }
            if let held {
                Glibc.close(held.pipe.read)
                Glibc.close(held.pipe.write)
            }
            #endif
        }

        @Test func aSourceCancelledOnAQueueSuspendedAfterTheClaimIsCancelledAfterTheResume() throws {
            #if DEBUG
            let watched = try [QoS.default, .userInitiated, .userInteractive].map { try Watched(qos: $0) }
            let taken = SourceDirectEntryTests.FirstClaim()
            DirectEntryTestHooks.beforeClaimedJob.locked { hook in
                hook = { claimed in
                    guard let item = watched.first(where: { $0.queue === claimed }), taken.take(claimed) else { return }
                    claimed.suspend()
                    item.source.cancel()
                }
            }
            defer { SourceDirectEntryTests.stopWatching() }
            let held = Self.claim(watched, taken: taken)
            #expect(held != nil, "no delivery took the claim")
            if let held {
                let handledAtClaim = held.handled.value
                #expect(keepsHolding(for: .milliseconds(50)) { held.cancelled.value == 0 && held.handled.value == handledAtClaim },
                        "a handler ran on a suspended queue")
                held.queue.resume()
                #expect(held.cancelled.await { $0 == 1 })
                held.queue.sync {}
                #expect(keepsHolding(for: .milliseconds(20)) { held.handled.value == handledAtClaim && held.cancelled.value == 1 })
            }
            for item in watched where item !== held { item.close() }
            if let held {
                Glibc.close(held.pipe.read)
                Glibc.close(held.pipe.write)
            }
            #endif
        }
    }
}
