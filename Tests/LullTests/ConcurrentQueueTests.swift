import Glibc
import Synchronization
import Testing
@testable import Lull

/// Two blocks that each wait until both have started: they can only both succeed if they
/// ran at the same time.
final class Rendezvous: Sendable {
    private let arrived = Counter()
    private let parties: Int
    let failures = Counter()

    init(parties: Int) {
        self.parties = parties
    }

    func arrive() {
        arrived.increment()
        if !arrived.await(until: { $0 >= parties }) { failures.increment() }
    }

    var everyoneArrived: Bool { arrived.value >= parties }
}

extension LullSuite {
    @Suite struct ConcurrentQueueTests {
        @Test(.enabled(if: onlineCPUs >= 2, "needs two CPUs"))
        func runsBlocksAtTheSameTime() {
            let queue = WorkQueue(label: "lull.test.concurrent.parallel", attributes: .concurrent)
            let rendezvous = Rendezvous(parties: 2)
            let done = Counter()
            for _ in 0..<2 {
                queue.async {
                    rendezvous.arrive()
                    done.increment()
                }
            }
            #expect(done.await { $0 == 2 })
            #expect(rendezvous.failures.value == 0)
        }

        @Test(.enabled(if: onlineCPUs >= 2, "needs two CPUs"))
        func globalQueueRunsBlocksAtTheSameTime() {
            let rendezvous = Rendezvous(parties: 2)
            let done = Counter()
            for _ in 0..<2 {
                WorkQueue.global().async {
                    rendezvous.arrive()
                    done.increment()
                }
            }
            #expect(done.await { $0 == 2 })
            #expect(rendezvous.failures.value == 0)
        }

        @Test func runsEveryOneOfTwentyThousandBlocksExactlyOnce() {
            let queue = WorkQueue(label: "lull.test.concurrent.load", attributes: .concurrent)
            let count = 20_000
            let runs = Mutex<[Int]>([Int](repeating: 0, count: count))
            let done = Counter()
            for index in 0..<count {
                queue.async {
                    runs.locked { $0[index] += 1 }
                    done.increment()
                }
            }
            #expect(done.await { $0 == count })
            #expect(runs.locked { $0.allSatisfy { $0 == 1 } })
        }

        @Test func globalQueuesRunEveryBlock() {
            let count = 10_000
            let done = Counter()
            for index in 0..<count {
                WorkQueue.global(qos: schedulableClasses[index % schedulableClasses.count]).async {
                    done.increment()
                }
            }
            #expect(done.await { $0 == count })
        }

        @Test func barrierWaitsForEarlierBlocksAndRunsAlone() {
            let queue = WorkQueue(label: "lull.test.concurrent.barrier", attributes: .concurrent)
            let overlap = OverlapTracker()
            let barrierRunning = Flag()
            let barrierDone = Flag()
            let before = Counter()
            let after = Counter()
            let violations = Recorder<String>()
            let perSide = 200
            for _ in 0..<perSide {
                queue.async {
                    overlap.enter()
                    if barrierRunning.isSet || barrierDone.isSet { violations.append("early block ran during or after the barrier") }
                    spin(microseconds: 100)
                    before.increment()
                    overlap.exit()
                }
            }
            queue.async(flags: .barrier) {
                barrierRunning.set()
                if overlap.running != 0 { violations.append("barrier started with \(overlap.running) blocks running") }
                if before.value != perSide { violations.append("barrier started after only \(before.value) earlier blocks") }
                spin(microseconds: 5_000)
                if overlap.running != 0 { violations.append("a block ran during the barrier") }
                barrierDone.set()
            }
            for _ in 0..<perSide {
                queue.async {
                    overlap.enter()
                    if !barrierDone.isSet { violations.append("late block ran before the barrier finished") }
                    spin(microseconds: 100)
                    after.increment()
                    overlap.exit()
                }
            }
            #expect(after.await { $0 == perSide })
            #expect(violations.values.isEmpty)
            #expect(barrierDone.isSet)
        }

