import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    /// Process sources, on children started with posix_spawn (no fork of the test process).
    @Suite struct ProcessSourceTests {
        @Test func theExitOfAChildFiresAndTheParentCanStillReapIt() throws {
            let pid = try SourceTestKit.spawnShell("sleep 0.2; exit 3")
            let source = EventSource.makeProcessSource(identifier: pid, eventMask: .exit,
                                                       queue: WorkQueue(label: "lull.test.src.process.exit"))
            #expect(source.handle == UInt(pid))
            #expect(source.mask == ProcessEvent.exit.rawValue)
            let events = Recorder<ProcessEvent>()
            let data = Recorder<UInt>()
            let reapableInHandler = Flag()
            let cancelled = Flag()
            source.setEventHandler {
                events.append(source.events)
                data.append(source.data)
                // The child is a zombie now, not reaped by the source: WNOWAIT sees it.
                var info = siginfo_t()
                if waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0, info.si_signo == SIGCHLD {
                    reapableInHandler.set()
                }
            }
            source.setCancelHandler { cancelled.set() }
            source.activate()
            #expect(waitFor(seconds: 10) { events.count >= 1 })
            #expect(events.values == [.exit])
            #expect(data.values == [ProcessEvent.exit.rawValue])
            #expect(reapableInHandler.isSet, "the exited child was not waitable from the handler")
            #expect(SourceTestKit.reap(pid) == 3, "waitpid could not reap the child or saw the wrong status")
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)))
            #expect(keepsHolding(for: .milliseconds(100)) { events.count == 1 })
        }

        @Test func aChildThatExitedBeforeTheSourceExistedStillFires() throws {
            let pid = try SourceTestKit.spawnShell("exit 0")
            // Wait for the exit without reaping: the child stays a zombie.
            var info = siginfo_t()
            var result: Int32
            repeat {
                result = waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT)
            } while result < 0 && errno == EINTR
            try #require(result == 0)
            let source = EventSource.makeProcessSource(identifier: pid, eventMask: .exit,
                                                       queue: WorkQueue(label: "lull.test.src.process.zombie"))
            let events = Recorder<ProcessEvent>()
            let cancelled = Flag()
            source.setEventHandler { events.append(source.events) }
            source.setCancelHandler { cancelled.set() }
            source.activate()
            #expect(waitFor(seconds: 10) { events.count >= 1 })
            #expect(events.values == [.exit])
            #expect(source.registrationError == nil)
            #expect(SourceTestKit.reap(pid) == 0)
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)))
        }

        @Test func severalSourcesOnOneChildAllSeeItsExit() throws {
            let pid = try SourceTestKit.spawnShell("sleep 0.1; exit 7")
            let events = Recorder<(Int, ProcessEvent)>()
            let cancelled = Counter()
            let sources = (0..<3).map { index in
                let source = EventSource.makeProcessSource(identifier: pid, eventMask: .exit,
                                                           queue: WorkQueue(label: "lull.test.src.process.many.\(index)"))
                source.setEventHandler { events.append((index, source.events)) }
                source.setCancelHandler { cancelled.increment() }
                source.activate()
                return source
            }
            #expect(waitFor(seconds: 10) { events.count >= 3 })
            #expect(Set(events.values.map(\.0)) == [0, 1, 2])
            #expect(events.values.allSatisfy { $0.1 == .exit })
            #expect(SourceTestKit.reap(pid) == 7)
            for source in sources { source.cancel() }
            #expect(cancelled.await(timeout: .seconds(10)) { $0 == 3 })
        }

        @Test(arguments: [ProcessIdentifierCase.beyondPidMax, .reapedChild, .negative])
        func aProcessThatDoesNotExistCancelsTheSourceWithAReason(which: ProcessIdentifierCase) throws {
            let pid = try which.make()
            if pid > 0 {
                errno = 0
                try #require(kill(pid, 0) == -1 && errno == ESRCH, "process \(pid) exists")
            }
            let source = EventSource.makeProcessSource(identifier: pid, eventMask: .exit,
                                                       queue: WorkQueue(label: "lull.test.src.process.missing"))
            let registered = Flag()
            let events = Counter()
            let cancelled = Flag()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { events.increment() }
            source.setCancelHandler { cancelled.set() }
            source.activate()
            #expect(cancelled.await(timeout: .seconds(10)))
            #expect(source.isCancelled)
            let description = source.registrationError.map { "\($0)" } ?? ""
            #expect(source.registrationError != nil)
            #expect(description.contains("\(pid)"), "registrationError: \(description)")
            #expect(!registered.isSet, "the registration handler ran for a source that could not register")
            #expect(events.value == 0)
        }
    }
}

enum ProcessIdentifierCase: String, Sendable, CustomTestStringConvertible {
    case beyondPidMax
    case reapedChild
    case negative

    var testDescription: String { rawValue }

    func make() throws -> pid_t {
        switch self {
        case .beyondPidMax:
            return 4_000_000
        case .reapedChild:
            let pid = try SourceTestKit.spawnShell("exit 0")
            _ = SourceTestKit.reap(pid)
            return pid
        case .negative:
            return -1
        }
    }
}
