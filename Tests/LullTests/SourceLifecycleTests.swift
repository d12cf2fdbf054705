import Glibc
import Synchronization
import Testing
@testable import Lull

/// The lifecycle every source kind shares (API.md, "Source behaviour"), checked mostly on
/// user-data sources (their events are exact and need no system call) and on read sources
/// where a descriptor matters.
extension LullSuite {
    @Suite struct SourceLifecycleTests {
        // MARK: Activation

        @Test func aSourceIsCreatedInactive() throws {
            let (readEnd, writeEnd) = try SourceTestKit.makePipe()
            let source = EventSource.makeReadSource(fileDescriptor: readEnd, queue: WorkQueue(label: "lull.test.src.inactive"))
            let registered = Counter()
            let seen = Recorder<UInt>()
            let cancelled = Flag()
            source.setRegistrationHandler { registered.increment() }
            source.setEventHandler {
                seen.append(source.data)
                _ = SourceTestKit.readSome(readEnd, max: 4096)
            }
            source.setCancelHandler {
                close(readEnd)
                close(writeEnd)
                cancelled.set()
            }
            // Readable before activation: nothing may run until activate().
            #expect(SourceTestKit.writeAll(writeEnd, Array("hello".utf8)) == 5)
            #expect(keepsHolding(for: .milliseconds(300)) { registered.value == 0 && seen.count == 0 })
            source.activate()
            #expect(waitFor(seconds: 10) { seen.count == 1 })
            #expect(registered.value == 1)
            #expect(seen.values == [5])
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)))
        }

        @Test func resumeOfANeverActivatedSourceActivatesIt() throws {
            let (readEnd, writeEnd) = try SourceTestKit.makePipe()
            let source = EventSource.makeReadSource(fileDescriptor: readEnd, queue: WorkQueue(label: "lull.test.src.resume-activates"))
            let registered = Counter()
            let seen = Recorder<UInt>()
            let cancelled = Flag()
            source.setRegistrationHandler { registered.increment() }
            source.setEventHandler {
                seen.append(source.data)
                _ = SourceTestKit.readSome(readEnd, max: 4096)
            }
            source.setCancelHandler {
                close(readEnd)
                close(writeEnd)
                cancelled.set()
            }
            source.resume()
            #expect(registered.await(timeout: .seconds(10)) { $0 == 1 })
            #expect(SourceTestKit.writeAll(writeEnd, Array("abc".utf8)) == 3)
            #expect(waitFor(seconds: 10) { seen.count == 1 })
            #expect(seen.values == [3])
            // Now active: a balanced suspend/resume is fine, and events keep coming.
            source.suspend()
            source.resume()
            #expect(SourceTestKit.writeAll(writeEnd, Array("de".utf8)) == 2)
            #expect(waitFor(seconds: 10) { seen.count == 2 })
            #expect(seen.values == [3, 2])
            #expect(registered.value == 1)
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)))
        }

        @Test func activatingASuspendedSourceDeliversOnlyAfterResume() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.suspended-at-activation"))
            let seen = Recorder<UInt>()
            let registered = Flag()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { seen.append(source.data) }
            source.suspend()
            source.activate()
            source.add(data: 4)
            #expect(keepsHolding(for: .milliseconds(300)) { seen.count == 0 && !registered.isSet })
            source.resume()
            #expect(waitFor(seconds: 10) { seen.count == 1 })
            #expect(registered.isSet)
            #expect(seen.values == [4])
            source.cancel()
        }

        // MARK: Registration handler

        @Test func theRegistrationHandlerRunsOnceBeforeTheFirstEventHandler() {
            // A concurrent target: if the handlers went to it directly, the event could
            // overtake the (slow) registration handler.
            let queue = WorkQueue(label: "lull.test.src.registration-order", attributes: .concurrent)
            let source = EventSource.makeUserDataAddSource(queue: queue)
            let log = Recorder<String>()
            let total = Atomic<UInt>(0)
            source.setRegistrationHandler {
                log.append("registration-start")
                spin(microseconds: 30_000)
                log.append("registration-end")
            }
            source.setEventHandler {
                log.append("event")
                total.add(source.data, ordering: .relaxed)
            }
            source.activate()
            source.add(data: 1)
            source.activate()  // a second activation does nothing
            for _ in 0..<9 { source.add(data: 1) }
            #expect(waitFor(seconds: 10) { total.load(ordering: .relaxed) == 10 })
            let values = log.values
            #expect(values.count >= 3)
            #expect(Array(values.prefix(2)) == ["registration-start", "registration-end"], "\(values)")
            #expect(values.dropFirst(2).allSatisfy { $0 == "event" }, "\(values)")
            source.cancel()
        }

        @Test func theRegistrationHandlerRunsAfterRegistrationForADescriptor() throws {
            let (readEnd, writeEnd) = try SourceTestKit.makePipe()
            let queue = WorkQueue(label: "lull.test.src.registration-read", attributes: .concurrent)
            let source = EventSource.makeReadSource(fileDescriptor: readEnd, queue: queue)
            let log = Recorder<String>()
            let cancelled = Flag()
            source.setRegistrationHandler {
                log.append("registration-start")
                spin(microseconds: 30_000)
                log.append("registration-end")
            }
            source.setEventHandler {
                log.append("event")
                _ = SourceTestKit.readSome(readEnd, max: 4096)
            }
            source.setCancelHandler {
                close(readEnd)
                close(writeEnd)
                cancelled.set()
            }
            #expect(SourceTestKit.writeAll(writeEnd, [1, 2, 3]) == 3)
            source.activate()
            #expect(waitFor(seconds: 10) { log.values.contains("event") })
            #expect(Array(log.values.prefix(3)) == ["registration-start", "registration-end", "event"], "\(log.values)")
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)))
            #expect(log.values.filter { $0.hasPrefix("registration-start") }.count == 1)
        }

        @Test func theRegistrationHandlerDoesNotRunWhenCancelledBeforeActivation() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.registration-cancelled"))
            let registered = Counter()
            let events = Counter()
            let cancelled = Counter()
            source.setRegistrationHandler { registered.increment() }
            source.setEventHandler { events.increment() }
            source.setCancelHandler { cancelled.increment() }
            source.cancel()
            source.activate()
            source.add(data: 1)
            #expect(cancelled.await(timeout: .seconds(10)) { $0 == 1 })
            #expect(keepsHolding(for: .milliseconds(200)) { registered.value == 0 && events.value == 0 && cancelled.value == 1 })
            #expect(source.isCancelled)
        }

        // MARK: Mutual exclusion and merging

        @Test func theEventHandlerNeverRunsConcurrentlyWithItselfOnAConcurrentQueue() {
            let queue = WorkQueue(label: "lull.test.src.exclusive", attributes: .concurrent)
            let source = EventSource.makeUserDataAddSource(queue: queue)
            let overlap = OverlapTracker()
            let total = Atomic<UInt>(0)
            let calls = Counter()
            source.setEventHandler {
                overlap.enter()
                total.add(source.data, ordering: .relaxed)
                calls.increment()
                spin(microseconds: 100)
                overlap.exit()
            }
            source.activate()
            // A first delivery before the burst: the burst then needs at least one more.
            source.add(data: 1)
            #expect(calls.await(timeout: .seconds(10)) { $0 == 1 })
            let perThread = 20_000
            SourceTestKit.runThreads(4) { _ in
                for index in 0..<perThread {
                    source.add(data: 1)
                    if index % 256 == 0 { usleep(50) }  // let deliveries start between bursts
                }
            }
            #expect(waitFor(seconds: 10) { total.load(ordering: .relaxed) == UInt(4 * perThread + 1) })
            #expect(overlap.maximum == 1, "the event handler ran \(overlap.maximum) times at once")
            #expect(calls.value > 1)
            source.cancel()
        }

        @Test func aReadSourceHandlerNeverRunsConcurrentlyWithItselfOnAConcurrentQueue() throws {
            let (readEnd, writeEnd) = try SourceTestKit.makePipe()
            let queue = WorkQueue(label: "lull.test.src.exclusive-read", attributes: .concurrent)
            let source = EventSource.makeReadSource(fileDescriptor: readEnd, queue: queue)
            let overlap = OverlapTracker()
            let received = Counter()
            let cancelled = Flag()
            source.setEventHandler {
                overlap.enter()
                // One byte per call: level-triggered delivery calls again at once.
                received.increment()
                _ = SourceTestKit.readSome(readEnd, max: 1)
                spin(microseconds: 50)
                overlap.exit()
            }
            source.setCancelHandler {
                close(readEnd)
                close(writeEnd)
                cancelled.set()
            }
            source.activate()
            for _ in 0..<50 {
                #expect(SourceTestKit.writeAll(writeEnd, [UInt8](repeating: 7, count: 20)) == 20)
                usleep(200)
            }
            #expect(received.await(timeout: .seconds(10)) { $0 == 1_000 })
            #expect(overlap.maximum == 1, "the event handler ran \(overlap.maximum) times at once")
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)))
        }

        @Test func eventsMergeWhileTheHandlerRuns() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.merge-running"))
            let gate = Gate()
            let started = Counter()
            let seen = Recorder<UInt>()
            let changed = Counter()
            source.setEventHandler {
                let value = source.data
                seen.append(value)
                if started.increment() == 1 { gate.wait() }
                // `data` stays this invocation's value for the whole handler.
                if source.data != value { changed.increment() }
            }
            source.activate()
            source.add(data: 1)
            #expect(started.await(timeout: .seconds(10)) { $0 == 1 })
            source.add(data: 2)
            source.add(data: 3)
            source.add(data: 4)
            gate.open()
            #expect(waitFor(seconds: 10) { seen.count == 2 })
            #expect(keepsHolding(for: .milliseconds(100)) { seen.count == 2 })
            #expect(seen.values == [1, 9])
            #expect(changed.value == 0, "data changed while the handler ran")
            source.cancel()
        }

        @Test func eventsMergeWhileTheSourceIsSuspended() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.merge-suspended"))
            let registered = Flag()
            let seen = Recorder<UInt>()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { seen.append(source.data) }
            source.activate()
            #expect(registered.await(timeout: .seconds(10)))
            source.suspend()
            for value in [1, 2, 3, 4] as [UInt] { source.add(data: value) }
            #expect(keepsHolding(for: .milliseconds(200)) { seen.count == 0 })
            source.resume()
            #expect(waitFor(seconds: 10) { seen.count == 1 })
            #expect(keepsHolding(for: .milliseconds(100)) { seen.count == 1 })
            #expect(seen.values == [10])
            source.cancel()
        }

        // MARK: Suspension

        @Test func suspensionsCountTwoSuspendsNeedTwoResumes() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.suspend-count"))
            let registered = Flag()
            let seen = Recorder<UInt>()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { seen.append(source.data) }
            source.activate()
            #expect(registered.await(timeout: .seconds(10)))
            source.suspend()
            source.suspend()
            source.add(data: 1)
            source.resume()
            #expect(keepsHolding(for: .milliseconds(300)) { seen.count == 0 })
            source.add(data: 2)
            source.resume()
            #expect(waitFor(seconds: 10) { seen.count == 1 })
            #expect(seen.values == [3])
            source.cancel()
        }

        @Test func aHandlerCanSuspendItsOwnSource() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.suspend-inside"))
            let seen = Recorder<UInt>()
            source.setEventHandler {
                seen.append(source.data)
                if seen.count == 1 { source.suspend() }
            }
            source.activate()
            source.add(data: 1)
            #expect(waitFor(seconds: 10) { seen.count == 1 })
            source.add(data: 5)
            source.add(data: 6)
            #expect(keepsHolding(for: .milliseconds(300)) { seen.count == 1 })
            source.resume()
            #expect(waitFor(seconds: 10) { seen.count == 2 })
            #expect(seen.values == [1, 11])
            // Balanced: the source keeps working.
            source.add(data: 2)
            #expect(waitFor(seconds: 10) { seen.count == 3 })
            #expect(seen.values == [1, 11, 2])
            source.cancel()
        }

        // MARK: Handlers

        @Test func aReplacedEventHandlerAppliesToLaterEvents() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.replace-handler"))
            let log = Recorder<String>()
            source.setEventHandler { log.append("A\(source.data)") }
            source.activate()
            source.add(data: 1)
            #expect(waitFor(seconds: 10) { log.count == 1 })
            source.setEventHandler {
                log.append("B\(source.data)")
                // Replaced from inside a handler: the next delivery uses C.
                source.setEventHandler { log.append("C\(source.data)") }
            }
            source.add(data: 2)
            #expect(waitFor(seconds: 10) { log.count == 2 })
            source.add(data: 3)
            #expect(waitFor(seconds: 10) { log.count == 3 })
            #expect(keepsHolding(for: .milliseconds(100)) { log.count == 3 })
            #expect(log.values == ["A1", "B2", "C3"])
            source.cancel()
        }

        @Test func eventsDeliveredWhileNoEventHandlerIsSetAreDropped() {
            let target = WorkQueue(label: "lull.test.src.no-handler")
            let source = EventSource.makeUserDataAddSource(queue: target)
            let seen = Recorder<UInt>()
            source.activate()
            SourceTestKit.settle(target)  // the registration step is over
            source.add(data: 5)
            // Let the delivery of 5 happen (with no handler), then install one.
            SourceTestKit.settle(target)
            source.setEventHandler { seen.append(source.data) }
            source.add(data: 7)
            #expect(waitFor(seconds: 10) { seen.count == 1 })
            #expect(keepsHolding(for: .milliseconds(100)) { seen.count == 1 })
            #expect(seen.values == [7])
            // Removing the handler drops again.
            SourceTestKit.settle(target)
            source.setEventHandler(handler: nil)
            source.add(data: 11)
            SourceTestKit.settle(target)
            source.setEventHandler { seen.append(source.data) }
            source.add(data: 1)
            #expect(waitFor(seconds: 10) { seen.count == 2 })
            #expect(seen.values == [7, 1])
            source.cancel()
        }

        // MARK: Cancellation

        @Test func cancelIsAsynchronousAndWaitsForTheRunningHandler() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.cancel-async"))
            let gate = Gate()
            let log = Recorder<String>()
            source.setEventHandler {
                log.append("start")
                gate.wait()
                log.append("end")
            }
            source.setCancelHandler { log.append("cancel") }
            source.activate()
            source.add(data: 1)
            #expect(waitFor(seconds: 10) { log.count == 1 })
            source.add(data: 1)  // pending when the source is cancelled: never delivered
            source.cancel()
            // cancel() returned while the handler is still blocked in it.
            #expect(source.isCancelled)
            #expect(log.values == ["start"])
            source.add(data: 1)  // after cancel: never delivered
            #expect(keepsHolding(for: .milliseconds(100)) { log.values == ["start"] })
            gate.open()
            #expect(waitFor(seconds: 10) { log.values.contains("cancel") })
            #expect(keepsHolding(for: .milliseconds(200)) { log.count == 3 })
            #expect(log.values == ["start", "end", "cancel"])
        }

        @Test func theCancelHandlerRunsExactlyOnceWhateverTheNumberOfCancels() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.cancel-once"))
            let cancelled = Counter()
            source.setCancelHandler { cancelled.increment() }
            source.activate()
            SourceTestKit.runThreads(4) { _ in
                for _ in 0..<100 { source.cancel() }
            }
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)) { $0 >= 1 })
            #expect(keepsHolding(for: .milliseconds(200)) { cancelled.value == 1 })
            #expect(source.isCancelled)
        }

        @Test func everyHandlerRunsOnTheTargetQueue() {
            let target = WorkQueue(label: "lull.test.src.on-target")
            let source = EventSource.makeUserDataAddSource(queue: target)
            let places = Recorder<(String, Bool)>()
            let exclusive = OverlapTracker()
            let done = Flag()
            // Each handler holds the (serial) target while it runs, and so excludes the
            // target's own blocks.
            source.setRegistrationHandler {
                exclusive.enter()
                places.append(("registration", SourceTestKit.isRunning(on: target)))
                spin(microseconds: 2_000)
                exclusive.exit()
            }
            source.setEventHandler {
                exclusive.enter()
                places.append(("event", SourceTestKit.isRunning(on: target)))
                spin(microseconds: 2_000)
                exclusive.exit()
            }
            source.setCancelHandler {
                exclusive.enter()
                places.append(("cancel", SourceTestKit.isRunning(on: target)))
                spin(microseconds: 2_000)
                exclusive.exit()
                done.set()
            }
            let blocks = Counter()
            for _ in 0..<20 {
                target.async {
                    exclusive.enter()
                    spin(microseconds: 1_000)
                    exclusive.exit()
                    blocks.increment()
                }
            }
            source.activate()
            source.add(data: 1)
            for _ in 0..<20 {
                target.async {
                    exclusive.enter()
                    spin(microseconds: 1_000)
                    exclusive.exit()
                    blocks.increment()
                }
            }
            #expect(waitFor(seconds: 10) { places.values.contains { $0.0 == "event" } })
            source.cancel()
            #expect(waitFor(seconds: 10) { done.isSet && blocks.value == 40 })
            let recorded = places.values
            #expect(recorded.map(\.0) == ["registration", "event", "cancel"])
            #expect(recorded.allSatisfy { $0.1 }, "handlers not holding the target queue: \(recorded)")
            #expect(exclusive.maximum == 1, "a handler overlapped a block of its serial target queue")
        }

        @Test func theCancelHandlerWaitsForASuspendedTargetQueue() {
            let target = WorkQueue(label: "lull.test.src.cancel-target-suspended")
            let source = EventSource.makeUserDataAddSource(queue: target)
            let registered = Flag()
            let cancelled = Flag()
            source.setRegistrationHandler { registered.set() }
            source.setCancelHandler { cancelled.set() }
            source.activate()
            #expect(registered.await(timeout: .seconds(10)))
            target.suspend()
            source.cancel()
            #expect(keepsHolding(for: .milliseconds(300)) { !cancelled.isSet })
            target.resume()
            #expect(cancelled.await(timeout: .seconds(10)))
        }

        @Test func aSuspendedCancelledSourceDeliversItsCancelHandlerOnlyOnceResumed() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.cancel-suspended"))
            let registered = Flag()
            let cancelled = Counter()
            let events = Counter()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { events.increment() }
            source.setCancelHandler { cancelled.increment() }
            source.activate()
            #expect(registered.await(timeout: .seconds(10)))
            source.suspend()
            source.add(data: 3)
            source.cancel()
            #expect(keepsHolding(for: .milliseconds(300)) { cancelled.value == 0 })
            source.resume()
            #expect(cancelled.await(timeout: .seconds(10)) { $0 == 1 })
            #expect(keepsHolding(for: .milliseconds(100)) { cancelled.value == 1 })
            #expect(events.value == 0, "an event merged before cancel was delivered after it")
        }

        @Test func handlersAreReleasedAfterCancellation() {
            // A source whose handlers capture it is a retain cycle until cancel breaks it.
            weak var weakSource: UserDataAddSource?
            let cancelled = Flag()
            let events = Counter()
            do {
                let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.released"))
                source.setRegistrationHandler { _ = source.handle }
                source.setEventHandler {
                    _ = source.data
                    events.increment()
                }
                source.setCancelHandler {
                    _ = source.isCancelled
                    cancelled.set()
                }
                source.activate()
                source.add(data: 1)
                #expect(events.await(timeout: .seconds(10)) { $0 == 1 })
                weakSource = source
                source.cancel()
            }
            #expect(cancelled.await(timeout: .seconds(10)))
            #expect(waitFor(seconds: 10) { weakSource == nil }, "the cancelled source was never freed")
        }

        @Test func handlersSetAsWorkItemsAreReleasedAfterCancellation() {
            weak var weakSource: UserDataAddSource?
            let cancelled = Flag()
            do {
                let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.released-items"))
                source.setEventHandler(handler: WorkItem { _ = source.data })
                source.setRegistrationHandler(handler: WorkItem { _ = source.mask })
                source.setCancelHandler(handler: WorkItem {
                    _ = source.handle
                    cancelled.set()
                })
                source.activate()
                source.add(data: 1)
                weakSource = source
                source.cancel()
            }
            #expect(cancelled.await(timeout: .seconds(10)))
            #expect(waitFor(seconds: 10) { weakSource == nil }, "the cancelled source was never freed")
        }

        @Test func whatTheHandlersCaptureIsReleasedAfterCancellationEvenWhileTheSourceLives() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.canary"))
            let eventCanaryFreed = Flag()
            let cancelCanaryFreed = Flag()
            let registrationCanaryFreed = Flag()
            let cancelled = Flag()
            do {
                let eventCanary = SourceTestKit.Canary(eventCanaryFreed)
                let cancelCanary = SourceTestKit.Canary(cancelCanaryFreed)
                let registrationCanary = SourceTestKit.Canary(registrationCanaryFreed)
                source.setEventHandler { eventCanary.touch() }
                source.setRegistrationHandler { registrationCanary.touch() }
                source.setCancelHandler {
                    cancelCanary.touch()
                    cancelled.set()
                }
            }
            source.activate()
            source.add(data: 1)
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)))
            #expect(waitFor(seconds: 10) {
                eventCanaryFreed.isSet && cancelCanaryFreed.isSet && registrationCanaryFreed.isSet
            }, "handlers kept after cancellation: event \(eventCanaryFreed.isSet), cancel \(cancelCanaryFreed.isSet), registration \(registrationCanaryFreed.isSet)")
            withExtendedLifetime(source) {}
        }

        @Test func aSourceTheProgramNoLongerReferencesStillGetsItsCancelHandler() {
            let cancelled = Counter()
            let events = Counter()
            let registered = Flag()
            weak var weakSource: UserDataAddSource?
            do {
                let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.dropped"))
                source.setRegistrationHandler { registered.set() }
                source.setEventHandler { events.increment() }
                source.setCancelHandler { cancelled.increment() }
                source.activate()
                source.add(data: 1)
                #expect(events.await(timeout: .seconds(10)) { $0 == 1 })
                weakSource = source
            }
            #expect(cancelled.await(timeout: .seconds(10)) { $0 == 1 })
            #expect(waitFor(seconds: 10) { weakSource == nil })
            #expect(keepsHolding(for: .milliseconds(100)) { cancelled.value == 1 && events.value == 1 })
        }

        @Test func releasingAnInactiveOrSuspendedSourceIsNotAnError() async {
            await #expect(processExitsWith: .success) {
                let inactiveCancelled = Flag()
                let suspendedCancelled = Flag()
                let suspendedEvents = Counter()
                do {
                    let inactive = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.release-inactive"))
                    inactive.setCancelHandler { inactiveCancelled.set() }
                    let suspended = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.release-suspended"))
                    suspended.setEventHandler { suspendedEvents.increment() }
                    suspended.setCancelHandler { suspendedCancelled.set() }
                    suspended.activate()
                    suspended.suspend()
                    suspended.suspend()
                    suspended.add(data: 1)
                }
                guard waitFor(seconds: 10, { inactiveCancelled.isSet && suspendedCancelled.isSet }) else {
                    printToStandardError("cancel handlers: inactive \(inactiveCancelled.isSet), suspended \(suspendedCancelled.isSet)")
                    exit(2)
                }
            }
        }

        // MARK: Over-resume

        @Test func overResumeOfASourceStopsTheProgramNamingItsKindAndQueue() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.over-resume-add"))
                source.activate()
                source.resume()
            }
            let message = standardErrorText(result)
            #expect(message.contains("over-resume"), "stderr: \(message)")
            #expect(message.contains("UserDataAddSource"), "stderr: \(message)")
            #expect(message.contains("lull.test.src.over-resume-add"), "stderr: \(message)")
        }

        @Test func overResumeAfterBalancedSuspensionsStopsTheProgram() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                var descriptors: [Int32] = [0, 0]
                guard pipe(&descriptors) == 0 else { exit(3) }
                let source = EventSource.makeReadSource(fileDescriptor: descriptors[0],
                                                        queue: WorkQueue(label: "lull.test.src.over-resume-read"))
                source.resume()  // activates
                source.suspend()
                source.suspend()
                source.resume()
                source.resume()
                source.resume()  // one too many
            }
            let message = standardErrorText(result)
            #expect(message.contains("over-resume"), "stderr: \(message)")
            #expect(message.contains("ReadSource"), "stderr: \(message)")
            #expect(message.contains("lull.test.src.over-resume-read"), "stderr: \(message)")
        }

        // MARK: Execution context and QoS

        @Test func handlersAreDetachedFromTheContextTheyWereSetIn() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.detached"))
            let seen = Mutex<[String: ExecutionContext]>([:])
            let setterActivity = ExecutionContext.withActivity("lull.test.src.setter") { () -> UInt64 in
                source.setRegistrationHandler { seen.locked { $0["registration"] = ExecutionContext.current } }
                source.setEventHandler { seen.locked { $0["event"] = ExecutionContext.current } }
                source.setCancelHandler { seen.locked { $0["cancel"] = ExecutionContext.current } }
                source.activate()
                source.add(data: 1)
                return ExecutionContext.current.activityID
            }
            #expect(setterActivity != 0)
            #expect(waitFor(seconds: 10) { seen.locked { $0["event"] != nil } })
            ExecutionContext.withActivity("lull.test.src.canceller") {
                source.cancel()
            }
            #expect(waitFor(seconds: 10) { seen.locked { $0["cancel"] != nil } })
            let contexts = seen.locked { $0 }
            #expect(contexts.keys.sorted() == ["cancel", "event", "registration"])
            for (handler, context) in contexts {
                #expect(context == .empty, "\(handler) handler ran in activity \(context.activityID)")
                #expect(context.activityID == 0 && context.activityName == nil)
            }
        }

        @Test func aHandlerThatAssignsTheCurrentContextRunsInIt() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.assigned"))
            let itemActivity = Captured<UInt64>()
            let blockActivity = Captured<UInt64>()
            let (expectedItem, expectedBlock) = ExecutionContext.withActivity("lull.test.src.assign") { () -> (UInt64, UInt64) in
                let item = WorkItem(flags: .assignCurrentContext) {
                    itemActivity.set(ExecutionContext.current.activityID)
                }
                source.setEventHandler(handler: item)
                let outer = ExecutionContext.current.activityID
                let inner = ExecutionContext.withActivity("lull.test.src.assign-block") { () -> UInt64 in
                    source.setCancelHandler(flags: .assignCurrentContext) {
                        blockActivity.set(ExecutionContext.current.activityID)
                    }
                    return ExecutionContext.current.activityID
                }
                return (outer, inner)
            }
            source.activate()
            source.add(data: 1)
            #expect(itemActivity.await() == expectedItem)
            source.cancel()
            #expect(blockActivity.await() == expectedBlock)
            #expect(expectedItem != 0 && expectedBlock != 0 && expectedItem != expectedBlock)
        }

        @Test(arguments: [QoS.background, .utility, .userInitiated, .userInteractive])
        func handlersRunAtTheTargetQueuesQoS(qos: QoS) {
            let queue = WorkQueue(label: "lull.test.src.qos.\(qos)", qos: qos)
            let source = EventSource.makeUserDataAddSource(queue: queue)
            let seen = Mutex<[String: QoS]>([:])
            let done = Flag()
            // Set up from a thread of another QoS: handlers must not take the setter's QoS.
            let setterQueue = WorkQueue(label: "lull.test.src.qos.setter",
                                        qos: qos == .userInteractive ? .utility : .userInteractive)
            setterQueue.async {
                source.setRegistrationHandler { seen.locked { $0["registration"] = QoS.current } }
                source.setEventHandler { seen.locked { $0["event"] = QoS.current } }
                source.setCancelHandler {
                    seen.locked { $0["cancel"] = QoS.current }
                    done.set()
                }
                source.activate()
                source.add(data: 1)
            }
            #expect(waitFor(seconds: 10) { seen.locked { $0["event"] != nil } })
            setterQueue.async { source.cancel() }
            #expect(done.await(timeout: .seconds(10)))
            let values = seen.locked { $0 }
            #expect(values.keys.sorted() == ["cancel", "event", "registration"])
            for (handler, observed) in values {
                #expect(observed == qos, "\(handler) handler ran at \(observed), queue is \(qos)")
            }
        }

        @Test(arguments: [QoS.QoSClass.utility, .userInitiated])
        func handlersRunAtTheQoSOfAGlobalTargetQueue(qosClass: QoS.QoSClass) {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue.global(qos: qosClass))
            let seen = Mutex<[String: QoS]>([:])
            let done = Flag()
            source.setRegistrationHandler { seen.locked { $0["registration"] = QoS.current } }
            source.setEventHandler { seen.locked { $0["event"] = QoS.current } }
            source.setCancelHandler {
                seen.locked { $0["cancel"] = QoS.current }
                done.set()
            }
            source.activate()
            source.add(data: 1)
            #expect(waitFor(seconds: 10) { seen.locked { $0["event"] != nil } })
            source.cancel()
            #expect(done.await(timeout: .seconds(10)))
            for (handler, observed) in seen.locked({ $0 }) {
                #expect(observed.qosClass == qosClass, "\(handler) handler ran at \(observed)")
            }
        }
    }
}