        @Test func manyBarriersSplitTheQueueIntoRounds() {
            let queue = WorkQueue(label: "lull.test.concurrent.rounds", attributes: .concurrent)
            let rounds = 50
            let perRound = 40
            let overlap = OverlapTracker()
            let completedInRound = Mutex<[Int]>([Int](repeating: 0, count: rounds))
            let violations = Recorder<String>()
            let barriersDone = Counter()
            for round in 0..<rounds {
                for _ in 0..<perRound {
                    queue.async {
                        overlap.enter()
                        if barriersDone.value != round { violations.append("block of round \(round) ran after barrier \(barriersDone.value)") }
                        spin(microseconds: 50)
                        completedInRound.locked { $0[round] += 1 }
                        overlap.exit()
                    }
                }
                queue.async(flags: .barrier) {
                    if overlap.running != 0 { violations.append("barrier \(round) overlapped a block") }
                    let done = completedInRound.locked { $0[round] }
                    if done != perRound { violations.append("barrier \(round) saw \(done) of \(perRound) blocks") }
                    spin(microseconds: 200)
                    if overlap.running != 0 { violations.append("a block ran during barrier \(round)") }
                    barriersDone.increment()
                }
            }
            #expect(barriersDone.await { $0 == rounds })
            #expect(violations.values.isEmpty)
        }

        @Test func workItemWithTheBarrierFlagIsABarrier() {
            let queue = WorkQueue(label: "lull.test.concurrent.barrier-item", attributes: .concurrent)
            let overlap = OverlapTracker()
            let finished = Counter()
            let violations = Recorder<String>()
            let count = 100
            for _ in 0..<count {
                queue.async {
                    overlap.enter()
                    spin(microseconds: 200)
                    finished.increment()
                    overlap.exit()
                }
            }
            let inBarrier = Flag()
            let barrierEnded = Flag()
            let barrier = WorkItem(flags: .barrier) {
                inBarrier.set()
                overlap.enter()
                if overlap.running != 1 { violations.append("barrier item overlapped \(overlap.running - 1) blocks") }
                if finished.value != count { violations.append("barrier item started after \(finished.value) of \(count) blocks") }
                spin(microseconds: 2_000)
                overlap.exit()
                barrierEnded.set()
            }
            queue.async(execute: barrier)
            for _ in 0..<count {
                queue.async {
                    overlap.enter()
                    if inBarrier.isSet && !barrierEnded.isSet { violations.append("a later block ran during the barrier item") }
                    if !barrierEnded.isSet { violations.append("a later block started before the barrier item ended") }
                    spin(microseconds: 50)
                    overlap.exit()
                    finished.increment()
                }
            }
            #expect(barrier.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(finished.await { $0 == 2 * count })
            #expect(violations.values.isEmpty)
        }

        @Test func barrierSyncWaitsForRunningBlocks() {
            let queue = WorkQueue(label: "lull.test.concurrent.barrier-sync", attributes: .concurrent)
            let overlap = OverlapTracker()
            let finished = Counter()
            let count = 100
            for _ in 0..<count {
                queue.async {
                    overlap.enter()
                    spin(microseconds: 200)
                    finished.increment()
                    overlap.exit()
                }
            }
            let seen = queue.sync(flags: .barrier) { (overlap.running, finished.value) }
            #expect(seen.0 == 0)
            #expect(seen.1 == count)
        }

        @Test func barrierOnAGlobalQueueDoesNotWaitForOtherBlocks() {
            // Global queues ignore the barrier flag, as in Dispatch.
            let gate = Gate()
            let blockerStarted = Flag()
            let barrierRan = Flag()
            WorkQueue.global(qos: .utility).async {
                blockerStarted.set()
                gate.wait()
            }
            #expect(blockerStarted.await())
            WorkQueue.global(qos: .utility).async(flags: .barrier) { barrierRan.set() }
            #expect(barrierRan.await())
            gate.open()
        }
    }
}
