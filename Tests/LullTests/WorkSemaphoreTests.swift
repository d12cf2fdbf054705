import Synchronization
import Testing
@testable import Lull

#if canImport(Glibc)
import Glibc
#endif

extension LullSuite {
    @Suite struct WorkSemaphoreTests {
        @Test func countsResources() {
            let semaphore = WorkSemaphore(value: 2)
            #expect(semaphore.wait(timeout: .now()) == .success)
            #expect(semaphore.wait(timeout: .now()) == .success)
            #expect(semaphore.wait(timeout: .now()) == .timedOut)
            #expect(semaphore.signal() == 0, "no one waits: nobody to wake")
            #expect(semaphore.wait(timeout: .now()) == .success)
            semaphore.signal()
            semaphore.signal()
        }

        @Test func signalReturnsNonzeroWhenItWakesAWaiter() {
            let semaphore = WorkSemaphore(value: 0)
            let woke = Flag()
            TestThreads.start(1) { _ in
                semaphore.wait()
                woke.set()
            }
            #expect(waitUntil { semaphore.parkedCount == 1 })
            #expect(semaphore.signal() != 0)
            #expect(waitUntil { woke.isSet })
            #expect(semaphore.signal() == 0)
            #expect(semaphore.wait(timeout: .now()) == .success)
        }

        @Test func wakesTheLongestWaiterFirst() {
            let semaphore = WorkSemaphore(value: 0)
            let order = Recorder<Int>()
            for index in 0..<4 {
                TestThreads.start(1) { _ in
                    semaphore.wait()
                    order.append(index)
                }
                #expect(waitUntil { semaphore.parkedCount == index + 1 })
            }
            for woken in 1...4 {
                semaphore.signal()
                #expect(waitUntil { order.count == woken })
            }
            #expect(order.values == [0, 1, 2, 3])
        }

        @Test func aTimedOutWaiterDoesNotSwallowALaterSignal() {
            let semaphore = WorkSemaphore(value: 0)
            #expect(semaphore.wait(timeout: .now() + .milliseconds(20)) == .timedOut)
            #expect(semaphore.parkedCount == 0)
            #expect(semaphore.signal() == 0, "the timed-out waiter is gone")
            #expect(semaphore.wait(timeout: .now()) == .success, "the signal was kept for the next wait")
            #expect(semaphore.wait(timeout: .now()) == .timedOut)
            semaphore.signal()
        }

        /// Waits that time out race signals: every signal is taken exactly once, by a wait
        /// that succeeded or by the count left at the end.
        @Test func timeoutsRacingSignalsLoseNothing() {
            let semaphore = WorkSemaphore(value: 0)
            let successes = Counter()
            let signals = 400
            let waiters = 4
            let finished = Counter()
            TestThreads.start(waiters) { _ in
                for round in 0..<200 {
                    let timeout: Deadline = round % 3 == 0 ? .now() : .now() + .microseconds(200)
                    if semaphore.wait(timeout: timeout) == .success { successes.increment() }
                }
                finished.increment()
            }
            TestThreads.start(2) { _ in
                for _ in 0..<(signals / 2) {
                    semaphore.signal()
                    usleep(10)
                }
                finished.increment()
            }
            #expect(waitUntil { finished.value == waiters + 2 })
            var left = 0
            while semaphore.wait(timeout: .now()) == .success { left += 1 }
            #expect(successes.value + left == signals)
            for _ in 0..<(successes.value + left) { semaphore.signal() }
        }

        /// Blocks that wait on a semaphore take every worker their class may run at once; the
        /// pool counts them as blocked and starts another thread for the block that signals.
        @Test func waitingWorkersLetThePoolStartAnother() {
            let semaphore = WorkSemaphore(value: 0)
            let queue = WorkQueue(label: "lull.test.semaphore.blocking", qos: .utility, attributes: .concurrent)
            let count = Runtime.shared.pool.cpuCount * 2 + 1
            let started = Counter()
            let finished = Counter()
            for _ in 0..<count {
                queue.async {
                    started.increment()
                    semaphore.wait()
                    finished.increment()
                }
            }
            #expect(waitUntil { started.value == count }, "only \(started.value) of \(count) waiting blocks started")
            queue.async { for _ in 0..<count { semaphore.signal() } }
            #expect(waitUntil { finished.value == count })
        }
    }
}

extension IndependentSuite {
    @Suite(.serialized) struct WorkSemaphoreTrapTests {
        @Test func releasingASemaphoreInUseStopsTheProgram() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                var semaphore: WorkSemaphore? = WorkSemaphore(value: 1)
                semaphore?.wait()
                semaphore = nil
            }
            let message = standardErrorText(result)
            #expect(message.contains("WorkSemaphore deallocated while in use"), "stderr: \(message)")
        }

        @Test func releasingASemaphoreAtOrAboveItsInitialValueIsFine() async {
            await #expect(processExitsWith: .success) {
                var semaphore: WorkSemaphore? = WorkSemaphore(value: 1)
                semaphore?.wait()
                semaphore?.signal()
                semaphore?.signal()
                // A wait that timed out gave its decrement back.
                let empty = WorkSemaphore(value: 0)
                _ = empty.wait(timeout: .now() + .milliseconds(1))
                semaphore = nil
                _ = semaphore
            }
        }
    }
}

/// Threads that run alongside the test (detached: each test waits for what its threads
/// do through its own conditions; `SourceTestKit.runThreads` waits for its threads at once).
enum TestThreads {
    /// Runs `body(index)` on `count` new threads and returns at once.
    static func start(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        final class Start: Sendable {
            let body: @Sendable () -> Void
            init(_ body: @escaping @Sendable () -> Void) { self.body = body }
        }
        for index in 0..<count {
            let start = Unmanaged.passRetained(Start { body(index) })
            var thread = pthread_t()
            let result = pthread_create(&thread, nil, { context in
                let start = Unmanaged<Start>.fromOpaque(context!).takeRetainedValue()
                start.body()
                return nil
            }, start.toOpaque())
            precondition(result == 0, "pthread_create failed: \(result)")
            pthread_detach(thread)
        }
    }
}
