import CLullShims
import Glibc
import Synchronization
import Testing
@testable import Lull

/// The nice value of another thread of this process, nil if it cannot be read (it exited).
func niceOfThread(_ tid: Int32) -> Int32? {
    var nice: Int32 = 0
    return lull_get_thread_nice(tid, &nice) == 0 ? nice : nil
}

/// A block that holds its queue until the gate opens, while publishing which thread runs it
/// and the QoS and nice value it sees — so that a test can watch an override arrive and go.
final class Holder: Sendable {
    let gate = Gate()
    let tid = Captured<Int32>()
    private let latest = Mutex<ObservedScheduling?>(nil)
    let finished = Flag()

    var block: @Sendable () -> Void {
        { [self] in
            tid.set(lull_gettid())
            while !gate.isOpen {
                latest.locked { $0 = observeScheduling() }
                usleep(200)
            }
            latest.locked { $0 = observeScheduling() }
            finished.set()
        }
    }

    var seen: ObservedScheduling? { latest.locked { $0 } }

    /// Waits until the holding block runs at `qosClass` (and, where the process may raise
    /// priorities, at its nice value).
    func waitUntilRunning(at qosClass: QoS.QoSClass) -> Bool {
        waitUntil {
            guard let seen else { return false }
            return seen.qos.qosClass == qosClass && (!ThreadPriority.canRaise || seen.nice == expectedNice(qosClass))
        }
    }

    /// The holder's thread is back at `qosClass`'s nice value once it finished.
    func waitUntilThreadDropsBack(to qosClass: QoS.QoSClass) -> Bool {
        guard let tid = tid.value else { return false }
        return waitUntil { finished.isSet && niceOfThread(tid).map { $0 == expectedNice(qosClass) } ?? true }
    }
}

extension LullSuite {
    /// Inversion avoidance: work that more important work waits on runs at the waiter's QoS
    /// — really, with the running thread's nice value raised — and drops back afterwards.
    @Suite struct QoSOverrideTests {
        // MARK: Asynchronous inversion: a serial queue with a more important block behind

        @Test func aSerialQueueRunsAtTheQoSOfAMoreImportantPendingBlockUntilItHasRun() {
            let queue = WorkQueue(label: "lull.test.override.async", qos: .utility)
            let holder = Holder()
            queue.async(execute: holder.block)
            #expect(holder.waitUntilRunning(at: .utility))
            let ahead = Captured<ObservedScheduling>()
            let important = Captured<ObservedScheduling>()
            let behind = Captured<ObservedScheduling>()
            queue.async { ahead.set(observeScheduling()) }
            #expect(!queue.debugDescription.contains("override="))
            queue.async(qos: .userInitiated, flags: .enforceQoS) { important.set(observeScheduling()) }
            // The block running now is raised at once (its thread's nice value too)...
            #expect(holder.waitUntilRunning(at: .userInitiated))
            #expect(queue.debugDescription.contains("override=user-initiated"), "\(queue.debugDescription)")
            queue.async { behind.set(observeScheduling()) }
            holder.gate.open()
            // ...so is the block ahead of the important one, and the important one runs at its QoS...
            #expect(ahead.await()?.qos == .userInitiated)
            #expect(important.await()?.qos == .userInitiated)
            // ...and the queue drops back once it has run.
            #expect(behind.await()?.qos == .utility)
            if ThreadPriority.canRaise {
                #expect(ahead.value?.nice == expectedNice(.userInitiated))
                #expect(important.value?.nice == expectedNice(.userInitiated))
                #expect(behind.value?.nice == expectedNice(.utility))
            }
            #expect(holder.waitUntilThreadDropsBack(to: .utility))
            #expect(waitUntil { !queue.debugDescription.contains("override=") }, "\(queue.debugDescription)")
        }

