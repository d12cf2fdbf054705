// Event sources: a read-source ping-pong across two pipes, read throughput on a socketpair,
// user-data merges from two threads, and the memory an idle read source costs. As in the
// queue benchmarks, the Lull and Dispatch versions are written out side by side, with the
// same descriptors and the same handler code, so that neither pays for an abstraction layer.

import Dispatch
import Glibc
import Lull
import Synchronization

enum SourceBenchmarks {
    static let all: [Benchmark] = [pingPong, readThroughput, userDataMerges, idleReadSources1k, idleReadSources100k]

    /// Names that select several benchmarks on the command line.
    static let groups: [String: [String]] = [
        "idle-read-sources": [idleReadSources1k.name, idleReadSources100k.name],
    ]

    /// How long a run waits for the cancel handlers of its sources before it reports a hang.
    static let cancelTimeout = 5.0

    // MARK: - ping-pong

    static let pingPong = Benchmark(
        name: "ping-pong",
        title: "read-source ping-pong: two pipes, two serial queues, a read source on each read end; A reads a byte "
            + "from pipe 1 and writes one to pipe 2, B the reverse; one byte in flight; figure = round trips / time",
        unit: "round trips/s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 30_000, quick: 10_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n))" },
        run: runPingPong
    )

    /// Times N round trips of one byte: main writes the first byte into pipe 1; A's handler
    /// moves each byte from pipe 1 to pipe 2 and B's from pipe 2 back to pipe 1, counting a
    /// round trip; the N-th one ends the run.
    @Sendable
    static func runPingPong(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let n = parameters.n
        guard let pipe1 = Descriptors.pipe(), let pipe2 = Descriptors.pipe() else {
            return .failed("pipe() failed: \(Descriptors.lastError())")
        }
        defer { Descriptors.close([pipe1.read, pipe1.write, pipe2.read, pipe2.write]) }
        let trips = QueueOwnedCounter()
        let handlerCalls = SharedCounter()
        let ioError = Atomic<Int32>(0)
        let completion = Completion()
        let cancelled = Countdown(2)

        // A: pipe 1 → pipe 2. B: pipe 2 → pipe 1, counting. One byte per call: a second
        // byte is never in flight, and a call that finds nothing (EAGAIN) does nothing.
        let handlerA: @Sendable () -> Void = {
            _ = handlerCalls.increment()
            var byte: UInt8 = 0
            guard read(pipe1.read, &byte, 1) == 1 else { return }
            if write(pipe2.write, &byte, 1) != 1 { ioError.store(errno, ordering: .relaxed) }
        }
        let handlerB: @Sendable () -> Void = {
            _ = handlerCalls.increment()
            var byte: UInt8 = 0
            guard read(pipe2.read, &byte, 1) == 1 else { return }
            trips.value += 1
            if trips.value == n {
                completion.finish(count: trips.value)
            } else if write(pipe1.write, &byte, 1) != 1 {
                ioError.store(errno, ordering: .relaxed)
            }
        }
        let onCancel: @Sendable () -> Void = { cancelled.countDown() }

        var first: UInt8 = 1
        let start: UInt64
        let cancelAll: () -> Void
        switch runtime {
        case .lull:
            let queueA = WorkQueue(label: "bench.ping-pong.a")
            let queueB = WorkQueue(label: "bench.ping-pong.b")
            let sourceA = EventSource.makeReadSource(fileDescriptor: pipe1.read, queue: queueA)
            let sourceB = EventSource.makeReadSource(fileDescriptor: pipe2.read, queue: queueB)
            sourceA.setEventHandler(handler: handlerA)
            sourceB.setEventHandler(handler: handlerB)
            sourceA.setCancelHandler(handler: onCancel)
            sourceB.setCancelHandler(handler: onCancel)
            sourceA.activate()
            sourceB.activate()
            start = Clock.now()
            _ = write(pipe1.write, &first, 1)
            cancelAll = {
                sourceA.cancel()
                sourceB.cancel()
            }
        case .dispatch:
            let queueA = DispatchQueue(label: "bench.ping-pong.a")
            let queueB = DispatchQueue(label: "bench.ping-pong.b")
            let sourceA = DispatchSource.makeReadSource(fileDescriptor: pipe1.read, queue: queueA)
            let sourceB = DispatchSource.makeReadSource(fileDescriptor: pipe2.read, queue: queueB)
            sourceA.setEventHandler(handler: handlerA)
            sourceB.setEventHandler(handler: handlerB)
            sourceA.setCancelHandler(handler: onCancel)
            sourceB.setCancelHandler(handler: onCancel)
            sourceA.activate()
            sourceB.activate()
            start = Clock.now()
            _ = write(pipe1.write, &first, 1)
            cancelAll = {
                sourceA.cancel()
                sourceB.cancel()
            }
        }
        let finished = completion.wait(seconds: parameters.runTimeout)
        cancelAll()
        guard finished else {
            // The counter belongs to queue B; read racily, for the message only.
            return .failed("TIMEOUT: \(Format.grouped(trips.value)) of \(Format.grouped(n)) round trips after "
                + "\(Format.seconds(parameters.runTimeout)) (\(Format.grouped(handlerCalls.value.load(ordering: .relaxed))) "
                + "handler calls); the byte in flight was not delivered")
        }
        guard cancelled.wait(seconds: cancelTimeout) else {
            return .failed("TIMEOUT: the cancel handlers of the two read sources had not run "
                + "\(Format.seconds(cancelTimeout)) after cancel()")
        }
        let error = ioError.load(ordering: .relaxed)
        guard error == 0 else {
            return .failed("write() in a handler failed: \(String(cString: strerror(error)))")
        }
        let seconds = Clock.seconds(from: start, to: completion.finishedAt.load(ordering: .acquiring))
        let calls = handlerCalls.value.load(ordering: .relaxed)
        return .ok(value: Double(n) / seconds, seconds: seconds,
                   extras: [("handler calls per trip", Double(calls) / Double(n)),
                            ("mean round trip µs", seconds / Double(n) * 1e6)],
                   notes: [])
    }

    // MARK: - read throughput

    static let chunkBytes = 64 * 1024

    static let readThroughput = Benchmark(
        name: "read-throughput",
        title: "read throughput: a socketpair (default buffers); a writer thread writes N MiB in 64 KiB blocking writes; "
            + "a read source on the non-blocking end reads 64 KiB at a time until EAGAIN; figure = MiB / (first write → last byte read)",
        unit: "MiB/s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 1024, quick: 256), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n)) MiB" },
        run: runReadThroughput
    )

    @Sendable
    static func runReadThroughput(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let totalBytes = parameters.n * 1024 * 1024
        guard let pair = Descriptors.socketPair() else {
            return .failed("socketpair() failed: \(Descriptors.lastError())")
        }
        defer { Descriptors.close([pair.reader, pair.writer]) }
        let reader = ReaderState(bufferBytes: chunkBytes)
        let handlerCalls = SharedCounter()
        let completion = Completion()
        let cancelled = Countdown(1)
        let writerDone = Countdown(1)
        let writeStarted = Atomic<UInt64>(0)
        let writeError = Atomic<Int32>(0)

        // Runs on the source's serial queue (its target): the reader state is confined to it.
        let handler: @Sendable () -> Void = {
            _ = handlerCalls.increment()
            while true {
                let count = read(pair.reader, reader.buffer, chunkBytes)
                if count > 0 {
                    reader.total += count
                    if reader.total == totalBytes { completion.finish(count: reader.total) }
                } else if count < 0 && errno == EINTR {
                    continue
                } else {
                    if count == 0 { reader.sawEndOfFile = true }
                    break
                }
            }
        }
        let onCancel: @Sendable () -> Void = { cancelled.countDown() }

        let cancel: () -> Void
        switch runtime {
        case .lull:
            let queue = WorkQueue(label: "bench.read-throughput")
            let source = EventSource.makeReadSource(fileDescriptor: pair.reader, queue: queue)
            source.setEventHandler(handler: handler)
            source.setCancelHandler(handler: onCancel)
            source.activate()
            cancel = { source.cancel() }
        case .dispatch:
            let queue = DispatchQueue(label: "bench.read-throughput")
            let source = DispatchSource.makeReadSource(fileDescriptor: pair.reader, queue: queue)
            source.setEventHandler(handler: handler)
            source.setCancelHandler(handler: onCancel)
            source.activate()
            cancel = { source.cancel() }
        }

        let writerFD = pair.writer
        let started = ThreadStarter.start {
            let chunk = UnsafeMutableRawPointer.allocate(byteCount: chunkBytes, alignment: 16)
            defer { chunk.deallocate() }
            chunk.initializeMemory(as: UInt8.self, repeating: 0x4C, count: chunkBytes)
            writeStarted.store(Clock.now(), ordering: .releasing)
            var written = 0
            outer: while written < totalBytes {
                let want = min(chunkBytes, totalBytes - written)
                var offset = 0
                while offset < want {
                    let count = write(writerFD, chunk + offset, want - offset)
                    if count > 0 {
                        offset += count
                    } else if count < 0 && errno == EINTR {
                        continue
                    } else {
                        writeError.store(count < 0 ? errno : EIO, ordering: .relaxed)
                        break outer
                    }
                }
                written += want
            }
            writerDone.countDown()
        }
        guard started else {
            cancel()
            return .failed("pthread_create failed for the writer thread")
        }
        let finished = completion.wait(seconds: parameters.runTimeout)
        let writerFinished = writerDone.wait(seconds: finished ? cancelTimeout : 0.5)
        cancel()
        guard finished else {
            return .failed("TIMEOUT: \(Format.grouped(reader.total)) of \(Format.grouped(totalBytes)) bytes read after "
                + "\(Format.seconds(parameters.runTimeout)) (\(Format.grouped(handlerCalls.value.load(ordering: .relaxed))) "
                + "handler calls; writer \(writerFinished ? "done" : "still writing"))")
        }
        guard writerFinished else {
            return .failed("the writer thread had not finished after the reader got every byte")
        }
        guard cancelled.wait(seconds: cancelTimeout) else {
            return .failed("TIMEOUT: the cancel handler of the read source had not run "
                + "\(Format.seconds(cancelTimeout)) after cancel()")
        }
        let error = writeError.load(ordering: .relaxed)
        guard error == 0 else {
            return .failed("write() failed in the writer thread: \(String(cString: strerror(error)))")
        }
        guard reader.total == totalBytes, !reader.sawEndOfFile else {
            return .failed("WRONG COUNT: read \(Format.grouped(reader.total)) of \(Format.grouped(totalBytes)) bytes"
                + (reader.sawEndOfFile ? " (and an unexpected end of file)" : ""))
        }
        let seconds = Clock.seconds(from: writeStarted.load(ordering: .acquiring),
                                    to: completion.finishedAt.load(ordering: .acquiring))
        let calls = handlerCalls.value.load(ordering: .relaxed)
        return .ok(value: Double(parameters.n) / seconds, seconds: seconds,
                   extras: [("handler calls", Double(calls)),
                            ("KiB per handler call", Double(totalBytes) / 1024 / Double(max(calls, 1)))],
                   notes: [])
    }

    // MARK: - user-data merges

    static let adderThreads = 2

    static let userDataMerges = Benchmark(
        name: "user-data-merges",
        title: "user-data add merges: 2 threads each do N add(data: 1) on one UserDataAdd source (serial target queue) "
            + "whose handler sums data; figure = 2N / (start → the handler's sum reaching 2N), exact sum checked",
        unit: "merges/s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 5_000_000, quick: 1_000_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n)) per thread" },
        run: runUserDataMerges
    )

    @Sendable
    static func runUserDataMerges(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let n = parameters.n
        let expected = n * adderThreads
        let sum = QueueOwnedCounter()
        let handlerCalls = SharedCounter()
        let completion = Completion()
        let cancelled = Countdown(1)
        let go = Latch()
        let addersDone = Countdown(adderThreads)
        let addersFinishedAt = Atomic<UInt64>(0)

        let merge: @Sendable () -> Void
        let cancel: () -> Void
        switch runtime {
        case .lull:
            let queue = WorkQueue(label: "bench.user-data-merges")
            let source = EventSource.makeUserDataAddSource(queue: queue)
            source.setEventHandler {
                _ = handlerCalls.increment()
                sum.value += Int(source.data)
                if sum.value == expected { completion.finish(count: sum.value) }
            }
            source.setCancelHandler { cancelled.countDown() }
            source.activate()
            merge = { source.add(data: 1) }
            cancel = { source.cancel() }
        case .dispatch:
            let queue = DispatchQueue(label: "bench.user-data-merges")
            let source = DispatchSource.makeUserDataAddSource(queue: queue)
            let box = DispatchUserDataAddBox(source)
            source.setEventHandler {
                _ = handlerCalls.increment()
                sum.value += Int(box.source.data)
                if sum.value == expected { completion.finish(count: sum.value) }
            }
            source.setCancelHandler { cancelled.countDown() }
            source.activate()
            merge = { box.source.add(data: 1) }
            cancel = { box.source.cancel() }
        }

        for _ in 0..<adderThreads {
            let started = ThreadStarter.start {
                _ = go.wait(seconds: parameters.runTimeout)
                for _ in 0..<n { merge() }
                if addersDone.countDown() { addersFinishedAt.store(Clock.now(), ordering: .releasing) }
            }
            guard started else {
                go.signal()
                cancel()
                return .failed("pthread_create failed for an adder thread")
            }
        }
        let start = Clock.now()
        go.signal()
        let finished = completion.wait(seconds: parameters.runTimeout)
        let addersFinished = addersDone.wait(seconds: finished ? cancelTimeout : 0.5)
        // Late or extra deliveries would change the sum after it reached 2N.
        Clock.sleep(seconds: 0.005)
        cancel()
        guard finished else {
            return .failed("TIMEOUT: the handler's sum was \(Format.grouped(sum.value)) of \(Format.grouped(expected)) after "
                + "\(Format.seconds(parameters.runTimeout)) (\(Format.grouped(handlerCalls.value.load(ordering: .relaxed))) "
                + "handler calls; adders \(addersFinished ? "done" : "still adding"))")
        }
        guard addersFinished else {
            return .failed("the adder threads had not finished after the handler's sum reached \(Format.grouped(expected))")
        }
        guard cancelled.wait(seconds: cancelTimeout) else {
            return .failed("TIMEOUT: the cancel handler of the user-data source had not run "
                + "\(Format.seconds(cancelTimeout)) after cancel()")
        }
        // The cancel handler ran after the last event handler: the sum is final.
        guard sum.value == expected else {
            return .failed("WRONG SUM: the handler summed \(Format.grouped(sum.value)) for \(Format.grouped(expected)) "
                + "add(data: 1) calls")
        }
        let seconds = Clock.seconds(from: start, to: completion.finishedAt.load(ordering: .acquiring))
        let addSeconds = Clock.seconds(from: start, to: addersFinishedAt.load(ordering: .acquiring))
        let calls = handlerCalls.value.load(ordering: .relaxed)
        return .ok(value: Double(expected) / seconds, seconds: seconds,
                   extras: [("adders done after ms", addSeconds * 1000),
                            ("handler calls", Double(calls)),
                            ("merges per handler call", Double(expected) / Double(max(calls, 1)))],
                   notes: [])
    }

    // MARK: - idle read sources (memory)

    static let idleReadSources1k = idleReadSources(count: 1_000, suffix: "1k")
    static let idleReadSources100k = idleReadSources(count: 100_000, suffix: "100k")

    /// Sources created, registered and kept before the baseline is taken, so that the
    /// runtime's threads, its reactor and the allocator's arenas exist already.
    static let warmUpSources = 256
    /// Descriptors kept free for the runtimes' own (epoll, eventfd, timerfd...).
    static let descriptorMargin = 128
    /// Pause before each RSS reading, so that workers that ran registration handlers park.
    static let settleSeconds = 0.2

    static func idleReadSources(count: Int, suffix: String) -> Benchmark {
        Benchmark(
            name: "idle-read-sources-\(suffix)",
            title: "memory per idle read source: K read sources (event + registration handler, default global queue) "
                + "on pipe read ends nobody writes to; figure = RSS increase / K once all K are registered",
            unit: "bytes/source",
            lowerIsBetter: true,
            singleShot: true,
            parameters: { options in Parameters(n: count, seconds: 0, runTimeout: options.runTimeout) },
            sizeDescription: { "K=\(Format.grouped($0.n))" },
            run: runIdleReadSources,
            freshProcessPerRun: true
        )
    }

    @Sendable
    static func runIdleReadSources(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let k = parameters.n
        var notes: [String] = []
        let limit = Descriptors.raiseLimit()
        let openAtStart = Descriptors.openCount()
        guard let warmUpPipe = Descriptors.pipe() else {
            return .failed("pipe() failed: \(Descriptors.lastError())")
        }
        var warmUpDescriptors = [warmUpPipe.read]
        for _ in 1..<warmUpSources {
            let copy = dup(warmUpPipe.read)
            guard copy >= 0 else { return .failed("dup() failed: \(Descriptors.lastError())") }
            warmUpDescriptors.append(copy)
        }
        // K pipes when the limit allows 2K descriptors more; otherwise one pipe whose read end
        // is duplicated as often as the limit allows, and several sources per descriptor.
        let available = Int(limit.soft) - openAtStart - warmUpSources - 2 - descriptorMargin
        var descriptors: [Int32] = []
        descriptors.reserveCapacity(min(k, max(available, 1)))
        var pipeWriteEnds: [Int32] = []
        if 2 * k <= available {
            pipeWriteEnds.reserveCapacity(k)
            for _ in 0..<k {
                guard let pipe = Descriptors.pipe() else {
                    return .failed("pipe() failed after \(descriptors.count) pipes: \(Descriptors.lastError())")
                }
                descriptors.append(pipe.read)
                pipeWriteEnds.append(pipe.write)
            }
            notes.append("one pipe per source (\(Format.grouped(k)) pipes)")
        } else {
            guard available >= 2, let pipe = Descriptors.pipe() else {
                return .failed("too few descriptors: RLIMIT_NOFILE \(limit.soft), \(openAtStart) open")
            }
            pipeWriteEnds.append(pipe.write)
            descriptors.append(pipe.read)
            while descriptors.count < min(k, available) {
                let copy = dup(pipe.read)
                guard copy >= 0 else { break }
                descriptors.append(copy)
            }
            let perDescriptor = (Double(k) / Double(descriptors.count) * 100).rounded() / 100
            notes.append("RLIMIT_NOFILE hard limit \(Format.grouped(Int(limit.hard))) is too low for "
                + "\(Format.grouped(k)) pipes: one pipe's read end duplicated into \(Format.grouped(descriptors.count)) "
                + "descriptors, \(perDescriptor) sources per descriptor (the same layout for both runtimes)")
        }
        // The child exits after this run: the descriptors are left to the exit. The sources are
        // released when this function returns (Lull cancels them then), before the exit.

        let registered = Atomic<Int>(0)
        let allRegistered = Latch()
        let eventHandler: @Sendable () -> Void = {}
        let registrationHandler: @Sendable () -> Void = {
            let count = registered.wrappingAdd(1, ordering: .relaxed).newValue
            if count == warmUpSources { allRegistered.signal() }
        }

        var warmUpKeeper = SourceKeeper(runtime, count: warmUpSources)
        var keeper = SourceKeeper(runtime, count: k)
        // Warm-up: the same work on its own descriptors, kept alive.
        warmUpKeeper.create(warmUpSources, descriptors: warmUpDescriptors,
                            eventHandler: eventHandler, registrationHandler: registrationHandler)
        guard allRegistered.wait(seconds: parameters.runTimeout) else {
            return .failed("TIMEOUT: \(registered.load(ordering: .relaxed)) of \(warmUpSources) warm-up read sources "
                + "registered after \(Format.seconds(parameters.runTimeout))")
        }
        let measuredRegistered = Latch()
        let measuredTarget = warmUpSources + k
        Clock.sleep(seconds: settleSeconds)
        guard let rssBefore = Memory.residentBytes() else { return .failed("cannot read VmRSS from /proc/self/status") }

        let start = Clock.now()
        let measured: @Sendable () -> Void = {
            let count = registered.wrappingAdd(1, ordering: .relaxed).newValue
            if count == measuredTarget { measuredRegistered.signal() }
        }
        keeper.create(k, descriptors: descriptors, eventHandler: eventHandler, registrationHandler: measured)
        let created = Clock.now()
        guard measuredRegistered.wait(seconds: parameters.runTimeout) else {
            return .failed("TIMEOUT: \(Format.grouped(registered.load(ordering: .relaxed) - warmUpSources)) of "
                + "\(Format.grouped(k)) read sources registered after \(Format.seconds(parameters.runTimeout))")
        }
        let done = Clock.now()
        Clock.sleep(seconds: settleSeconds)
        guard let rssAfter = Memory.residentBytes() else { return .failed("cannot read VmRSS from /proc/self/status") }
        withExtendedLifetime(warmUpKeeper) {}
        withExtendedLifetime(keeper) {}
        withExtendedLifetime(pipeWriteEnds) {}

        let perSource = Double(rssAfter - rssBefore) / Double(k)
        var extras: [(String, Double)] = []
        extras.append(("create+activate ms", Clock.seconds(from: start, to: created) * 1000))
        extras.append(("all registered after ms", Clock.seconds(from: start, to: done) * 1000))
        extras.append(("RSS before MiB", Double(rssBefore) / 1_048_576))
        return .ok(value: perSource, seconds: Clock.seconds(from: start, to: done), extras: extras, notes: notes)
    }
}

