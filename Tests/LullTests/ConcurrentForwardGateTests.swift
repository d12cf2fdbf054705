import Glibc
import Synchronization
import Testing
@testable import Lull

/// A concurrent queue's blocks go to the global queue through the lock-free forward gate
/// while nothing is in their way (docs/Queues.md, "The concurrent queue's forward gate"):
/// every public call from any thread at any moment against that path.
extension LullSuite {
    @Suite struct ConcurrentForwardGateTests {
        /// Per-submitter progress: how many of its blocks finished and started, and how
        /// many of its barriers finished.
        final class SubmitterLog: Sendable {
            let finished = Atomic<Int>(0)
            let barriersDone = Atomic<Int>(0)
        }

        final class RunCount: Sendable {
            let value = Atomic<Int>(0)
        }

        @Test func stormOfSubmittersRunsEveryBlockExactlyOnce() {
            let queue = WorkQueue(label: "lull.test.gate.storm", attributes: .concurrent)
            let submitters = 4
            let perSubmitter = 5_000
            let runs = (0..<submitters * perSubmitter).map { _ in RunCount() }
            let group = WorkGroup()
            SourceTestKit.runThreads(submitters) { submitter in
                for index in 0..<perSubmitter {
                    let slot = submitter * perSubmitter + index
                    queue.async(group: group) { runs[slot].value.add(1, ordering: .relaxed) }
                }
            }
            #expect(group.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(runs.allSatisfy { $0.value.load(ordering: .relaxed) == 1 })
            #expect(waitUntil { queue.forwardedBlocks == 0 })
            #expect(queue.forwardGateIsOpen)
        }

        @Test func barriersFromRacingSubmittersRunAloneAndInEachSubmittersOrder() {
            let queue = WorkQueue(label: "lull.test.gate.barriers", attributes: .concurrent)
            let submitters = 3
            let perSubmitter = 1_200
            let barrierEvery = 200
            let logs = (0..<submitters).map { _ in SubmitterLog() }
            let overlap = OverlapTracker()
            let barrierRunning = Atomic<Int>(0)
            let violations = Recorder<String>()
            let group = WorkGroup()
            SourceTestKit.runThreads(submitters) { submitter in
                let log = logs[submitter]
                var barriersSubmitted = 0
                for index in 0..<perSubmitter {
                    if index > 0 && index % barrierEvery == 0 {
                        let finishedBefore = index
                        let barrierIndex = barriersSubmitted
                        barriersSubmitted += 1
                        queue.async(group: group, flags: .barrier) {
                            barrierRunning.add(1, ordering: .sequentiallyConsistent)
                            if overlap.running != 0 { violations.append("a barrier started with \(overlap.running) blocks running") }
                            if log.finished.load(ordering: .acquiring) < finishedBefore {
                                violations.append("a barrier started before the blocks its submitter queued ahead of it finished")
                            }
                            if log.barriersDone.load(ordering: .acquiring) != barrierIndex {
                                violations.append("a submitter's barriers ran out of order")
                            }
                            log.barriersDone.add(1, ordering: .releasing)
                            barrierRunning.subtract(1, ordering: .sequentiallyConsistent)
                        }
                    }
                    let barriersAhead = barriersSubmitted
                    queue.async(group: group) {
                        overlap.enter()
                        if barrierRunning.load(ordering: .sequentiallyConsistent) != 0 {
                            violations.append("a block ran during a barrier")
                        }
                        if log.barriersDone.load(ordering: .acquiring) < barriersAhead {
                            violations.append("a block started before a barrier its submitter queued ahead of it")
                        }
                        log.finished.add(1, ordering: .releasing)
                        overlap.exit()
                    }
                }
            }
            #expect(group.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(violations.count == 0, "\(Set(violations.values).sorted())")
            #expect(logs.allSatisfy { $0.finished.load(ordering: .relaxed) == perSubmitter })
            #expect(waitUntil { queue.forwardedBlocks == 0 && queue.forwardGateIsOpen })
        }

