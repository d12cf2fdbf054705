import Glibc
import Testing
@testable import Lull

extension LullSuite {
    /// A delivery job already posted on the source's queue when the source is suspended runs
    /// no handler: the value waits for the resume (Dispatch's source does not start while
    /// suspended). Two read sources on one serial queue, where the second's handler suspends
    /// the first while the first's next delivery waits behind it, are the case in a server.
    @Suite struct SourceSuspendedDeliveryTests {
        /// A block of the source's serial queue merges (the delivery job goes into the queue
        /// behind the block) and then suspends the source: the job that runs after the block
        /// finds the source suspended.
        @Test func aDeliveryQueuedBeforeTheSuspendWaitsForTheResume() {
            let queue = WorkQueue(label: "lull.test.suspended-delivery")
            let source = EventSource.makeUserDataAddSource(queue: queue)
            let values = Recorder<UInt>()
            source.setEventHandler { values.append(source.data) }
            source.activate()
            queue.sync {
                source.add(data: 3)
                source.suspend()
            }
            // The delivery job was queued behind the block above, and so ran before this one.
            queue.sync {}
            #expect(values.values.isEmpty, "a handler ran while its source was suspended")
            source.add(data: 4)
            #expect(keepsHolding(for: .milliseconds(20)) { values.values.isEmpty })
            source.resume()
            #expect(waitUntil { values.values.reduce(0, +) == 7 })
            #expect(values.values == [7])
            let cancelled = Flag()
            source.setCancelHandler { cancelled.set() }
            source.cancel()
            #expect(cancelled.await())
        }

        /// The handler of one source suspends another source of the same serial queue whose
        /// delivery is queued behind it; the cancel of the suspended source then waits for the
        /// resume too, and no event handler runs after the cancel.
        @Test func aSourceSuspendedByAnotherHandlerOfItsQueueRunsNothingUntilResumed() {
            let queue = WorkQueue(label: "lull.test.suspended-delivery.peer")
            let first = EventSource.makeUserDataAddSource(queue: queue)
            let second = EventSource.makeUserDataAddSource(queue: queue)
            let firstRuns = Counter()
            let firstCancelled = Flag()
            first.setEventHandler { firstRuns.increment() }
            first.setCancelHandler { firstCancelled.set() }
            second.setEventHandler { first.suspend() }
            first.activate()
            second.activate()
            queue.sync {
                // Both deliveries go into the queue behind this block: the second's first.
                second.add(data: 1)
                first.add(data: 1)
            }
            queue.sync {}
            #expect(firstRuns.value == 0, "the suspended source's queued delivery ran its handler")
            first.cancel()
            #expect(keepsHolding(for: .milliseconds(20)) { !firstCancelled.isSet })
            first.resume()
            #expect(firstCancelled.await())
            #expect(firstRuns.value == 0, "an event handler ran after the cancel")
            let secondCancelled = Flag()
            second.setCancelHandler { secondCancelled.set() }
            second.cancel()
            #expect(secondCancelled.await())
        }
    }
}