        @Test func aBlockThatArrivedWhileTheDrainRanHigherRaisesItOnceItsLevelFalls() {
            let queue = WorkQueue(label: "lull.test.override.level-falls", qos: .utility, attributes: .initiallyInactive)
            let first = Holder()
            let second = Holder()
            // One batch: a user-interactive block, then a utility one.
            queue.async(qos: .userInteractive, flags: .enforceQoS, execute: first.block)
            queue.async(execute: second.block)
            queue.activate()
            #expect(first.waitUntilRunning(at: .userInteractive))
            // Below the level the drain runs at now: no override is needed yet...
            let late = Captured<ObservedScheduling>()
            queue.async(qos: .userInitiated, flags: .enforceQoS) { late.set(observeScheduling()) }
            first.gate.open()
            // ...but once the user-interactive block has run, the block ahead of it is raised.
            #expect(second.waitUntilRunning(at: .userInitiated))
            second.gate.open()
            #expect(late.await()?.qos == .userInitiated)
            // The drain ran on a user-interactive worker: what comes next runs at utility again.
            let after = scheduling(of: { queue.async(execute: $0) })
            #expect(after?.qos == .utility)
            if ThreadPriority.canRaise { #expect(after?.nice == expectedNice(.utility)) }
        }

        @Test func aPlainSerialQueueIsRaisedByABlockInferredFromAMoreImportantSubmitter() {
            let queue = WorkQueue(label: "lull.test.override.inferred")
            let holder = Holder()
            WorkQueue.global(qos: .utility).async { queue.async(execute: holder.block) }
            #expect(holder.waitUntilRunning(at: .utility))
            let ahead = Captured<ObservedScheduling>()
            WorkQueue.global(qos: .utility).async { queue.async { ahead.set(observeScheduling()) } }
            #expect(waitUntil { queue.state.locked { $0.pending.count } + queue.inbox.count == 1 })
            WorkQueue.global(qos: .userInteractive).async { queue.async {} }
            // A user-interactive submitter's block is user-initiated: the queue runs at that.
            #expect(holder.waitUntilRunning(at: .userInitiated))
            holder.gate.open()
            #expect(ahead.await()?.qos == .userInitiated)
            #expect(holder.waitUntilThreadDropsBack(to: .utility))
        }

        @Test func aBlockRaisedByAnOverrideDoesNotPassTheOverrideOnToWorkItSubmits() {
            let queue = WorkQueue(label: "lull.test.override.no-propagation", qos: .utility)
            let plain = WorkQueue(label: "lull.test.override.no-propagation.plain")
            let holder = Holder()
            let submitted = Captured<QoS>()
            let gate = holder.gate
            queue.async {
                holder.block()
                _ = gate
            }
            #expect(holder.waitUntilRunning(at: .utility))
            queue.async(qos: .userInitiated, flags: .enforceQoS) {}
            #expect(holder.waitUntilRunning(at: .userInitiated))
            // Submitted from the raised thread: inferred from the block's own QoS.
            let probe = WorkItem { submitted.set(QoS.current) }
            WorkQueue.global(qos: .utility).async { plain.async(execute: probe) }
            #expect(submitted.await() == .utility)
            gate.open()
            #expect(holder.waitUntilThreadDropsBack(to: .utility))
        }

        // MARK: Synchronous inversion: sync, WorkItem.wait (WorkGroup.wait raises nothing)

        @Test func syncFromAMoreImportantThreadRaisesTheDrainItWaitsFor() {
            let queue = WorkQueue(label: "lull.test.override.sync", qos: .utility)
            let holder = Holder()
            queue.async(execute: holder.block)
            #expect(holder.waitUntilRunning(at: .utility))
            let inSync = Captured<ObservedScheduling>()
            let returned = Flag()
            WorkQueue.global(qos: .userInitiated).async {
                queue.sync { inSync.set(observeScheduling()) }
                returned.set()
            }
            #expect(holder.waitUntilRunning(at: .userInitiated))
            holder.gate.open()
            #expect(returned.await())
            #expect(inSync.value?.qos == .userInitiated)
            #expect(holder.waitUntilThreadDropsBack(to: .utility))
            // The queue itself is back at its QoS.
            #expect(scheduling(of: { queue.async(execute: $0) })?.qos == .utility)
        }

        @Test func syncRaisesAnotherSyncCallerThatHoldsTheQueue() {
            let queue = WorkQueue(label: "lull.test.override.sync-owner", qos: .utility)
            let holder = Holder()
            WorkQueue.global(qos: .utility).async { queue.sync(execute: holder.block) }
            #expect(holder.waitUntilRunning(at: .utility))
            let returned = Flag()
            WorkQueue.global(qos: .userInteractive).async {
                queue.sync {}
                returned.set()
            }
            #expect(holder.waitUntilRunning(at: .userInteractive))
            holder.gate.open()
            #expect(returned.await())
            #expect(holder.waitUntilThreadDropsBack(to: .utility))
        }

        @Test func syncThroughATargetQueueRaisesTheTargetsDrain() {
            let target = WorkQueue(label: "lull.test.override.sync-target", qos: .utility)
            let child = WorkQueue(label: "lull.test.override.sync-child", target: target)
            let holder = Holder()
            target.async(execute: holder.block)
            #expect(holder.waitUntilRunning(at: .utility))
            let returned = Flag()
            WorkQueue.global(qos: .userInitiated).async {
                child.sync {}
                returned.set()
            }
            #expect(holder.waitUntilRunning(at: .userInitiated))
            holder.gate.open()
            #expect(returned.await())
            #expect(holder.waitUntilThreadDropsBack(to: .utility))
        }

        @Test func waitingOnARunningWorkItemRaisesTheThreadRunningIt() {
            let holder = Holder()
            let item = WorkItem(block: holder.block)
            WorkQueue.global(qos: .utility).async(execute: item)
            #expect(holder.waitUntilRunning(at: .utility))
            let waited = Flag()
            WorkQueue.global(qos: .userInitiated).async {
                item.wait()
                waited.set()
            }
            #expect(holder.waitUntilRunning(at: .userInitiated))
            holder.gate.open()
            #expect(waited.await())
            #expect(holder.waitUntilThreadDropsBack(to: .utility))
        }

        @Test func aWaitThatTimesOutTakesItsOverrideBack() {
            let holder = Holder()
            let item = WorkItem(block: holder.block)
            WorkQueue.global(qos: .utility).async(execute: item)
            #expect(holder.waitUntilRunning(at: .utility))
            let result = Captured<WaitResult>()
            WorkQueue.global(qos: .userInitiated).async {
                result.set(item.wait(timeout: .now() + .milliseconds(100)))
            }
            #expect(result.await() == .timedOut)
            #expect(holder.waitUntilRunning(at: .utility))
            holder.gate.open()
            #expect(holder.waitUntilThreadDropsBack(to: .utility))
        }

        @Test func waitingOnAWorkItemQueuedBehindOtherBlocksRaisesItsQueue() {
            let queue = WorkQueue(label: "lull.test.override.item-pending", qos: .utility)
            let holder = Holder()
            queue.async(execute: holder.block)
            #expect(holder.waitUntilRunning(at: .utility))
            let itemSaw = Captured<ObservedScheduling>()
            let item = WorkItem { itemSaw.set(observeScheduling()) }
            queue.async(execute: item)
            let waited = Flag()
            WorkQueue.global(qos: .userInitiated).async {
                item.wait()
                waited.set()
            }
            // The block ahead of the item is raised, then the item itself.
            #expect(holder.waitUntilRunning(at: .userInitiated))
            holder.gate.open()
            #expect(waited.await())
            #expect(itemSaw.value?.qos == .userInitiated)
            #expect(holder.waitUntilThreadDropsBack(to: .utility))
        }

        @Test func waitingOnAGroupRaisesNothing() {
            // The contract: a group has no owner to raise; its blocks keep their QoS.
            let group = WorkGroup()
            let holder = Holder()
            WorkQueue.global(qos: .utility).async(group: group, execute: holder.block)
            #expect(holder.waitUntilRunning(at: .utility))
            let waiting = Flag()
            let waited = Flag()
            WorkQueue.global(qos: .userInitiated).async {
                waiting.set()
                group.wait()
                waited.set()
            }
            #expect(waitUntil { waiting.isSet })
            #expect(keepsHolding(for: .milliseconds(50)) { holder.seen?.qos == .utility })
            holder.gate.open()
            #expect(waited.await())
            #expect(holder.waitUntilThreadDropsBack(to: .utility))
        }

        @Test func aLessImportantWaiterRaisesNothing() {
            let holder = Holder()
            let item = WorkItem(block: holder.block)
            WorkQueue.global(qos: .userInitiated).async(execute: item)
            #expect(holder.waitUntilRunning(at: .userInitiated))
            let waiting = Flag()
            WorkQueue.global(qos: .background).async {
                waiting.set()
                item.wait()
            }
            #expect(waiting.await())
            #expect(keepsHolding(for: .milliseconds(50)) { holder.seen?.qos == .userInitiated })
            holder.gate.open()
            #expect(holder.waitUntilThreadDropsBack(to: .userInitiated))
        }

        // MARK: Observability

        @Test func currentOutsideLullWorkIsDefaultAndInsideSyncTheCallers() {
            let probe = Captured<QoS>()
            SourceTestKit.runThreads(1) { _ in probe.set(QoS.current) }
            #expect(probe.value == .default)
            let queue = WorkQueue(label: "lull.test.override.current", qos: .background)
            let inSync = Captured<QoS>()
            WorkQueue.global(qos: .userInitiated).async { queue.sync { inSync.set(QoS.current) } }
            #expect(inSync.await() == .userInitiated)
        }

        @Test func debugDescriptionShowsLabelQoSAndTarget() {
            let target = WorkQueue(label: "lull.test.override.describe-target")
            let queue = WorkQueue(label: "lull.test.override.describe", qos: .utility, target: target)
            let text = queue.debugDescription
            #expect(text.contains("'lull.test.override.describe'"), "\(text)")
            #expect(text.contains("qos=utility"), "\(text)")
            #expect(text.contains("target=lull.test.override.describe-target"), "\(text)")
            #expect(!text.contains("override="), "\(text)")
            let global = WorkQueue(label: "lull.test.override.describe-global", target: .global(qos: .background))
            #expect(global.debugDescription.contains("qos=background"), "\(global.debugDescription)")
            #expect(global.debugDescription.contains("target=lull.global.background"), "\(global.debugDescription)")
        }
    }
}
