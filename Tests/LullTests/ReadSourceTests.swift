import Glibc
import Synchronization
import Testing
@testable import Lull

/// Where the bytes of a read or write source test travel.
enum SourceByteChannel: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case pipe
    case socketPair

    var testDescription: String { rawValue }

    /// (reading end, writing end)
    func make() throws -> (reader: Int32, writer: Int32) {
        switch self {
        case .pipe:
            let made = try SourceTestKit.makePipe()
            return (made.read, made.write)
        case .socketPair:
            let made = try SourceTestKit.makeSocketPair()
            return (made.0, made.1)
        }
    }
}

extension LullSuite {
    @Suite struct ReadSourceTests {
        @Test(arguments: SourceByteChannel.allCases)
        func dataIsTheNumberOfBytesAvailable(channel: SourceByteChannel) throws {
            let (reader, writer) = try channel.make()
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: WorkQueue(label: "lull.test.src.read.data"))
            #expect(source.handle == UInt(reader))
            let seen = Recorder<UInt>()
            let received = Mutex<[UInt8]>([])
            let cancelled = Flag()
            source.setEventHandler {
                let available = source.data
                seen.append(available)
                let bytes = SourceTestKit.readSome(reader, max: Int(available))
                received.locked { $0 += bytes }
            }
            source.setCancelHandler {
                close(reader)
                close(writer)
                cancelled.set()
            }
            source.activate()
            #expect(SourceTestKit.writeAll(writer, Array("hello".utf8)) == 5)
            #expect(waitFor(seconds: 10) { seen.count == 1 })
            let thousand = (0..<1_000).map { UInt8(truncatingIfNeeded: $0) }
            #expect(SourceTestKit.writeAll(writer, thousand) == 1_000)
            #expect(waitFor(seconds: 10) { seen.count == 2 })
            #expect(keepsHolding(for: .milliseconds(200)) { seen.count == 2 })
            #expect(seen.values == [5, 1_000])
            #expect(received.locked { $0 } == Array("hello".utf8) + thousand)
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)))
        }

        @Test(arguments: SourceByteChannel.allCases)
        func theHangUpOfThePeerFiresWithZero(channel: SourceByteChannel) throws {
            let (reader, writer) = try channel.make()
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: WorkQueue(label: "lull.test.src.read.eof"))
            let registered = Flag()
            let seen = Recorder<UInt>()
            let cancelled = Flag()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler {
                let available = source.data
                seen.append(available)
                // At the end of file the condition stays true: stop watching.
                if available == 0 { source.cancel() } else { _ = SourceTestKit.readSome(reader, max: Int(available)) }
            }
            source.setCancelHandler {
                close(reader)
                cancelled.set()
            }
            source.activate()
            #expect(registered.await(timeout: .seconds(10)))
            close(writer)
            #expect(cancelled.await(timeout: .seconds(10)))
            #expect(seen.values == [0])
        }

        @Test(arguments: SourceByteChannel.allCases)
        func dataLeftBeforeTheHangUpIsDeliveredAndThenTheEndOfFile(channel: SourceByteChannel) throws {
            let (reader, writer) = try channel.make()
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: WorkQueue(label: "lull.test.src.read.data-then-eof"))
            let seen = Recorder<UInt>()
            let received = Mutex<[UInt8]>([])
            let cancelled = Flag()
            source.setEventHandler {
                let available = source.data
                seen.append(available)
                if available == 0 {
                    source.cancel()
                } else {
                    let bytes = SourceTestKit.readSome(reader, max: Int(available))
                    received.locked { $0 += bytes }
                }
            }
            source.setCancelHandler {
                close(reader)
                cancelled.set()
            }
            // Both the data and the hang-up happen before the source watches.
            #expect(SourceTestKit.writeAll(writer, [1, 2, 3]) == 3)
            close(writer)
            source.activate()
            #expect(cancelled.await(timeout: .seconds(10)), "no end-of-file delivery after the data: \(seen.values)")
            #expect(seen.values == [3, 0])
            #expect(received.locked { $0 } == [1, 2, 3])
        }

        @Test(arguments: SourceByteChannel.allCases)
        func aHandlerThatReadsPartOfTheDataRunsAgainUntilItIsDrained(channel: SourceByteChannel) throws {
            let (reader, writer) = try channel.make()
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: WorkQueue(label: "lull.test.src.read.level"))
            let seen = Recorder<UInt>()
            let received = Mutex<[UInt8]>([])
            let cancelled = Flag()
            source.setEventHandler {
                seen.append(source.data)
                let bytes = SourceTestKit.readSome(reader, max: 1)
                received.locked { $0 += bytes }
            }
            source.setCancelHandler {
                close(reader)
                close(writer)
                cancelled.set()
            }
            #expect(SourceTestKit.writeAll(writer, Array(1...10)) == 10)
            source.activate()
            #expect(waitFor(seconds: 10) { seen.count >= 10 })
            // Drained: no further call while nothing changes (no spinning).
            #expect(keepsHolding(for: .milliseconds(300)) { seen.count == 10 }, "calls: \(seen.values)")
            #expect(seen.values == [10, 9, 8, 7, 6, 5, 4, 3, 2, 1])
            #expect(received.locked { $0 } == Array(1...10))
            // And it wakes again for new data.
            #expect(SourceTestKit.writeAll(writer, [42, 43]) == 2)
            #expect(waitFor(seconds: 10) { seen.count == 12 })
            #expect(keepsHolding(for: .milliseconds(200)) { seen.count == 12 })
            #expect(Array(seen.values.suffix(2)) == [2, 1])
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)))
        }

        @Test(arguments: SourceByteChannel.allCases)
        func aDrainedSourceDoesNotSpin(channel: SourceByteChannel) throws {
            let (reader, writer) = try channel.make()
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: WorkQueue(label: "lull.test.src.read.no-spin"))
            let calls = Counter()
            let cancelled = Flag()
            source.setEventHandler {
                calls.increment()
                _ = SourceTestKit.readSome(reader, max: 65_536)
            }
            source.setCancelHandler {
                close(reader)
                close(writer)
                cancelled.set()
            }
            source.activate()
            // Nothing to read: never fires.
            #expect(keepsHolding(for: .milliseconds(300)) { calls.value == 0 })
            for round in 1...5 {
                #expect(SourceTestKit.writeAll(writer, [UInt8](repeating: 9, count: 100)) == 100)
                #expect(calls.await(timeout: .seconds(10)) { $0 == round })
                #expect(keepsHolding(for: .milliseconds(150)) { calls.value == round }, "round \(round): \(calls.value) calls")
            }
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)))
        }

        @Test func onARegularFileDataIsTheBytesFromTheOffsetToTheEnd() throws {
            let file = try RegularFile(size: 100)
            defer { file.remove() }
            let descriptor = file.descriptor
            #expect(lseek(descriptor, 0, SEEK_SET) == 0)
            let source = EventSource.makeReadSource(fileDescriptor: descriptor, queue: WorkQueue(label: "lull.test.src.read.file"))
            let seen = Recorder<UInt>()
            let received = Counter()
            let cancelled = Flag()
            source.setEventHandler {
                seen.append(source.data)
                let bytes = SourceTestKit.readSome(descriptor, max: 30)
                for _ in bytes { received.increment() }
            }
            source.setCancelHandler { cancelled.set() }
            source.activate()
            #expect(waitFor(seconds: 10) { seen.count >= 4 })
            // At the end of the file: no more calls.
            #expect(keepsHolding(for: .milliseconds(300)) { seen.count == 4 }, "calls: \(seen.values)")
            #expect(seen.values == [100, 70, 40, 10])
            #expect(received.value == 100)
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)))
        }

        @Test func onARegularFileStartingMidwayDataCountsFromTheOffset() throws {
            let file = try RegularFile(size: 1_000)
            defer { file.remove() }
            let descriptor = file.descriptor
            #expect(lseek(descriptor, 400, SEEK_SET) == 400)
            let source = EventSource.makeReadSource(fileDescriptor: descriptor, queue: WorkQueue(label: "lull.test.src.read.file-offset"))
            let seen = Recorder<UInt>()
            let cancelled = Flag()
            source.setEventHandler {
                seen.append(source.data)
                _ = SourceTestKit.readSome(descriptor, max: Int(source.data))
            }
            source.setCancelHandler { cancelled.set() }
            source.activate()
            #expect(waitFor(seconds: 10) { seen.count >= 1 })
            #expect(keepsHolding(for: .milliseconds(300)) { seen.count == 1 })
            #expect(seen.values == [600])
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)))
        }

        @Test func onARegularFileAtItsEndItDoesNotFire() throws {
            let file = try RegularFile(size: 50)
            defer { file.remove() }
            let descriptor = file.descriptor
            #expect(lseek(descriptor, 0, SEEK_END) == 50)
            let source = EventSource.makeReadSource(fileDescriptor: descriptor, queue: WorkQueue(label: "lull.test.src.read.file-end"))
            let registered = Flag()
            let calls = Counter()
            let cancelled = Flag()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { calls.increment() }
            source.setCancelHandler { cancelled.set() }
            source.activate()
            #expect(registered.await(timeout: .seconds(10)))
            #expect(keepsHolding(for: .milliseconds(300)) { calls.value == 0 })
            #expect(source.registrationError == nil)
            #expect(!source.isCancelled)
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)))
            #expect(calls.value == 0)
        }
    }
}

/// An unlinked temporary file of `size` bytes, open for reading and writing.
struct RegularFile {
    let descriptor: Int32

    init(size: Int) throws {
        var template = Array("/tmp/lull-src-test-XXXXXX".utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard descriptor >= 0 else { throw SourceTestKit.SystemError(call: "mkstemp", code: errno) }
        SourceTestKit.setCloseOnExec(descriptor)
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        self.descriptor = descriptor
        let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0) }
        guard SourceTestKit.writeAll(descriptor, bytes) == size else {
            close(descriptor)
            throw SourceTestKit.SystemError(call: "write", code: errno)
        }
    }

    func remove() {
        close(descriptor)
    }
}
