import Glibc
import Synchronization
import Testing
@testable import Lull

/// What a block saw of its execution context and QoS.
struct ObservedContext: Sendable, Equatable {
    let activityID: UInt64
    let parentActivityID: UInt64
    let activityName: String?
    let qos: QoS

    static var current: ObservedContext {
        let context = ExecutionContext.current
        return ObservedContext(activityID: context.activityID, parentActivityID: context.parentActivityID,
                               activityName: context.activityName, qos: QoS.current)
    }
}

/// Runs `body` in a block of a user-interactive queue (a thread whose QoS work it submits
/// would inherit as user-initiated) and waits for it.
func onUserInteractiveThread<T: Sendable>(_ body: @escaping @Sendable () -> T) -> T? {
    let result = Captured<T>()
    WorkQueue(label: "lull.test.ctx.ui-thread", qos: .userInteractive).async { result.set(body()) }
    return result.await()
}

/// Runs `submit` inside a new activity on a user-interactive thread; returns that activity's
/// ID and what the block `submit` was given saw when it ran.
func observedRun(_ submit: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void)
    -> (activity: UInt64, seen: ObservedContext?) {
    let seen = Captured<ObservedContext>()
    let activity = onUserInteractiveThread {
        ExecutionContext.withActivity("lull.test.ctx.submitter") { () -> UInt64 in
            submit { seen.set(.current) }
            return ExecutionContext.current.activityID
        }
    }
    return (activity ?? 0, seen.await())
}

extension LullSuite {
    @Suite struct ExecutionContextTests {
        // MARK: Activities

        @Test func outsideAnyActivityTheContextIsEmpty() {
            let context = ExecutionContext.current
            #expect(context == .empty)
            #expect(context.activityID == 0 && context.parentActivityID == 0 && context.activityName == nil)
        }

        @Test func withActivityStartsAChildOfTheCurrentOneAndRestoresTheOuterOne() {
            let (outer, inner, afterInner) = ExecutionContext.withActivity("lull.test.ctx.outer") {
                () -> (ExecutionContext, ExecutionContext, ExecutionContext) in
                let outer = ExecutionContext.current
                let inner = ExecutionContext.withActivity("lull.test.ctx.inner") { ExecutionContext.current }
                return (outer, inner, ExecutionContext.current)
            }
            #expect(outer.activityID != 0 && outer.activityName == "lull.test.ctx.outer")
            #expect(outer.parentActivityID == 0)
            #expect(inner.activityID != 0 && inner.activityID != outer.activityID)
            #expect(inner.parentActivityID == outer.activityID)
            #expect(inner.activityName == "lull.test.ctx.inner")
            #expect(afterInner == outer)
            #expect(ExecutionContext.current == .empty)
        }

        @Test func withActivityRestoresTheOuterContextWhenTheBodyThrows() {
            ExecutionContext.withActivity("lull.test.ctx.throws-outer") {
                let outer = ExecutionContext.current
                #expect(throws: TestError.self) {
                    try ExecutionContext.withActivity("lull.test.ctx.throws") { throw TestError(code: 1) }
                }
                #expect(ExecutionContext.current == outer)
            }
            #expect(ExecutionContext.current == .empty)
        }

        @Test func everyActivityHasItsOwnID() {
            let ids = (0..<100).map { _ in ExecutionContext.withActivity("lull.test.ctx.ids") { ExecutionContext.current.activityID } }
            #expect(Set(ids).count == 100)
            #expect(!ids.contains(0))
        }

        // MARK: Propagation

        @Test func asyncCarriesTheSubmittersContext() {
            let serial = WorkQueue(label: "lull.test.ctx.async.serial")
            let concurrent = WorkQueue(label: "lull.test.ctx.async.concurrent", attributes: .concurrent)
            let nested = WorkQueue(label: "lull.test.ctx.async.nested", target: serial)
            for queue in [serial, concurrent, nested, WorkQueue.global(qos: .utility)] {
                let (activity, seen) = observedRun { queue.async(execute: $0) }
                #expect(activity != 0)
                #expect(seen?.activityID == activity, "\(queue.label)")
                #expect(seen?.activityName == "lull.test.ctx.submitter", "\(queue.label)")
            }
            let (activity, seen) = observedRun { serial.async(execute: WorkItem(block: $0)) }
            #expect(seen?.activityID == activity)
        }