// MARK: - Helpers shared by the event-source tests

/// Descriptors, processes and threads for the event-source tests (SourceXxxTests files).
enum SourceTestKit {
    struct SystemError: Error, CustomStringConvertible {
        let call: String
        let code: Int32
        var description: String { "\(call) failed: \(String(cString: strerror(code))) (errno \(code))" }
    }

    /// A close-on-exec pipe (children spawned by other tests must not keep its ends open).
    static func makePipe() throws -> (read: Int32, write: Int32) {
        var descriptors: [Int32] = [0, 0]
        guard pipe(&descriptors) == 0 else { throw SystemError(call: "pipe", code: errno) }
        setCloseOnExec(descriptors[0])
        setCloseOnExec(descriptors[1])
        return (descriptors[0], descriptors[1])
    }

    /// A pipe whose read end has the number `number` if that number is free: `F_DUPFD` takes
    /// the lowest free number at or above it, atomically, so no other descriptor is touched.
    static func makePipe(reusing number: Int32) throws -> (read: Int32, write: Int32) {
        var made = try makePipe()
        if made.read != number {
            let moved = fcntl(made.read, F_DUPFD_CLOEXEC, number)
            if moved == number {
                close(made.read)
                made.read = moved
            } else if moved >= 0 {
                close(moved)
            }
        }
        return made
    }