/// Keeps the idle sources alive (Lull cancels a source the program no longer references),
/// in an array filled before the baseline, so that storing a source allocates nothing.
struct SourceKeeper {
    let runtime: Runtime
    private var lull: [ReadSource?]
    private var dispatch: [(any DispatchSourceRead)?]
    private var used = 0

    init(_ runtime: Runtime, count: Int) {
        self.runtime = runtime
        lull = [ReadSource?](repeating: nil, count: runtime == .lull ? count : 0)
        dispatch = [(any DispatchSourceRead)?](repeating: nil, count: runtime == .dispatch ? count : 0)
    }

    /// Creates `count` read sources, source i on `descriptors[i % descriptors.count]`, with
    /// the given handlers, and activates each.
    mutating func create(_ count: Int, descriptors: [Int32], eventHandler: @escaping @Sendable () -> Void,
                         registrationHandler: @escaping @Sendable () -> Void) {
        for index in 0..<count {
            let descriptor = descriptors[index % descriptors.count]
            switch runtime {
            case .lull:
                let source = EventSource.makeReadSource(fileDescriptor: descriptor)
                source.setEventHandler(handler: eventHandler)
                source.setRegistrationHandler(handler: registrationHandler)
                source.activate()
                lull[used] = source
            case .dispatch:
                let source = DispatchSource.makeReadSource(fileDescriptor: descriptor)
                source.setEventHandler(handler: eventHandler)
                source.setRegistrationHandler(handler: registrationHandler)
                source.activate()
                dispatch[used] = source
            }
            used += 1
        }
    }
}

