import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    /// One wake-up reports several sources, whose deliveries the poller runs in its inline
    /// batch: a handler that waits in one of Lull's waits for what a later handler of the
    /// same batch does must not wait for ever (the batch's other jobs go to the class queue).
    @Suite(.serialized) struct InlineBatchWaitTests {
        enum Wait: CaseIterable {
            case semaphore, group
        }

        /// Sources on `count` pipes, each with a byte written before activation, so that one
        /// poll reports them all. The first to run waits for the last to run.
        func run(_ wait: Wait) throws -> Bool {
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
            return finished
        }

        @Test(arguments: Wait.allCases)
        func aHandlerWaitingForALaterHandlerOfItsWakeUpIsNotLeftWaiting(_ wait: Wait) throws {
            for attempt in 0..<10 {
                let finished = try run(wait)
                #expect(finished, "attempt \(attempt): the first handler still waits for the last")
                if !finished { return }
            }
        }
    }
}
