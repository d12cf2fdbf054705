import Synchronization
import Testing
@testable import Lull

#if canImport(Glibc)
import Glibc
#endif

/// `workPrecondition`, queue-specific values, `QueueBound`, `Deadline + Double` and
/// `asyncAfter(deadline:leeway:)`: what a Dispatch program needs to port by renaming.
extension LullSuite {
    @Suite struct PortingHelperTests {
        /// What the predicates say on the calling thread, as booleans (nil: holds).
        static func holds(_ predicate: WorkPredicate) -> Bool {
            predicate.failure(on: ThreadState.current) == nil
        }

        // MARK: workPrecondition

        @Test func aSerialQueuesBlockIsOnItsQueueAndItsTargets() {
            let target = WorkQueue(label: "lull.test.port.target", qos: .utility)
            let child = WorkQueue(label: "lull.test.port.child", target: target)
            let other = WorkQueue(label: "lull.test.port.other")
            let seen = Captured<[Bool]>()
            child.async {
                seen.set([Self.holds(.onQueue(child)), Self.holds(.onQueue(target)),
                          Self.holds(.onQueue(.global(qos: .utility))), Self.holds(.onQueueAsBarrier(child)),
                          Self.holds(.notOnQueue(other)), Self.holds(.onQueue(other)),
                          Self.holds(.onQueue(.global(qos: .background))), Self.holds(.notOnQueue(child))])
            }
            #expect(seen.await() == [true, true, true, true, true, false, false, false])
            let inTarget = Captured<[Bool]>()
            target.async { inTarget.set([Self.holds(.onQueue(target)), Self.holds(.onQueue(child))]) }
            #expect(inTarget.await() == [true, false], "a target's block is not on the queues that target it")
        }

        @Test func aThreadOutsideEveryQueueIsOnNone() {
            let queue = WorkQueue(label: "lull.test.port.none")
            let seen = Captured<[Bool]>()
            SourceTestKit.runThreads(1) { _ in
                seen.set([Self.holds(.onQueue(queue)), Self.holds(.notOnQueue(queue)),
                          Self.holds(.onQueue(.global())), Self.holds(.onQueue(.main))])
            }
            #expect(seen.value == [false, true, false, false])
        }

        @Test func syncPutsTheCallerOnTheQueueAndItsTargets() {
            let target = WorkQueue(label: "lull.test.port.sync-target")
            let queue = WorkQueue(label: "lull.test.port.sync", target: target)
            let seen = Captured<[Bool]>()
            SourceTestKit.runThreads(1) { _ in
                let inside = queue.sync { [Self.holds(.onQueue(queue)), Self.holds(.onQueue(target)),
                                           Self.holds(.onQueue(.global()))] }
                let global = WorkQueue.global(qos: .background).sync { Self.holds(.onQueue(.global(qos: .background))) }
                seen.set(inside + [global, Self.holds(.notOnQueue(queue))])
            }
            #expect(seen.value == [true, true, true, true, true])
        }

        @Test func aGlobalQueuesBlockIsOnThatGlobalQueueOnly() {
            let seen = Captured<[Bool]>()
            // A block of the default global queue submitted at a higher QoS runs on that
            // class's threads: still on the default global queue.
            WorkQueue.global().async(qos: .userInitiated) {
                seen.set([Self.holds(.onQueue(.global())), Self.holds(.onQueue(.global(qos: .userInitiated))),
                          Self.holds(.onQueueAsBarrier(.global()))])
            }
            #expect(seen.await() == [true, false, false])
            let utility = Captured<[Bool]>()
            WorkQueue.global(qos: .utility).async {
                utility.set([Self.holds(.onQueue(.global(qos: .utility))), Self.holds(.notOnQueue(.global()))])
            }
            #expect(utility.await() == [true, true])
        }