/// Lets a Dispatch user-data source be used from `@Sendable` closures.
///
/// `@unchecked Sendable`: Dispatch sources are thread-safe objects (merging and reading
/// `data` from any thread is their documented use); the Swift overlay does not mark them.
final class DispatchUserDataAddBox: @unchecked Sendable {
    let source: any DispatchSourceUserDataAdd

    init(_ source: any DispatchSourceUserDataAdd) {
        self.source = source
    }
}

/// The state of the read-throughput handler: its buffer and its byte count.
///
/// `@unchecked Sendable`: touched only by the handler, which runs on one serial queue (and
/// never concurrently with itself), and by the main thread after the run has finished.
final class ReaderState: @unchecked Sendable {
    let buffer: UnsafeMutableRawPointer
    var total = 0
    var sawEndOfFile = false

    init(bufferBytes: Int) {
        buffer = UnsafeMutableRawPointer.allocate(byteCount: bufferBytes, alignment: 16)
    }

    deinit {
        buffer.deallocate()
    }
}

/// Counts down from `count`; `wait` returns when it reached 0.
final class Countdown: Sendable {
    private let remaining: Atomic<Int>
    private let latch = Latch()

    init(_ count: Int) {
        remaining = Atomic(count)
    }

    /// Returns true for the call that reached 0.
    @discardableResult
    func countDown() -> Bool {
        if remaining.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
            latch.signal()
            return true
        }
        return false
    }

    func wait(seconds: Double) -> Bool { latch.wait(seconds: seconds) }
}

