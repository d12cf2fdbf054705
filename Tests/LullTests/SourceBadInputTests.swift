import Glibc
import Synchronization
import Testing
@testable import Lull

/// Which kind of descriptor source a bad-input test makes.
enum DescriptorSourceKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case read
    case write

    var testDescription: String { rawValue }

    func make(_ descriptor: Int32, queue: WorkQueue) -> any EventSourceProtocol {
        switch self {
        case .read: EventSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
        case .write: EventSource.makeWriteSource(fileDescriptor: descriptor, queue: queue)
        }
    }
}

/// A descriptor number that refers to no open file.
enum BadDescriptor: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case negative
    case neverOpened
    case closed

    var testDescription: String { rawValue }

    func make() throws -> Int32 {
        switch self {
        case .negative:
            return -1
        case .neverOpened:
            return 9_999
        case .closed:
            // A pipe end moved to a high number nobody else uses (below the soft
            // RLIMIT_NOFILE, 1024 for most users), then closed.
            var limit = rlimit()
            guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
                throw SourceTestKit.SystemError(call: "getrlimit", code: errno)
            }
            let made = try SourceTestKit.makePipe()
            let high = fcntl(made.read, F_DUPFD_CLOEXEC, Int32(clamping: min(7_000, limit.rlim_cur - limit.rlim_cur / 8)))
            close(made.read)
            close(made.write)
            guard high >= 0 else { throw SourceTestKit.SystemError(call: "fcntl(F_DUPFD)", code: errno) }
            close(high)
            return high
        }
    }
}

extension LullSuite {
    @Suite struct SourceBadInputTests {
        @Test(arguments: DescriptorSourceKind.allCases, BadDescriptor.allCases)
        func anInvalidDescriptorCancelsTheSourceWithAReason(kind: DescriptorSourceKind, bad: BadDescriptor) throws {
            let descriptor = try bad.make()
            try #require(!SourceTestKit.isOpen(descriptor), "descriptor \(descriptor) is open")
            let source = kind.make(descriptor, queue: WorkQueue(label: "lull.test.src.bad-descriptor"))
            let registered = Flag()
            let events = Counter()
            let cancelled = Counter()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { events.increment() }
            source.setCancelHandler { cancelled.increment() }
            source.activate()
            #expect(cancelled.await(timeout: .seconds(10)) { $0 == 1 })
            #expect(source.isCancelled)
            let description = source.registrationError.map { "\($0)" } ?? ""
            #expect(source.registrationError != nil)
            #expect(description.contains("descriptor \(descriptor)"), "registrationError: \(description)")
            #expect(keepsHolding(for: .milliseconds(100)) { cancelled.value == 1 })
            #expect(!registered.isSet, "the registration handler ran for a source that could not register")
            #expect(events.value == 0)
        }

