import CLullShims
import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    /// `events`: every source kind as an AsyncSequence, with backpressure from suspension.
    @Suite struct SourceEventsTests {
        init() {
            _ = SignalSourceTests.ignoreUserSignalsOnce
        }

        // MARK: Helpers

        /// Polls `condition` from a task (without blocking a thread of the cooperative pool).
        static func eventually(timeout: Duration = generousTimeout, _ condition: () -> Bool) async -> Bool {
            let clock = ContinuousClock()
            let end = clock.now.advanced(by: timeout)
            while !condition() {
                if clock.now >= end { return condition() }
                try? await Task.sleep(for: .milliseconds(1))
            }
            return true
        }

        /// The channel of a source's `events` loop, once the loop started.
        static func channel(of source: EventSourceBase) -> SourceEventsChannel? {
            source.core.withState { _ in source.core.extras?.eventsChannel }
        }

        /// Suspensions of the source (the loop's and the program's).
        static func suspendCount(of source: EventSourceBase) -> Int32 {
            source.core.withState { $0.suspendCount }
        }

        /// A number blocks and tasks update.
        final class Tally: Sendable {
            private let storage = Atomic<UInt>(0)
            var value: UInt { storage.load(ordering: .acquiring) }
            @discardableResult
            func add(_ amount: UInt) -> UInt { storage.wrappingAdd(amount, ordering: .acquiringAndReleasing).newValue }
            func raise(to candidate: UInt) {
                var seen = value
                while candidate > seen {
                    let (done, original) = storage.compareExchange(expected: seen, desired: candidate, ordering: .acquiringAndReleasing)
                    if done { return }
                    seen = original
                }
            }
        }

        /// A loop that records what it got and whether the cancel handler had run when it
        /// ended; it leaves early when `body` says false.
        final class Loop: Sendable {
            let values = Recorder<UInt>()
            let total = Tally()
            let ended = Flag()
            let cancelHandlerRanFirst = Flag()
            let cancelHandlerRuns = Counter()
            let task: Task<Void, Never>

            init(_ source: UserDataAddSource, body: @escaping @Sendable (UInt) async -> Bool = { _ in true }) {
                let cancelHandlerRuns = cancelHandlerRuns
                source.setCancelHandler { cancelHandlerRuns.increment() }
                let (values, total, ended, ranFirst) = (values, total, ended, cancelHandlerRanFirst)
                task = Task {
                    for await value in source.events {
                        values.append(value)
                        total.add(value)
                        if await !body(value) { break }
                    }
                    if cancelHandlerRuns.value == 1 { ranFirst.set() }
                    ended.set()
                }
            }
        }

        // MARK: Backpressure

        @Test func aMillionAddsAgainstASlowConsumerMergeInBoundedMemoryAndSumExactly() async throws {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.events.million"))
            let mostBuffered = Tally()
            let mostSuspended = Tally()
            let loop = Loop(source) { _ in
                // While the body runs, the loop holds the source suspended (once) and holds
                // at most one value: the source merges, nothing piles up.
                if let channel = Self.channel(of: source) {
                    mostBuffered.raise(to: UInt(channel.bufferedCount))
                }
                mostSuspended.raise(to: UInt(Self.suspendCount(of: source)))
                spin(microseconds: 20)  // a slow consumer
                return true
            }
            #expect(await Self.eventually { Self.channel(of: source)?.hasWaitingConsumer == true })
            let produced = Flag()
            WorkQueue.global().async {
                for _ in 0..<1_000_000 { source.add(data: 1) }
                produced.set()
            }
            #expect(await Self.eventually { loop.total.value >= 1_000_000 })
            #expect(produced.isSet)
            source.cancel()
            #expect(await Self.eventually { loop.ended.isSet })
            await loop.task.value
            #expect(loop.total.value == 1_000_000, "the sum of the elements is not the sum of the adds")
            #expect(loop.values.count < 1_000_000 / 10, "adds did not merge while the consumer was busy: \(loop.values.count) elements")
            #expect(mostBuffered.value <= 1)
            #expect(mostSuspended.value == 1, "the source was not suspended while the consumer was busy")
        }

        @Test func eventsThatComeWhileTheBodyRunsMergeIntoTheNextElement() async throws {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.events.merge"))
            var iterator = source.events.makeAsyncIterator()
            source.add(data: 1)
            #expect(await iterator.next() == 1)
            // The consumer is busy: the handler must not run, the adds merge.
            source.add(data: 2)
            source.add(data: 3)
            let channel = try #require(Self.channel(of: source))
            #expect(keepsHolding(for: .milliseconds(50)) { channel.bufferedCount == 0 && Self.suspendCount(of: source) == 1 })
            #expect(await iterator.next() == 5)
            source.cancel()
            #expect(await iterator.next() == nil)
        }

        @Test func aChainOfElementsEachAddingTheNextNeverStalls() async throws {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.events.chain"))
            let count = 20_000
            let progress = Tally()
            let chain = Task {
                var total = 0
                source.add(data: 1)
                for await value in source.events {
                    total += Int(value)
                    progress.add(value)
                    if total < count { source.add(data: 1) } else { break }
                }
                return total
            }
            #expect(await Self.eventually { progress.value >= UInt(count) }, "the chain stalled at \(progress.value)")
            #expect(await chain.value == count)
        }

        // MARK: Every kind

        @Test func userDataOrAndReplaceSourcesDeliverTheirMergedValue() async throws {
            let or = EventSource.makeUserDataOrSource(queue: WorkQueue(label: "lull.test.events.or"))
            var orValues = or.events.makeAsyncIterator()
            or.or(data: 0b001)
            #expect(await orValues.next() == 0b001)
            or.or(data: 0b010)
            or.or(data: 0b100)
            #expect(await orValues.next() == 0b110)
            or.cancel()
            #expect(await orValues.next() == nil)

            let replace = EventSource.makeUserDataReplaceSource(queue: WorkQueue(label: "lull.test.events.replace"))
            var replaced = replace.events.makeAsyncIterator()
            replace.replace(data: 7)
            #expect(await replaced.next() == 7)
            replace.replace(data: 8)
            replace.replace(data: 9)
            #expect(await replaced.next() == 9)
            replace.cancel()
            #expect(await replaced.next() == nil)
        }

        @Test func aTimerDeliversItsFires() async throws {
            let timer = EventSource.makeTimerSource(queue: WorkQueue(label: "lull.test.events.timer"))
            timer.schedule(deadline: .now(), repeating: .milliseconds(1))
            var fires: UInt = 0
            var elements = 0
            for await count in timer.events {
                #expect(count >= 1)
                fires += count
                elements += 1
                if elements == 3 { break }  // leaving the loop cancels the timer
            }
            #expect(fires >= 3)
            #expect(await Self.eventually { timer.isCancelled })
        }

        @Test func readAndWriteSourcesDeliverByteCounts() async throws {
            let (readEnd, writeEnd) = try SourceTestKit.makePipe()
            let reader = EventSource.makeReadSource(fileDescriptor: readEnd, queue: WorkQueue(label: "lull.test.events.read"))
            let closed = Flag()
            reader.setCancelHandler { close(readEnd); closed.set() }
            var readable = reader.events.makeAsyncIterator()
            #expect(write(writeEnd, "hello", 5) == 5)
            #expect(await readable.next() == 5)
            var buffer = [UInt8](repeating: 0, count: 16)
            #expect(read(readEnd, &buffer, 16) == 5)
            #expect(write(writeEnd, "abc", 3) == 3)
            #expect(await readable.next() == 3, "a readiness already read was delivered, or the new bytes were not")

            let writer = EventSource.makeWriteSource(fileDescriptor: writeEnd, queue: WorkQueue(label: "lull.test.events.write"))
            writer.setCancelHandler { close(writeEnd) }
            var writable = writer.events.makeAsyncIterator()
            let space = await writable.next()
            #expect((space ?? 0) > 0)
            writer.cancel()
            #expect(await writable.next() == nil)
            reader.cancel()
            #expect(await readable.next() == nil)
            #expect(closed.isSet, "the loop ended before the cancel handler ran")
        }

        @Test func aSignalSourceDeliversItsDeliveries() async throws {
            let source = EventSource.makeSignalSource(signal: SIGUSR2, queue: WorkQueue(label: "lull.test.events.signal"))
            var deliveries = source.events.makeAsyncIterator()
            SignalSourceTests.raiseUnblocked(SIGUSR2)
            let count = await deliveries.next()
            #expect((count ?? 0) >= 1)
            source.cancel()
            #expect(await deliveries.next() == nil)
        }

        @Test func fileSystemAndProcessSourcesDeliverTypedEvents() async throws {
            let directory = try FileSystemTestKit.TemporaryDirectory("events")
            defer { directory.remove() }
            try FileSystemTestKit.write(directory.at("file"), "a")
            let file = try EventSource.makeFileSystemObjectSource(path: directory.at("file"), eventMask: [.write, .extend],
                                                                 queue: WorkQueue(label: "lull.test.events.fs"))
            var changes = file.events.makeAsyncIterator()
            try FileSystemTestKit.write(directory.at("file"), "more", append: true)
            let change: FileSystemEvent? = await changes.next()
            #expect(change?.contains(.write) == true)
            file.cancel()
            #expect(await changes.next() == nil)

            let pid = try SourceTestKit.spawnShell("exit 0")
            let process = EventSource.makeProcessSource(identifier: pid, eventMask: .exit,
                                                        queue: WorkQueue(label: "lull.test.events.process"))
            var exits = process.events.makeAsyncIterator()
            let exit: ProcessEvent? = await exits.next()
            #expect(exit == .exit)
            #expect(SourceTestKit.reap(pid) == 0)
            process.cancel()
            #expect(await exits.next() == nil)
        }

        // MARK: Ending

        @Test func cancellingTheConsumingTaskCancelsTheSourceAndTheLoopEndsAfterTheCancelHandler() async throws {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.events.task-cancel"))
            let loop = Loop(source)
            #expect(await Self.eventually { Self.channel(of: source)?.hasWaitingConsumer == true })
            source.add(data: 4)
            #expect(await Self.eventually { loop.total.value == 4 })
            loop.task.cancel()
            #expect(await Self.eventually { loop.ended.isSet })
            #expect(source.isCancelled)
            #expect(loop.cancelHandlerRanFirst.isSet, "the loop ended before the user's cancel handler ran")
            #expect(keepsHolding(for: .milliseconds(20)) { loop.cancelHandlerRuns.value == 1 })
        }

        @Test func cancellingTheSourceWhileTheBodyRunsEndsTheLoopAfterTheCancelHandler() async throws {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.events.source-cancel"))
            let inBody = Flag()
            let release = Gate()
            let loop = Loop(source) { _ in
                inBody.set()
                while !release.isOpen { try? await Task.sleep(for: .milliseconds(1)) }
                return true
            }
            source.add(data: 1)
            #expect(await Self.eventually { inBody.isSet })
            // Cancelled while the loop holds the source suspended: the cancel handler waits
            // for the loop to ask again, and then runs before the loop ends.
            source.add(data: 2)
            source.cancel()
            #expect(keepsHolding(for: .milliseconds(20)) { loop.cancelHandlerRuns.value == 0 })
            release.open()
            #expect(await Self.eventually { loop.ended.isSet })
            #expect(loop.cancelHandlerRanFirst.isSet)
            #expect(loop.values.values == [1], "an event handler ran after the cancel")
        }

        @Test func leavingTheLoopEarlyCancelsTheSource() async throws {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.events.break"))
            let cancelled = Flag()
            source.setCancelHandler { cancelled.set() }
            source.add(data: 3)
            for await value in source.events {
                #expect(value == 3)
                break
            }
            #expect(await Self.eventually { cancelled.isSet })
            #expect(source.isCancelled)
        }

        @Test func aSecondIterationEndsAtOnce() async throws {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.events.twice"))
            var first = source.events.makeAsyncIterator()
            var second = source.events.makeAsyncIterator()
            #expect(await second.next() == nil)
            source.add(data: 2)
            #expect(await first.next() == 2, "the second iteration disturbed the first")
            source.cancel()
            #expect(await first.next() == nil)
            var afterwards = source.events.makeAsyncIterator()
            #expect(await afterwards.next() == nil)
        }

        @Test func theLoopKeepsASourceNobodyElseHoldsAlive() async throws {
            weak var weakSource: UserDataAddSource?
            let events: SourceEvents<UInt>
            do {
                let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.events.alive"))
                weakSource = source
                events = source.events
            }
            var iterator = events.makeAsyncIterator()
            let source = try #require(weakSource)
            source.add(data: 6)
            #expect(await iterator.next() == 6)
            source.cancel()
            #expect(await iterator.next() == nil)
        }

        // MARK: Races

        /// Consumers end every way there is — the source cancelled, the task cancelled, the
        /// loop left — at random moments against a producer: every loop ends, every cancel
        /// handler runs once, and an unbalanced suspension would stop the process
        /// (over-resume) or leave a loop hanging.
        @Test func loopsEndEveryWayWhileEventsArriveWithoutLosingTheCancelHandler() async throws {
            let rounds = 150
            let queue = WorkQueue(label: "lull.test.events.races", attributes: .concurrent)
            var loops: [(source: UserDataAddSource, loop: Loop)] = []
            for round in 0..<rounds {
                let source = EventSource.makeUserDataAddSource(queue: queue)
                let leaveAfter = round % 3 == 2 ? UInt(round % 5 + 1) : .max
                let seen = Tally()
                let loop = Loop(source) { value in
                    // The third way: the loop is left after a few elements.
                    seen.add(value) < leaveAfter
                }
                WorkQueue.global().async {
                    for _ in 0..<(round % 7) * 20 { source.add(data: 1) }
                    switch round % 3 {
                    case 0: source.cancel()
                    case 1: loop.task.cancel()
                    default: source.add(data: 1_000)
                    }
                }
                loops.append((source, loop))
            }
            #expect(await Self.eventually { loops.allSatisfy { $0.loop.ended.isSet } })
            #expect(await Self.eventually { loops.allSatisfy { $0.loop.cancelHandlerRuns.value == 1 } })
            #expect(loops.allSatisfy { $0.source.isCancelled })
        }
    }
}
