import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    /// One wake-up reports several sources, whose deliveries the poller runs in its inline
    /// batch: a handler that waits in one of Lull's waits for what a later handler does must
    /// not wait for ever, whether that handler's job is behind it in the same batch (the
    /// batch's other jobs go to the class queue) or its event still needs a poll (the
    /// waiting thread was the last poller: another worker polls).
    @Suite(.serialized) struct InlineBatchWaitTests {
        enum Wait: CaseIterable {
            case semaphore, group
        }

        /// Sources on `count` pipes, each with a byte written before activation, so that one
        /// poll reports them all. The first to run waits for the last to run.
        func run(_ wait: Wait) throws -> (finished: Bool, started: Int, released: Bool) {
            let count = 8
            var pipes: [[Int32]] = []
            defer { for ends in pipes { close(ends[0]); close(ends[1]) } }
            for _ in 0..<count {
                var ends: [Int32] = [0, 0]
                try #require(pipe(&ends) == 0)
                pipes.append(ends)
                var byte: UInt8 = 1
                try #require(write(ends[1], &byte, 1) == 1)
            }
            let semaphore = WorkSemaphore(value: 0)
            let group = WorkGroup()
            group.enter()
            let started = Atomic<Int>(0)
            let waiterDone = Flag()
            let released = Flag()
            var sources: [ReadSource] = []
            for index in 0..<count {
                let descriptor = pipes[index][0]
                let source = EventSource.makeReadSource(fileDescriptor: descriptor,
                                                        queue: WorkQueue(label: "lull.test.inline-wait.\(index)"))
                source.setEventHandler {
                    var byte: UInt8 = 0
                    _ = read(descriptor, &byte, 1)
                    let place = started.add(1, ordering: .relaxed).oldValue
                    if place == 0 {
                        switch wait {
                        case .semaphore: semaphore.wait()
                        case .group: group.wait()
                        }
                        waiterDone.set()
                    } else if place == count - 1 {
                        released.set()
                        switch wait {
                        case .semaphore: _ = semaphore.signal()
                        case .group: group.leave()
                        }
                    }
                }
                sources.append(source)
            }
            for source in sources { source.activate() }
            let finished = waiterDone.await()
            if !finished {
                // Let the stuck handler go, so that the sources can end.
                if !released.isSet {
                    _ = semaphore.signal()
                    group.leave()
                }
            }
            let cancelled = Counter()
            for source in sources {
                source.setCancelHandler { cancelled.increment() }
                source.cancel()
            }
            #expect(cancelled.await { $0 == count })
            return (finished, started.load(ordering: .relaxed), released.isSet)
        }

        @Test(arguments: Wait.allCases)
        func aHandlerWaitingForALaterHandlerOfItsWakeUpIsNotLeftWaiting(_ wait: Wait) throws {
            for attempt in 0..<10 {
                let (finished, started, released) = try run(wait)
                #if DEBUG
                let handedOver = PoolTestHooks.inlineJobsHandedOverByWaits.load(ordering: .relaxed)
                #else
                let handedOver = -1
                #endif
                #expect(finished, "attempt \(attempt): the first handler still waits for the last (\(started) handlers started, the last ran: \(released), jobs handed over so far: \(handedOver))")
                if !finished { return }
            }
        }
    }
}
