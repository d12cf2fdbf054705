import Glibc
import Testing
@testable import Lull

/// What a block saw of its thread's scheduling.
struct ObservedScheduling: Sendable {
    let qos: QoS
    let nice: Int32
    let ioClass: Int32?
}

func observeScheduling() -> ObservedScheduling {
    ObservedScheduling(qos: QoS.current, nice: currentNice(), ioClass: currentIOPriorityClass())
}

/// Runs `submit` with a block that records its scheduling and waits for the record.
func scheduling(of submit: (@escaping @Sendable () -> Void) -> Void) -> ObservedScheduling? {
    let seen = Captured<ObservedScheduling>()
    submit { seen.set(observeScheduling()) }
    return seen.await()
}

let schedulableClasses: [QoS.QoSClass] = [.background, .utility, .default, .userInitiated, .userInteractive]

extension LullSuite {
    @Suite struct QoSTests {
        // MARK: Values

        @Test func classesAreOrderedUnspecifiedBackgroundUtilityDefaultUserInitiatedUserInteractive() {
            let order: [QoS.QoSClass] = [.unspecified, .background, .utility, .default, .userInitiated, .userInteractive]
            for (i, lhs) in order.enumerated() {
                for (j, rhs) in order.enumerated() {
                    #expect((lhs < rhs) == (i < j), "\(lhs) < \(rhs)")
                    #expect((lhs == rhs) == (i == j), "\(lhs) == \(rhs)")
                    #expect((lhs > rhs) == (i > j), "\(lhs) > \(rhs)")
                }
            }
            #expect(QoS.QoSClass.allCases.sorted() == order)
            #expect(QoS.QoSClass.allCases.max() == .userInteractive)
            #expect(QoS.QoSClass.allCases.min() == .unspecified)
        }

        @Test func staticValuesHaveTheirClassAndRelativePriorityZero() {
            let pairs: [(QoS, QoS.QoSClass)] = [
                (.background, .background), (.utility, .utility), (.default, .default),
                (.userInitiated, .userInitiated), (.userInteractive, .userInteractive),
                (.unspecified, .unspecified),
            ]
            for (qos, qosClass) in pairs {
                #expect(qos.qosClass == qosClass)
                #expect(qos.relativePriority == 0)
                #expect(qos == QoS(qosClass: qosClass, relativePriority: 0))
            }
        }

        @Test func initKeepsClassAndRelativePriority() {
            for relative in -15...0 {
                let qos = QoS(qosClass: .utility, relativePriority: relative)
                #expect(qos.qosClass == .utility)
                #expect(qos.relativePriority == relative)
            }
            #expect(QoS(qosClass: .utility, relativePriority: -1) != .utility)
            #expect(QoS(qosClass: .utility, relativePriority: -1) == QoS(qosClass: .utility, relativePriority: -1))
            #expect(Set([QoS.utility, QoS(qosClass: .utility, relativePriority: 0), .background]).count == 2)
        }

        // MARK: What a block runs at

        @Test func theExpectedNiceValuesFollowTheKernelsRuleForEveryProcess() {
            let classes: [QoS.QoSClass] = [.userInteractive, .userInitiated, .default, .utility, .background]
            func nice(_ allowance: NiceAllowance) -> [Int32] { classes.map { allowance.nice(for: $0) } }
            // CAP_SYS_NICE: every class at its own value.
            #expect(nice(NiceAllowance(privileged: true, niceLimit: 0, processNice: 0)) == [-10, -5, 0, 5, 15])
            // Unprivileged, RLIMIT_NICE 0: default and above keep the starting nice value.
            #expect(nice(NiceAllowance(privileged: false, niceLimit: 0, processNice: 0)) == [0, 0, 0, 5, 15])
            #expect(nice(NiceAllowance(privileged: false, niceLimit: 0, processNice: 10)) == [10, 10, 10, 10, 15])
            #expect(nice(NiceAllowance(privileged: false, niceLimit: 0, processNice: 19)) == [19, 19, 19, 19, 19])
            // RLIMIT_NICE 27 allows down to -7; 40 and RLIM_INFINITY allow everything.
            #expect(nice(NiceAllowance(privileged: false, niceLimit: 27, processNice: 0)) == [-7, -5, 0, 5, 15])
            #expect(nice(NiceAllowance(privileged: false, niceLimit: 40, processNice: 0)) == [-10, -5, 0, 5, 15])
            #expect(nice(NiceAllowance(privileged: false, niceLimit: .max, processNice: 0)) == [-10, -5, 0, 5, 15])
            // A utility worker raised for more important work: only as far as it may go.
            #expect(NiceAllowance(privileged: false, niceLimit: 0, processNice: 0).nice(for: .userInitiated, onAWorkerOf: .utility) == 5)
            #expect(NiceAllowance(privileged: false, niceLimit: 20, processNice: 0).nice(for: .userInitiated, onAWorkerOf: .utility) == 0)
            #expect(NiceAllowance(privileged: true, niceLimit: 0, processNice: 0).nice(for: .userInitiated, onAWorkerOf: .utility) == -5)
        }

