import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    @Suite struct WriteSourceTests {
        @Test(arguments: SourceByteChannel.allCases)
        func firesWhenWritableWithPositiveData(channel: SourceByteChannel) throws {
            let (reader, writer) = try channel.make()
            let source = EventSource.makeWriteSource(fileDescriptor: writer, queue: WorkQueue(label: "lull.test.src.write.fires"))
            #expect(source.handle == UInt(writer))
            let seen = Recorder<UInt>()
            let cancelled = Flag()
            source.setEventHandler {
                seen.append(source.data)
                // Level-triggered: while writable it would keep firing; one call is enough.
                source.cancel()
            }
            source.setCancelHandler {
                close(reader)
                close(writer)
                cancelled.set()
            }
            source.activate()
            #expect(cancelled.await(timeout: .seconds(10)))
            #expect(seen.count == 1, "calls: \(seen.values)")
            #expect(seen.values.allSatisfy { $0 > 0 }, "data: \(seen.values)")
        }

        @Test(arguments: SourceByteChannel.allCases)
        func keepsFiringWhileWritable(channel: SourceByteChannel) throws {
            let (reader, writer) = try channel.make()
            let source = EventSource.makeWriteSource(fileDescriptor: writer, queue: WorkQueue(label: "lull.test.src.write.level"))
            let seen = Recorder<UInt>()
            let cancelled = Flag()
            source.setEventHandler {
                seen.append(source.data)
                // Writes a little each time; the descriptor stays writable.
                _ = SourceTestKit.writeAll(writer, [1])
                if seen.count == 5 { source.cancel() }
            }
            source.setCancelHandler {
                close(reader)
                close(writer)
                cancelled.set()
            }
            source.activate()
            #expect(cancelled.await(timeout: .seconds(10)))
            #expect(seen.count == 5)
            #expect(seen.values.allSatisfy { $0 > 0 }, "data: \(seen.values)")
        }

        @Test func stopsFiringWhileTheBufferIsFullUntilThePeerReads() throws {
            let (local, peer) = try SourceTestKit.makeSocketPair()
            SourceTestKit.setNonBlocking(local)
            SourceTestKit.setNonBlocking(peer)
            let source = EventSource.makeWriteSource(fileDescriptor: local, queue: WorkQueue(label: "lull.test.src.write.full"))
            let calls = Counter()
            let seen = Recorder<UInt>()
            let filled = Flag()
            let writtenTotal = Atomic<Int>(0)
            let cancelled = Flag()
            let chunk = [UInt8](repeating: 0x5A, count: 65_536)
            source.setEventHandler {
                calls.increment()
                seen.append(source.data)
                if !filled.isSet {
                    // Write until the kernel says the buffer is full.
                    while true {
                        let result = chunk.withUnsafeBytes { write(local, $0.baseAddress, chunk.count) }
                        if result > 0 {
                            writtenTotal.add(result, ordering: .relaxed)
                        } else if result < 0 && errno == EINTR {
                            continue
                        } else {
                            break
                        }
                    }
                    filled.set()
                } else {
                    source.cancel()
                }
            }
            source.setCancelHandler {
                close(local)
                cancelled.set()
            }
            source.activate()
            #expect(filled.await(timeout: .seconds(10)))
            #expect(writtenTotal.load(ordering: .relaxed) > 0)
            #expect(calls.value == 1)
            // Full: no call while the peer reads nothing.
            #expect(keepsHolding(for: .milliseconds(400)) { calls.value == 1 }, "calls while full: \(calls.value)")
            // The peer drains everything: writable again.
            var drained = 0
            let total = writtenTotal.load(ordering: .relaxed)
            #expect(waitFor(seconds: 10) {
                drained += SourceTestKit.drain(peer)
                return drained == total
            })
            #expect(cancelled.await(timeout: .seconds(10)))
            #expect(calls.value == 2)
            #expect(seen.values.allSatisfy { $0 > 0 }, "data: \(seen.values)")
            close(peer)
        }

        @Test func firesForARegularFile() throws {
            let file = try RegularFile(size: 10)
            defer { file.remove() }
            let descriptor = file.descriptor
            let source = EventSource.makeWriteSource(fileDescriptor: descriptor, queue: WorkQueue(label: "lull.test.src.write.file"))
            let seen = Recorder<UInt>()
            let cancelled = Flag()
            source.setEventHandler {
                seen.append(source.data)
                source.cancel()
            }
            source.setCancelHandler { cancelled.set() }
            source.activate()
            #expect(cancelled.await(timeout: .seconds(10)))
            #expect(seen.count == 1)
            #expect(seen.values.allSatisfy { $0 > 0 }, "data: \(seen.values)")
        }
    }
}
