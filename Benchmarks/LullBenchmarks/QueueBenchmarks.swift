// Queue throughput: async onto a serial queue, async onto a concurrent queue, and sync
// round trips onto a serial queue. The Lull and Dispatch versions of each are written out
// side by side, with the same blocks, so that neither pays for an abstraction layer.

import Dispatch
import Lull

enum QueueBenchmarks {
    static let all: [Benchmark] = [serialAsync, concurrentAsync, syncRoundTrip]

    static let serialAsync = Benchmark(
        name: "serial-async",
        title: "async onto a serial queue: one producer thread, N blocks that each increment a counter the queue owns",
        unit: "blocks/s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 1_000_000, quick: 100_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n))" },
        run: runSerialAsync
    )

    static let concurrentAsync = Benchmark(
        name: "concurrent-async",
        title: "async onto a concurrent queue: one producer thread, N blocks that each do an atomic increment",
        unit: "blocks/s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 1_000_000, quick: 100_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n))" },
        run: runConcurrentAsync
    )

    static let syncRoundTrip = Benchmark(
        name: "sync",
        title: "sync onto a serial queue from a non-worker thread (the main thread): N round trips of a trivial block",
        unit: "round trips/s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 1_000_000, quick: 100_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n))" },
        run: runSyncRoundTrip
    )

    // MARK: - async onto a serial queue

    /// Times from the first submit to the run of a final block submitted after the N;
    /// FIFO order puts it last, and it reads the count the N blocks left.
    @Sendable
    static func runSerialAsync(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let n = parameters.n
        let counter = QueueOwnedCounter()
        let completion = Completion()
        let start: UInt64
        switch runtime {
        case .lull:
            let queue = WorkQueue(label: "bench.serial-async")
            start = Clock.now()
            for _ in 0..<n {
                queue.async { counter.value &+= 1 }
            }
            queue.async { completion.finish(count: counter.value) }
        case .dispatch:
            let queue = DispatchQueue(label: "bench.serial-async")
            start = Clock.now()
            for _ in 0..<n {
                queue.async { counter.value &+= 1 }
            }
            queue.async { completion.finish(count: counter.value) }
        }
        guard completion.wait(seconds: parameters.runTimeout) else {
            return .failed("TIMEOUT: the final block, submitted after \(Format.grouped(n)) blocks, "
                + "had not run after \(Format.seconds(parameters.runTimeout))")
        }
        let seen = completion.observedCount.load(ordering: .relaxed)
        guard seen == n else {
            return .failed("WRONG COUNT: the final block saw \(Format.grouped(seen)) of \(Format.grouped(n)) "
                + "increments (lost updates: the queue ran blocks concurrently or out of order)")
        }
        let seconds = Clock.seconds(from: start, to: completion.finishedAt.load(ordering: .acquiring))
        return .ok(value: Double(n) / seconds, seconds: seconds)
    }

    // MARK: - async onto a concurrent queue

    /// Times from the first submit to the run of the block whose increment reaches N.
    @Sendable
    static func runConcurrentAsync(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let n = parameters.n
        let counter = SharedCounter()
        let completion = Completion()
        let block: @Sendable () -> Void = {
            if counter.increment() == n { completion.finish(count: n) }
        }
        let start: UInt64
        switch runtime {
        case .lull:
            let queue = WorkQueue(label: "bench.concurrent-async", attributes: .concurrent)
            start = Clock.now()
            for _ in 0..<n {
                queue.async(execute: block)
            }
        case .dispatch:
            let queue = DispatchQueue(label: "bench.concurrent-async", attributes: .concurrent)
            start = Clock.now()
            for _ in 0..<n {
                queue.async(execute: block)
            }
        }
        guard completion.wait(seconds: parameters.runTimeout) else {
            let ran = counter.value.load(ordering: .relaxed)
            return .failed("TIMEOUT: \(Format.grouped(ran)) of \(Format.grouped(n)) blocks had run after "
                + "\(Format.seconds(parameters.runTimeout))")
        }
        // A block that ran twice would push the count past N after the finish.
        Clock.sleep(seconds: 0.001)
        let total = counter.value.load(ordering: .relaxed)
        guard total == n else {
            return .failed("WRONG COUNT: \(Format.grouped(total)) block runs for \(Format.grouped(n)) blocks submitted")
        }
        let seconds = Clock.seconds(from: start, to: completion.finishedAt.load(ordering: .acquiring))
        return .ok(value: Double(n) / seconds, seconds: seconds)
    }

    // MARK: - sync round trips

    /// N `sync` calls from the calling thread (the child's main thread, which is no
    /// worker of either runtime). A hang here is caught by the parent's timeout.
    @Sendable
    static func runSyncRoundTrip(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let n = parameters.n
        let counter = QueueOwnedCounter()
        let start: UInt64
        let end: UInt64
        switch runtime {
        case .lull:
            let queue = WorkQueue(label: "bench.sync")
            start = Clock.now()
            for _ in 0..<n {
                queue.sync { counter.value &+= 1 }
            }
            end = Clock.now()
        case .dispatch:
            let queue = DispatchQueue(label: "bench.sync")
            start = Clock.now()
            for _ in 0..<n {
                queue.sync { counter.value &+= 1 }
            }
            end = Clock.now()
        }
        guard counter.value == n else {
            return .failed("WRONG COUNT: \(Format.grouped(counter.value)) of \(Format.grouped(n)) sync blocks ran")
        }
        let seconds = Clock.seconds(from: start, to: end)
        return .ok(value: Double(n) / seconds, seconds: seconds)
    }
}
