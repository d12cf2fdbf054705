import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    /// `events` deliveries made without a job (`SourceCore.post`): when the loop waits and
    /// the source's queue has nothing else to run, the thread that merges hands the value to
    /// the waiting task; otherwise the delivery is a job of the queue, as a handler's.
    @Suite struct SourceEventsDeliveryTests {
        typealias Kit = LullSuite.SourceEventsTests

        /// Two sources, each consumer adding 1 to the other's for each element: one element
        /// in flight, so every element is exactly 1 and none may be lost or the loops stall.
        /// Returns the two channels' deliveries (by job, without one).
        static func pingPong(roundTrips: Int, preferQueues: Bool) async -> [(byJob: Int, withoutJob: Int)]? {
            let pingQueue = WorkQueue(label: "lull.test.events.ping")
            let pongQueue = WorkQueue(label: "lull.test.events.pong")
            let a = EventSource.makeUserDataAddSource(queue: pingQueue)
            let b = EventSource.makeUserDataAddSource(queue: pongQueue)
            let wrongElements = Counter()
            let ready = Counter()
            let pings = Task(executorPreference: preferQueues ? pingQueue : nil) {
                var iterator = a.events.makeAsyncIterator()
                _ = ready.increment()
                var seen = 0
                while let value = await iterator.next() {
                    if value != 1 { _ = wrongElements.increment() }
                    seen += 1
                    b.add(data: 1)
                }
                return seen
            }
            let pongs = Task(executorPreference: preferQueues ? pongQueue : nil) {
                var iterator = b.events.makeAsyncIterator()
                _ = ready.increment()
                var seen = 0
                while let value = await iterator.next() {
                    if value != 1 { _ = wrongElements.increment() }
                    seen += 1
                    if seen < roundTrips { a.add(data: 1) } else { break }
                }
                return (seen, Kit.channel(of: b)?.deliveries)
            }
            guard await Kit.eventually({ ready.value == 2 }) else { return nil }
            a.add(data: 1)
            let (pongsSeen, pongDeliveries) = await pongs.value  // leaving the loop cancelled b
            #expect(await Kit.eventually { Kit.channel(of: a)?.hasWaitingConsumer == true })
            let pingDeliveries = Kit.channel(of: a)?.deliveries
            a.cancel()
            let pingsSeen = await pings.value
            #expect(pongsSeen == roundTrips)
            #expect(pingsSeen == roundTrips, "a ping was lost or delivered twice")
            #expect(wrongElements.value == 0, "an element was not exactly the one add in flight")
            guard let pingDeliveries, let pongDeliveries else { return nil }
            return [pingDeliveries, pongDeliveries]
        }

        @Test func pingPongOnTheDefaultExecutorLosesNothingAndSkipsTheDeliveryJobs() async throws {
            let roundTrips = 2_000
            let deliveries = try #require(await Self.pingPong(roundTrips: roundTrips, preferQueues: false))
            // Each source's queue is idle whenever its consumer waits: the delivery skips the
            // job (or the consumer took it inline, when it came before the consumer waited).
            for (source, counts) in zip(["ping", "pong"], deliveries) {
                #expect(counts.byJob <= 1, "\(source): \(counts.byJob) of \(roundTrips) deliveries were jobs")
                #expect(counts.withoutJob > 0)
            }
        }

        @Test func pingPongOfTasksOnTheSourcesQueuesLosesNothing() async throws {
            let roundTrips = 2_000
            let deliveries = try #require(await Self.pingPong(roundTrips: roundTrips, preferQueues: true))
            // A consumer's own slice runs on its source's queue: a delivery decided while that
            // slice still holds the queue is a job behind it, one decided after it is not. How
            // many of each is the threads' timing; the ping-pong must lose nothing either way.
            for (source, counts) in zip(["ping", "pong"], deliveries) {
                #expect(counts.withoutJob > 0, "\(source): \(counts)")
            }
        }

        @Test func aDeliveryWaitsForTheBlocksAheadOfItOnTheSourcesQueue() async throws {
            let queue = WorkQueue(label: "lull.test.events.busy-queue")
            let source = EventSource.makeUserDataAddSource(queue: queue)
            let loop = Kit.Loop(source)
            #expect(await Kit.eventually { Kit.channel(of: source)?.hasWaitingConsumer == true })
            let blockRuns = Flag()
            let release = Flag()
            queue.async {
                blockRuns.set()
                _ = waitUntil { release.isSet }
            }
            #expect(waitUntil { blockRuns.isSet })
            source.add(data: 3)
            // The queue runs a block: the delivery is a job behind it, not taken by the adder.
            #expect(keepsHolding(for: .milliseconds(20)) { loop.total.value == 0 })
            release.set()
            #expect(await Kit.eventually { loop.total.value == 3 })
            #expect(Kit.channel(of: source)?.deliveries ?? (0, 0) == (1, 0))
            // Idle again (the consumer waits, and the drain that ran the delivery has given
            // the queue back): the next delivery skips the job.
            #expect(await Kit.eventually {
                Kit.channel(of: source)?.hasWaitingConsumer == true && queue.isIdleForPostedJob
            })
            source.add(data: 4)
            #expect(await Kit.eventually { loop.total.value == 7 })
            #expect(Kit.channel(of: source)?.deliveries ?? (0, 0) == (1, 1))
            source.cancel()
            await loop.task.value
            #expect(loop.values.values == [3, 4])
        }

        @Test func aSuspendedQueueHoldsTheDeliveryUntilItResumes() async throws {
            let parent = WorkQueue(label: "lull.test.events.suspended-parent")
            let queue = WorkQueue(label: "lull.test.events.suspended", target: parent)
            let source = EventSource.makeUserDataAddSource(queue: queue)
            let loop = Kit.Loop(source)
            #expect(await Kit.eventually { Kit.channel(of: source)?.hasWaitingConsumer == true })
            // Suspending the queue's target holds it as well.
            parent.suspend()
            source.add(data: 2)
            source.add(data: 5)
            #expect(keepsHolding(for: .milliseconds(20)) { loop.total.value == 0 })
            parent.resume()
            #expect(await Kit.eventually { loop.total.value == 7 })
            #expect(Kit.channel(of: source)?.deliveries ?? (0, 0) == (1, 0))
            source.cancel()
            await loop.task.value
            #expect(loop.values.values == [7])
        }

        @Test func aHandlerTheProgramSetsDuringTheLoopRunsOnTheQueueAndGetsTheEvents() async throws {
            let queue = WorkQueue(label: "lull.test.events.replaced")
            let source = EventSource.makeUserDataAddSource(queue: queue)
            let loop = Kit.Loop(source)
            #expect(await Kit.eventually { Kit.channel(of: source)?.hasWaitingConsumer == true })
            let handled = Counter()
            let offQueue = Counter()
            source.setEventHandler {
                if queue.isIsolatingCurrentContext() != true { _ = offQueue.increment() }
                for _ in 0..<Int(source.data) { _ = handled.increment() }
            }
            source.add(data: 6)
            #expect(await Kit.eventually { handled.value == 6 })
            #expect(offQueue.value == 0, "the program's handler ran off its queue")
            #expect(loop.total.value == 0, "the loop got an event after the program replaced its handler")
            #expect(Kit.channel(of: source)?.deliveries.withoutJob == 0)
            source.cancel()
            loop.task.cancel()
            await loop.task.value
        }

        @Test func cancellingAPingPongTaskWhileItWaitsEndsItsLoopPromptly() async throws {
            for round in 0..<20 {
                let a = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.events.cancel-ping"))
                let b = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.events.cancel-pong"))
                let cancelHandlerRuns = Counter()
                a.setCancelHandler { _ = cancelHandlerRuns.increment() }
                let trips = Counter()
                let wrongElements = Counter()
                let pings = Task {
                    for await value in a.events {
                        if value != 1 { _ = wrongElements.increment() }
                        b.add(data: 1)
                    }
                    return cancelHandlerRuns.value
                }
                let pongs = Task {
                    for await value in b.events {
                        if value != 1 { _ = wrongElements.increment() }
                        _ = trips.increment()
                        a.add(data: 1)
                    }
                }
                #expect(await Kit.eventually { Kit.channel(of: a)?.hasWaitingConsumer == true })
                #expect(await Kit.eventually { Kit.channel(of: b)?.hasWaitingConsumer == true })
                a.add(data: 1)
                // Cancelled at a different moment of the round trips each round.
                let stopAt = 1 + (round * 37) % 200
                #expect(await Kit.eventually { trips.value >= stopAt })
                pings.cancel()
                #expect(await pings.value == 1, "the loop ended before the cancel handler ran, or it ran twice")
                #expect(a.isCancelled)
                b.cancel()
                await pongs.value
                #expect(wrongElements.value == 0)
            }
        }
    }
}
