import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    /// How a read delivery gets its `data` (when the handler asks for it) and when it runs at
    /// all: never with nothing to read because an earlier handler read the bytes its
    /// readiness announced, again while bytes are left, once for the end of file.
    @Suite struct ReadSourceDeliveryTests {
        /// One non-blocking read: the byte count (0 at the end of file), nil when nothing was
        /// there (EAGAIN) or the read failed.
        static func readNow(_ descriptor: Int32, max: Int = 65_536) -> Int? {
            var buffer = [UInt8](repeating: 0, count: max)
            while true {
                let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, max, Int32(MSG_DONTWAIT)) }
                if count >= 0 { return count }
                if errno == EINTR { continue }
                return nil
            }
        }

        /// Reads without blocking until nothing is left: the bytes read, and whether the first
        /// read found anything (or the end of file).
        static func drainNow(_ descriptor: Int32) -> (bytes: Int, foundSomething: Bool) {
            var total = 0
            var first = true
            var foundSomething = false
            while let count = readNow(descriptor), count > 0 {
                if first { foundSomething = true }
                first = false
                total += count
            }
            if first, readNow(descriptor) == 0 { foundSomething = true }
            return (total, foundSomething)
        }

        @Test func dataIsTakenOncePerDeliveryWhenTheHandlerAsks() throws {
            let (reader, writer) = try SourceTestKit.makeSocketPair()
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: WorkQueue(label: "lull.test.read-delivery.data"))
            let seen = Recorder<[UInt]>()
            let cancelled = Flag()
            source.setEventHandler {
                let first = source.data
                // Bytes that arrive while the handler runs are the next delivery's.
                if seen.count == 0 { SourceTestKit.writeAll(writer, [7, 7, 7]) }
                let again = source.data
                seen.append([first, again])
                _ = SourceTestKit.readSome(reader, max: Int(first))
            }
            source.setCancelHandler {
                close(reader)
                close(writer)
                cancelled.set()
            }
            source.activate()
            #expect(SourceTestKit.writeAll(writer, [1, 2, 3, 4, 5]) == 5)
            #expect(waitUntil { seen.count == 2 })
            #expect(keepsHolding { seen.count == 2 })
            #expect(seen.values == [[5, 5], [3, 3]])
            source.cancel()
            #expect(cancelled.await())
        }

        @Test func aHandlerThatNeverAsksForDataRunsOncePerArrivalAndNeverFindsNothing() throws {
            let (reader, writer) = try SourceTestKit.makeSocketPair()
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: WorkQueue(label: "lull.test.read-delivery.unasked"))
            let calls = Counter()
            let empty = Counter()
            let received = Atomic<Int>(0)
            let cancelled = Flag()
            source.setEventHandler {
                let (bytes, foundSomething) = Self.drainNow(reader)
                received.add(bytes, ordering: .relaxed)
                if !foundSomething { empty.increment() }
                calls.increment()
            }
            source.setCancelHandler {
                close(reader)
                close(writer)
                cancelled.set()
            }
            source.activate()
            for round in 1...5 {
                #expect(SourceTestKit.writeAll(writer, [UInt8](repeating: 3, count: 100)) == 100)
                #expect(calls.await { $0 == round })
                #expect(keepsHolding(for: .milliseconds(50)) { calls.value == round }, "round \(round): \(calls.value) calls")
            }
            #expect(empty.value == 0)
            #expect(received.load(ordering: .relaxed) == 500)
            source.cancel()
            #expect(cancelled.await())
        }

        @Test func aHandlerThatReadsPartOfTheBytesWithoutAskingRunsAgain() throws {
            let (reader, writer) = try SourceTestKit.makeSocketPair()
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: WorkQueue(label: "lull.test.read-delivery.partial"))
            let reads = Recorder<Int?>()
            let cancelled = Flag()
            source.setEventHandler { reads.append(Self.readNow(reader, max: 4)) }
            source.setCancelHandler {
                close(reader)
                close(writer)
                cancelled.set()
            }
            #expect(SourceTestKit.writeAll(writer, Array(1...10)) == 10)
            source.activate()
            #expect(waitUntil { reads.count >= 3 })
            #expect(keepsHolding { reads.count == 3 }, "reads: \(reads.values)")
            #expect(reads.values == [4, 4, 2])
            source.cancel()
            #expect(cancelled.await())
        }

        /// The handler reads bytes whose readiness was reported while it ran: that readiness
        /// is checked before it is delivered, and finds nothing, so the handler does not run
        /// for it. The source's queue is not the poller's class, so the poller reports the
        /// readiness while the handler runs; a second source, written after the bytes, tells
        /// the handler it was (both come in one poll, the bytes' first, or the bytes' earlier).
        @Test func bytesAHandlerReadAfterTheyWereReportedDoNotRunItAgain() throws {
            let (reader, writer) = try SourceTestKit.makeSocketPair()
            let (sentinelReader, sentinelWriter) = try SourceTestKit.makeSocketPair()
            let sentinel = EventSource.makeReadSource(fileDescriptor: sentinelReader,
                                                      queue: WorkQueue(label: "lull.test.read-delivery.sentinel"))
            let sentinelRuns = Counter()
            sentinel.setEventHandler {
                _ = Self.drainNow(sentinelReader)
                sentinelRuns.increment()
            }
            sentinel.setCancelHandler {
                close(sentinelReader)
                close(sentinelWriter)
            }
            sentinel.activate()
            let source = EventSource.makeReadSource(fileDescriptor: reader,
                                                    queue: WorkQueue(label: "lull.test.read-delivery.stale", qos: .utility))
            let calls = Counter()
            let empty = Counter()
            let cancelled = Flag()
            source.setEventHandler {
                if !Self.drainNow(reader).foundSomething { empty.increment() }
                let before = sentinelRuns.value
                SourceTestKit.writeAll(writer, [2])
                SourceTestKit.writeAll(sentinelWriter, [1])
                _ = sentinelRuns.await(timeout: .milliseconds(200)) { $0 > before }
                _ = Self.drainNow(reader)
                calls.increment()
            }
            source.setCancelHandler {
                close(reader)
                close(writer)
                cancelled.set()
            }
            source.activate()
            for round in 1...5 {
                #expect(SourceTestKit.writeAll(writer, [1]) == 1)
                #expect(calls.await { $0 == round })
                #expect(keepsHolding(for: .milliseconds(50)) { calls.value == round }, "round \(round): \(calls.value) calls")
            }
            #expect(empty.value == 0, "\(empty.value) of \(calls.value) deliveries found nothing to read")
            source.cancel()
            sentinel.cancel()
            #expect(cancelled.await())
        }

        /// The driver of a read source (to drive the reactor's side of an interleaving).
        static func driver(of source: ReadSource) -> (DrivenSourceCore, DescriptorDriver) {
            let core = source.core as! DrivenSourceCore
            return (core, core.driver as! DescriptorDriver)
        }

        /// Runs a block on the source's serial queue and waits for it: every delivery posted
        /// before has run by then.
        static func flush(_ queue: WorkQueue) -> Bool {
            let done = Flag()
            queue.async { done.set() }
            return done.await()
        }

        /// The interleaving that once looped a handler at the end of file: the poller ran the
        /// handler inline, the level check after it delivered the end of file, and the edge
        /// of the hang-up came in the poller's next iteration, newer than the handler. Here
        /// the test is the poller: it merges reports of iterations later than any handler,
        /// as `DescriptorMux.fired` does, each into an idle source, and waits for the
        /// delivery each posts. A report of the end already delivered runs no handler.
        static func reportTheEndAgain(_ source: ReadSource, on queue: WorkQueue, times: Int = 20) -> Bool {
            let (core, driver) = driver(of: source)
            for _ in 0..<times {
                guard flush(queue) else { return false }
                driver.readinessReported(to: core, iteration: Runtime.shared.reactor.pollIteration &+ 1)
            }
            return flush(queue)
        }

        @Test func atTheEndOfFileAHandlerThatNeverAsksForDataIsNotCalledInALoop() throws {
            let (reader, writer) = try SourceTestKit.makeSocketPair()
            let queue = WorkQueue(label: "lull.test.read-delivery.eof")
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: queue)
            let (_, driver) = Self.driver(of: source)
            let calls = Counter()
            let cancelled = Flag()
            // Reads what is there and ignores the end of file (neither cancels nor asks `data`).
            source.setEventHandler {
                _ = Self.drainNow(reader)
                calls.increment()
            }
            source.setCancelHandler {
                close(reader)
                cancelled.set()
            }
            source.activate()
            #expect(SourceTestKit.writeAll(writer, [1, 2, 3]) == 3)
            #expect(calls.await { $0 == 1 })
            close(writer)
            // The end of file is delivered, checked, once: by the delivery the hang-up's report
            // makes, or by the one the level check after an unchecked delivery makes (whose
            // handler read the end itself).
            #expect(waitUntil { driver.endOfFileWasDelivered })
            #expect(Self.flush(queue))
            let settled = calls.value
            #expect((2...3).contains(settled), "\(settled) calls")
            #expect(Self.reportTheEndAgain(source, on: queue))
            #expect(calls.value == settled, "\(calls.value) calls after \(settled)")
            #expect(driver.endOfFileWasDelivered)
            source.cancel()
            #expect(cancelled.await())
        }

        @Test func theEndOfFileAskedForInTheFirstDeliveryIsZeroAndNotDeliveredAgain() throws {
            let (reader, writer) = try SourceTestKit.makeSocketPair()
            let queue = WorkQueue(label: "lull.test.read-delivery.eof-asked")
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: queue)
            let seen = Recorder<UInt>()
            let registered = Flag()
            let cancelled = Flag()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { seen.append(source.data) }  // never cancels
            source.setCancelHandler {
                close(reader)
                cancelled.set()
            }
            source.activate()
            #expect(registered.await())
            close(writer)
            #expect(waitUntil { seen.count == 1 })
            #expect(Self.reportTheEndAgain(source, on: queue))
            #expect(seen.values == [0])
            source.cancel()
            #expect(cancelled.await())
        }

        /// Reports of the end of file from four threads at once, racing the deliveries they
        /// cause and the level checks after them: the bytes are delivered, then the end, once.
        /// Once the writer is closed the descriptor stays readable (bytes, then the end), so
        /// every report merged is true, as the poller's are.
        @Test func reportsOfTheEndRacingItsDeliveriesDeliverItOnce() throws {
            let (reader, writer) = try SourceTestKit.makeSocketPair()
            let queue = WorkQueue(label: "lull.test.read-delivery.eof-race")
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: queue)
            let (core, driver) = Self.driver(of: source)
            let seen = Recorder<UInt>()
            let registered = Flag()
            let cancelled = Flag()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler {
                let data = source.data
                seen.append(data)
                if data > 0 { _ = Self.drainNow(reader) }
            }
            source.setCancelHandler {
                close(reader)
                cancelled.set()
            }
            source.activate()
            #expect(registered.await())
            #expect(SourceTestKit.writeAll(writer, [1, 2, 3]) == 3)
            close(writer)
            SourceTestKit.runThreads(4) { _ in
                for _ in 0..<250 {
                    driver.readinessReported(to: core, iteration: Runtime.shared.reactor.pollIteration &+ 1)
                }
            }
            #expect(waitUntil { driver.endOfFileWasDelivered })
            #expect(Self.flush(queue))
            #expect(seen.values == [3, 0], "deliveries: \(seen.values)")
            source.cancel()
            #expect(cancelled.await())
        }

        /// A FIFO's reader sees the end of file when the writer closes, and bytes again when
        /// another writer opens it: each end is delivered once, the bytes after it too.
        @Test func bytesAfterTheEndOfFileAreDeliveredAndTheNextEndOnceMore() throws {
            let path = "/tmp/lull-read-delivery-fifo-\(getpid())-\(UInt32.random(in: 0 ... .max))"
            guard mkfifo(path, 0o600) == 0 else { throw SystemError("mkfifo", code: errno) }
            defer { unlink(path) }
            let reader = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
            #expect(reader >= 0)
            let firstWriter = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
            #expect(firstWriter >= 0)
            let queue = WorkQueue(label: "lull.test.read-delivery.fifo")
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: queue)
            let seen = Recorder<UInt>()
            let cancelled = Flag()
            source.setEventHandler {
                let data = source.data
                seen.append(data)
                if data > 0 { _ = Self.readAllNow(reader) }
            }
            source.setCancelHandler {
                close(reader)
                cancelled.set()
            }
            source.activate()
            #expect(SourceTestKit.writeAll(firstWriter, [1, 2, 3]) == 3)
            #expect(waitUntil { seen.count == 1 })
            close(firstWriter)
            #expect(waitUntil { seen.count == 2 })
            #expect(Self.reportTheEndAgain(source, on: queue, times: 5))
            let secondWriter = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
            #expect(secondWriter >= 0)
            #expect(SourceTestKit.writeAll(secondWriter, [4, 5]) == 2)
            #expect(waitUntil { seen.count == 3 })
            close(secondWriter)
            #expect(waitUntil { seen.count == 4 })
            #expect(Self.reportTheEndAgain(source, on: queue, times: 5))
            #expect(seen.values == [3, 0, 2, 0])
            source.cancel()
            #expect(cancelled.await())
        }

        /// Reads (with `read`, which works on any descriptor) until nothing is left.
        static func readAllNow(_ descriptor: Int32) -> Int {
            var buffer = [UInt8](repeating: 0, count: 4096)
            var total = 0
            while true {
                let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, 4096) }
                if count > 0 { total += count; continue }
                if count < 0 && errno == EINTR { continue }
                return total
            }
        }

        @Test func manyConnectionsLoseNoArrival() throws {
            let connections = 100
            let rounds = 20
            let received = Counter()
            let empty = Counter()
            let cancelled = Counter()
            var pairs: [(Int32, Int32)] = []
            var sources: [ReadSource] = []
            for index in 0..<connections {
                let (reader, writer) = try SourceTestKit.makeSocketPair()
                pairs.append((reader, writer))
                let source = EventSource.makeReadSource(fileDescriptor: reader,
                                                        queue: WorkQueue(label: "lull.test.read-delivery.many.\(index)"))
                source.setEventHandler {
                    let (bytes, foundSomething) = Self.drainNow(reader)
                    if !foundSomething { empty.increment() }
                    for _ in 0..<bytes { received.increment() }
                }
                source.setCancelHandler {
                    close(reader)
                    close(writer)
                    cancelled.increment()
                }
                source.activate()
                sources.append(source)
            }
            for round in 1...rounds {
                for (_, writer) in pairs { SourceTestKit.writeAll(writer, [UInt8(truncatingIfNeeded: round)]) }
                #expect(received.await { $0 == round * connections }, "round \(round): \(received.value) bytes")
            }
            #expect(empty.value == 0)
            for source in sources { source.cancel() }
            #expect(cancelled.await { $0 == connections })
        }

        @Test func aCancelDuringADeliveryLetsItFinishAndNothingRunsAfterIt() throws {
            let (reader, writer) = try SourceTestKit.makeSocketPair()
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: WorkQueue(label: "lull.test.read-delivery.cancel"))
            let entered = Flag()
            let gate = Gate()
            let seen = Recorder<UInt>()
            let cancels = Counter()
            source.setEventHandler {
                entered.set()
                gate.wait()
                // Asked after the cancel: the descriptor is still open until the cancel handler.
                seen.append(source.data)
                _ = Self.drainNow(reader)
            }
            source.setCancelHandler {
                close(reader)
                cancels.increment()
            }
            source.activate()
            #expect(SourceTestKit.writeAll(writer, [1, 2, 3, 4, 5]) == 5)
            #expect(entered.await())
            source.cancel()
            #expect(SourceTestKit.writeAll(writer, [6]) == 1)
            gate.open()
            #expect(cancels.await { $0 == 1 })
            #expect(keepsHolding(for: .milliseconds(100)) { seen.count == 1 && cancels.value == 1 })
            #expect(seen.values == [5] || seen.values == [6], "data: \(seen.values)")
            close(writer)
        }
    }
}