        @Test func blocksOfDifferentActivitiesInOneSerialBatchEachRunInTheirOwn() {
            let queue = WorkQueue(label: "lull.test.ctx.batch")
            let gate = Gate()
            queue.async { gate.wait() }
            let expected = Recorder<UInt64>()
            let seen = Recorder<UInt64>()
            for index in 0..<30 {
                if index % 3 == 0 {
                    expected.append(0)
                    queue.async { seen.append(ExecutionContext.current.activityID) }
                } else {
                    ExecutionContext.withActivity("lull.test.ctx.batch.\(index)") {
                        expected.append(ExecutionContext.current.activityID)
                        queue.async { seen.append(ExecutionContext.current.activityID) }
                        if index % 2 == 0 {
                            queue.async { seen.append(ExecutionContext.current.activityID) }
                            expected.append(ExecutionContext.current.activityID)
                        }
                    }
                }
            }
            gate.open()
            #expect(waitUntil { seen.count == expected.count })
            #expect(seen.values == expected.values)
        }

        @Test func syncCarriesTheCallersContextAndDetachedSyncRunsWithNone() {
            let queue = WorkQueue(label: "lull.test.ctx.sync")
            ExecutionContext.withActivity("lull.test.ctx.sync-caller") {
                let caller = ExecutionContext.current
                #expect(queue.sync { ExecutionContext.current } == caller)
                #expect(queue.sync(flags: .detached) { ExecutionContext.current } == .empty)
                // The caller's context is back after a detached sync.
                #expect(ExecutionContext.current == caller)
                // Through the waiting path too: the queue is busy when `sync` is called.
                let gate = Gate()
                queue.async { gate.wait() }
                WorkQueue.global().asyncAfter(deadline: .now() + .milliseconds(50)) { gate.open() }
                #expect(queue.sync { ExecutionContext.current } == caller)
            }
        }

        @Test func notificationsCarryTheContextOfTheNotifyCall() {
            let queue = WorkQueue(label: "lull.test.ctx.notify")
            let group = WorkGroup()
            let gate = Gate()
            queue.async(group: group) { gate.wait() }
            let item = WorkItem { gate.wait() }
            WorkQueue.global().async(execute: item)
            let groupSeen = Captured<ExecutionContext>()
            let itemSeen = Captured<ExecutionContext>()
            let itemItemSeen = Captured<ExecutionContext>()
            let expected = ExecutionContext.withActivity("lull.test.ctx.notifier") { () -> ExecutionContext in
                group.notify(queue: queue) { groupSeen.set(.current) }
                item.notify(queue: queue) { itemSeen.set(.current) }
                item.notify(queue: queue, execute: WorkItem { itemItemSeen.set(.current) })
                return ExecutionContext.current
            }
            // The completing thread has another activity: it must not leak into the notifications.
            WorkQueue.global().async { ExecutionContext.withActivity("lull.test.ctx.completer") { gate.open() } }
            #expect(groupSeen.await() == expected)
            #expect(itemSeen.await() == expected)
            #expect(itemItemSeen.await() == expected)
            #expect(expected.activityID != 0)
        }

        @Test func detachedBlocksAndItemsRunWithTheEmptyContext() {
            let queue = WorkQueue(label: "lull.test.ctx.detached")
            let (activity, seen) = observedRun { queue.async(flags: .detached, execute: $0) }
            #expect(activity != 0)
            #expect(seen?.activityID == 0)
            let (_, item) = observedRun { queue.async(execute: WorkItem(flags: .detached, block: $0)) }
            #expect(item?.activityID == 0)
            let (_, performed) = observedRun { WorkItem(flags: .detached, block: $0).perform() }
            #expect(performed?.activityID == 0)
        }

        @Test func asyncAfterBlocksAreDetachedByDefault() {
            let queue = WorkQueue(label: "lull.test.ctx.after")
            let soon: @Sendable () -> Deadline = { .now() + .milliseconds(5) }
            let cases: [(String, ObservedContext?)] = [
                ("deadline", observedRun { queue.asyncAfter(deadline: soon(), execute: $0) }.seen),
                ("wallDeadline", observedRun { queue.asyncAfter(wallDeadline: .now() + .milliseconds(5), execute: $0) }.seen),
                ("work item", observedRun { queue.asyncAfter(deadline: soon(), execute: WorkItem(block: $0)) }.seen),
                ("past deadline", observedRun { queue.asyncAfter(deadline: .now() - .seconds(1), execute: $0) }.seen),
            ]
            for (name, seen) in cases {
                #expect(seen?.activityID == 0, "\(name)")
                // Nor does the submitter's QoS (user-interactive here) travel: the queue has
                // none, so the block runs at default.
                #expect(seen?.qos == .default, "\(name)")
            }
            // An explicit QoS still applies.
            let withQoS = observedRun { queue.asyncAfter(deadline: soon(), qos: .utility, execute: $0) }.seen
            #expect(withQoS?.qos == .utility)
        }

