#if ServiceContext
import ServiceContextModule
import Testing
@testable import Lull

/// A trace identifier, as a tracer would keep in a ServiceContext.
private enum TraceKey: ServiceContextKey {
    typealias Value = String
}

private func currentTrace() -> String? {
    ServiceContext.current?[TraceKey.self]
}

private func context(trace: String) -> ServiceContext {
    var context = ServiceContext.topLevel
    context[TraceKey.self] = trace
    return context
}

extension LullSuite {
    /// The trait `ServiceContext`: an activity's ServiceContext follows the contract's
    /// propagation rules, as `ServiceContext.current`.
    @Suite struct ServiceContextTests {
        /// `async`, `sync`, notifications and tasks created in a block carry it, across queues.
        @Test func followsBlocksAcrossQueuesAndIntoTasks() async {
            let first = WorkQueue(label: "lull.test.service-context.first")
            let second = WorkQueue(label: "lull.test.service-context.second", attributes: .concurrent)
            let seen = Recorder<String?>()
            let group = WorkGroup()
            let done = Flag()
            ExecutionContext.withActivity("request", serviceContext: context(trace: "t-1")) {
                #expect(currentTrace() == "t-1")
                #expect(ExecutionContext.current.serviceContext?[TraceKey.self] == "t-1")
                first.async(group: group) {
                    seen.append(currentTrace())
                    second.sync { seen.append(currentTrace()) }
                    second.async(group: group) { seen.append(currentTrace()) }
                    group.enter()
                    Task {
                        seen.append(currentTrace())
                        group.leave()
                    }
                }
                group.notify(queue: second) {
                    seen.append(currentTrace())
                    done.set()
                }
            }
            #expect(currentTrace() == nil, "the binding outlived the activity")
            #expect(waitUntil { done.isSet })
            #expect(seen.values == Array(repeating: "t-1", count: 5))
        }

        /// Detached blocks, delayed blocks and source handlers drop it; a work item made
        /// with `.assignCurrentContext` keeps it, also as a handler.
        @Test func detachedWorkDropsIt() {
            let queue = WorkQueue(label: "lull.test.service-context.detached")
            let detached = Captured<String?>()
            let delayed = Captured<String?>()
            let handler = Captured<String?>()
            let assigned = Captured<String?>()
            let source = EventSource.makeUserDataAddSource(queue: queue)
            ExecutionContext.withActivity("request", serviceContext: context(trace: "t-2")) {
                queue.async(flags: .detached) { detached.set(currentTrace()) }
                queue.asyncAfter(deadline: .now()) { delayed.set(currentTrace()) }
                source.setEventHandler { handler.set(currentTrace()) }
                let item = WorkItem(flags: .assignCurrentContext) { assigned.set(currentTrace()) }
                source.setCancelHandler(handler: item)
            }
            source.activate()
            source.add(data: 1)
            #expect(detached.await() == .some(nil))
            #expect(delayed.await() == .some(nil))
            #expect(handler.await() == .some(nil))
            source.cancel()
            #expect(assigned.await() == .some("t-2"))
        }

        /// A plain activity carries the ServiceContext current where it starts (a span's,
        /// say); an async activity keeps it across suspension points.
        @Test func anActivityCarriesTheCurrentServiceContext() async throws {
            let queue = WorkQueue(label: "lull.test.service-context.capture")
            let inBlock = Captured<String?>()
            ServiceContext.withValue(context(trace: "t-3")) {
                ExecutionContext.withActivity("span") {
                    queue.async { inBlock.set(currentTrace()) }
                }
            }
            #expect(inBlock.await() == .some("t-3"))

            let afterSleep = try await ExecutionContext.withActivity("async", serviceContext: context(trace: "t-4")) {
                () async throws -> String? in
                try await Task.sleep(for: .milliseconds(1), clock: CoalescingClock())
                let inner = await ExecutionContext.withActivity("child") { () async in currentTrace() }
                #expect(inner == "t-4")
                return currentTrace()
            }
            #expect(afterSleep == "t-4")
            #expect(currentTrace() == nil)
        }
    }
}
#endif