        @Test func aConcurrentQueueIsABarrierOnlyInsideABarrier() {
            let queue = WorkQueue(label: "lull.test.port.concurrent", attributes: .concurrent)
            let plain = Captured<[Bool]>()
            queue.async { plain.set([Self.holds(.onQueue(queue)), Self.holds(.onQueueAsBarrier(queue))]) }
            #expect(plain.await() == [true, false])
            let barrier = Captured<[Bool]>()
            queue.async(flags: .barrier) {
                barrier.set([Self.holds(.onQueue(queue)), Self.holds(.onQueueAsBarrier(queue))])
            }
            #expect(barrier.await() == [true, true])
            let syncBarrier = queue.sync(flags: .barrier) { Self.holds(.onQueueAsBarrier(queue)) }
            #expect(syncBarrier)
        }

        @Test func concurrentPerformIterationsRunOnTheCallersQueue() {
            let queue = WorkQueue(label: "lull.test.port.apply")
            let key = SpecificKey<String>()
            queue.setSpecific(key: key, value: "apply")
            let misses = Counter()
            let done = Flag()
            queue.async {
                WorkQueue.concurrentPerform(iterations: 64) { _ in
                    if !Self.holds(.onQueue(queue)) || WorkQueue.getSpecific(key: key) != "apply" {
                        misses.increment()
                    }
                    spin(microseconds: 200)
                }
                done.set()
            }
            #expect(waitUntil { done.isSet })
            #expect(misses.value == 0)
        }

        @Test func workPreconditionPassesWhereItHolds() {
            let queue = WorkQueue(label: "lull.test.port.passes")
            let done = Flag()
            queue.async {
                workPrecondition(condition: .onQueue(queue))
                workPrecondition(condition: .onQueueAsBarrier(queue))
                workPrecondition(condition: .notOnQueue(.main))
                done.set()
            }
            #expect(waitUntil { done.isSet })
        }

        // MARK: Queue-specific values

        @Test func specificValuesAreFoundOnTheQueueAndThroughItsTargets() {
            let name = SpecificKey<String>()
            let number = SpecificKey<Int>()
            let target = WorkQueue(label: "lull.test.port.specific-target")
            let queue = WorkQueue(label: "lull.test.port.specific", target: target)
            target.setSpecific(key: name, value: "target")
            target.setSpecific(key: number, value: 1)
            queue.setSpecific(key: number, value: 2)
            #expect(queue.getSpecific(key: number) == 2)
            #expect(queue.getSpecific(key: name) == nil, "the instance lookup does not walk targets")
            let seen = Captured<[String]>()
            queue.async {
                seen.set(["\(WorkQueue.getSpecific(key: name) ?? "-")", "\(WorkQueue.getSpecific(key: number) ?? 0)"])
            }
            #expect(seen.await() == ["target", "2"])
            queue.setSpecific(key: number, value: nil)
            let afterRemoval = queue.sync { WorkQueue.getSpecific(key: number) }
            #expect(afterRemoval == 1, "removed on the queue: the target's value shows through")
            #expect(WorkQueue.getSpecific(key: number) == nil, "not on any queue")
            let onGlobal = Captured<Int>()
            WorkQueue.global().async { onGlobal.set(WorkQueue.getSpecific(key: number) ?? -1) }
            #expect(onGlobal.await() == -1)
        }

        @Test func keysAreDistinct() {
            let first = SpecificKey<Int>()
            let second = SpecificKey<Int>()
            let queue = WorkQueue(label: "lull.test.port.keys")
            queue.setSpecific(key: first, value: 1)
            #expect(queue.getSpecific(key: second) == nil)
            queue.setSpecific(key: second, value: 2)
            #expect(queue.getSpecific(key: first) == 1)
            #expect(queue.getSpecific(key: second) == 2)
        }

        @Test func specificValuesAreReleasedWithTheQueueOrWhenRemoved() {
            final class Token: Sendable {
                let released: Flag
                init(_ released: Flag) { self.released = released }
                deinit { released.set() }
            }
            let key = SpecificKey<Token>()
            let removed = Flag()
            let withQueue = Flag()
            var queue: WorkQueue? = WorkQueue(label: "lull.test.port.release")
            queue?.setSpecific(key: key, value: Token(removed))
            queue?.setSpecific(key: key, value: Token(withQueue))
            #expect(removed.isSet, "a replaced value is released")
            queue?.sync {}
            #expect(!withQueue.isSet)
            queue = nil
            #expect(waitUntil { withQueue.isSet }, "the queue's values are released with it")
            let other = WorkQueue(label: "lull.test.port.release-nil")
            let cleared = Flag()
            other.setSpecific(key: key, value: Token(cleared))
            other.setSpecific(key: key, value: nil)
            #expect(cleared.isSet)
        }