        @Test func anItemThatAssignsTheCurrentContextRunsInItWhereverItRuns() {
            let queue = WorkQueue(label: "lull.test.ctx.assign")
            let seen = Recorder<(String, ObservedContext)>()
            // Created on a utility thread inside an activity.
            let made = Captured<WorkItem>()
            let creation = Captured<UInt64>()
            let kinds = ["async", "asyncAfter", "perform", "notify", "sync"]
            WorkQueue(label: "lull.test.ctx.assign.creator", qos: .utility).async {
                ExecutionContext.withActivity("lull.test.ctx.assign.creation") {
                    creation.set(ExecutionContext.current.activityID)
                    made.set(WorkItem(flags: .assignCurrentContext) {
                        let kind = kinds[min(seen.count, kinds.count - 1)]
                        seen.append((kind, .current))
                    })
                }
            }
            guard let item = made.await(), let creationID = creation.await() else {
                Issue.record("the item was not created")
                return
            }
            // Run from a user-interactive thread in another activity, five ways, one after the other.
            _ = onUserInteractiveThread {
                ExecutionContext.withActivity("lull.test.ctx.assign.runner") {
                    queue.async(execute: item)
                    _ = waitUntil { seen.count == 1 }
                    queue.asyncAfter(deadline: .now() + .milliseconds(5), execute: item)
                    _ = waitUntil { seen.count == 2 }
                    item.perform()
                    let trigger = WorkItem {}
                    trigger.notify(queue: queue, execute: item)
                    queue.async(execute: trigger)
                    _ = waitUntil { seen.count == 4 }
                    queue.sync(execute: item)
                }
            }
            #expect(waitUntil { seen.count == 5 })
            for (kind, observed) in seen.values {
                #expect(observed.activityID == creationID, "\(kind)")
                #expect(observed.activityName == "lull.test.ctx.assign.creation", "\(kind)")
            }
            // Its captured QoS (utility) applies where nothing else decides: a plain queue.
            let byKind = Dictionary(seen.values, uniquingKeysWith: { first, _ in first })
            #expect(byKind["async"]?.qos == .utility)
            #expect(byKind["asyncAfter"]?.qos == .utility)
        }

        @Test func assignCurrentContextLowersAUserInteractiveCreatorToUserInitiated() {
            let queue = WorkQueue(label: "lull.test.ctx.assign-qos")
            let seen = Captured<QoS>()
            let item = onUserInteractiveThread { WorkItem(flags: .assignCurrentContext) { seen.set(QoS.current) } }
            guard let item else {
                Issue.record("the item was not created")
                return
            }
            queue.async(execute: item)
            #expect(seen.await() == .userInitiated)
        }

        // MARK: Swift concurrency

        @Test func aTaskCreatedInsideABlockInheritsItsContext() async {
            let queue = WorkQueue(label: "lull.test.ctx.task")
            let inTask = Captured<ExecutionContext>()
            let afterAwait = Captured<ExecutionContext>()
            let inDetached = Captured<ExecutionContext>()
            let submitted = Captured<ExecutionContext>()
            let blockContext = ExecutionContext.withActivity("lull.test.ctx.task-owner") { () -> ExecutionContext in
                queue.async {
                    Task {
                        inTask.set(.current)
                        try? await Task.sleep(for: .milliseconds(5))
                        afterAwait.set(.current)
                        // Work the task submits carries the task's context.
                        queue.async { submitted.set(.current) }
                    }
                    Task.detached { inDetached.set(.current) }
                }
                return ExecutionContext.current
            }
            #expect(blockContext.activityID != 0)
            #expect(inTask.await() == blockContext)
            #expect(afterAwait.await() == blockContext)
            #expect(submitted.await() == blockContext)
            #expect(inDetached.await() == .empty)
        }

        @Test func asyncCodeReadsTheActivityItStartedAndDetachedWorkInsideItSeesNone() async {
            let queue = WorkQueue(label: "lull.test.ctx.async-code")
            let (outer, child, detached, itemDetached) = await ExecutionContext.withActivity("lull.test.ctx.async-outer") {
                Task { () async -> (ExecutionContext, ExecutionContext, ExecutionContext, ExecutionContext) in
                    try? await Task.sleep(for: .milliseconds(1))
                    let outer = ExecutionContext.current
                    let child = ExecutionContext.withActivity("lull.test.ctx.async-child") { ExecutionContext.current }
                    let detached = queue.sync(flags: .detached) { ExecutionContext.current }
                    let itemSeen = Captured<ExecutionContext>()
                    WorkItem(flags: .detached) { itemSeen.set(.current) }.perform()
                    return (outer, child, detached, itemSeen.value ?? outer)
                }
            }.value
            #expect(outer.activityID != 0 && outer.activityName == "lull.test.ctx.async-outer")
            #expect(child.parentActivityID == outer.activityID)
            #expect(detached == .empty)
            #expect(itemDetached == .empty)
        }
    }
}
