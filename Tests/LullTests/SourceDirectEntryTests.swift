import Glibc
import Synchronization
import Testing
@testable import Lull

/// A delivery the poller decides for a source on an idle serial queue claims the queue and
/// runs in the poller's inline batch, inside the queue, with no drain around it
/// (`WorkQueue.claimForInlineJob`, docs/Queues.md "Direct entry"). The handler must still run
/// inside its queue, never beside a block of the queue, before the blocks queued after the
/// claim, and not while the queue is suspended.
extension LullSuite {
    @Suite struct SourceDirectEntryTests {
        /// A read source on a pipe whose handler reads one byte and runs `inside`.
        final class PipeSource: Sendable {
            let pipe: (read: Int32, write: Int32)
            let source: ReadSource
            let handled = Counter()

            init(queue: WorkQueue, inside: @escaping @Sendable () -> Void = {}) throws {
                pipe = try SourceTestKit.makePipe()
                source = EventSource.makeReadSource(fileDescriptor: pipe.read, queue: queue)
                let readEnd = pipe.read
                let handled = handled
                source.setEventHandler {
                    inside()
                    _ = SourceTestKit.readSome(readEnd, max: 1)
                    handled.increment()
                }
                source.activate()
            }

            /// Writes one byte and waits until the handler read it.
            func roundTrip() -> Bool {
                let before = handled.value
                guard SourceTestKit.writeAll(pipe.write, [1]) == 1 else { return false }
                return handled.await { $0 > before }
            }

            func close() {
                let cancelled = Flag()
                source.setCancelHandler { cancelled.set() }
                source.cancel()
                cancelled.await()
                Glibc.close(pipe.read)
                Glibc.close(pipe.write)
            }
        }

        static func stopWatching() {
            #if DEBUG
            DirectEntryTestHooks.beforeClaimedJob.locked { $0 = nil }
            #endif
        }

        /// The first queue whose claimed job ran, taken once.
        final class FirstClaim: Sendable {
            private let storage = Mutex<WorkQueue?>(nil)

            /// Records `queue` unless one was: true for the call that did.
            func take(_ queue: WorkQueue) -> Bool {
                storage.locked { taken -> Bool in
                    guard taken == nil else { return false }
                    taken = queue
                    return true
                }
            }

            var queue: WorkQueue? { storage.locked { $0 } }
        }

        // The poller claims only for a queue of the class it polls for, one of the three
        // polling classes: each test has a queue of each and sends bytes through them in turn
        // until a delivery took the claim.

