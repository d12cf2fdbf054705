import CLullShims
import Glibc
import Synchronization
import Testing
@testable import Lull

/// Activates `source` and waits for its registration handler or its cancel handler; the
/// code of its registration error when it was cancelled (0 when the error carries none),
/// nil when it registered (or nothing happened in time).
func registrationFailureCode(_ source: any EventSourceProtocol) -> Int32? {
    let registered = Flag()
    let cancelled = Flag()
    source.setRegistrationHandler { registered.set() }
    source.setCancelHandler { cancelled.set() }
    source.activate()
    guard waitUntil({ registered.isSet || cancelled.isSet }), cancelled.isSet, !registered.isSet else { return nil }
    return (source.registrationError as? EventSourceError)?.code ?? 0
}

/// Activates `source` with an event handler that counts its calls, waits for its
/// registration, runs `trigger` and waits for the handler: true when it ran. The source is
/// cancelled (and its cancel handler waited for) before this returns.
func firesAfterRegistration(_ source: any EventSourceProtocol, drain: @escaping @Sendable () -> Void = {},
                            _ trigger: () -> Void) -> Bool {
    let registered = Flag()
    let fired = Flag()
    let cancelled = Flag()
    source.setRegistrationHandler { registered.set() }
    source.setEventHandler {
        drain()
        fired.set()
    }
    source.setCancelHandler { cancelled.set() }
    source.activate()
    guard waitUntil({ registered.isSet || cancelled.isSet }), registered.isSet else { return false }
    trigger()
    let ran = fired.await()
    source.cancel()
    return cancelled.await() && ran
}

/// Starts the runtime's parts that open descriptors once per process (the reactor, its
/// timerfd, the diagnostics socket, the first workers), so that counting descriptors
/// afterwards counts only what a test opens.
func warmUpRuntime() {
    guard let ends = try? SourceTestKit.makePipe() else { return }
    _ = firesAfterRegistration(EventSource.makeReadSource(fileDescriptor: ends.read, queue: WorkQueue(label: "lull.test.fault.warm-up")),
                               drain: { _ = SourceTestKit.readSome(ends.read, max: 16) }) {
        SourceTestKit.writeAll(ends.write, [1])
    }
    close(ends.read)
    close(ends.write)
}