        @Test func suspendWhileBlocksStreamInHoldsEveryLaterBlockUntilResume() {
            let queue = WorkQueue(label: "lull.test.gate.suspend", attributes: .concurrent)
            let started = Counter()
            let submitted = Atomic<Int>(0)
            let stop = Flag()
            let submitters = 2
            let rounds = 3
            for _ in 0..<submitters {
                Thread.detach {
                    var sent = 0
                    while !stop.isSet {
                        submitted.add(1, ordering: .relaxed)
                        queue.async { started.increment() }
                        sent += 1
                        // Leave the workers some of the CPUs.
                        if sent % 64 == 0 { sched_yield() }
                    }
                }
            }
            for _ in 0..<rounds {
                #expect(started.await { $0 > 0 })
                queue.suspend()
                #expect(!queue.forwardGateIsOpen)
                // Blocks forwarded before the suspension either ran or went back to wait;
                // blocks taken by drains stopped at the suspension.
                #expect(waitUntil {
                    queue.forwardedBlocks == 0 && queue.state.locked { $0.inFlight } == 0
                })
                let seen = started.value
                #expect(keepsHolding(for: .milliseconds(30)) { started.value == seen })
                queue.resume()
                #expect(started.await { $0 > seen })
            }
            stop.set()
            // The submitters stop within one block; then every block submitted runs.
            #expect(waitUntil { started.value == submitted.load(ordering: .relaxed) })
            #expect(keepsHolding(for: .milliseconds(20)) { started.value == submitted.load(ordering: .relaxed) })
        }

        @Test func syncAndBarrierSyncFromManyThreadsBesideAsyncs() {
            let queue = WorkQueue(label: "lull.test.gate.sync", attributes: .concurrent)
            let overlap = OverlapTracker()
            let exclusive = Atomic<Int>(0)
            let violations = Recorder<String>()
            let asyncRuns = Counter()
            let syncRuns = Atomic<Int>(0)
            let threads = 4
            let perThread = 400
            SourceTestKit.runThreads(threads) { thread in
                for index in 0..<perThread {
                    queue.async {
                        overlap.enter()
                        if exclusive.load(ordering: .sequentiallyConsistent) != 0 { violations.append("a block ran during a barrier sync") }
                        overlap.exit()
                        asyncRuns.increment()
                    }
                    switch (index + thread) % 8 {
                    case 0:
                        queue.sync(flags: .barrier) {
                            exclusive.add(1, ordering: .sequentiallyConsistent)
                            if overlap.running != 0 { violations.append("a barrier sync ran beside \(overlap.running) blocks") }
                            exclusive.subtract(1, ordering: .sequentiallyConsistent)
                        }
                        syncRuns.add(1, ordering: .relaxed)
                    case 4:
                        queue.sync {
                            if exclusive.load(ordering: .sequentiallyConsistent) != 0 { violations.append("a sync ran during a barrier sync") }
                        }
                        syncRuns.add(1, ordering: .relaxed)
                    default:
                        break
                    }
                }
            }
            #expect(asyncRuns.await { $0 == threads * perThread })
            #expect(syncRuns.load(ordering: .relaxed) == threads * perThread / 4)
            #expect(violations.count == 0, "\(Set(violations.values).sorted())")
        }

        @Test func theGateOpensOnlyWhileNothingIsInTheWay() {
            let queue = WorkQueue(label: "lull.test.gate.states", attributes: [.concurrent, .initiallyInactive])
            #expect(!queue.forwardGateIsOpen)
            let done = Counter()
            for _ in 0..<10 { queue.async { done.increment() } }
            #expect(keepsHolding(for: .milliseconds(20)) { done.value == 0 })
            queue.activate()
            #expect(done.await { $0 == 10 })
            #expect(waitUntil { queue.forwardGateIsOpen })

            queue.suspend()
            #expect(!queue.forwardGateIsOpen)
            queue.resume()
            #expect(queue.forwardGateIsOpen)

            // A barrier that runs closes it; the blocks behind the barrier keep it closed until
            // they are taken.
            let release = Gate()
            let barrierStarted = Flag()
            queue.async(flags: .barrier) {
                barrierStarted.set()
                release.wait()
            }
            #expect(!queue.forwardGateIsOpen)
            #expect(barrierStarted.await())
            queue.async { done.increment() }
            #expect(!queue.forwardGateIsOpen)
            #expect(keepsHolding(for: .milliseconds(20)) { done.value == 10 })
            release.open()
            #expect(done.await { $0 == 11 })
            #expect(waitUntil { queue.forwardGateIsOpen })
            #expect(queue.forwardedBlocks == 0)
        }

        @Test func blocksSubmittedAfterARetargetToASerialQueueRunThereInOrder() {
            let queue = WorkQueue(label: "lull.test.gate.retarget", attributes: .concurrent)
            let serial = WorkQueue(label: "lull.test.gate.retarget.serial")
            let warmUp = WorkGroup()
            for _ in 0..<1_000 { queue.async(group: warmUp) {} }
            queue.setTarget(queue: serial)
            #expect(!queue.forwardGateIsOpen)
            let order = Recorder<Int>()
            let overlap = OverlapTracker()
            let count = 500
            let group = WorkGroup()
            for index in 0..<count {
                queue.async(group: group) {
                    overlap.enter()
                    order.append(index)
                    overlap.exit()
                }
            }
            #expect(group.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(warmUp.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(order.values == Array(0..<count))
            #expect(overlap.maximum == 1)

            // And back to a global queue: the gate opens again on the new target.
            queue.setTarget(queue: WorkQueue.global(qos: .utility))
            #expect(waitUntil {
                queue.async {}
                return queue.forwardGateIsOpen
            })
            let onUtility = Captured<QoS.QoSClass?>()
            queue.async { onUtility.set(ThreadState.current.runningGlobal) }
            #expect(onUtility.await() == .some(.utility))
        }

        @Test func workItemsAndGroupsThroughTheGate() {
            let queue = WorkQueue(label: "lull.test.gate.items", attributes: .concurrent)
            let ran = Counter()
            let cancelled = WorkItem { ran.increment() }
            cancelled.cancel()
            queue.async(execute: cancelled)
            let item = WorkItem { ran.increment() }
            queue.async(execute: item)
            item.wait()
            cancelled.wait()
            #expect(ran.value == 1)
            let group = WorkGroup()
            for _ in 0..<100 { queue.async(group: group) { ran.increment() } }
            #expect(group.wait(timeout: .now() + .seconds(10)) == .success)
            #expect(ran.value == 101)
        }
    }
}