    /// A close-on-exec AF_UNIX stream socket pair.
    static func makeSocketPair() throws -> (Int32, Int32) {
        var descriptors: [Int32] = [0, 0]
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        guard socketpair(AF_UNIX, type, 0, &descriptors) == 0 else { throw SystemError(call: "socketpair", code: errno) }
        return (descriptors[0], descriptors[1])
    }

    static func setCloseOnExec(_ descriptor: Int32) {
        _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
    }

    static func setNonBlocking(_ descriptor: Int32) {
        let flags = fcntl(descriptor, F_GETFL)
        _ = fcntl(descriptor, F_SETFL, flags | O_NONBLOCK)
    }

    static func isOpen(_ descriptor: Int32) -> Bool {
        fcntl(descriptor, F_GETFD) != -1
    }

    /// Writes all of `bytes` (retrying short writes); returns the count written.
    @discardableResult
    static func writeAll(_ descriptor: Int32, _ bytes: [UInt8]) -> Int {
        var written = 0
        while written < bytes.count {
            let result = bytes.withUnsafeBytes { buffer in
                write(descriptor, buffer.baseAddress! + written, bytes.count - written)
            }
            if result < 0 {
                if errno == EINTR { continue }
                break
            }
            written += result
        }
        return written
    }

    /// One `read` of at most `max` bytes: what it returned ([] at end of file or on error).
    static func readSome(_ descriptor: Int32, max: Int) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: max)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, max) }
        return count > 0 ? Array(buffer.prefix(count)) : []
    }

    /// Reads until the (non-blocking) descriptor has nothing more; returns the byte count.
    @discardableResult
    static func drain(_ descriptor: Int32) -> Int {
        var total = 0
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, 65_536) }
            if count > 0 {
                total += count
            } else if count < 0 && errno == EINTR {
                continue
            } else {
                return total
            }
        }
    }

    /// Whether the calling thread is running a block of `queue` (or of a queue funnelled
    /// through it): the queues a thread holds while draining.
    static func isRunning(on queue: WorkQueue) -> Bool {
        ThreadState.current.heldQueues.contains { $0.id == queue.identity }
    }

    /// Waits until what a source already posted on its serial target queue has run: every
    /// handler of a source is work on its target, and a serial queue runs in order.
    /// Meaningful when the source had nothing posted or running before the merge being
    /// waited for (settle once before that merge too), and is neither suspended nor inactive.
    static func settle(_ target: WorkQueue) {
        target.sync {}
    }

    /// True in a ThreadSanitizer build (its runtime is linked in).
    static let underThreadSanitizer: Bool = dlsym(nil, "__tsan_init") != nil

    /// Runs `body(index)` on `count` new threads at once and waits for all of them.
    static func runThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
        final class Start: Sendable {
            let body: @Sendable () -> Void
            init(_ body: @escaping @Sendable () -> Void) { self.body = body }
        }
        var threads: [pthread_t] = []
        for index in 0..<count {
            let start = Unmanaged.passRetained(Start { body(index) })
            var thread = pthread_t()
            let result = pthread_create(&thread, nil, { context in
                let start = Unmanaged<Start>.fromOpaque(context!).takeRetainedValue()
                start.body()
                return nil
            }, start.toOpaque())
            precondition(result == 0, "pthread_create failed: \(result)")
            threads.append(thread)
        }
        for thread in threads { pthread_join(thread, nil) }
    }

    /// Starts `/bin/sh -c script` (posix_spawn: no fork of the test process).
    static func spawnShell(_ script: String) throws -> pid_t {
        var pid: pid_t = 0
        let words: [String] = ["/bin/sh", "-c", script]
        let arguments: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
        let environment: [UnsafeMutablePointer<CChar>?] = [strdup("PATH=/usr/bin:/bin"), nil]
        defer {
            arguments.forEach { free($0) }
            environment.forEach { free($0) }
        }
        let result = posix_spawn(&pid, "/bin/sh", nil, nil, arguments, environment)
        guard result == 0 else { throw SystemError(call: "posix_spawn", code: result) }
        return pid
    }

    /// Reaps `pid` (blocking); its exit status, or nil if waitpid failed or it did not exit.
    static func reap(_ pid: pid_t) -> Int32? {
        var status: Int32 = 0
        var result: pid_t
        repeat {
            result = waitpid(pid, &status, 0)
        } while result < 0 && errno == EINTR
        guard result == pid, status & 0x7f == 0 else { return nil }
        return (status >> 8) & 0xff
    }

    /// Sets `flag` when freed: shows when a handler's captures are released.
    final class Canary: Sendable {
        let flag: Flag
        init(_ flag: Flag) { self.flag = flag }
        func touch() {}
        deinit { flag.set() }
    }
}