/// Starts detached pthreads (no Foundation).
enum ThreadStarter {
    final class Body: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    /// Starts a detached thread that runs `body`; false if the thread could not be created.
    static func start(_ body: @escaping @Sendable () -> Void) -> Bool {
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        var thread = pthread_t()
        let result = pthread_create(&thread, nil, { context in
            let body = Unmanaged<Body>.fromOpaque(context!).takeRetainedValue()
            body.run()
            return nil
        }, context)
        guard result == 0 else {
            Unmanaged<Body>.fromOpaque(context).release()
            return false
        }
        pthread_detach(thread)
        return true
    }
}

/// Pipes, socketpairs and the descriptor limit.
enum Descriptors {
    struct Pipe: Sendable {
        let read: Int32
        let write: Int32
    }

    struct Pair: Sendable {
        /// Non-blocking: watched by the read source.
        let reader: Int32
        /// Blocking: written by the writer thread.
        let writer: Int32
    }

    /// A pipe with both ends non-blocking.
    static func pipe() -> Pipe? {
        var fds: [Int32] = [-1, -1]
        guard Glibc.pipe(&fds) == 0 else { return nil }
        for descriptor in fds {
            let flags = fcntl(descriptor, F_GETFL)
            guard flags >= 0, fcntl(descriptor, F_SETFL, flags | O_NONBLOCK) == 0 else {
                close(fds)
                return nil
            }
        }
        return Pipe(read: fds[0], write: fds[1])
    }