/// In a child process (exit test): a new temporary directory and a descriptor open on it;
/// the child stops with a message when either cannot be had.
func temporaryDirectoryOpenInChild() -> (FileSystemTestKit.TemporaryDirectory, Int32) {
    let directory = try? FileSystemTestKit.TemporaryDirectory("fault")
    childRequire(directory != nil, "mkdtemp failed")
    let descriptor = open(directory!.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    childRequire(descriptor >= 0, "open: errno \(errno)")
    return (directory!, descriptor)
}

/// A user signal the test process ignores (set once per process: a later `signal()` would
/// replace Lull's forwarder), so that raising it is harmless.
func ignoredSignal(_ signal: Int32) -> Int32 {
    _ = LullSuite.SignalSourceTests.ignoreUserSignalsOnce
    return signal
}

extension LullSuite {
    /// Fault injection at the system-call seam (`SyscallFault`): every call the runtime
    /// makes that can fail ends in its documented outcome (docs/Failures.md) — a
    /// `registrationError`, a logged degradation or a retry — and never in a crash, a hang
    /// or a leaked descriptor.
    @Suite struct SyscallFaultTests {
        // MARK: The seam itself

        @Test func anArmedFaultFailsExactlyTheArmedNumberOfCalls() {
            withSyscallFault(.eventfd, errno: EMFILE, count: 2) {
                #expect(lull_eventfd() == -EMFILE)
                #expect(lull_eventfd() == -EMFILE)
                #expect(SyscallFault.hits(.eventfd) == 2)
                let descriptor = lull_eventfd()
                #expect(descriptor >= 0)
                if descriptor >= 0 { close(descriptor) }
                #expect(SyscallFault.hits(.eventfd) == 2)
            }
            let descriptor = lull_eventfd()
            #expect(descriptor >= 0)
            if descriptor >= 0 { close(descriptor) }
        }

        @Test func anEventfdDrainInterruptedBySignalsIsRetried() throws {
            let descriptor = lull_eventfd()
            try #require(descriptor >= 0)
            defer { close(descriptor) }
            var one: UInt64 = 1
            #expect(write(descriptor, &one, 8) == 8)
            withSyscallFault(.eventfdRead, errno: EINTR, count: 3) {
                lull_eventfd_drain(descriptor)
                #expect(SyscallFault.hits(.eventfdRead) == 3)
            }
            var value: UInt64 = 0
            let left = read(descriptor, &value, 8)
            #expect(left < 0 && errno == EAGAIN, "the counter was not drained: read returned \(left), value \(value)")
        }

        // MARK: event_add (libevent's epoll_ctl)

        @Test func aRefusedEventAddCancelsReadAndWriteSourcesWithTheErrnoAndLeaksNothing() async {
            let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                warmUpRuntime()
                let before = FileSystemTestKit.openDescriptorCount()
                let made = try? SourceTestKit.makePipe()
                childRequire(made != nil, "pipe: errno \(errno)")
                let ends = [made!.read, made!.write]
                let queue = WorkQueue(label: "lull.test.fault.event-add")
                for forWriting in [false, true] {
                    let descriptor = forWriting ? ends[1] : ends[0]
                    let refused: any EventSourceProtocol = forWriting
                        ? EventSource.makeWriteSource(fileDescriptor: descriptor, queue: queue)
                        : EventSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
                    let code = withSyscallFault(.eventAdd, errno: ENOSPC) {
                        let code = registrationFailureCode(refused)
                        childRequire(SyscallFault.hits(.eventAdd) == 1, "event_add was not reached")
                        return code
                    }
                    childRequire(code == ENOSPC, "writing \(forWriting): registrationError code \(String(describing: code)), \(String(describing: refused.registrationError))")
                }
                // Nothing of the refused sources is left behind: new ones on the same
                // descriptors register and fire.
                let reader = ends[0]
                childRequire(firesAfterRegistration(EventSource.makeReadSource(fileDescriptor: reader, queue: queue),
                                                    drain: { _ = SourceTestKit.readSome(reader, max: 16) }) {
                    SourceTestKit.writeAll(ends[1], [1])
                }, "a read source on the same descriptor did not fire")
                childRequire(firesAfterRegistration(EventSource.makeWriteSource(fileDescriptor: ends[1], queue: queue)) {},
                             "a write source on the same descriptor did not fire")
                close(ends[0])
                close(ends[1])
                childRequire(FileSystemTestKit.openDescriptorCount() == before,
                             "descriptors: \(before) before, \(FileSystemTestKit.openDescriptorCount()) after")
            }
            printChildFailure(result)
        }

        @Test func aRefusedEventAddCancelsSignalProcessAndFileSystemSourcesAndClosesTheirDescriptors() async {
            let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                warmUpRuntime()
                let (directory, watched) = temporaryDirectoryOpenInChild()
                defer { directory.remove() }
                let before = FileSystemTestKit.openDescriptorCount()
                let queue = WorkQueue(label: "lull.test.fault.event-add-kinds")
                let signal = ignoredSignal(SIGUSR1)
                let kinds: [(String, () -> any EventSourceProtocol)] = [
                    ("signal", { EventSource.makeSignalSource(signal: signal, queue: queue) }),
                    ("process", { EventSource.makeProcessSource(identifier: getpid(), eventMask: .exit, queue: queue) }),
                    ("file system", { EventSource.makeFileSystemObjectSource(fileDescriptor: watched, eventMask: .all, queue: queue) }),
                ]
                for (kind, make) in kinds {
                    let source = make()
                    let code = withSyscallFault(.eventAdd, errno: ENOSPC) {
                        let code = registrationFailureCode(source)
                        childRequire(SyscallFault.hits(.eventAdd) == 1, "\(kind): event_add was not reached")
                        return code
                    }
                    childRequire(code == ENOSPC, "\(kind): registrationError code \(String(describing: code)), \(String(describing: source.registrationError))")
                    // The descriptors opened for it (eventfd, pidfd, inotify instance and pin)
                    // are closed; the file-system hub closes its instance on a job.
                    childRequire(waitUntil { FileSystemTestKit.openDescriptorCount() == before },
                                 "\(kind): descriptors: \(before) before, \(FileSystemTestKit.openDescriptorCount()) after")
                }
                // Once the reactor accepts again, a new signal source works.
                childRequire(firesAfterRegistration(EventSource.makeSignalSource(signal: signal, queue: queue)) {
                    LullSuite.SignalSourceTests.raiseUnblocked(signal)
                }, "a signal source after the refused one did not fire")
                close(watched)
            }
            printChildFailure(result)
        }

        // MARK: eventfd

        @Test func aFailedEventfdCancelsTheSignalSourceWithTheErrno() async {
            let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                warmUpRuntime()
                let before = FileSystemTestKit.openDescriptorCount()
                let signal = ignoredSignal(SIGUSR2)
                let queue = WorkQueue(label: "lull.test.fault.eventfd")
                let source = EventSource.makeSignalSource(signal: signal, queue: queue)
                let code = withSyscallFault(.eventfd, errno: EMFILE) {
                    let code = registrationFailureCode(source)
                    childRequire(SyscallFault.hits(.eventfd) == 1, "eventfd was not reached")
                    return code
                }
                childRequire(code == EMFILE, "registrationError code \(String(describing: code)), \(String(describing: source.registrationError))")
                childRequire(FileSystemTestKit.openDescriptorCount() == before, "a descriptor leaked")
                childRequire(firesAfterRegistration(EventSource.makeSignalSource(signal: signal, queue: queue)) {
                    LullSuite.SignalSourceTests.raiseUnblocked(signal)
                }, "a signal source after the failed one did not fire")
            }
            printChildFailure(result)
        }

        @Test(arguments: [EINTR, EAGAIN])
        func aSignalIsDeliveredWhenReadingTheEventfdFails(code: Int32) {
            let signal = ignoredSignal(SIGUSR2)
            let queue = WorkQueue(label: "lull.test.fault.eventfd-read")
            let source = EventSource.makeSignalSource(signal: signal, queue: queue)
            let deliveries = Counter()
            let registered = Flag()
            let cancelled = Flag()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { deliveries.increment() }
            source.setCancelHandler { cancelled.set() }
            source.activate()
            #expect(registered.await())
            withSyscallFault(.eventfdRead, errno: code) {
                LullSuite.SignalSourceTests.raiseUnblocked(signal)
                #expect(deliveries.await { $0 == 1 }, "the signal was lost")
                #expect(SyscallFault.hits(.eventfdRead) == 1)
            }
            // And the next one is not lost either.
            LullSuite.SignalSourceTests.raiseUnblocked(signal)
            #expect(deliveries.await { $0 == 2 }, "the second signal was lost")
            source.cancel()
            #expect(cancelled.await())
        }

        // MARK: pidfd_open

        @Test func aFailedPidfdOpenCancelsTheProcessSourceWithTheErrno() {
            let before = FileSystemTestKit.openDescriptorCount()
            let source = EventSource.makeProcessSource(identifier: getpid(), eventMask: .exit,
                                                       queue: WorkQueue(label: "lull.test.fault.pidfd"))
            let code = withSyscallFault(.pidfdOpen, errno: EMFILE) {
                let code = registrationFailureCode(source)
                #expect(SyscallFault.hits(.pidfdOpen) == 1)
                return code
            }
            #expect(code == EMFILE, "\(String(describing: source.registrationError))")
            #expect(FileSystemTestKit.openDescriptorCount() == before)
        }

        // MARK: inotify

        @Test func aFailedInotifyInitCancelsTheFileSystemSourceWithTheErrno() async {
            let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                warmUpRuntime()
                let (directory, watched) = temporaryDirectoryOpenInChild()
                defer { directory.remove() }
                let before = FileSystemTestKit.openDescriptorCount()
                let queue = WorkQueue(label: "lull.test.fault.inotify-init")
                let source = EventSource.makeFileSystemObjectSource(fileDescriptor: watched, eventMask: .all, queue: queue)
                let code = withSyscallFault(.inotifyInit, errno: EMFILE) {
                    let code = registrationFailureCode(source)
                    childRequire(SyscallFault.hits(.inotifyInit) == 1, "inotify_init was not reached")
                    return code
                }
                childRequire(code == EMFILE, "registrationError code \(String(describing: code)), \(String(describing: source.registrationError))")
                childRequire(FileSystemTestKit.openDescriptorCount() == before, "a descriptor leaked")
                // A source made from a path throws instead.
                let thrown = withSyscallFault(.inotifyInit, errno: EMFILE) { () -> Int32? in
                    do {
                        _ = try EventSource.makeFileSystemObjectSource(path: directory.path, eventMask: .all, queue: queue)
                        return nil
                    } catch {
                        return (error as? EventSourceError)?.code
                    }
                }
                childRequire(thrown == EMFILE, "the path variant threw \(String(describing: thrown))")
                childRequire(FileSystemTestKit.openDescriptorCount() == before, "a descriptor leaked (path)")
                close(watched)
            }
            printChildFailure(result)
        }

        @Test func aFailedInotifyAddWatchCancelsOrThrowsWithTheErrno() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("fault")
            defer { directory.remove() }
            let watched = try FileSystemTestKit.openDirectory(directory.path)
            defer { close(watched) }
            let before = FileSystemTestKit.openDescriptorCount()
            let queue = WorkQueue(label: "lull.test.fault.inotify-add-watch")
            let source = EventSource.makeFileSystemObjectSource(fileDescriptor: watched, eventMask: .all, queue: queue)
            let code = withSyscallFault(.inotifyAddWatch, errno: ENOSPC) {
                let code = registrationFailureCode(source)
                #expect(SyscallFault.hits(.inotifyAddWatch) == 1)
                return code
            }
            #expect(code == ENOSPC, "\(String(describing: source.registrationError))")
            let thrown = withSyscallFault(.inotifyAddWatch, errno: ENOSPC) { () -> Int32? in
                do {
                    _ = try EventSource.makeFileSystemObjectSource(path: directory.path, eventMask: .all, queue: queue)
                    return nil
                } catch {
                    return (error as? EventSourceError)?.code
                }
            }
            #expect(thrown == ENOSPC)
            // The pin and (once idle) the inotify instance are closed.
            #expect(waitUntil { FileSystemTestKit.openDescriptorCount() <= before },
                    "descriptors: \(before) before, \(FileSystemTestKit.openDescriptorCount()) after")
        }

        /// An interrupted read of the inotify descriptor is retried at once; a read that finds
        /// nothing (EAGAIN) leaves what is queued for the next readiness: no event is lost.
        @Test(arguments: [EINTR, EAGAIN])
        func noFileSystemEventIsLostWhenReadingInotifyFails(code: Int32) throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("fault")
            defer { directory.remove() }
            let file = directory.at("file")
            try FileSystemTestKit.write(file, "start")
            let watched = WatchedObject(try EventSource.makeFileSystemObjectSource(
                path: file, eventMask: [.attrib, .write], queue: WorkQueue(label: "lull.test.fault.inotify-read")))
            try #require(watched.registered.isSet)
            withSyscallFault(.inotifyRead, errno: code) {
                #expect(chmod(file, 0o600) == 0)
                #expect(waitUntil { SyscallFault.hits(.inotifyRead) == 1 })
            }
            if code == EAGAIN {
                // The chmod's event is still queued; the next change makes the descriptor
                // ready again, and both are read.
                try FileSystemTestKit.write(file, "more", append: true)
                #expect(watched.log.waitFor([.attrib, .write]), "got \(watched.log.values)")
            } else {
                #expect(watched.log.waitFor(.attrib), "got \(watched.log.values)")
            }
            #expect(watched.finish())
        }

        // MARK: timerfd

        @Test func aFailedTimerfdCreateLeavesTimersOnTheCoarseClock() async {
            let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                SyscallFault.arm(.timerfdCreate, errno: EMFILE)
                let fired = Flag()
                WorkQueue.global().asyncAfter(deadline: .now() + .milliseconds(20)) { fired.set() }
                childRequire(fired.await(), "the delayed block did not run")
                childRequire(SyscallFault.hits(.timerfdCreate) == 1, "timerfd_create was not reached")
                // With no timer left, nothing keeps a worker polling.
                childRequire(waitUntil { !Runtime.shared.reactor.needsPoller }, "the reactor still counts a timer that fired")
            }
            let message = standardErrorText(result)
            #expect(message.contains("timerfd_create failed"), "stderr: \(message)")
            #expect(message.contains("coarse clock"), "stderr: \(message)")
        }

        @Test func aFailingTimerfdSettimeLeavesTimersOnTheCoarseClock() async {
            let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                warmUpRuntime()
                SyscallFault.arm(.timerfdSettime, errno: EINVAL, count: SyscallFault.always)
                let fired = Counter()
                let queue = WorkQueue(label: "lull.test.fault.settime")
                for milliseconds in [5, 20, 40] {
                    queue.asyncAfter(deadline: .now() + .milliseconds(milliseconds)) { fired.increment() }
                }
                childRequire(fired.await { $0 == 3 }, "\(fired.value) of 3 delayed blocks ran")
                childRequire(SyscallFault.hits(.timerfdSettime) >= 1, "timerfd_settime was not reached")
            }
            let message = standardErrorText(result)
            #expect(message.contains("timerfd_settime (arm) failed"), "stderr: \(message)")
        }

        /// The reactor's timer needs one of its two events in libevent's set: the timerfd's
        /// (epoll_ctl) or libevent's timeout. Refusing the first leaves the coarse clock;
        /// refusing both still fires the timer.
        @Test(arguments: [1, 2, 6] as [Int32])
        func aRefusedEventAddForTheReactorsTimerStillFiresTheTimers(failures: Int32) async {
            // Exit tests capture nothing: one child per count, told by the environment.
            setenv("LULL_TEST_FAULT_COUNT", "\(failures)", 1)
            defer { unsetenv("LULL_TEST_FAULT_COUNT") }
            let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                let failures = getenv("LULL_TEST_FAULT_COUNT").flatMap { Int32(String(cString: $0)) } ?? 1
                SyscallFault.arm(.eventAddTimer, errno: ENOMEM, count: failures)
                let fired = Counter()
                let queue = WorkQueue(label: "lull.test.fault.timer-add")
                for milliseconds in [5, 20, 40] {
                    queue.asyncAfter(deadline: .now() + .milliseconds(milliseconds)) { fired.increment() }
                }
                childRequire(fired.await { $0 == 3 }, "\(fired.value) of 3 delayed blocks ran")
                childRequire(SyscallFault.hits(.eventAddTimer) >= min(Int(failures), 2), "\(SyscallFault.hits(.eventAddTimer)) of \(failures) failures injected")
                childRequire(waitUntil { !Runtime.shared.reactor.needsPoller }, "the reactor still counts a timer that fired")
            }
            let message = standardErrorText(result)
            #expect(message.contains("event_add for the reactor"), "stderr: \(message)")
        }

        // MARK: Threads

        @Test
        func workOfAClassWithoutAWorkerRunsWhenThreadCreationFails() async {
            let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                let warm = Flag()
                WorkQueue.global().async { warm.set() }
                childRequire(warm.await(), "the warm-up block did not run")
                SyscallFault.arm(.threadCreate, errno: EAGAIN, count: SyscallFault.always)
                let ran = Flag()
                WorkQueue.global(qos: .utility).async { ran.set() }
                childRequire(ran.await(), "the utility block never ran")
                childRequire(SyscallFault.hits(.threadCreate) >= 1, "pthread_create was not reached")
            }
            let message = standardErrorText(result)
            #expect(message.contains("pthread_create: EAGAIN"), "stderr: \(message)")
        }

        @Test func workRunsWhenCreatingOneMoreThreadFails() async {
            let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                let warm = Flag()
                WorkQueue.global().async { warm.set() }
                childRequire(warm.await(), "the warm-up block did not run")
                SyscallFault.arm(.threadCreate, errno: EAGAIN, count: SyscallFault.always)
                let ran = Counter()
                let queue = WorkQueue(label: "lull.test.fault.thread", attributes: .concurrent)
                for _ in 0..<50 {
                    queue.async {
                        spin(microseconds: 200)
                        ran.increment()
                    }
                }
                childRequire(ran.await { $0 == 50 }, "\(ran.value) of 50 blocks ran")
            }
            let message = standardErrorText(result)
            #expect(!message.contains("requirement failed"), "stderr: \(message)")
        }

        // MARK: The diagnostics socket

        @Test func aFailedSocketLeavesTheProgramRunningWithoutDiagnostics() async {
            let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                SyscallFault.arm(.socket, errno: EMFILE)
                let fired = Flag()
                WorkQueue.global().asyncAfter(deadline: .now() + .milliseconds(5)) { fired.set() }
                childRequire(fired.await(), "the delayed block did not run")
                childRequire(SyscallFault.hits(.socket) == 1, "socket was not reached")
            }
            let message = standardErrorText(result)
            #expect(message.contains("no diagnostics socket: socket: EMFILE"), "stderr: \(message)")
        }
    }
}
