// A source's `events` (an AsyncSequence with backpressure) against a plain event handler on
// the same source kind, in the same process, in alternating chunks: what the async loop
// costs per element over the handler it replaces.

import Glibc
import Lull
import Synchronization

enum EventsBenchmarks {
    static let all: [Benchmark] = [eventsChain, eventsPingPong, eventsPingPongInstalled, eventsPingPongQueue, eventsStream]

    /// Chunks per variant in one run, taking turns (the first of each pair alternates), so
    /// that the host's slow and fast phases fall on both alike.
    static let chunks = 10

    // MARK: - events-chain

    static let eventsChain = Benchmark(
        name: "events-chain",
        title: "user-data add source, one element at a time: each element adds the next 1 (no merging); `for await` over "
            + "`events` (a task on the default executor) against a plain event handler; figure = elements / time. Both "
            + "variants in one process, in \(chunks) alternating chunks each; the handler's column is the peer's",
        unit: "elements/s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 20_000, quick: 5_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n))" },
        run: { runtime, parameters in runBoth(runtime, parameters, shape: .chain) },
        peerInSameProcess: true,
        maxRuns: 5,
        peerName: "handler"
    )

    // MARK: - events-ping-pong

    static let eventsPingPong = pingPongBenchmark(
        name: "events-ping-pong", placement: .defaultExecutor,
        tasks: "two tasks on Swift's default executor")

    static let eventsPingPongInstalled = pingPongBenchmark(
        name: "events-ping-pong-installed", placement: .installed,
        tasks: "two tasks after `GlobalExecutor.install()`, so Lull's pool runs them")

    static let eventsPingPongQueue = pingPongBenchmark(
        name: "events-ping-pong-queue", placement: .sourceQueue,
        tasks: "two tasks started with `Task(executorPreference:)` on their source's queue")

    /// Where the ping-pong's consuming tasks run.
    enum TaskPlacement {
        /// Swift's default executor (no `install()`).
        case defaultExecutor
        /// Lull's pool: the child installs `GlobalExecutor` before its first task.
        case installed
        /// Each task prefers its source's queue as its executor.
        case sourceQueue
    }

    static func pingPongBenchmark(name: String, placement: TaskPlacement, tasks: String) -> Benchmark {
        Benchmark(
            name: name,
            title: "two user-data add sources A and B (each on a serial queue of its own); A's consumer adds 1 to B, B's adds "
                + "1 to A, one element in flight, so each consumer waits idle for every element; `for await` over `events` "
                + "(\(tasks)) against plain event handlers; figure = round trips / time. Both "
                + "variants in one process, in \(chunks) alternating chunks each; the handlers' column is the peer's",
            unit: "round trips/s",
            lowerIsBetter: false,
            singleShot: false,
            parameters: { options in
                Parameters(n: options.size(full: 20_000, quick: 5_000), seconds: 0, runTimeout: options.runTimeout)
            },
            sizeDescription: { "N=\(Format.grouped($0.n))" },
            run: { runtime, parameters in
                if placement == .installed, let failure = ExecutorBenchmarks.prepare(.lull) { return .failed(failure) }
                return runBoth(runtime, parameters, shape: .pingPong(placement))
            },
            peerInSameProcess: true,
            maxRuns: 5,
            peerName: "handler"
        )
    }

    /// A round trips between two sources, one element in flight.
    static func pingPongChunk(_ variant: Variant, placement: TaskPlacement, count: Int, timeout: Double) -> Measured? {
        let pingQueue = WorkQueue(label: "bench.events.ping")
        let pongQueue = WorkQueue(label: "bench.events.pong")
        let a = EventSource.makeUserDataAddSource(queue: pingQueue)
        let b = EventSource.makeUserDataAddSource(queue: pongQueue)
        let completion = Completion()
        let start: UInt64
        switch variant {
        case .handler:
            let trips = SharedCounter()
            a.setEventHandler { b.add(data: 1) }
            b.setEventHandler {
                let done = trips.increment()
                if done < count { a.add(data: 1) } else { completion.finish(count: done) }
            }
            a.activate()
            b.activate()
            start = Clock.now()
            a.add(data: 1)
        case .events:
            let pings = a.events
            let pongs = b.events
            let ready = Countdown(2)
            let preferred: (ping: WorkQueue?, pong: WorkQueue?) = placement == .sourceQueue ? (pingQueue, pongQueue) : (nil, nil)
            Task(executorPreference: preferred.ping) {
                var iterator = pings.makeAsyncIterator()
                _ = ready.countDown()
                while await iterator.next() != nil { b.add(data: 1) }
            }
            Task(executorPreference: preferred.pong) {
                var iterator = pongs.makeAsyncIterator()
                _ = ready.countDown()
                var done = 0
                while await iterator.next() != nil {
                    done += 1
                    if done < count { a.add(data: 1) } else { break }
                }
                completion.finish(count: done)
            }
            _ = ready.wait(seconds: timeout)
            start = Clock.now()
            a.add(data: 1)
        }
        let finished = completion.wait(seconds: timeout)
        let end = completion.finishedAt.load(ordering: .acquiring)
        a.cancel()
        b.cancel()
        guard finished, completion.observedCount.load(ordering: .relaxed) == count else { return nil }
        return Measured(nanoseconds: end - start, elements: count)
    }

    // MARK: - events-stream

    static let eventsStream = Benchmark(
        name: "events-stream",
        title: "user-data add source fed by a thread doing N add(data: 1) as fast as it can; the consumer sums until 2N; "
            + "`for await` over `events` against a plain event handler; figure = N / time, exact sum checked. Both "
            + "variants in one process, in \(chunks) alternating chunks each; the handler's column is the peer's",
        unit: "adds/s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 5_000_000, quick: 1_000_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n))" },
        run: { runtime, parameters in runBoth(runtime, parameters, shape: .stream) },
        peerInSameProcess: true,
        maxRuns: 5,
        peerName: "handler"
    )

    enum Variant {
        case events, handler
    }

    enum Shape: Equatable {
        case chain, pingPong(TaskPlacement), stream
    }

    /// One run: both variants in turns; the figure is the `events` loop's (`runtime` is
    /// always Lull here), the extras prefixed "peer" the handler's.
    static func runBoth(_ runtime: Runtime, _ parameters: Parameters, shape: Shape) -> RunOutcome {
        let stream = shape == .stream
        let chunk = max(1, parameters.n / chunks)
        var wall: [Variant: UInt64] = [:]
        var elements: [Variant: Int] = [:]
        for index in 0..<chunks {
            let order: [Variant] = index % 2 == 0 ? [.events, .handler] : [.handler, .events]
            for variant in order {
                let measured = switch shape {
                case .chain: chainChunk(variant, count: chunk, timeout: parameters.runTimeout)
                case .pingPong(let placement): pingPongChunk(variant, placement: placement, count: chunk, timeout: parameters.runTimeout)
                case .stream: streamChunk(variant, count: chunk, timeout: parameters.runTimeout)
                }
                guard let measured else {
                    return .failed("TIMEOUT or wrong sum: \(variant) chunk of \(Format.grouped(chunk)) after "
                        + Format.seconds(parameters.runTimeout))
                }
                wall[variant, default: 0] += measured.nanoseconds
                elements[variant, default: 0] += measured.elements
            }
        }
        let count = Double(chunk * chunks)
        func rate(_ variant: Variant) -> Double { count / (Double(wall[variant] ?? 1) / 1e9) }
        let (unit, item) = switch shape {
        case .chain: ("elements/s", "element")
        case .pingPong: ("round trips/s", "round trip")
        case .stream: ("adds/s", "add")
        }
        var extras: [(String, Double)] = [("ns per \(item)", Double(wall[.events] ?? 0) / count),
                                          ("peer ns per \(item)", Double(wall[.handler] ?? 0) / count),
                                          ("peer " + unit, rate(.handler)),
                                          ("events/handler time", Double(wall[.events] ?? 0) / Double(max(wall[.handler] ?? 1, 1)))]
        if stream {
            extras += [("elements", Double(elements[.events] ?? 0)), ("peer elements", Double(elements[.handler] ?? 0))]
        }
        return .ok(value: rate(.events), seconds: Double(wall[.events] ?? 0) / 1e9, extras: extras, notes: [])
    }

    struct Measured {
        let nanoseconds: UInt64
        let elements: Int
    }

    /// Each element (handler call) adds the next 1, `count` times: one element in flight.
    static func chainChunk(_ variant: Variant, count: Int, timeout: Double) -> Measured? {
        let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "bench.events.chain"))
        let completion = Completion()
        let start: UInt64
        switch variant {
        case .handler:
            let sum = SharedCounter()
            source.setEventHandler {
                let total = sum.value.wrappingAdd(Int(source.data), ordering: .relaxed).newValue
                if total < count { source.add(data: 1) } else { completion.finish(count: total) }
            }
            source.activate()
            start = Clock.now()
            source.add(data: 1)
        case .events:
            let elements = source.events
            start = Clock.now()
            Task {
                var total = 0
                source.add(data: 1)
                for await value in elements {
                    total += Int(value)
                    if total < count { source.add(data: 1) } else { break }
                }
                completion.finish(count: total)
            }
        }
        let finished = completion.wait(seconds: timeout)
        let end = completion.finishedAt.load(ordering: .acquiring)
        source.cancel()
        guard finished, completion.observedCount.load(ordering: .relaxed) == count else { return nil }
        return Measured(nanoseconds: end - start, elements: count)
    }

    /// A thread adds 1 `count` times as fast as it can; the consumer sums until `count`.
    static func streamChunk(_ variant: Variant, count: Int, timeout: Double) -> Measured? {
        let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "bench.events.stream"))
        let completion = Completion()
        let calls = SharedCounter()
        switch variant {
        case .handler:
            let sum = SharedCounter()
            source.setEventHandler {
                _ = calls.increment()
                let total = sum.value.wrappingAdd(Int(source.data), ordering: .relaxed).newValue
                if total >= count { completion.finish(count: total) }
            }
            source.activate()
        case .events:
            let elements = source.events
            let started = Latch()
            Task {
                var iterator = elements.makeAsyncIterator()
                started.signal()
                var total = 0
                while total < count, let value = await iterator.next() {
                    _ = calls.increment()
                    total += Int(value)
                }
                completion.finish(count: total)
            }
            _ = started.wait(seconds: timeout)
        }
        let added = Countdown(1)
        let start = Clock.now()
        let started = ThreadStarter.start {
            for _ in 0..<count { source.add(data: 1) }
            _ = added.countDown()
        }
        guard started else {
            source.cancel()
            return nil
        }
        let finished = completion.wait(seconds: timeout)
        let end = completion.finishedAt.load(ordering: .acquiring)
        _ = added.wait(seconds: timeout)
        source.cancel()
        guard finished, completion.observedCount.load(ordering: .relaxed) == count else { return nil }
        return Measured(nanoseconds: end - start, elements: calls.value.load(ordering: .relaxed))
    }
}