        /// Values set and removed from several threads while blocks look them up: every
        /// lookup sees a value that was set (or none), never a torn or foreign one.
        @Test func specificValuesRaceLookups() {
            let key = SpecificKey<Int>()
            let target = WorkQueue(label: "lull.test.port.specific-race-target")
            let queue = WorkQueue(label: "lull.test.port.specific-race", target: target)
            target.setSpecific(key: key, value: -1)
            let wrong = Counter()
            let lookups = Counter()
            for _ in 0..<200 {
                queue.async {
                    let value = WorkQueue.getSpecific(key: key)
                    if value == nil || !(value! == -1 || (0..<4).contains(value!)) { wrong.increment() }
                    lookups.increment()
                }
            }
            SourceTestKit.runThreads(4) { index in
                for round in 0..<100 {
                    queue.setSpecific(key: key, value: round % 2 == 0 ? index : nil)
                    _ = queue.getSpecific(key: key)
                }
            }
            #expect(waitUntil { lookups.value == 200 })
            #expect(wrong.value == 0)
        }

        // MARK: QueueBound

        @Test func queueBoundStateIsReachableOnItsQueue() {
            struct Connection {
                var bytes = 0
                var lines: [String] = []
            }
            let queue = WorkQueue(label: "lull.test.port.bound")
            let child = WorkQueue(label: "lull.test.port.bound-child", target: queue)
            let state = QueueBound(Connection(), on: queue)
            for index in 0..<100 {
                queue.async { state.value.bytes += index }
            }
            child.async { state.value.lines.append("from a queue that targets it") }
            state.async { $0.lines.append("async") }
            let (bytes, lines) = state.sync { ($0.bytes, $0.lines) }
            #expect(bytes == 4_950)
            #expect(lines == ["from a queue that targets it", "async"])
            let counted = queue.sync { state.withValue { connection -> Int in
                connection.bytes = 0
                return connection.lines.count
            } }
            #expect(counted == 2)
            #expect(state.sync { $0.bytes } == 0)
        }

        @Test func queueBoundUpdatesFromManyThreadsAllLand() {
            let queue = WorkQueue(label: "lull.test.port.bound-race")
            let tally = QueueBound([Int: Int](), on: queue)
            SourceTestKit.runThreads(4) { index in
                for _ in 0..<250 {
                    tally.async { $0[index, default: 0] += 1 }
                }
            }
            let counts = tally.sync { $0 }
            #expect(counts == [0: 250, 1: 250, 2: 250, 3: 250])
        }

        // MARK: Time

        @Test func deadlinePlusSecondsIsInNanoseconds() {
            let base = Deadline(uptimeNanoseconds: 10_000_000_000)
            #expect(base + 1.5 == base + .milliseconds(1_500))
            #expect(base + 0.000_000_001 == Deadline(uptimeNanoseconds: 10_000_000_001))
            #expect(base - 2.25 == Deadline(uptimeNanoseconds: 7_750_000_000))
            #expect(base + -2.25 == base - 2.25)
            #expect(base - 20.0 == Deadline(uptimeNanoseconds: 0), "saturates at zero")
            #expect(base + 1e30 == .distantFuture, "saturates at distantFuture")
            #expect(base + .infinity == .distantFuture)
            #expect(base + .nan == .distantFuture, "NaN is never, as Dispatch clamps it")
            #expect(base - .infinity == Deadline(uptimeNanoseconds: 0))
            #expect(Deadline.distantFuture - 1.0 == .distantFuture)
            let wall = WallDeadline(nanosecondsSinceEpoch: 5_000_000_000)
            #expect(wall + 0.5 == WallDeadline(nanosecondsSinceEpoch: 5_500_000_000))
            #expect(wall - 0.5 == WallDeadline(nanosecondsSinceEpoch: 4_500_000_000))
        }

