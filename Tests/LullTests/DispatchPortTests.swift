import Testing
import Lull

// A Dispatch program ported to Lull by renaming types alone, as docs/Porting.md describes:
//
//   DispatchQueue → WorkQueue             DispatchSemaphore → WorkSemaphore
//   DispatchGroup → WorkGroup             DispatchSpecificKey → SpecificKey
//   DispatchWorkItem → WorkItem           dispatchPrecondition → workPrecondition
//   DispatchSource → EventSource          DispatchTime → Deadline
//
// Nothing else changed: `.now() + 1.5`, `.milliseconds(5)` intervals, `wait(timeout:)`
// results, the predicates, the sources' calls read as they do with Dispatch. (The one line
// Dispatch has no counterpart for, `asyncAfter(deadline:leeway:)`, is marked.) The program
// itself is ordinary Dispatch code: a class whose state a serial queue guards (asserted
// with the precondition), a semaphore bounding the concurrent work, a group for the batch,
// a timer and a user-data source on the state queue, a cancelled timeout.

/// Squares numbers on a concurrent queue, at most two at a time, and totals them on a serial
/// queue; ticks a timer and counts progress events there too.
private final class SquareTotaler: @unchecked Sendable {  // state touched only on stateQueue
    static let queueName = SpecificKey<String>()

    let stateQueue = WorkQueue(label: "ported.state")
    let workers = WorkQueue(label: "ported.workers", qos: .utility, attributes: .concurrent)
    let limiter = WorkSemaphore(value: 2)
    let group = WorkGroup()

    private var total = 0
    private var inFlight = 0
    private var mostInFlight = 0
    private var ticks = 0
    private var progress: UInt = 0
    private var timeoutFired = false

    init() {
        stateQueue.setSpecific(key: SquareTotaler.queueName, value: "state")
    }

    /// Squares `0..<count` and returns the sum (nil on a timeout).
    func sumOfSquares(below count: Int) -> Int? {
        dispatchCheckOffState()
        for index in 0..<count {
            group.enter()
            workers.async {
                self.limiter.wait()
                self.stateQueue.sync { self.noteStarted() }
                let square = index * index
                self.stateQueue.async {
                    self.add(square)
                    self.limiter.signal()
                    self.group.leave()
                }
            }
        }
        guard group.wait(timeout: .now() + 10) == .success else { return nil }
        return stateQueue.sync { total }
    }

    private func dispatchCheckOffState() {
        workPrecondition(condition: .notOnQueue(stateQueue))
    }

    private func noteStarted() {
        workPrecondition(condition: .onQueue(stateQueue))
        inFlight += 1
        mostInFlight = max(mostInFlight, inFlight)
    }

    private func add(_ square: Int) {
        workPrecondition(condition: .onQueueAsBarrier(stateQueue))
        inFlight -= 1
        total += square
    }

    /// Ticks a repeating timer `count` times on the state queue, then cancels it.
    func tick(_ count: Int) -> Int {
        let done = WorkSemaphore(value: 0)
        let timer = EventSource.makeTimerSource(queue: stateQueue)
        timer.schedule(deadline: .now(), repeating: .milliseconds(5), leeway: .milliseconds(1))
        timer.setEventHandler {
            workPrecondition(condition: .onQueue(self.stateQueue))
            self.ticks += 1
            if self.ticks == count { timer.cancel() }
        }
        timer.setCancelHandler { done.signal() }
        timer.activate()
        _ = done.wait(timeout: .now() + 10)
        return stateQueue.sync { ticks }
    }

    /// Posts `count` progress events; the source merges them on the state queue.
    func reportProgress(_ count: Int) -> UInt {
        let finished = WorkSemaphore(value: 0)
        let source = EventSource.makeUserDataAddSource(queue: stateQueue)
        source.setEventHandler {
            workPrecondition(condition: .onQueue(self.stateQueue))
            self.progress += source.data
            if self.progress == UInt(count) { finished.signal() }
        }
        source.activate()
        for _ in 0..<count { source.add(data: 1) }
        _ = finished.wait(timeout: .now() + 10)
        source.cancel()
        return stateQueue.sync { progress }
    }

    /// A timeout that is cancelled before it fires, and a short delay that runs.
    func timeouts() -> (timeoutFired: Bool, delayedRan: Bool) {
        let timeout = WorkItem { self.timeoutFired = true }
        stateQueue.asyncAfter(deadline: .now() + 1.5, execute: timeout)
        timeout.cancel()
        let delayed = WorkSemaphore(value: 0)
        // Lull only (Dispatch has no leeway on asyncAfter): a 10 ms delay, at most 2 ms late.
        WorkQueue.global(qos: .userInitiated).asyncAfter(deadline: .now() + 0.01, leeway: .milliseconds(2)) {
            delayed.signal()
        }
        let delayedRan = delayed.wait(timeout: .now() + 10) == .success
        let fired = stateQueue.sync { timeoutFired }
        return (fired || !timeout.isCancelled, delayedRan)
    }

    var mostConcurrentSquares: Int { stateQueue.sync { mostInFlight } }

    /// Where the specific value is seen from: the state queue, a queue that targets it, and
    /// a thread on no queue.
    func queueNames() -> [String?] {
        let child = WorkQueue(label: "ported.child", target: stateQueue)
        return [stateQueue.sync { WorkQueue.getSpecific(key: SquareTotaler.queueName) },
                child.sync { WorkQueue.getSpecific(key: SquareTotaler.queueName) },
                WorkQueue.getSpecific(key: SquareTotaler.queueName)]
    }
}

extension LullSuite {
    @Suite struct DispatchPortTests {
        @Test func aDispatchProgramPortedByRenamingRuns() {
            let totaler = SquareTotaler()
            #expect(totaler.sumOfSquares(below: 12) == (0..<12).map { $0 * $0 }.reduce(0, +))
            #expect(totaler.mostConcurrentSquares <= 2, "the semaphore bounds the concurrent squares")
            #expect(totaler.tick(3) == 3)
            #expect(totaler.reportProgress(100) == 100)
            let (timeoutFired, delayedRan) = totaler.timeouts()
            #expect(!timeoutFired && delayedRan)
            #expect(totaler.queueNames() == ["state", "state", nil])
        }
    }
}
