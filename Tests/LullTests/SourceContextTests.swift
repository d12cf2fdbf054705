import Glibc
import Synchronization
import Testing
@testable import Lull

/// One source of each kind, with what makes it fire and what to clean up afterwards.
struct SourceUnderTest {
    let source: any EventSourceProtocol
    let fire: () -> Void
    let cleanUp: () -> Void
}

enum SourceKind: String, CaseIterable, Sendable {
    case read, write, userDataAdd, userDataOr, userDataReplace, signal, process, timer, fileSystem

    func make(queue: WorkQueue) throws -> SourceUnderTest {
        switch self {
        case .read:
            let pipe = try SourceTestKit.makePipe()
            return SourceUnderTest(source: EventSource.makeReadSource(fileDescriptor: pipe.read, queue: queue),
                                   fire: { SourceTestKit.writeAll(pipe.write, [1]) },
                                   cleanUp: { close(pipe.read); close(pipe.write) })
        case .write:
            let pipe = try SourceTestKit.makePipe()
            return SourceUnderTest(source: EventSource.makeWriteSource(fileDescriptor: pipe.write, queue: queue),
                                   fire: {}, cleanUp: { close(pipe.read); close(pipe.write) })
        case .userDataAdd:
            let source = EventSource.makeUserDataAddSource(queue: queue)
            return SourceUnderTest(source: source, fire: { source.add(data: 1) }, cleanUp: {})
        case .userDataOr:
            let source = EventSource.makeUserDataOrSource(queue: queue)
            return SourceUnderTest(source: source, fire: { source.or(data: 1) }, cleanUp: {})
        case .userDataReplace:
            let source = EventSource.makeUserDataReplaceSource(queue: queue)
            return SourceUnderTest(source: source, fire: { source.replace(data: 1) }, cleanUp: {})
        case .signal:
            _ = LullSuite.SignalSourceTests.ignoreUserSignalsOnce
            return SourceUnderTest(source: EventSource.makeSignalSource(signal: SIGUSR2, queue: queue),
                                   fire: { LullSuite.SignalSourceTests.raiseUnblocked(SIGUSR2) }, cleanUp: {})
        case .process:
            let pid = try SourceTestKit.spawnShell("exit 0")
            return SourceUnderTest(source: EventSource.makeProcessSource(identifier: pid, eventMask: .exit, queue: queue),
                                   fire: {}, cleanUp: { _ = SourceTestKit.reap(pid) })
        case .timer:
            let source = EventSource.makeTimerSource(queue: queue)
            return SourceUnderTest(source: source, fire: { source.schedule(deadline: .now()) }, cleanUp: {})
        case .fileSystem:
            var template = Array("/tmp/lull-ctx-XXXXXX".utf8CString)
            let descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
            guard descriptor >= 0 else { throw SourceTestKit.SystemError(call: "mkstemp", code: errno) }
            SourceTestKit.setCloseOnExec(descriptor)
            let path = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            let source = try EventSource.makeFileSystemObjectSource(path: path, eventMask: .write, queue: queue)
            return SourceUnderTest(source: source, fire: { SourceTestKit.writeAll(descriptor, [1]) },
                                   cleanUp: { close(descriptor); unlink(path) })
        }
    }
}

extension LullSuite {
    /// The 2014 rule for source handlers: detached by default, whatever the kind of source
    /// and the handler, and at the QoS of their queue (or of their handler work item).
    @Suite struct SourceContextTests {
        /// Sets up a source from a user-interactive thread inside an activity, with handlers
        /// made by `handlers`, fires it, cancels it; returns what each handler saw.
        func observeHandlers(of kind: SourceKind, queue: WorkQueue,
                             flags: WorkItemFlags = [], asWorkItems: Bool = false)
            throws -> (activity: UInt64, seen: [String: ObservedContext]) {
            let made = try kind.make(queue: queue)
            defer { made.cleanUp() }
            let seen = Mutex<[String: ObservedContext]>([:])
            let source = made.source
            let activity = onUserInteractiveThread { () -> UInt64 in
                ExecutionContext.withActivity("lull.test.src-ctx.\(kind)") { () -> UInt64 in
                    let record: @Sendable (String) -> @Sendable () -> Void = { name in
                        { seen.locked { $0[name] = $0[name] ?? .current } }
                    }
                    if asWorkItems {
                        source.setRegistrationHandler(handler: WorkItem(flags: flags, block: record("registration")))
                        source.setEventHandler(handler: WorkItem(flags: flags, block: record("event")))
                        source.setCancelHandler(handler: WorkItem(flags: flags, block: record("cancel")))
                    } else {
                        source.setRegistrationHandler(qos: .unspecified, flags: flags, handler: record("registration"))
                        source.setEventHandler(qos: .unspecified, flags: flags, handler: record("event"))
                        source.setCancelHandler(qos: .unspecified, flags: flags, handler: record("cancel"))
                    }
                    source.activate()
                    return ExecutionContext.current.activityID
                }
            }
            #expect(waitUntil { seen.locked { $0["registration"] != nil } }, "\(kind): no registration handler")
            made.fire()
            #expect(waitUntil { seen.locked { $0["event"] != nil } }, "\(kind): no event handler")
            _ = onUserInteractiveThread {
                ExecutionContext.withActivity("lull.test.src-ctx.canceller") { source.cancel() }
            }
            #expect(waitUntil { seen.locked { $0["cancel"] != nil } }, "\(kind): no cancel handler")
            return (activity ?? 0, seen.locked { $0 })
        }