        @Test func asyncAfterWithALeewayArmsExactlyThatWindow() {
            let driven = DrivenEngine()
            let services = QueueServices(pool: Runtime.shared.pool, timers: driven.engine)
            let root = WorkQueue(rootLabel: "lull.test.port.leeway-root", kind: .root(.default), qos: .default,
                                 executor: Runtime.shared.pool, services: services)
            let deadline = Deadline.now() + .seconds(100)
            root.asyncAfter(deadline: deadline, leeway: .milliseconds(3)) {}
            #expect(driven.recorder.take()?.latest == deadline.uptimeNanoseconds + 3_000_000)
            #expect(driven.engine.count == 1)
            let later = deadline + .seconds(100)
            root.asyncAfter(deadline: later, leeway: .seconds(-1)) {}
            let strict = deadline - .seconds(50)
            root.asyncAfter(deadline: strict, leeway: .zero) {}
            #expect(driven.recorder.take()?.latest == strict.uptimeNanoseconds, "a zero leeway: the deadline itself")
            // The default for a 100 s delay would be 10 s.
            root.asyncAfter(deadline: deadline) {}
            #expect(driven.engine.count == 4)
            withExtendedLifetime(services) {}
        }

        @Test func asyncAfterWithALeewayNeverRunsEarly() {
            let queue = WorkQueue(label: "lull.test.port.after-leeway")
            let deadline = Deadline.now() + 0.02
            let ranAt = Captured<UInt64>()
            queue.asyncAfter(deadline: deadline, leeway: .milliseconds(1)) { ranAt.set(monotonicNanoseconds()) }
            let time = ranAt.await()
            #expect(time != nil && time! >= deadline.uptimeNanoseconds)
        }
    }
}

extension IndependentSuite {
    @Suite(.serialized) struct PortingHelperTrapTests {
        @Test func onQueueFailureNamesTheQueue() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let queue = WorkQueue(label: "lull.test.trap.expected-queue")
                workPrecondition(condition: .onQueue(queue))
            }
            let message = standardErrorText(result)
            #expect(message.contains("workPrecondition failed"), "stderr: \(message)")
            #expect(message.contains("expected to run on WorkQueue 'lull.test.trap.expected-queue'"), "stderr: \(message)")
        }

        @Test func notOnQueueFailureNamesTheQueue() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let queue = WorkQueue(label: "lull.test.trap.unexpected-queue")
                queue.sync { workPrecondition(condition: .notOnQueue(queue)) }
            }
            let message = standardErrorText(result)
            #expect(message.contains("expected not to run on WorkQueue 'lull.test.trap.unexpected-queue'"),
                    "stderr: \(message)")
        }

        @Test func barrierFailureNamesTheQueue() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let queue = WorkQueue(label: "lull.test.trap.not-a-barrier", attributes: .concurrent)
                queue.sync { workPrecondition(condition: .onQueueAsBarrier(queue)) }
            }
            let message = standardErrorText(result)
            #expect(message.contains("expected to run as a barrier on WorkQueue 'lull.test.trap.not-a-barrier'"),
                    "stderr: \(message)")
        }

        @Test func queueBoundOffItsQueueStopsTheProgram() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let queue = WorkQueue(label: "lull.test.trap.bound-owner")
                let state = QueueBound(0, on: queue)
                state.value += 1
            }
            let message = standardErrorText(result)
            #expect(message.contains("QueueBound<Int> used off its queue"), "stderr: \(message)")
            #expect(message.contains("'lull.test.trap.bound-owner'"), "stderr: \(message)")
        }

        @Test func queueBoundNeedsASerialQueue() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                _ = QueueBound(0, on: WorkQueue(label: "lull.test.trap.bound-concurrent", attributes: .concurrent))
            }
            let message = standardErrorText(result)
            #expect(message.contains("QueueBound needs a serial queue"), "stderr: \(message)")
        }
    }
}
