import CLullShims
import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    /// What a signal source does to the signal's disposition: a forwarder with SA_RESTART
    /// while sources exist, the program's disposition back when the last one is cancelled,
    /// and children that exec inherit SIG_IGN. Real-time signals no other test uses, set to
    /// SIG_IGN first (their default action ends the process).
    @Suite struct SignalDispositionTests {
        static var ignoredSignal: Int32 { lull_signal_realtime_min() + 4 }
        static var handledSignal: Int32 { lull_signal_realtime_min() + 5 }

        static func disposition(_ number: Int32) -> sigaction {
            var action = sigaction()
            sigaction(number, nil, &action)
            return action
        }

        static func isIgnored(_ action: sigaction) -> Bool {
            action.sa_flags & SA_SIGINFO == 0
                && unsafeBitCast(action.__sigaction_handler.sa_handler, to: Int.self) == unsafeBitCast(SIG_IGN, to: Int.self)
        }

        /// Whether SigIgn of /proc/<pid>/status (text) has `number`.
        static func ignoreMaskHas(_ status: String, _ number: Int32) -> Bool? {
            guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigIgn:") }),
                  let mask = UInt64(String(line.dropFirst("SigIgn:".count).filter { !$0.isWhitespace }), radix: 16) else { return nil }
            return mask & (1 << UInt64(number - 1)) != 0
        }

        static func activatedWatcher(_ number: Int32, _ label: String) -> SignalSourceTests.Watcher {
            let watcher = SignalSourceTests.Watcher(signal: number, label: label)
            watcher.source.activate()
            #expect(watcher.registered.await())
            return watcher
        }

        static func cancel(_ watcher: SignalSourceTests.Watcher) {
            watcher.source.cancel()
            #expect(watcher.cancelled.await())
        }

        @Test func cancellingTheLastSourcePutsBackSIGIGN() {
            let number = Self.ignoredSignal
            signal(number, SIG_IGN)
            let first = Self.activatedWatcher(number, "lull.test.src.signal.disposition.first")
            let second = Self.activatedWatcher(number, "lull.test.src.signal.disposition.second")
            #expect(!Self.isIgnored(Self.disposition(number)), "no forwarder while sources exist")
            Self.cancel(first)
            #expect(!Self.isIgnored(Self.disposition(number)), "the forwarder left while a source still watches")
            SignalSourceTests.raiseUnblocked(number)
            #expect(waitUntil { second.sum == 1 })
            Self.cancel(second)
            #expect(Self.isIgnored(Self.disposition(number)), "the disposition is not SIG_IGN after the last cancel")
        }

        @Test func cancellingTheLastSourcePutsBackTheProgramsHandler() {
            let number = Self.handledSignal
            signal(number, { _ in programRealtimeHandlerCalls.add(1, ordering: .relaxed) })
            let installed = Self.disposition(number).__sigaction_handler.sa_handler
            let watcher = Self.activatedWatcher(number, "lull.test.src.signal.disposition.handler")
            SignalSourceTests.raiseUnblocked(number)
            #expect(waitUntil { watcher.sum == 1 })
            Self.cancel(watcher)
            let after = Self.disposition(number)
            #expect(after.sa_flags & SA_SIGINFO == 0)
            #expect(unsafeBitCast(after.__sigaction_handler.sa_handler, to: Int.self) == unsafeBitCast(installed, to: Int.self),
                    "the program's handler is not back after the last cancel")
            let before = programRealtimeHandlerCalls.load(ordering: .relaxed)
            SignalSourceTests.raiseUnblocked(number)
            #expect(programRealtimeHandlerCalls.load(ordering: .relaxed) == before + 1)
            #expect(keepsHolding(for: .milliseconds(100)) { watcher.sum == 1 })
            signal(number, SIG_IGN)
        }

        /// posix_spawn resets handled signals to their default: after the cancel, SIG_IGN
        /// is back and the child inherits it.
        @Test func aChildSpawnedAfterTheCancelInheritsSIGIGN() throws {
            let number = Self.ignoredSignal
            signal(number, SIG_IGN)
            let watcher = Self.activatedWatcher(number, "lull.test.src.signal.disposition.spawn")
            Self.cancel(watcher)
            let outcome = try ToolProcess.run("/bin/cat", ["/proc/self/status"])
            #expect(outcome.status == 0)
            #expect(Self.ignoreMaskHas(outcome.standardOutput, number) == true,
                    "the child does not ignore signal \(number): \(outcome.standardOutput)")
        }

        /// A forked child that execs while a source watches: Lull's fork handler puts the
        /// program's SIG_IGN back in the child before the exec.
        @Test func aForkedChildThatExecsWhileASourceWatchesInheritsSIGIGN() {
            let number = Self.ignoredSignal
            signal(number, SIG_IGN)
            let watcher = Self.activatedWatcher(number, "lull.test.src.signal.disposition.fork")
            defer { Self.cancel(watcher) }
            let path = strdup("/bin/cat")
            let arguments: [UnsafeMutablePointer<CChar>?] = [strdup("cat"), strdup("/proc/self/status"), nil]
            defer {
                free(path)
                arguments.forEach { free($0) }
            }
            let outcome = ForkProbe.runChild(capturing: 1) {
                // Async-signal-safe calls only, then exec.
                _ = arguments.withUnsafeBufferPointer { execv(path!, $0.baseAddress!) }
                _exit(127)
            }
            #expect(outcome?.signalled == false && outcome?.status == 0, "\(String(describing: outcome))")
            let text = outcome?.output ?? ""
            #expect(Self.ignoreMaskHas(text, number) == true, "the child does not ignore signal \(number): \(text)")
        }

        /// The forwarder is installed with SA_RESTART: a read that the signal interrupts on
        /// its thread carries on, it does not fail with EINTR.
        @Test func aReadInterruptedByAWatchedIgnoredSignalIsRestarted() {
            let number = Self.ignoredSignal
            signal(number, SIG_IGN)
            let watcher = Self.activatedWatcher(number, "lull.test.src.signal.disposition.read")
            defer { Self.cancel(watcher) }
            var fds: [Int32] = [-1, -1]
            #expect(pipe(&fds) == 0)
            for descriptor in fds { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
            defer { close(fds[0]); close(fds[1]) }
            let reader = Mutex<(thread: pthread_t, tid: Int32)?>(nil)
            let result = Mutex<(count: Int, error: Int32)?>(nil)
            let readDescriptor = fds[0]
            WorkQueue(label: "lull.test.src.signal.disposition.reader").async {
                // Workers inherit the mask of the thread that started them: the signal is
                // let through on this one while it reads.
                var unblocked = sigset_t()
                var previous = sigset_t()
                sigemptyset(&unblocked)
                sigaddset(&unblocked, number)
                pthread_sigmask(SIG_UNBLOCK, &unblocked, &previous)
                defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
                reader.locked { $0 = (pthread_self(), lull_gettid()) }
                var byte: UInt8 = 0
                let count = read(readDescriptor, &byte, 1)
                let error = errno
                result.locked { $0 = (count, error) }
            }
            #expect(waitUntil { reader.locked { $0 } != nil })
            let (thread, tid) = reader.locked { $0 }!
            // Asleep in the read: state S, in a pipe read.
            #expect(waitUntil { Self.isSleepingInRead(tid) })
            pthread_kill(thread, number)
            #expect(waitUntil { watcher.sum == 1 }, "the forwarder did not run")
            #expect(keepsHolding(for: .milliseconds(50)) { result.locked { $0 } == nil },
                    "the read returned before any data: \(String(describing: result.locked { $0 }))")
            var byte: UInt8 = 1
            #expect(write(fds[1], &byte, 1) == 1)
            #expect(waitUntil { result.locked { $0 } != nil })
            let outcome = result.locked { $0 }
            #expect(outcome?.count == 1, "read: \(String(describing: outcome))")
        }

        /// The thread is asleep in the kernel (state S) in a read of a pipe.
        static func isSleepingInRead(_ tid: Int32) -> Bool {
            guard let stat = readSmallFile("/proc/self/task/\(tid)/stat"),
                  let close = stat.lastIndex(of: ")") else { return false }
            let state = stat[stat.index(close, offsetBy: 2)...].prefix(1)
            let channel = readSmallFile("/proc/self/task/\(tid)/wchan") ?? ""
            return state == "S" && (channel.contains("pipe") || channel == "0" || channel.isEmpty)
        }

        static func readSmallFile(_ path: String) -> String? {
            var length: UInt = 0
            var bytes: UnsafeMutablePointer<CChar>?
            guard lull_read_small_file(path, &bytes, &length) == 0, let bytes else { return nil }
            defer { lull_free(bytes) }
            return String(decoding: UnsafeRawBufferPointer(start: bytes, count: Int(length)), as: UTF8.self)
        }
    }
}

/// Calls of the program's own real-time signal handler (a C function pointer cannot capture).
let programRealtimeHandlerCalls = Atomic<Int>(0)
