import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    @Suite struct TargetQueueTests {
        @Test func serialTargetMakesItsChildrenMutuallyExclusive() {
            let target = WorkQueue(label: "lull.test.target.serial")
            let children = [
                WorkQueue(label: "lull.test.target.child.s1", target: target),
                WorkQueue(label: "lull.test.target.child.s2", target: target),
                WorkQueue(label: "lull.test.target.child.s3", qos: .utility, target: target),
                WorkQueue(label: "lull.test.target.child.c1", attributes: .concurrent, target: target),
                WorkQueue(label: "lull.test.target.child.c2", qos: .userInitiated, attributes: .concurrent, target: target),
            ]
            let overlap = OverlapTracker()
            let perChild = 2_000
            let done = Counter()
            for index in 0..<perChild {
                for child in children {
                    child.async {
                        overlap.enter()
                        if index % 200 == 0 { spin(microseconds: 100) }
                        overlap.exit()
                        done.increment()
                    }
                }
                target.async {
                    overlap.enter()
                    overlap.exit()
                    done.increment()
                }
            }
            #expect(done.await { $0 == perChild * (children.count + 1) })
            #expect(overlap.maximum == 1)
        }

        @Test func childKeepsItsOrderThroughItsTarget() {
            let target = WorkQueue(label: "lull.test.target.order", attributes: .concurrent)
            let children = (0..<4).map { WorkQueue(label: "lull.test.target.order.\($0)", target: target) }
            let logs = children.map { _ in Recorder<Int>() }
            let count = 10_000
            for index in 0..<count {
                for (child, log) in zip(children, logs) {
                    child.async { log.append(index) }
                }
            }
            #expect(waitUntil { logs.allSatisfy { $0.count == count } })
            for log in logs {
                #expect(log.values == Array(0..<count))
            }
        }

        @Test func deepHierarchyFunnelsThroughTheRoot() {
            let root = WorkQueue(label: "lull.test.target.root")
            let middle = WorkQueue(label: "lull.test.target.middle", attributes: .concurrent, target: root)
            let leafA = WorkQueue(label: "lull.test.target.leafA", target: middle)
            let leafB = WorkQueue(label: "lull.test.target.leafB", attributes: .concurrent, target: middle)
            let overlap = OverlapTracker()
            let done = Counter()
            let count = 2_000
            for _ in 0..<count {
                for queue in [leafA, leafB, middle] {
                    queue.async {
                        overlap.enter()
                        overlap.exit()
                        done.increment()
                    }
                }
            }
            #expect(done.await { $0 == count * 3 })
            #expect(overlap.maximum == 1)
        }

        @Test func suspendedTargetHoldsBackItsChildren() {
            let target = WorkQueue(label: "lull.test.target.suspended")
            let child = WorkQueue(label: "lull.test.target.suspended.child", target: target)
            target.suspend()
            let ran = Counter()
            for _ in 0..<10 {
                child.async { ran.increment() }
            }
            #expect(keepsHolding { ran.value == 0 })
            target.resume()
            #expect(ran.await { $0 == 10 })
        }

        @Test func busyTargetDelaysChildBlocksUntilItsBlockEnds() {
            let target = WorkQueue(label: "lull.test.target.busy")
            let child = WorkQueue(label: "lull.test.target.busy.child", target: target)
            let gate = Gate()
            let log = Recorder<String>()
            let started = Flag()
            target.async {
                started.set()
                gate.wait()
                log.append("target block")
            }
            #expect(started.await())
            child.async { log.append("child block") }
            #expect(keepsHolding { log.count == 0 })
            gate.open()
            #expect(waitUntil { log.count == 2 })
            #expect(log.values == ["target block", "child block"])
        }

        @Test func setTargetRedirectsLaterBlocks() {
            let target = WorkQueue(label: "lull.test.target.set")
            let child = WorkQueue(label: "lull.test.target.set.child", attributes: .initiallyInactive)
            child.setTarget(queue: target)
            let gate = Gate()
            let started = Flag()
            let log = Recorder<String>()
            target.async {
                started.set()
                gate.wait()
                log.append("target block")
            }
            #expect(started.await())
            child.async { log.append("child block") }
            child.activate()
            #expect(keepsHolding { log.count == 0 })
            gate.open()
            #expect(waitUntil { log.count == 2 })
            #expect(log.values == ["target block", "child block"])
        }

        @Test func setTargetChangesTheQoSThatATargetGives() {
            let queue = WorkQueue(label: "lull.test.target.qos")
            queue.setTarget(queue: .global(qos: .background))
            let background = scheduling(of: { queue.async(execute: $0) })
            #expect(background?.qos == .background)
            #expect(background?.nice == expectedNice(.background))
            queue.setTarget(queue: .global(qos: .utility))
            let utility = scheduling(of: { queue.async(execute: $0) })
            #expect(utility?.qos == .utility)
            #expect(utility?.nice == expectedNice(.utility))
            // nil: back to the default global queue, which gives no QoS of its own.
            queue.setTarget(queue: nil)
            let reset = scheduling(of: { block in
                WorkQueue.global(qos: .userInitiated).async { queue.async(execute: block) }
            })
            #expect(reset?.qos.qosClass == .userInitiated)
        }

        @Test func queueTargetingAQueueWithQoSKeepsItsOwnQoS() {
            let target = WorkQueue(label: "lull.test.target.owned-qos", qos: .utility)
            let child = WorkQueue(label: "lull.test.target.owned-qos.child", qos: .userInitiated, target: target)
            let seen = scheduling(of: { child.async(execute: $0) })
            #expect(seen?.qos.qosClass == .userInitiated)
        }

        @Test func serialTargetRunsItsChildrenOnOneThreadAtATimeAcrossSync() {
            // sync on a child takes the target too: it cannot overlap a block of another child.
            let target = WorkQueue(label: "lull.test.target.sync")
            let childA = WorkQueue(label: "lull.test.target.sync.a", target: target)
            let childB = WorkQueue(label: "lull.test.target.sync.b", attributes: .concurrent, target: target)
            let overlap = OverlapTracker()
            let done = Counter()
            let count = 500
            for _ in 0..<count {
                childA.async {
                    overlap.enter()
                    spin(microseconds: 20)
                    overlap.exit()
                    done.increment()
                }
            }
            for _ in 0..<count {
                childB.sync {
                    overlap.enter()
                    spin(microseconds: 20)
                    overlap.exit()
                }
            }
            #expect(done.await { $0 == count })
            #expect(overlap.maximum == 1)
        }
    }
}