    static func socketPair() -> Pair? {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            return nil
        }
        let flags = fcntl(fds[0], F_GETFL)
        guard flags >= 0, fcntl(fds[0], F_SETFL, flags | O_NONBLOCK) == 0 else {
            _ = Glibc.close(fds[0])
            _ = Glibc.close(fds[1])
            return nil
        }
        return Pair(reader: fds[0], writer: fds[1])
    }

    /// A blocking pipe with both ends close-on-exec, or nil (errno set).
    static func closeOnExecPipe() -> (read: Int32, write: Int32)? {
        var fds: [Int32] = [-1, -1]
        guard Glibc.pipe(&fds) == 0 else { return nil }
        for descriptor in fds where fcntl(descriptor, F_SETFD, FD_CLOEXEC) != 0 {
            close(fds)
            return nil
        }
        return (fds[0], fds[1])
    }

    static func close(_ descriptors: [Int32]) {
        for descriptor in descriptors { _ = Glibc.close(descriptor) }
    }

    static func lastError() -> String { String(cString: strerror(errno)) }

    /// Raises the soft RLIMIT_NOFILE to the hard limit; returns both.
    static func raiseLimit() -> (soft: UInt64, hard: UInt64) {
        var limit = rlimit()
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        guard getrlimit(resource, &limit) == 0 else { return (1024, 1024) }
        if limit.rlim_cur < limit.rlim_max {
            var raised = limit
            raised.rlim_cur = limit.rlim_max
            if setrlimit(resource, &raised) == 0 { limit = raised }
        }
        return (UInt64(limit.rlim_cur), UInt64(limit.rlim_max))
    }

    /// Descriptors open in this process, from /proc/self/fd.
    static func openCount() -> Int {
        guard let directory = opendir("/proc/self/fd") else { return 0 }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            if entry.pointee.d_name.0 != 0x2E { count += 1 }  // not "." or ".."
        }
        return count - 1  // the directory's own descriptor
    }
}

/// This process's memory, as the kernel and the allocator see it.
enum Memory {
    /// VmRSS from /proc/PID/status of `pid` (nil: this process), in bytes.
    static func residentBytes(of pid: pid_t? = nil) -> Int? {
        guard let status = ThreadSwitches.readFile(pid.map { "/proc/\($0)/status" } ?? "/proc/self/status") else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            let fields = line.dropFirst("VmRSS:".count).split { $0 == " " || $0 == "\t" }
            if let kilobytes = fields.first.flatMap({ Int($0) }) { return kilobytes * 1024 }
        }
        return nil
    }
}