/// A detached thread for a test's background producer.
private enum Thread {
    static func detach(_ body: @escaping @Sendable () -> Void) {
        final class Start: Sendable {
            let body: @Sendable () -> Void
            init(_ body: @escaping @Sendable () -> Void) { self.body = body }
        }
        let start = Unmanaged.passRetained(Start(body))
        var thread = pthread_t()
        let result = pthread_create(&thread, nil, { context in
            Unmanaged<Start>.fromOpaque(context!).takeRetainedValue().body()
            return nil
        }, start.toOpaque())
        precondition(result == 0, "pthread_create failed: \(result)")
        pthread_detach(thread)
    }
}

/// The gate's word on its own: what each transition lets through.
extension IndependentSuite {
    @Suite struct ForwardGateWordTests {
        @Test func closedUntilPublishedOpenAndCountsBlocksInAndOut() {
            let gate = ForwardGate()
            do {
                let seen = gate.tryEnter()
                #expect(seen == nil)
            }
            let target = WorkQueue.global()
            gate.publish(openTo: target)
            do {
                let seen = gate.tryEnter()?.takeUnretainedValue()
                #expect(seen === target)
            }
            do {
                let seen = gate.tryEnter()?.takeUnretainedValue()
                #expect(seen === target)
            }
            do {
                let seen = gate.forwardedCount
                #expect(seen == 2)
            }
            do {
                let seen = gate.leave()
                #expect(!seen)
            }
            do {
                let seen = gate.leave()
                #expect(!seen)
            }
            do {
                let seen = gate.forwardedCount
                #expect(seen == 0)
            }
            gate.publish(openTo: nil)
            do {
                let seen = gate.isOpen
                #expect(!seen)
            }
            do {
                let seen = gate.tryEnter()
                #expect(seen == nil)
            }
        }

        @Test func theExclusiveCheckClosesTheGateInTheSameStep() {
            let gate = ForwardGate()
            gate.publish(openTo: WorkQueue.global())
            // Nothing runs: the barrier may go, and no block may be counted in after the look.
            do {
                let seen = gate.closeForExclusive()
                #expect(seen)
            }
            do {
                let seen = gate.isOpen
                #expect(!seen)
            }
            do {
                let seen = gate.tryEnter()
                #expect(seen == nil)
            }
        }

        @Test func theLastBlockOutComesBackForAWaitingBarrier() {
            let gate = ForwardGate()
            gate.publish(openTo: WorkQueue.global())
            do {
                let seen = gate.tryEnter()
                #expect(seen != nil)
            }
            do {
                let seen = gate.tryEnter()
                #expect(seen != nil)
            }
            do {
                let seen = gate.closeForExclusive()
                #expect(!seen)
            }
            do {
                let seen = gate.tryEnter()
                #expect(seen == nil)
            }
            do {
                let seen = gate.leave()
                #expect(!seen)
            }
            do {
                let seen = gate.leave()
                #expect(seen)
            }
            // Reopening clears a barrier's flag: the state that opens has no barrier.
            gate.publish(openTo: WorkQueue.global())
            do {
                let seen = gate.tryEnter()
                #expect(seen != nil)
            }
            do {
                let seen = gate.leave()
                #expect(!seen)
            }
        }

        @Test func aNewTargetGoesOutWithTheNextOpening() {
            let gate = ForwardGate()
            let first = WorkQueue.global(qos: .utility)
            let second = WorkQueue.global(qos: .userInitiated)
            gate.publish(openTo: first)
            do {
                let seen = gate.tryEnter()?.takeUnretainedValue()
                #expect(seen === first)
            }
            gate.publish(openTo: second)
            do {
                let seen = gate.isOpen
                #expect(seen)
            }
            do {
                let seen = gate.tryEnter()?.takeUnretainedValue()
                #expect(seen === second)
            }
            do {
                let seen = gate.forwardedCount
                #expect(seen == 2)
            }
        }
    }
}