        @Test func closingTheDescriptorInTheCancelHandlerIsSafeWhenItsNumberIsReusedAtOnce() throws {
            var reusedNumbers = 0
            for round in 0..<20 {
                let old = try SourceTestKit.makePipe()
                let oldRead = old.read
                let oldWrite = old.write
                let sourceA = EventSource.makeReadSource(fileDescriptor: oldRead, queue: WorkQueue(label: "lull.test.src.reuse.a"))
                enum Step: Equatable, Sendable { case event, cancel }
                let stepsA = Recorder<Step>()
                let fresh = Mutex<(read: Int32, write: Int32)?>(nil)
                sourceA.setEventHandler {
                    // Reads nothing: the descriptor stays readable and A keeps firing.
                    stepsA.append(.event)
                    usleep(200)
                }
                sourceA.setCancelHandler {
                    stepsA.append(.cancel)
                    close(oldRead)
                    close(oldWrite)
                    // The number is free now: take it at once for a new pipe.
                    let made = try? SourceTestKit.makePipe(reusing: oldRead)
                    fresh.locked { $0 = made ?? (-1, -1) }
                }
                sourceA.activate()
                #expect(SourceTestKit.writeAll(oldWrite, Array("old".utf8)) == 3)
                #expect(waitFor(seconds: 10) { stepsA.count >= 2 })
                sourceA.cancel()
                #expect(waitFor(seconds: 10) { fresh.locked { $0 != nil } })
                guard let (newRead, newWrite) = fresh.locked({ $0 }), newRead >= 0 else {
                    Issue.record("round \(round): no new pipe")
                    return
                }
                if newRead == oldRead { reusedNumbers += 1 }
                let sourceB = EventSource.makeReadSource(fileDescriptor: newRead, queue: WorkQueue(label: "lull.test.src.reuse.b"))
                let receivedB = Mutex<[UInt8]>([])
                let cancelledB = Flag()
                sourceB.setEventHandler {
                    let bytes = SourceTestKit.readSome(newRead, max: 4096)
                    receivedB.locked { $0 += bytes }
                }
                sourceB.setCancelHandler {
                    close(newRead)
                    close(newWrite)
                    cancelledB.set()
                }
                sourceB.activate()
                #expect(SourceTestKit.writeAll(newWrite, Array("new data for B".utf8)) == 14)
                #expect(waitFor(seconds: 10) { receivedB.locked { $0.count } >= 14 })
                #expect(receivedB.locked { $0 } == Array("new data for B".utf8))
                #expect(sourceB.registrationError == nil)
                #expect(!sourceB.isCancelled)
                // A: events, then its cancel handler once, and nothing after it.
                #expect(keepsHolding(for: .milliseconds(50)) { stepsA.values.last == .cancel })
                let steps = stepsA.values
                #expect(steps.filter { $0 == .cancel }.count == 1)
                #expect(steps.last == .cancel, "round \(round): A's event handler ran after its cancel handler")
                sourceB.cancel()
                #expect(cancelledB.await(timeout: .seconds(10)))
            }
            #expect(reusedNumbers > 0, "no round reused the descriptor number: the test proved nothing")
        }

        @Test func aDescriptorClosedWhileWatchedAndReusedCancelsTheOldSourceAndTheNewOneWorks() throws {
            let old = try SourceTestKit.makePipe()
            let number = old.read
            let sourceA = EventSource.makeReadSource(fileDescriptor: number, queue: WorkQueue(label: "lull.test.src.stale.a"))
            let registeredA = Flag()
            let eventsA = Counter()
            let cancelledA = Flag()
            sourceA.setRegistrationHandler { registeredA.set() }
            sourceA.setEventHandler { eventsA.increment() }
            sourceA.setCancelHandler { cancelledA.set() }
            sourceA.activate()
            #expect(registeredA.await(timeout: .seconds(10)))
            // The program closes the descriptor behind the source's back...
            close(number)
            // ...and the number comes back for another file.
            let fresh = try SourceTestKit.makePipe(reusing: number)
            try #require(fresh.read == number, "could not reuse descriptor number \(number) (got \(fresh.read))")
            let newRead = fresh.read
            let newWrite = fresh.write
            let sourceB = EventSource.makeReadSource(fileDescriptor: newRead, queue: WorkQueue(label: "lull.test.src.stale.b"))
            let receivedB = Mutex<[UInt8]>([])
            let cancelledB = Flag()
            sourceB.setEventHandler {
                let bytes = SourceTestKit.readSome(newRead, max: 4096)
                receivedB.locked { $0 += bytes }
            }
            sourceB.setCancelHandler {
                close(newRead)
                close(newWrite)
                cancelledB.set()
            }
            sourceB.activate()
            #expect(cancelledA.await(timeout: .seconds(10)), "the source of the closed descriptor was not cancelled")
            let description = sourceA.registrationError.map { "\($0)" } ?? ""
            #expect(sourceA.registrationError != nil)
            #expect(description.contains("descriptor \(number)"), "registrationError: \(description)")
            #expect(SourceTestKit.writeAll(newWrite, Array("fresh".utf8)) == 5)
            #expect(waitFor(seconds: 10) { receivedB.locked { $0.count } >= 5 })
            #expect(receivedB.locked { $0 } == Array("fresh".utf8))
            #expect(sourceB.registrationError == nil && !sourceB.isCancelled)
            #expect(eventsA.value == 0, "the old source saw the new file's data")
            sourceB.cancel()
            #expect(cancelledB.await(timeout: .seconds(10)))
            close(old.write)
        }
    }
}
