import CLullShims
import Glibc
import Synchronization
import Testing
@testable import Lull

/// The source lifecycle under races (docs/SourceLifecycle.md): `activate()` against
/// `cancel()` on another thread, for every kind that registers outside the core's lock;
/// many threads churning read sources while their descriptors are closed and reused; and a
/// descriptor closed while watched and opened again on the same object.
extension LullSuite {
    @Suite struct SourceRaceTests {
        // MARK: activate() racing cancel()

        /// `rounds` sources from `make`, each activated on one thread while another cancels
        /// it: two threads meet at a barrier every round, and the canceller starts a little
        /// later each round, so that cancels land before, during and after the registration.
        /// Returns how many cancel handlers each source ran, once every source had one or
        /// the timeout passed.
        static func raceActivationWithCancellation(rounds: Int, _ make: () throws -> EventSourceBase) rethrows -> [Int] {
            let cancels = (0..<rounds).map { _ in Counter() }
            var sources: [EventSourceBase] = []
            for round in 0..<rounds {
                let source = try make()
                let counter = cancels[round]
                source.setEventHandler {}
                source.setCancelHandler { counter.increment() }
                sources.append(source)
            }
            let racing = sources
            let arrivals = Atomic<Int>(0)
            SourceTestKit.runThreads(2) { index in
                for round in 0..<rounds {
                    arrivals.wrappingAdd(1, ordering: .acquiringAndReleasing)
                    var spins = 0
                    while arrivals.load(ordering: .acquiring) < 2 * (round + 1) {
                        spins += 1
                        if spins > 1_000 { sched_yield() }
                    }
                    if index == 0 {
                        racing[round].activate()
                    } else {
                        spin(microseconds: UInt64(round % 16))
                        racing[round].cancel()
                    }
                }
            }
            sources.removeAll()
            waitUntil { cancels.allSatisfy { $0.value >= 1 } }
            // Exactly once: nothing runs a second cancel handler a little later.
            _ = keepsHolding(for: .milliseconds(50)) { cancels.allSatisfy { $0.value <= 1 } }
            return cancels.map(\.value)
        }

        static let raceRounds = 1_000

        @Test(arguments: [false, true])
        func activatingADescriptorSourceWhileAnotherThreadCancelsItLeavesNothingRegistered(forWriting: Bool) throws {
            let pipe = try SourceTestKit.makePipe()
            defer { close(pipe.read); close(pipe.write) }
            let watched = forWriting ? pipe.write : pipe.read
            let queue = WorkQueue(label: "lull.test.src.race.\(forWriting ? "write" : "read")")
            let cancels = Self.raceActivationWithCancellation(rounds: Self.raceRounds) {
                forWriting ? EventSource.makeWriteSource(fileDescriptor: watched, queue: queue)
                           : EventSource.makeReadSource(fileDescriptor: watched, queue: queue)
            }
            #expect(cancels.allSatisfy { $0 == 1 }, "cancel handlers per source: \(Set(cancels))")
            // No registration outlived its source: the reactor's epoll set (and the witness)
            // no longer watch the descriptor, and readiness reaches no freed source.
            #expect(waitUntil { ProcessResources.epollEntries(for: watched) == 0 },
                    "\(ProcessResources.epollEntries(for: watched)) epoll entries left for descriptor \(watched)")
            if !forWriting { #expect(SourceTestKit.writeAll(pipe.write, [1]) == 1) }
            SourceTestKit.settle(queue)
        }

        @Test func activatingAProcessSourceWhileAnotherThreadCancelsItLeaksNoPidfd() throws {
            let pid = try SourceTestKit.spawnShell("exec sleep 30")
            defer {
                kill(pid, SIGKILL)
                _ = SourceTestKit.reap(pid)
            }
            try Self.warmUp()
            let before = ProcessResources.descriptorCount
            let queue = WorkQueue(label: "lull.test.src.race.process")
            let cancels = Self.raceActivationWithCancellation(rounds: Self.raceRounds) {
                EventSource.makeProcessSource(identifier: pid, eventMask: .exit, queue: queue)
            }
            #expect(cancels.allSatisfy { $0 == 1 }, "cancel handlers per source: \(Set(cancels))")
            #expect(waitUntil { ProcessResources.descriptorCount <= before },
                    "descriptors: \(before) before, \(ProcessResources.descriptorCount) after")
        }