        @Test func aPollersDeliveryOnAnIdleSerialQueueRunsInsideIt() throws {
            let key = SpecificKey<Int>()
            let outside = Counter()
            let claims = Counter()
            defer { Self.stopWatching() }
            var made: [(WorkQueue, PipeSource)] = []
            for qos in [QoS.default, .userInitiated, .userInteractive] {
                let queue = WorkQueue(label: "direct.inside.\(qos.qosClass)", qos: qos)
                queue.setSpecific(key: key, value: 7)
                let source = try PipeSource(queue: queue) {
                    if WorkQueue.getSpecific(key: key) != 7 || QoS.current.qosClass != qos.qosClass { outside.increment() }
                }
                made.append((queue, source))
            }
            #if DEBUG
            let queues = made.map(\.0)
            DirectEntryTestHooks.beforeClaimedJob.locked { hook in
                hook = { claimed in if queues.contains(where: { $0 === claimed }) { claims.increment() } }
            }
            #endif
            for _ in 0..<200 {
                for (_, source) in made { #expect(source.roundTrip()) }
                if claims.value > 0 { break }
            }
            for (_, source) in made { source.close() }
            #expect(outside.value == 0, "a handler ran outside its queue or at another QoS")
            #if DEBUG
            #expect(claims.value > 0, "no delivery took the claim")
            #endif
        }

        /// A block queued on the queue after the poller claimed it for a delivery runs after the
        /// delivery, as it would behind the delivery's job in the queue.
        @Test func aBlockQueuedAfterTheClaimRunsAfterTheDelivery() throws {
            #if DEBUG
            let order = Recorder<String>()
            let queues = [QoS.default, .userInitiated, .userInteractive].map { WorkQueue(label: "direct.order.\($0.qosClass)", qos: $0) }
            let first = FirstClaim()
            DirectEntryTestHooks.beforeClaimedJob.locked { hook in
                hook = { claimed in
                    guard queues.contains(where: { $0 === claimed }) else { return }
                    guard first.take(claimed) else { return }
                    claimed.async { order.append("block") }
                }
            }
            defer { Self.stopWatching() }
            let sources = try queues.map { queue in
                try PipeSource(queue: queue) { if first.queue === queue { order.append("handler") } }
            }
            for _ in 0..<200 {
                for source in sources { #expect(source.roundTrip()) }
                if first.queue != nil { break }
            }
            let claimed = first.queue
            #expect(claimed != nil, "no delivery took the claim")
            claimed?.sync {}
            #expect(Array(order.values.prefix(2)) == ["handler", "block"])
            for source in sources { source.close() }
            #endif
        }

        /// A queue suspended between the claim and the claimed job's run keeps the delivery
        /// until it is resumed; then it runs, once.
        @Test func aQueueSuspendedAfterTheClaimHoldsTheDelivery() throws {
            #if DEBUG
            let queues = [QoS.default, .userInitiated, .userInteractive].map { WorkQueue(label: "direct.suspend.\($0.qosClass)", qos: $0) }
            let suspended = FirstClaim()
            DirectEntryTestHooks.beforeClaimedJob.locked { hook in
                hook = { claimed in
                    guard queues.contains(where: { $0 === claimed }) else { return }
                    guard suspended.take(claimed) else { return }
                    claimed.suspend()
                }
            }
            defer { Self.stopWatching() }
            let sources = try queues.map { try PipeSource(queue: $0) }
            var held: (queue: WorkQueue, source: PipeSource, before: Int)?
            for _ in 0..<200 where held == nil {
                for (index, source) in sources.enumerated() {
                    let before = source.handled.value
                    #expect(SourceTestKit.writeAll(source.pipe.write, [1]) == 1)
                    // Either the handler reads the byte, or the hook suspends the queue first.
                    waitUntil { source.handled.value > before || suspended.queue === queues[index] }
                    if suspended.queue === queues[index] {
                        held = (queues[index], source, before)
                        break
                    }
                }
            }
            #expect(held != nil, "no delivery took the claim: \(sources.map { $0.handled.value }), \(String(describing: suspended.queue?.label))")
            if let held {
                #expect(keepsHolding(for: .milliseconds(50)) { held.source.handled.value == held.before },
                        "a delivery ran on a suspended queue")
                held.queue.resume()
                #expect(held.source.handled.await { $0 == held.before + 1 })
                #expect(keepsHolding(for: .milliseconds(20)) { held.source.handled.value == held.before + 1 })
            }
            for source in sources { source.close() }
            #endif
        }

        /// Deliveries that the poller runs inside their claimed queue and blocks that another
        /// thread keeps queueing on it never run at once, and every byte is delivered.
        @Test func claimedDeliveriesNeverRunBesideTheQueuesBlocks() throws {
            let queues = [QoS.default, .userInitiated, .userInteractive].map { WorkQueue(label: "direct.exclusive.\($0.qosClass)", qos: $0) }
            let overlaps = queues.map { _ in OverlapTracker() }
            let sources = try queues.indices.map { index in
                try PipeSource(queue: queues[index]) {
                    overlaps[index].enter()
                    spin(microseconds: 1)
                    overlaps[index].exit()
                }
            }
            let done = Flag()
            let blocks = Counter()
            SourceTestKit.runThreads(2) { index in
                if index == 0 {
                    for _ in 0..<300 {
                        for source in sources { _ = source.roundTrip() }
                    }
                    done.set()
                } else {
                    while !done.isSet {
                        for index in queues.indices {
                            queues[index].async {
                                overlaps[index].enter()
                                overlaps[index].exit()
                                blocks.increment()
                            }
                        }
                        usleep(20)
                    }
                }
            }
            for queue in queues { queue.sync {} }
            #expect(sources.allSatisfy { $0.handled.value == 300 })
            #expect(blocks.value > 0)
            #expect(overlaps.allSatisfy { $0.maximum == 1 }, "a delivery ran beside a block of its serial queue")
            for source in sources { source.close() }
        }
    }
}
