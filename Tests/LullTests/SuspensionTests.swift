import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    @Suite struct SuspensionTests {
        // MARK: suspend / resume

        @Test(arguments: [WorkQueue.Attributes(), .concurrent])
        func suspendedQueueRunsNothingUntilResumed(_ attributes: WorkQueue.Attributes) {
            let queue = WorkQueue(label: "lull.test.suspend", attributes: attributes)
            queue.suspend()
            let ran = Counter()
            for _ in 0..<20 {
                queue.async { ran.increment() }
            }
            #expect(keepsHolding { ran.value == 0 })
            queue.resume()
            #expect(ran.await { $0 == 20 })
        }

        @Test(arguments: [WorkQueue.Attributes(), .concurrent])
        func suspensionsCount(_ attributes: WorkQueue.Attributes) {
            let queue = WorkQueue(label: "lull.test.suspend.count", attributes: attributes)
            queue.suspend()
            queue.suspend()
            queue.suspend()
            let ran = Counter()
            queue.async { ran.increment() }
            queue.resume()
            #expect(keepsHolding { ran.value == 0 })
            queue.resume()
            #expect(keepsHolding { ran.value == 0 })
            queue.resume()
            #expect(ran.await { $0 == 1 })
        }

        @Test func suspensionTakesEffectAfterTheRunningBlock() {
            let queue = WorkQueue(label: "lull.test.suspend.after-running")
            let gate = Gate()
            let started = Flag()
            let log = Recorder<String>()
            queue.async {
                started.set()
                gate.wait()
                log.append("A")
            }
            queue.async { log.append("B") }
            queue.async { log.append("C") }
            #expect(started.await())
            queue.suspend()
            gate.open()
            // The running block finishes...
            #expect(waitUntil { log.count == 1 })
            // ...and the ones queued behind it wait for the resume, although the drain that
            // ran A had already taken them.
            #expect(keepsHolding { log.count == 1 })
            queue.resume()
            #expect(waitUntil { log.count == 3 })
            #expect(log.values == ["A", "B", "C"])
        }

        @Test func suspensionTakesEffectAfterTheRunningBlockOnAConcurrentQueue() {
            let queue = WorkQueue(label: "lull.test.suspend.concurrent-running", attributes: .concurrent)
            let gate = Gate()
            let started = Flag()
            let finished = Flag()
            let later = Counter()
            queue.async {
                started.set()
                gate.wait()
                finished.set()
            }
            #expect(started.await())
            queue.suspend()
            for _ in 0..<10 {
                queue.async { later.increment() }
            }
            gate.open()
            #expect(finished.await())
            #expect(keepsHolding { later.value == 0 })
            queue.resume()
            #expect(later.await { $0 == 10 })
        }

        @Test func blockCanSuspendItsOwnQueue() {
            let queue = WorkQueue(label: "lull.test.suspend.self")
            let log = Recorder<String>()
            queue.async {
                queue.suspend()
                log.append("suspender")
            }
            queue.async { log.append("next") }
            #expect(waitUntil { log.count == 1 })
            #expect(keepsHolding { log.count == 1 })
            queue.resume()
            #expect(waitUntil { log.count == 2 })
            #expect(log.values == ["suspender", "next"])
        }

        @Test func blocksQueuedWhileSuspendedRunInOrderAfterResume() {
            let queue = WorkQueue(label: "lull.test.suspend.order")
            let log = Recorder<Int>()
            queue.async { log.append(-1) }
            #expect(waitUntil { log.count == 1 })
            queue.suspend()
            for index in 0..<1_000 {
                queue.async { log.append(index) }
            }
            #expect(keepsHolding { log.count == 1 })
            queue.resume()
            #expect(waitUntil { log.count == 1_001 })
            #expect(log.values == [-1] + Array(0..<1_000))
        }

        @Test func suspendAndResumeUnderLoadLosesNothing() {
            let queue = WorkQueue(label: "lull.test.suspend.load")
            let log = Recorder<Int>()
            let count = 10_000
            for index in 0..<count {
                queue.async { log.append(index) }
                if index % 500 == 0 { queue.suspend() }
                if index % 500 == 250 { queue.resume() }
            }
            #expect(waitUntil { log.count == count })
            #expect(log.values == Array(0..<count))
        }

        // MARK: initially inactive

        @Test(arguments: [WorkQueue.Attributes.initiallyInactive, [.initiallyInactive, .concurrent]])
        func inactiveQueueRunsNothingUntilActivated(_ attributes: WorkQueue.Attributes) {
            let queue = WorkQueue(label: "lull.test.inactive", attributes: attributes)
            let log = Recorder<Int>()
            for index in 0..<100 {
                queue.async { log.append(index) }
            }
            #expect(keepsHolding { log.count == 0 })
            queue.activate()
            #expect(waitUntil { log.count == 100 })
            #expect(Set(log.values) == Set(0..<100))
        }

        @Test func inactiveSerialQueueRunsInOrderOnceActivated() {
            let queue = WorkQueue(label: "lull.test.inactive.order", attributes: .initiallyInactive)
            let log = Recorder<Int>()
            for index in 0..<1_000 {
                queue.async { log.append(index) }
            }
            queue.activate()
            #expect(waitUntil { log.count == 1_000 })
            #expect(log.values == Array(0..<1_000))
        }

        @Test(arguments: [WorkQueue.Attributes.initiallyInactive, [.initiallyInactive, .concurrent]])
        func resumeOnAnInactiveQueueActivatesIt(_ attributes: WorkQueue.Attributes) {
            let queue = WorkQueue(label: "lull.test.inactive.resume", attributes: attributes)
            let ran = Counter()
            queue.async { ran.increment() }
            #expect(keepsHolding { ran.value == 0 })
            queue.resume()
            #expect(ran.await { $0 == 1 })
            // The queue is now an ordinary active queue.
            queue.async { ran.increment() }
            #expect(ran.await { $0 == 2 })
        }

        @Test func activateTwiceIsHarmless() {
            let queue = WorkQueue(label: "lull.test.inactive.twice", attributes: .initiallyInactive)
            let ran = Counter()
            queue.async { ran.increment() }
            queue.activate()
            queue.activate()
            #expect(ran.await { $0 == 1 })
            queue.async { ran.increment() }
            #expect(ran.await { $0 == 2 })
        }

        @Test func activateOnAnActiveQueueDoesNothing() {
            let queue = WorkQueue(label: "lull.test.active.activate")
            queue.activate()
            queue.suspend()
            let ran = Counter()
            queue.async { ran.increment() }
            // activate() does not undo a suspension.
            queue.activate()
            #expect(keepsHolding { ran.value == 0 })
            queue.resume()
            #expect(ran.await { $0 == 1 })
        }

        @Test func suspendedInactiveQueueNeedsActivateAndResume() {
            let queue = WorkQueue(label: "lull.test.inactive.suspended", attributes: .initiallyInactive)
            queue.suspend()
            let ran = Counter()
            queue.async { ran.increment() }
            queue.activate()
            #expect(keepsHolding { ran.value == 0 })
            queue.resume()
            #expect(ran.await { $0 == 1 })
        }

        @Test func inactiveTargetHoldsBackItsChildren() {
            let target = WorkQueue(label: "lull.test.inactive.target", attributes: .initiallyInactive)
            let child = WorkQueue(label: "lull.test.inactive.target.child", target: target)
            let ran = Counter()
            child.async { ran.increment() }
            #expect(keepsHolding { ran.value == 0 })
            target.activate()
            #expect(ran.await { $0 == 1 })
        }
    }
}
