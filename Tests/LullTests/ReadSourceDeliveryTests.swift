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

        @Test func atTheEndOfFileAHandlerThatNeverAsksForDataIsNotCalledInALoop() throws {
            let (reader, writer) = try SourceTestKit.makeSocketPair()
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: WorkQueue(label: "lull.test.read-delivery.eof"))
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
            #expect(calls.await { $0 >= 2 })
            // The end of file is delivered, once checked: then the source waits for news.
            #expect(keepsHolding(for: .milliseconds(200)) { calls.value <= 3 }, "\(calls.value) calls")
            let settled = calls.value
            #expect(keepsHolding(for: .milliseconds(100)) { calls.value == settled })
            source.cancel()
            #expect(cancelled.await())
        }

        @Test func theEndOfFileAskedForInTheFirstDeliveryIsZeroAndNotDeliveredAgain() throws {
            let (reader, writer) = try SourceTestKit.makeSocketPair()
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: WorkQueue(label: "lull.test.read-delivery.eof-asked"))
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
            #expect(keepsHolding(for: .milliseconds(200)) { seen.count == 1 }, "deliveries: \(seen.values)")
            #expect(seen.values == [0])
            source.cancel()
            #expect(cancelled.await())
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
