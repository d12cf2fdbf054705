// The cost of execution-context propagation: async throughput onto a serial queue from a
// producer with an activity current, against the same producer without one. Every block
// then carries the activity to the queue, runs with it current (and bound for Swift tasks
// it might start), and puts the outer context back.
//
// Dispatch on Linux has no activities (no os_activity, no vouchers): its two halves are
// the same plain async, so its "overhead" shows the noise of the measurement itself.

import Dispatch
import Lull
import Synchronization

enum ContextBenchmarks {
    static let all: [Benchmark] = [contextAsync]

    static let contextAsync = Benchmark(
        name: "context-async",
        title: "async onto a serial queue with an activity current (the figure) and without (extra): one producer "
            + "thread, N blocks each; Dispatch has no activities on Linux (both halves plain)",
        unit: "blocks/s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 1_000_000, quick: 100_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n))" },
        run: runContextAsync,
        extraRows: [
            ExtraRow(label: "context-async without activity", extra: "without activity", unit: "blocks/s",
                     lowerIsBetter: false, style: .rate),
            ExtraRow(label: "context-async without ÷ with", extra: "overhead", unit: "x (1.10 = 10%)",
                     lowerIsBetter: true, style: .ratio),
        ]
    )

    /// One run: N blocks without an activity and N with one, in ten alternating rounds of
    /// N/10 each, so that a change of load on the machine hits both halves alike.
    @Sendable
    static func runContextAsync(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let withFirst = runIndex.add(1, ordering: .relaxed).oldValue % 2 == 1
        let rounds = 10
        let perRound = max(1, parameters.n / rounds)
        var seconds: [Bool: Double] = [true: 0, false: 0]
        for _ in 0..<rounds {
            for withActivity in withFirst ? [true, false] : [false, true] {
                switch oneHalf(runtime, n: perRound, withActivity: withActivity, timeout: parameters.runTimeout) {
                case .success(let elapsed): seconds[withActivity]! += elapsed
                case .failure(let problem): return .failed(problem.message)
                }
            }
        }
        let blocks = Double(perRound * rounds)
        let with = blocks / seconds[true]!
        let without = blocks / seconds[false]!
        return .ok(value: with, seconds: seconds[true]!,
                   extras: [("without activity", without), ("overhead", without / with)], notes: [])
    }

    private static let runIndex = Atomic<Int>(0)

    struct Problem: Error {
        let message: String
    }

    /// N increments of a queue-owned counter, then a final block that reads it; the time
    /// from the first submit to that final block.
    private static func oneHalf(_ runtime: Runtime, n: Int, withActivity: Bool, timeout: Double) -> Result<Double, Problem> {
        let counter = QueueOwnedCounter()
        let completion = Completion()
        let start: UInt64
        switch runtime {
        case .lull:
            let queue = WorkQueue(label: "bench.context-async")
            let submit = {
                for _ in 0..<n {
                    queue.async { counter.value &+= 1 }
                }
                queue.async { completion.finish(count: counter.value) }
            }
            start = Clock.now()
            if withActivity {
                ExecutionContext.withActivity("bench.context-async.request", submit)
            } else {
                submit()
            }
        case .dispatch:
            let queue = DispatchQueue(label: "bench.context-async")
            start = Clock.now()
            for _ in 0..<n {
                queue.async { counter.value &+= 1 }
            }
            queue.async { completion.finish(count: counter.value) }
        }
        guard completion.wait(seconds: timeout) else {
            return .failure(Problem(message: "TIMEOUT: the final block, submitted after \(Format.grouped(n)) blocks, "
                + "had not run after \(Format.seconds(timeout))"))
        }
        let seen = completion.observedCount.load(ordering: .relaxed)
        guard seen == n else {
            return .failure(Problem(message: "WRONG COUNT: the final block saw \(Format.grouped(seen)) of "
                + "\(Format.grouped(n)) increments"))
        }
        return .success(Clock.seconds(from: start, to: completion.finishedAt.load(ordering: .acquiring)))
    }
}