        @Test(arguments: [QoS.background, .utility, .default, .userInitiated, .userInteractive])
        func currentInsideABlockEqualsTheQueueQoS(_ qos: QoS) {
            let serial = WorkQueue(label: "lull.test.qos.serial", qos: qos)
            let concurrent = WorkQueue(label: "lull.test.qos.concurrent", qos: qos, attributes: .concurrent)
            #expect(serial.qos == qos)
            #expect(scheduling(of: { serial.async(execute: $0) })?.qos == qos)
            #expect(scheduling(of: { concurrent.async(execute: $0) })?.qos == qos)
        }

        @Test(arguments: [
            QoS(qosClass: .utility, relativePriority: -5),
            QoS(qosClass: .userInitiated, relativePriority: -15),
            QoS(qosClass: .default, relativePriority: -1),
        ])
        func currentInsideABlockKeepsTheQueuesRelativePriority(_ qos: QoS) {
            let serial = WorkQueue(label: "lull.test.qos.relative.serial", qos: qos)
            let concurrent = WorkQueue(label: "lull.test.qos.relative.concurrent", qos: qos, attributes: .concurrent)
            #expect(serial.qos == qos)
            #expect(scheduling(of: { serial.async(execute: $0) })?.qos == qos)
            #expect(scheduling(of: { concurrent.async(execute: $0) })?.qos == qos)
        }

        @Test(arguments: schedulableClasses)
        func workerNiceValueMatchesTheQueueClass(_ qosClass: QoS.QoSClass) {
            let queue = WorkQueue(label: "lull.test.nice", qos: QoS(qosClass: qosClass, relativePriority: 0))
            let seen = scheduling(of: { queue.async(execute: $0) })
            #expect(seen?.nice == expectedNice(qosClass))
            #expect(seen?.qos.qosClass == qosClass)
        }

        @Test(arguments: schedulableClasses)
        func globalQueueBlocksRunAtTheirClass(_ qosClass: QoS.QoSClass) {
            let seen = scheduling(of: { WorkQueue.global(qos: qosClass).async(execute: $0) })
            #expect(seen?.qos.qosClass == qosClass)
            #expect(seen?.nice == expectedNice(qosClass))
        }

        @Test func manyBlocksOfEveryClassEachRunAtTheirNiceValue() {
            let mismatches = Recorder<String>()
            let done = Counter()
            let perClass = 200
            for qosClass in schedulableClasses {
                let queue = WorkQueue(label: "lull.test.nice.many", qos: QoS(qosClass: qosClass, relativePriority: 0),
                                      attributes: .concurrent)
                for _ in 0..<perClass {
                    queue.async {
                        let nice = currentNice()
                        if nice != expectedNice(qosClass) { mismatches.append("\(qosClass): nice \(nice)") }
                        done.increment()
                    }
                }
            }
            #expect(done.await { $0 == perClass * schedulableClasses.count })
            #expect(mismatches.values.isEmpty)
        }

        @Test func backgroundWorkersUseTheIdleIOClass() {
            let onQueue = scheduling(of: { WorkQueue(label: "lull.test.io", qos: .background).async(execute: $0) })
            #expect(onQueue?.ioClass == ioPriorityClassIdle)
            let onGlobal = scheduling(of: { WorkQueue.global(qos: .background).async(execute: $0) })
            #expect(onGlobal?.ioClass == ioPriorityClassIdle)
        }

        @Test(arguments: [QoS.QoSClass.utility, .default, .userInitiated, .userInteractive])
        func otherWorkersDoNotUseTheIdleIOClass(_ qosClass: QoS.QoSClass) {
            let seen = scheduling(of: { WorkQueue.global(qos: qosClass).async(execute: $0) })
            #expect(seen != nil)
            #expect(seen?.ioClass != ioPriorityClassIdle)
        }

        // MARK: Resolution rules

        @Test func plainQueueTargetingANonDefaultGlobalQueueTakesItsQoS() {
            let queue = WorkQueue(label: "lull.test.qos.target", target: .global(qos: .utility))
            let seen = scheduling(of: { queue.async(execute: $0) })
            #expect(seen?.qos == .utility)
            #expect(seen?.nice == expectedNice(.utility))
        }

        @Test func plainQueueInfersTheSubmittersQoS() {
            let plain = WorkQueue(label: "lull.test.qos.plain")
            for qosClass in [QoS.QoSClass.background, .utility, .userInitiated] {
                let seen = scheduling(of: { block in
                    WorkQueue.global(qos: qosClass).async { plain.async(execute: block) }
                })
                #expect(seen?.qos.qosClass == qosClass)
            }
        }