        @Test func activatingAFileSystemSourceOnADescriptorWhileAnotherThreadCancelsItLeaksNoWatch() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("race")
            defer { directory.remove() }
            let watched = open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            try #require(watched >= 0)
            defer { close(watched) }
            try Self.warmUp()
            let descriptorsBefore = ProcessResources.descriptorCount
            let watchesBefore = ProcessResources.inotifyWatchCount
            let queue = WorkQueue(label: "lull.test.src.race.fs")
            let cancels = Self.raceActivationWithCancellation(rounds: Self.raceRounds) {
                EventSource.makeFileSystemObjectSource(fileDescriptor: watched, eventMask: .write, queue: queue)
            }
            #expect(cancels.allSatisfy { $0 == 1 }, "cancel handlers per source: \(Set(cancels))")
            #expect(waitUntil { ProcessResources.inotifyWatchCount <= watchesBefore },
                    "inotify watches: \(watchesBefore) before, \(ProcessResources.inotifyWatchCount) after")
            // The pins, and the inotify instance once its last watch is gone.
            #expect(waitUntil { ProcessResources.descriptorCount <= descriptorsBefore },
                    "descriptors: \(descriptorsBefore) before, \(ProcessResources.descriptorCount) after")
        }

        // MARK: Many threads, descriptors closed and reused under their sources

        /// Makes the runtime open what it keeps for good (the reactor, the open-file
        /// witness), so that a descriptor count taken after it shows only leaks.
        static func warmUp() throws {
            let pipe = try SourceTestKit.makePipe()
            let source = EventSource.makeReadSource(fileDescriptor: pipe.read)
            let cancelled = Flag()
            source.setCancelHandler { cancelled.set() }
            source.activate()
            source.cancel()
            cancelled.await()
            close(pipe.read)
            close(pipe.write)
        }

        /// 8 threads make three read sources on each pipe of their own and activate,
        /// suspend, resume and cancel them; every third pipe is closed while its sources are
        /// registered and they are cancelled and dropped a moment later, so that another
        /// thread's new pipe takes the number and retires the old registration (cancelling
        /// the old sources) while their owner cancels and drops them.
        @Test func eightThreadsChurningReadSourcesOnReusedDescriptorsNeitherCrashNorLeak() throws {
            try Self.warmUp()
            let threads = 8
            let perThread = 300
            let sourcesPerPipe = 3
            let before = ProcessResources.descriptorCount
            let made = Counter()
            let cancelled = Counter()
            let retired = Counter()
            let failures = Recorder<String>()
            SourceTestKit.runThreads(threads) { thread in
                for iteration in 0..<perThread {
                    guard let pipe = try? SourceTestKit.makePipe() else {
                        failures.append("thread \(thread): pipe failed (errno \(errno))")
                        return
                    }
                    SourceTestKit.setNonBlocking(pipe.read)
                    let closesEarly = iteration % 3 == 0
                    let open = Counter()
                    var sources: [ReadSource] = []
                    for _ in 0..<sourcesPerPipe {
                        let source = EventSource.makeReadSource(fileDescriptor: pipe.read)
                        made.increment()
                        open.increment()
                        source.setEventHandler { SourceTestKit.drain(pipe.read) }
                        source.setCancelHandler { [source] in
                            let reason = source.registrationError.map { "\($0)" } ?? ""
                            if reason.contains("reused") { retired.increment() }
                            // The last cancel handler of a pipe that is still open closes it.
                            if open.decrement() == 0 && !closesEarly {
                                close(pipe.read)
                                close(pipe.write)
                            }
                            cancelled.increment()
                        }
                        source.activate()
                        sources.append(source)
                    }
                    for source in sources { source.suspend() }
                    if iteration % 2 == 0 { SourceTestKit.writeAll(pipe.write, [UInt8(truncatingIfNeeded: iteration)]) }
                    for source in sources { source.resume() }
                    if closesEarly {
                        close(pipe.read)
                        close(pipe.write)
                        // Another thread may take the number now (this one sleeps).
                        usleep(UInt32(20 + iteration % 100))
                    }
                    for source in sources { source.cancel() }
                    sources.removeAll()
                }
            }
            #expect(failures.values.isEmpty, "\(failures.values)")
            #expect(waitUntil { cancelled.value == made.value }, "\(cancelled.value) of \(made.value) sources cancelled")
            #expect(keepsHolding(for: .milliseconds(50)) { cancelled.value == made.value })
            #expect(retired.value > 0, "no closed descriptor's number was taken by another source before its cancel: the test proved nothing")
            #expect(waitUntil { ProcessResources.descriptorCount <= before },
                    "descriptors: \(before) before, \(ProcessResources.descriptorCount) after")
        }

        // MARK: The same object opened again on the same number

        /// A source on `first`, which the program closes while it is registered and opens
        /// again (`reopen`, the same object) on the same number: the old source is cancelled
        /// with the reason, the new one fires when `signal` makes the descriptor readable.
        static func checkReopenedObject(tag: String, open first: Int32, reopen: () -> Int32,
                                        signal: (Int32) -> Void, consume: @escaping @Sendable (Int32) -> Void) throws {
            let sourceA = EventSource.makeReadSource(fileDescriptor: first, queue: WorkQueue(label: "lull.test.src.reopen.\(tag).a"))
            let registeredA = Flag()
            let eventsA = Counter()
            let cancelledA = Flag()
            sourceA.setRegistrationHandler { registeredA.set() }
            sourceA.setEventHandler { eventsA.increment() }
            sourceA.setCancelHandler { cancelledA.set() }
            sourceA.activate()
            #expect(registeredA.await())
            // The program closes the descriptor behind the source's back and opens the same
            // object again: the same device and inode, on the same number.
            close(first)
            var reopened = reopen()
            if reopened != first, reopened >= 0 {
                let moved = fcntl(reopened, F_DUPFD_CLOEXEC, first)
                close(reopened)
                reopened = moved
            }
            let second = reopened
            try #require(second == first, "could not reuse descriptor number \(first) (got \(second))")
            defer { close(second) }
            let sourceB = EventSource.makeReadSource(fileDescriptor: second, queue: WorkQueue(label: "lull.test.src.reopen.\(tag).b"))
            let eventsB = Counter()
            let cancelledB = Flag()
            sourceB.setEventHandler {
                consume(second)
                eventsB.increment()
            }
            sourceB.setCancelHandler { cancelledB.set() }
            sourceB.activate()
            #expect(cancelledA.await(), "the source of the closed descriptor was not cancelled")
            let description = sourceA.registrationError.map { "\($0)" } ?? ""
            #expect(description.contains("descriptor \(first)") && description.contains("reused"),
                    "registrationError: \(description)")
            signal(second)
            #expect(eventsB.await { $0 >= 1 }, "the source of the reopened \(tag) never fired")
            #expect(sourceB.registrationError == nil && !sourceB.isCancelled)
            #expect(eventsA.value == 0, "the old source saw the new open file's data")
            sourceB.cancel()
            #expect(cancelledB.await())
        }

        @Test func aFifoClosedWhileWatchedAndOpenedAgainOnTheSameNumberCancelsTheOldSourceAndTheNewOneFires() throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("fifo")
            defer { directory.remove() }
            let path = directory.at("fifo")
            try #require(mkfifo(path, 0o600) == 0)
            // Read and write: opening does not wait for a peer, and the source's own
            // descriptor feeds it.
            let flags = O_RDWR | O_NONBLOCK | O_CLOEXEC
            let first = open(path, flags)
            try #require(first >= 0)
            try Self.checkReopenedObject(tag: "fifo", open: first, reopen: { open(path, flags) },
                                         signal: { SourceTestKit.writeAll($0, Array("x".utf8)) },
                                         consume: { SourceTestKit.drain($0) })
        }

        @Test func anEventfdClosedWhileWatchedAndAnotherOnTheSameNumberCancelsTheOldSourceAndTheNewOneFires() throws {
            // Every eventfd is the same anonymous inode: only the open file tells them apart.
            let first = lull_eventfd()
            try #require(first >= 0)
            try Self.checkReopenedObject(tag: "eventfd", open: first, reopen: { lull_eventfd() },
                                         signal: { var one: UInt64 = 1; _ = write($0, &one, 8) },
                                         consume: { lull_eventfd_drain($0) })
        }
    }
}
