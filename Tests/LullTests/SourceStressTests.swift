import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    @Suite struct SourceStressTests {
        // MARK: Echo

        /// One client/server socket pair echoing `size` bytes through read and write sources,
        /// all on one serial queue.
        final class EchoConnection: Sendable {
            let index: Int
            let size: Int
            let client: Int32
            let server: Int32
            let queue: WorkQueue
            let clientWriter: WriteSource
            let clientReader: ReadSource
            let serverReader: ReadSource
            let sent = Mutex<Int>(0)
            let received = Mutex<Int>(0)
            let mismatches = Atomic<Int>(0)
            let failures = Recorder<String>()
            let verified = Flag()
            let clientSourcesLeft = Atomic<Int>(2)
            let closedDescriptors: Counter

            init(index: Int, size: Int, closedDescriptors: Counter) throws {
                self.index = index
                self.size = size
                self.closedDescriptors = closedDescriptors
                (client, server) = try SourceTestKit.makeSocketPair()
                SourceTestKit.setNonBlocking(client)
                SourceTestKit.setNonBlocking(server)
                queue = WorkQueue(label: "lull.test.src.echo.\(index)")
                clientWriter = EventSource.makeWriteSource(fileDescriptor: client, queue: queue)
                clientReader = EventSource.makeReadSource(fileDescriptor: client, queue: queue)
                serverReader = EventSource.makeReadSource(fileDescriptor: server, queue: queue)
                clientWriter.setEventHandler { self.clientCanWrite() }
                clientReader.setEventHandler { self.clientCanRead() }
                serverReader.setEventHandler { self.serverCanRead() }
                clientWriter.setCancelHandler { self.clientSourceFinished() }
                clientReader.setCancelHandler { self.clientSourceFinished() }
                serverReader.setCancelHandler {
                    close(self.server)
                    self.closedDescriptors.increment()
                }
            }

            func expectedByte(at offset: Int) -> UInt8 {
                UInt8(truncatingIfNeeded: index &* 131 &+ offset &* 7 &+ offset >> 8)
            }

            func activate() {
                serverReader.activate()
                clientReader.activate()
                clientWriter.activate()
            }

            func cancelAll() {
                clientWriter.cancel()
                clientReader.cancel()
                serverReader.cancel()
            }

            /// At most 4 KiB per call: the level-triggered source calls again while writable.
            private func clientCanWrite() {
                let offset = sent.locked { $0 }
                guard offset < size else { return }
                let count = min(4_096, size - offset)
                let bytes = (0..<count).map { expectedByte(at: offset + $0) }
                let result = bytes.withUnsafeBytes { write(client, $0.baseAddress, count) }
                if result > 0 {
                    let total = sent.locked { sent -> Int in
                        sent += result
                        return sent
                    }
                    if total == size { clientWriter.cancel() }
                } else if result < 0 && errno != EAGAIN && errno != EINTR {
                    failures.append("client write: errno \(errno)")
                    clientWriter.cancel()
                }
            }

            private func clientCanRead() {
                let available = Int(clientReader.data)
                let bytes = SourceTestKit.readSome(client, max: max(available, 1))
                if bytes.isEmpty {
                    if available == 0 {
                        failures.append("client saw end of file after \(received.locked { $0 }) bytes")
                        clientReader.cancel()
                    }
                    return
                }
                let total = received.locked { received -> Int in
                    for (offset, byte) in bytes.enumerated() where byte != expectedByte(at: received + offset) {
                        mismatches.add(1, ordering: .relaxed)
                    }
                    received += bytes.count
                    return received
                }
                if total == size {
                    verified.set()
                    clientReader.cancel()
                } else if total > size {
                    failures.append("client received \(total) bytes of \(size)")
                    clientReader.cancel()
                }
            }

            private func serverCanRead() {
                let bytes = SourceTestKit.readSome(server, max: 65_536)
                if bytes.isEmpty {
                    if serverReader.data == 0 { serverReader.cancel() }  // the client closed
                    return
                }
                // Echo everything; the kernel buffers are far larger than `size`, so waiting
                // for room is a fallback that should not be needed.
                var written = 0
                while written < bytes.count {
                    let result = bytes.withUnsafeBytes { write(server, $0.baseAddress! + written, bytes.count - written) }
                    if result > 0 {
                        written += result
                    } else if result < 0 && (errno == EAGAIN || errno == EINTR) {
                        var entry = pollfd(fd: server, events: Int16(POLLOUT), revents: 0)
                        _ = poll(&entry, 1, 1_000)
                    } else {
                        failures.append("server write: errno \(errno)")
                        serverReader.cancel()
                        return
                    }
                }
            }

            private func clientSourceFinished() {
                if clientSourcesLeft.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
                    close(client)
                    closedDescriptors.increment()
                }
            }
        }

        @Test func aThousandConcurrentConnectionsEchoWithoutLosingAByte() throws {
            try SourceTestKit.raiseDescriptorLimit(to: 4_096)
            // Under ThreadSanitizer the test's own byte-by-byte checking runs some fifty times
            // slower (debug build, every access instrumented): 100 connections there.
            let connectionCount = SourceTestKit.underThreadSanitizer ? 100 : 1_000
            let size = 16_384
            let closedDescriptors = Counter()
            var connections: [EchoConnection] = []
            connections.reserveCapacity(connectionCount)
            for index in 0..<connectionCount {
                connections.append(try EchoConnection(index: index, size: size, closedDescriptors: closedDescriptors))
            }
            for connection in connections { connection.activate() }
            let allVerified = waitFor(seconds: SourceTestKit.underThreadSanitizer ? 240 : 60) {
                connections.allSatisfy { $0.verified.isSet }
            }
            #expect(allVerified, "\(connections.filter { !$0.verified.isSet }.count) connections did not get all their bytes back")
            // Every side closes its descriptor in a cancel handler once done.
            let allClosed = closedDescriptors.await(timeout: .seconds(30)) { $0 == 2 * connectionCount }
            #expect(allClosed, "\(closedDescriptors.value) of \(2 * connectionCount) descriptors closed")
            let mismatches = connections.reduce(0) { $0 + $1.mismatches.load(ordering: .relaxed) }
            #expect(mismatches == 0, "\(mismatches) bytes came back wrong")
            let failures = connections.flatMap { $0.failures.values }
            #expect(failures.isEmpty, "\(failures.prefix(10))")
            #expect(connections.allSatisfy { $0.received.locked { $0 } == size })
            if !allClosed {
                for connection in connections { connection.cancelAll() }
                _ = closedDescriptors.await(timeout: .seconds(10)) { $0 == 2 * connectionCount }
            }
        }

        // MARK: Suspend storms

        @Test func suspendStormsWhileEventsFlowLoseNothing() {
            let queue = WorkQueue(label: "lull.test.src.storm", attributes: .concurrent)
            let source = EventSource.makeUserDataAddSource(queue: queue)
            let total = Atomic<UInt>(0)
            let overlap = OverlapTracker()
            source.setEventHandler {
                overlap.enter()
                total.add(source.data, ordering: .relaxed)
                overlap.exit()
            }
            source.activate()
            let rounds = 20_000
            SourceTestKit.runThreads(6) { thread in
                for round in 0..<rounds {
                    switch thread {
                    case 0, 1, 2:
                        // Suspenders that also merge while holding their suspension.
                        source.suspend()
                        source.add(data: 1)
                        if round % 8 == 0 { source.suspend(); source.resume() }
                        source.resume()
                    default:
                        source.add(data: 1)
                        if round % 32 == 0 {
                            source.suspend()
                            source.resume()
                        }
                    }
                }
            }
            let expected = UInt(6 * rounds)
            #expect(waitFor(seconds: 10) { total.load(ordering: .relaxed) == expected },
                    "summed \(total.load(ordering: .relaxed)) of \(expected)")
            #expect(keepsHolding(for: .milliseconds(100)) { total.load(ordering: .relaxed) == expected })
            #expect(overlap.maximum == 1)
            // The suspensions balanced out: one more suspend holds events, one resume frees them.
            source.suspend()
            source.add(data: 5)
            #expect(keepsHolding(for: .milliseconds(200)) { total.load(ordering: .relaxed) == expected })
            source.resume()
            #expect(waitFor(seconds: 10) { total.load(ordering: .relaxed) == expected + 5 })
            source.cancel()
        }

        @Test func suspendStormsOnAReadSourceLoseNoByte() throws {
            let (reader, writer) = try SourceTestKit.makeSocketPair()
            SourceTestKit.setNonBlocking(reader)
            let source = EventSource.makeReadSource(fileDescriptor: reader, queue: WorkQueue(label: "lull.test.src.storm-read"))
            let received = Atomic<Int>(0)
            let cancelled = Flag()
            source.setEventHandler {
                received.add(SourceTestKit.drain(reader), ordering: .relaxed)
            }
            source.setCancelHandler {
                close(reader)
                close(writer)
                cancelled.set()
            }
            source.activate()
            let chunks = 2_000
            let chunk = [UInt8](repeating: 3, count: 100)
            SourceTestKit.runThreads(3) { thread in
                for _ in 0..<chunks {
                    if thread == 0 {
                        _ = SourceTestKit.writeAll(writer, chunk)
                    } else {
                        source.suspend()
                        source.resume()
                    }
                }
            }
            #expect(waitFor(seconds: 10) { received.load(ordering: .relaxed) == chunks * chunk.count },
                    "received \(received.load(ordering: .relaxed)) of \(chunks * chunk.count)")
            source.cancel()
            #expect(cancelled.await(timeout: .seconds(10)))
        }

        // MARK: Cancel during delivery

        enum Step: Equatable, Sendable {
            case start, end, cancel
        }

        @Test func cancelWhileAnEventIsDeliveredRunsTheCancelHandlerAfterTheHandlerReturned() {
            let iterations = 100
            var logs: [Recorder<Step>] = []
            for iteration in 0..<iterations {
                let queue = WorkQueue(label: "lull.test.src.cancel-race.\(iteration)", attributes: .concurrent)
                let source = EventSource.makeUserDataAddSource(queue: queue)
                let log = Recorder<Step>()
                let started = Flag()
                let cancelled = Flag()
                source.setEventHandler {
                    log.append(.start)
                    started.set()
                    usleep(UInt32(200 + (iteration % 7) * 300))
                    log.append(.end)
                }
                source.setCancelHandler {
                    log.append(.cancel)
                    cancelled.set()
                }
                source.activate()
                source.add(data: 1)
                let waitForStart = iteration % 3 != 0
                if waitForStart {
                    #expect(started.await(timeout: .seconds(10)))
                }
                // Cancel from another thread while more events keep arriving.
                let canceller = WorkQueue.global(qos: .userInitiated)
                canceller.async { source.cancel() }
                for _ in 0..<20 { source.add(data: 1) }
                #expect(cancelled.await(timeout: .seconds(10)), "iteration \(iteration)")
                if waitForStart {
                    #expect(Array(log.values.prefix(2)) == [.start, .end], "iteration \(iteration): \(log.values)")
                }
                logs.append(log)
            }
            // Nothing may run after a cancel handler, even a little later.
            #expect(keepsHolding(for: .milliseconds(200)) { logs.allSatisfy { $0.values.last == .cancel } })
            for (iteration, log) in logs.enumerated() {
                let steps = log.values
                #expect(steps.last == .cancel, "iteration \(iteration): \(steps)")
                #expect(steps.filter { $0 == .cancel }.count == 1, "iteration \(iteration): \(steps)")
                // start/end pairs, never overlapping, all before the cancel handler.
                let events = Array(steps.dropLast())
                #expect(events.count % 2 == 0, "iteration \(iteration): \(steps)")
                for pair in stride(from: 0, to: events.count - 1, by: 2) {
                    #expect(events[pair] == .start && events[pair + 1] == .end, "iteration \(iteration): \(steps)")
                }
            }
        }

        @Test func cancellingAReadSourceFromAnotherThreadWhileItsHandlerRunsIsOrderly() throws {
            for iteration in 0..<50 {
                let (reader, writer) = try SourceTestKit.makePipe()
                let source = EventSource.makeReadSource(fileDescriptor: reader, queue: WorkQueue(label: "lull.test.src.cancel-read.\(iteration)"))
                let log = Recorder<Step>()
                let started = Flag()
                let cancelled = Flag()
                let readAfterClose = Counter()
                let closed = Flag()
                source.setEventHandler {
                    log.append(.start)
                    if closed.isSet { readAfterClose.increment() }
                    started.set()
                    usleep(500)
                    _ = SourceTestKit.readSome(reader, max: 1)  // leave data: stays readable
                    log.append(.end)
                }
                source.setCancelHandler {
                    log.append(.cancel)
                    close(reader)
                    closed.set()
                    cancelled.set()
                }
                source.activate()
                #expect(SourceTestKit.writeAll(writer, [UInt8](repeating: 1, count: 64)) == 64)
                #expect(started.await(timeout: .seconds(10)))
                SourceTestKit.runThreads(1) { _ in source.cancel() }
                #expect(cancelled.await(timeout: .seconds(10)))
                #expect(keepsHolding(for: .milliseconds(20)) { log.values.last == .cancel })
                let steps = log.values
                #expect(steps.last == .cancel && steps.filter { $0 == .cancel }.count == 1, "iteration \(iteration): \(steps)")
                #expect(steps.dropLast().count % 2 == 0, "iteration \(iteration): a handler was cut short: \(steps)")
                #expect(readAfterClose.value == 0)
                close(writer)
            }
        }
    }
}

extension SourceTestKit {
    /// Raises the soft RLIMIT_NOFILE to at least `minimum` (the hard limit permitting).
    static func raiseDescriptorLimit(to minimum: rlim_t) throws {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            throw SystemError(call: "getrlimit", code: errno)
        }
        if limit.rlim_cur >= minimum { return }
        guard limit.rlim_max >= minimum else {
            throw SystemError(call: "setrlimit (hard limit \(limit.rlim_max) < \(minimum))", code: EPERM)
        }
        limit.rlim_cur = minimum
        guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            throw SystemError(call: "setrlimit", code: errno)
        }
    }
}