        @Test func userInteractiveSubmitterIsLoweredToUserInitiated() {
            let plain = WorkQueue(label: "lull.test.qos.lowered")
            let seen = scheduling(of: { block in
                WorkQueue.global(qos: .userInteractive).async { plain.async(execute: block) }
            })
            #expect(seen?.qos.qosClass == .userInitiated)
        }

        @Test func detachedBlockDoesNotInferTheSubmittersQoS() {
            let plain = WorkQueue(label: "lull.test.qos.detached")
            let seen = scheduling(of: { block in
                WorkQueue.global(qos: .userInitiated).async { plain.async(flags: .detached, execute: block) }
            })
            #expect(seen?.qos.qosClass == .default)
        }

        @Test func blockQoSAppliesOnAPlainQueue() {
            let plain = WorkQueue(label: "lull.test.qos.item")
            let seen = scheduling(of: { plain.async(qos: .utility, execute: $0) })
            #expect(seen?.qos.qosClass == .utility)
            let item = scheduling(of: { block in plain.async(execute: WorkItem(qos: .background, block: block)) })
            #expect(item?.qos.qosClass == .background)
        }

        @Test func queueQoSWinsOverTheBlockQoSUnlessEnforced() {
            let queue = WorkQueue(label: "lull.test.qos.enforce", qos: .utility)
            let plain = scheduling(of: { queue.async(qos: .userInitiated, execute: $0) })
            #expect(plain?.qos.qosClass == .utility)
            let enforced = scheduling(of: { queue.async(qos: .userInitiated, flags: .enforceQoS, execute: $0) })
            #expect(enforced?.qos.qosClass == .userInitiated)
            // Enforcing a lower QoS does not lower the block.
            let lower = scheduling(of: { queue.async(qos: .background, flags: .enforceQoS, execute: $0) })
            #expect(lower?.qos.qosClass == .utility)
        }

        @Test func noQoSIgnoresTheBlocksOwnQoS() {
            let plain = WorkQueue(label: "lull.test.qos.no-qos")
            let seen = scheduling(of: { block in
                WorkQueue.global(qos: .utility).async {
                    plain.async(qos: .userInitiated, flags: .noQoS, execute: block)
                }
            })
            #expect(seen?.qos.qosClass == .utility)
        }

        @Test func inheritQoSPrefersTheSubmittersQoSOverTheBlocks() {
            let plain = WorkQueue(label: "lull.test.qos.inherit")
            let seen = scheduling(of: { block in
                WorkQueue.global(qos: .userInitiated).async {
                    plain.async(qos: .background, flags: .inheritQoS, execute: block)
                }
            })
            #expect(seen?.qos.qosClass == .userInitiated)
        }

        @Test func assignCurrentContextCapturesTheQoSAtCreation() {
            // The item is created on a utility worker and submitted from a user-initiated one:
            // it runs at the QoS it captured.
            let plain = WorkQueue(label: "lull.test.qos.assigned")
            let item = Captured<WorkItem>()
            let seen = Captured<ObservedScheduling>()
            WorkQueue.global(qos: .utility).async {
                item.set(WorkItem(flags: .assignCurrentContext) { seen.set(observeScheduling()) })
            }
            guard let created = item.await() else {
                Issue.record("the item was not created")
                return
            }
            WorkQueue.global(qos: .userInitiated).async { plain.async(execute: created) }
            #expect(seen.await()?.qos.qosClass == .utility)
        }

        @Test func syncRunsAtTheCallersQoSAndNeverLowersIt() {
            let utilityQueue = WorkQueue(label: "lull.test.qos.sync", qos: .utility)
            let seen = scheduling(of: { block in
                WorkQueue.global(qos: .userInitiated).async { utilityQueue.sync { block() } }
            })
            #expect(seen?.qos.qosClass == .userInitiated)
            #expect(seen?.nice == expectedNice(.userInitiated))
        }

        @Test func syncOfAHigherWorkItemRaisesTheCallerForTheBlockOnly() {
            let queue = WorkQueue(label: "lull.test.qos.sync-item")
            let after = Captured<ObservedScheduling>()
            let seen = scheduling(of: { block in
                WorkQueue.global(qos: .utility).async {
                    queue.sync(execute: WorkItem(qos: .userInitiated, block: block))
                    after.set(observeScheduling())
                }
            })
            #expect(seen?.qos.qosClass == .userInitiated)
            #expect(seen?.nice == expectedNice(.userInitiated, onAWorkerOf: .utility))
            // The caller is back at its own QoS afterwards.
            let restored = after.await()
            #expect(restored?.qos.qosClass == .utility)
            #expect(restored?.nice == expectedNice(.utility))
        }
    }
}