        @Test(arguments: SourceKind.allCases)
        func everyHandlerIsDetachedByDefault(kind: SourceKind) throws {
            let queue = WorkQueue(label: "lull.test.src-ctx.\(kind).plain")
            let (activity, seen) = try observeHandlers(of: kind, queue: queue)
            #expect(activity != 0)
            #expect(seen.keys.sorted() == ["cancel", "event", "registration"])
            for (handler, observed) in seen {
                #expect(observed.activityID == 0, "\(kind) \(handler) handler ran in activity \(observed.activityID)")
                // The setter ran at user-interactive: a plain queue gives its handlers default.
                #expect(observed.qos == .default, "\(kind) \(handler) handler ran at \(observed.qos)")
            }
        }

        @Test(arguments: SourceKind.allCases)
        func handlerWorkItemsAreDetachedByDefaultToo(kind: SourceKind) throws {
            let (_, seen) = try observeHandlers(of: kind, queue: WorkQueue(label: "lull.test.src-ctx.\(kind).items"),
                                                asWorkItems: true)
            #expect(seen.count == 3)
            for (handler, observed) in seen {
                #expect(observed.activityID == 0, "\(kind) \(handler) work item ran in activity \(observed.activityID)")
                #expect(observed.qos == .default, "\(kind) \(handler) work item ran at \(observed.qos)")
            }
        }

        @Test(arguments: [SourceKind.read, .userDataAdd, .timer, .signal])
        func handlersThatAssignTheCurrentContextRunInTheSettersContextAndQoS(kind: SourceKind) throws {
            for asWorkItems in [false, true] {
                let queue = WorkQueue(label: "lull.test.src-ctx.\(kind).assigned")
                let (activity, seen) = try observeHandlers(of: kind, queue: queue, flags: .assignCurrentContext,
                                                           asWorkItems: asWorkItems)
                #expect(seen.count == 3)
                for (handler, observed) in seen {
                    #expect(observed.activityID == activity, "\(kind) \(handler) (work item: \(asWorkItems))")
                    // The setter's user-interactive, lowered to user-initiated as for any capture.
                    #expect(observed.qos == .userInitiated, "\(kind) \(handler) (work item: \(asWorkItems)) ran at \(observed.qos)")
                }
            }
        }

        @Test(arguments: [SourceKind.userDataAdd, .timer])
        func handlersRunAtTheQoSOfTheirHandlerWorkItemOrBlock(kind: SourceKind) throws {
            let made = try kind.make(queue: WorkQueue(label: "lull.test.src-ctx.\(kind).item-qos"))
            defer { made.cleanUp() }
            let seen = Mutex<[String: QoS]>([:])
            made.source.setRegistrationHandler(qos: .utility, flags: []) { seen.locked { $0["registration"] = QoS.current } }
            made.source.setEventHandler(handler: WorkItem(qos: .userInitiated) { seen.locked { $0["event"] = QoS.current } })
            made.source.setCancelHandler(qos: .background, flags: []) { seen.locked { $0["cancel"] = QoS.current } }
            made.source.activate()
            #expect(waitUntil { seen.locked { $0["registration"] != nil } })
            made.fire()
            #expect(waitUntil { seen.locked { $0["event"] != nil } })
            made.source.cancel()
            #expect(waitUntil { seen.locked { $0["cancel"] != nil } })
            let values = seen.locked { $0 }
            #expect(values["registration"] == .utility)
            #expect(values["event"] == .userInitiated)
            #expect(values["cancel"] == .background)
        }
    }
}
