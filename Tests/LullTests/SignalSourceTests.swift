import CLullShims
import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    /// Signal sources. SIGUSR1 and SIGUSR2 are set to SIG_IGN first, as on Darwin (their
    /// default action would end the test process). Signals are raised on the calling thread
    /// (`raise`), which does not block them, so each is delivered before `raise` returns.
    @Suite struct SignalSourceTests {
        init() {
            _ = SignalSourceTests.ignoreUserSignalsOnce
        }

        /// Once per process: a later `signal()` would replace Lull's forwarder (documented).
        static let ignoreUserSignalsOnce: Void = {
            signal(SIGUSR1, SIG_IGN)
            signal(SIGUSR2, SIG_IGN)
            signal(SIGPWR, SIG_IGN)
            var unblocked = sigset_t()
            sigemptyset(&unblocked)
            for number in [SIGUSR1, SIGUSR2, SIGPWR, SIGURG, SIGWINCH] { sigaddset(&unblocked, number) }
            sigprocmask(SIG_UNBLOCK, &unblocked, nil)
        }()

        /// `raise` on a thread that does not block the signal: delivered before it returns.
        static func raiseUnblocked(_ number: Int32) {
            var unblocked = sigset_t()
            sigemptyset(&unblocked)
            sigaddset(&unblocked, number)
            pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
            raise(number)
        }

        /// A signal source whose handler sums `data`.
        final class Watcher: Sendable {
            let source: SignalSource
            let total = Atomic<UInt>(0)
            let calls = Counter()
            let registered = Flag()
            let cancelled = Flag()

            init(signal: Int32, label: String) {
                source = EventSource.makeSignalSource(signal: signal, queue: WorkQueue(label: label))
                // Captures the watcher until the source is cancelled.
                source.setRegistrationHandler { self.registered.set() }
                source.setEventHandler {
                    self.total.add(self.source.data, ordering: .relaxed)
                    self.calls.increment()
                }
                source.setCancelHandler { self.cancelled.set() }
            }

            var sum: UInt { total.load(ordering: .relaxed) }
        }

        @Test func severalSourcesOnTheSameSignalAllSeeEveryDelivery() {
            let watchers = (0..<3).map { Watcher(signal: SIGUSR1, label: "lull.test.src.signal.many.\($0)") }
            for watcher in watchers { watcher.source.activate() }
            #expect(waitFor(seconds: 10) { watchers.allSatisfy { $0.registered.isSet } })
            #expect(watchers.allSatisfy { $0.source.handle == UInt(SIGUSR1) && $0.source.registrationError == nil })
            SignalSourceTests.raiseUnblocked(SIGUSR1)
            #expect(waitFor(seconds: 10) { watchers.allSatisfy { $0.sum == 1 } }, "sums: \(watchers.map(\.sum))")
            SignalSourceTests.raiseUnblocked(SIGUSR1)
            #expect(waitFor(seconds: 10) { watchers.allSatisfy { $0.sum == 2 } }, "sums: \(watchers.map(\.sum))")
            #expect(keepsHolding(for: .milliseconds(200)) { watchers.allSatisfy { $0.sum == 2 } })
            for watcher in watchers { watcher.source.cancel() }
            #expect(waitFor(seconds: 10) { watchers.allSatisfy { $0.cancelled.isSet } })
        }

        @Test func dataCountsTheDeliveriesMergedWhileSuspended() {
            let suspended = Watcher(signal: SIGUSR2, label: "lull.test.src.signal.suspended")
            let witness = Watcher(signal: SIGUSR2, label: "lull.test.src.signal.witness")
            suspended.source.activate()
            witness.source.activate()
            #expect(waitFor(seconds: 10) { suspended.registered.isSet && witness.registered.isSet })
            suspended.source.suspend()
            SignalSourceTests.raiseUnblocked(SIGUSR2)
            SignalSourceTests.raiseUnblocked(SIGUSR2)
            SignalSourceTests.raiseUnblocked(SIGUSR2)
            #expect(waitFor(seconds: 10) { witness.sum >= 1 })
            #expect(suspended.calls.value == 0)
            suspended.source.resume()
            // Whatever the kernel delivered (signals merged while pending count once), both
            // sources count the same deliveries.
            #expect(waitFor(seconds: 10) { suspended.sum >= 1 && suspended.sum == witness.sum },
                    "suspended \(suspended.sum), witness \(witness.sum)")
            #expect(keepsHolding(for: .milliseconds(200)) { suspended.sum == witness.sum })
            #expect((1...3).contains(suspended.sum), "data sum \(suspended.sum)")
            #expect(suspended.calls.value >= 1 && suspended.calls.value <= Int(suspended.sum))
            suspended.source.cancel()
            witness.source.cancel()
            #expect(waitFor(seconds: 10) { suspended.cancelled.isSet && witness.cancelled.isSet })
        }

        @Test func aSourceCountsOnlySignalsDeliveredAfterItWasActivated() {
            // The first source installs Lull's forwarder for SIGUSR1; once it is gone, signals
            // still arrive (ignored). A new source must not count them.
            let first = Watcher(signal: SIGUSR1, label: "lull.test.src.signal.earlier")
            first.source.activate()
            SignalSourceTests.raiseUnblocked(SIGUSR1)
            #expect(waitFor(seconds: 10) { first.sum == 1 })
            first.source.cancel()
            #expect(first.cancelled.await(timeout: .seconds(10)))
            SignalSourceTests.raiseUnblocked(SIGUSR1)
            SignalSourceTests.raiseUnblocked(SIGUSR1)
            let later = Watcher(signal: SIGUSR1, label: "lull.test.src.signal.later")
            later.source.activate()
            #expect(later.registered.await(timeout: .seconds(10)))
            SignalSourceTests.raiseUnblocked(SIGUSR1)
            #expect(waitFor(seconds: 10) { later.sum >= 1 })
            #expect(keepsHolding(for: .milliseconds(200)) { later.sum == 1 }, "counted \(later.sum) signals, 1 was sent after activation")
            #expect(first.sum == 1)
            later.source.cancel()
            #expect(later.cancelled.await(timeout: .seconds(10)))
        }

        @Test func aSignalCaughtByTheProgramsOwnHandlerIsSeenByBoth() {
            // A program handler (not SIG_IGN): Lull counts the signal and still calls it.
            // SIGURG is used by no other test; the handler stays installed (it only counts).
            signal(SIGURG, { _ in programHandlerCalls.add(1, ordering: .relaxed) })
            let before = programHandlerCalls.load(ordering: .relaxed)
            let watcher = Watcher(signal: SIGURG, label: "lull.test.src.signal.program-handler")
            watcher.source.activate()
            #expect(watcher.registered.await(timeout: .seconds(10)))
            SignalSourceTests.raiseUnblocked(SIGURG)
            #expect(waitFor(seconds: 10) { watcher.sum == 1 })
            #expect(programHandlerCalls.load(ordering: .relaxed) == before + 1)
            watcher.source.cancel()
            #expect(watcher.cancelled.await(timeout: .seconds(10)))
        }

        @Test func aSignalWhoseDefaultIsToBeIgnoredNeedsNoDisposition() {
            let watcher = Watcher(signal: SIGWINCH, label: "lull.test.src.signal.default-ignored")
            watcher.source.activate()
            #expect(watcher.registered.await(timeout: .seconds(10)))
            SignalSourceTests.raiseUnblocked(SIGWINCH)
            SignalSourceTests.raiseUnblocked(SIGWINCH)
            #expect(waitFor(seconds: 10) { watcher.sum == 2 })
            watcher.source.cancel()
            #expect(watcher.cancelled.await(timeout: .seconds(10)))
        }

        @Test func aSourceActivatedAfterTheProgramSetTheDispositionAgainSeesTheSignal() {
            // As on Darwin, the program sets SIG_IGN before creating each source; doing so
            // again after an earlier source existed must not blind the next one. (SIGPWR is
            // used by no other test.)
            let first = Watcher(signal: SIGPWR, label: "lull.test.src.signal.redisposition.first")
            first.source.activate()
            SignalSourceTests.raiseUnblocked(SIGPWR)
            #expect(waitFor(seconds: 10) { first.sum == 1 })
            first.source.cancel()
            #expect(first.cancelled.await(timeout: .seconds(10)))
            signal(SIGPWR, SIG_IGN)
            let second = Watcher(signal: SIGPWR, label: "lull.test.src.signal.redisposition.second")
            second.source.activate()
            #expect(second.registered.await(timeout: .seconds(10)))
            SignalSourceTests.raiseUnblocked(SIGPWR)
            #expect(waitFor(seconds: 10) { second.sum == 1 }, "the source activated after signal(SIGPWR, SIG_IGN) saw \(second.sum) signals")
            second.source.cancel()
            #expect(second.cancelled.await(timeout: .seconds(10)))
        }

        @Test(arguments: [Int32(0), 32, 33, 65, 1_000, -3, SIGKILL, SIGSTOP])
        func aSignalThatCannotBeWatchedCancelsTheSourceWithAReason(number: Int32) {
            let source = EventSource.makeSignalSource(signal: number, queue: WorkQueue(label: "lull.test.src.signal.bad"))
            let registered = Flag()
            let events = Counter()
            let cancelled = Flag()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { events.increment() }
            source.setCancelHandler { cancelled.set() }
            source.activate()
            #expect(cancelled.await(timeout: .seconds(10)))
            #expect(source.isCancelled)
            let error = source.registrationError
            #expect(error != nil)
            let description = error.map { "\($0)" } ?? ""
            #expect(description.contains("signal \(number)"), "registrationError: \(description)")
            #expect(!registered.isSet, "the registration handler ran for a source that could not register")
            #expect(events.value == 0)
        }

        /// glibc keeps 32 and 33 for its threads: the reason says so, and the valid numbers
        /// it lists leave them out.
        @Test(arguments: [Int32(32), 33, 65, 0])
        func theReasonForAnInvalidSignalListsTheValidNumbers(number: Int32) {
            let source = EventSource.makeSignalSource(signal: number, queue: WorkQueue(label: "lull.test.src.signal.reason"))
            let cancelled = Flag()
            source.setCancelHandler { cancelled.set() }
            source.activate()
            #expect(cancelled.await(timeout: .seconds(10)))
            let description = source.registrationError.map { "\($0)" } ?? ""
            #expect(description.contains("valid: 1...31 and SIGRTMIN...SIGRTMAX (\(lull_signal_realtime_min())...\(lull_signal_realtime_max()))"),
                    "registrationError: \(description)")
            #expect(description.contains("32...33 are reserved by glibc for its threads (NPTL)"), "registrationError: \(description)")
            if number == 32 || number == 33 {
                #expect(description.contains("signal \(number) is reserved"), "registrationError: \(description)")
            }
        }

        /// The first and last real-time signals a program may use can be watched.
        @Test func theRealTimeSignalsAtBothEndsCanBeWatched() {
            for number in [lull_signal_realtime_min(), lull_signal_realtime_max()] {
                signal(number, SIG_IGN)
                let watcher = Watcher(signal: number, label: "lull.test.src.signal.realtime")
                watcher.source.activate()
                #expect(watcher.registered.await(timeout: .seconds(10)), "signal \(number)")
                SignalSourceTests.raiseUnblocked(number)
                #expect(waitFor(seconds: 10) { watcher.sum == 1 }, "signal \(number)")
                watcher.source.cancel()
                #expect(watcher.cancelled.await(timeout: .seconds(10)))
            }
        }
    }
}

/// Calls of the program's own SIGUSR2 handler (a C function pointer cannot capture).
let programHandlerCalls = Atomic<Int>(0)
