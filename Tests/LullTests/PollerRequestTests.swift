import Glibc
import Synchronization
import Testing
@testable import Lull

/// While no worker polls the reactor, every change of its interest asks the pool for a
/// poller (`WorkerPool.ensurePoller`). With every worker busy and none idle, each request
/// used to start a thread: one request at a time must be answered by one thread.
extension LullSuite {
    @Suite struct PollerRequestTests {
        /// Blocks that keep their worker running until the gate opens.
        final class Occupancy: Sendable {
            let gate = Atomic<Bool>(false)
            let busy = Atomic<Int>(0)

            func occupy() {
                busy.add(1, ordering: .relaxed)
                // Spinning, not sleeping: the pool must see a running worker, not a blocked one.
                while !gate.load(ordering: .acquiring) { sched_yield() }
            }
        }

        @Test func manyRegistrationsWhileEveryWorkerIsBusyStartOnePoller() throws {
            let occupancy = Occupancy()
            var pipes: [[Int32]] = []
            var sources: [ReadSource] = []
            defer {
                occupancy.gate.store(true, ordering: .releasing)
                for source in sources { source.cancel() }
                for ends in pipes { close(ends[0]); close(ends[1]) }
            }
            // The poller runs this handler itself, so it leaves the reactor for as long.
            var trigger: [Int32] = [0, 0]
            try #require(pipe(&trigger) == 0)
            pipes.append(trigger)
            let leaderSource = EventSource.makeReadSource(fileDescriptor: trigger[0], queue: .global())
            leaderSource.setEventHandler { occupancy.occupy() }
            leaderSource.activate()
            sources.append(leaderSource)
            #expect(write(trigger[1], "x", 1) == 1)
            for _ in 0..<Runtime.shared.pool.cpuCount {
                WorkQueue.global().async { occupancy.occupy() }
            }
            // The handler and the blocks share the class's cpuCount threads (the handler's
            // poller counts as one of them once it runs it): which of them run first is
            // timing, and the rest wait queued, which is all this test needs.
            try #require(waitUntil { occupancy.busy.load(ordering: .relaxed) >= Runtime.shared.pool.cpuCount })
            // Queued behind them: a thread started for a poller must poll, not take these.
            for _ in 0..<8 {
                WorkQueue.global().async { occupancy.occupy() }
            }
            let threadsBefore = Runtime.shared.pool.workerThreadIDs().count

            let queue = WorkQueue(label: "poller-requests", qos: .userInitiated)
            for _ in 0..<100 {
                var ends: [Int32] = [0, 0]
                try #require(pipe(&ends) == 0)
                pipes.append(ends)
                let source = EventSource.makeReadSource(fileDescriptor: ends[0], queue: queue)
                source.setEventHandler {}
                source.activate()
                sources.append(source)
            }
            #expect(waitUntil { Runtime.shared.pool.pollerSlot.isPolling }, "no worker polls")
            let started = Runtime.shared.pool.workerThreadIDs().count - threadsBefore
            #expect(started <= 3, "\(started) threads started for 100 registrations")
        }
    }
}
