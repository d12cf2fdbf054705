// asyncAfter churn: N delayed blocks with deadlines spread over 100-500 ms, scheduled in
// a shuffled order, all waited for. The figure is what the runtime controls, its cost: blocks
// per second of the whole process's CPU time from the first schedule to the last fire. The
// wall-clock rate N / (first schedule → last fire) is bounded by the last deadline (500 ms)
// and its leeway, not by the runtime, so it is reported beside it with the lateness.

import Dispatch
import Lull
import Synchronization

enum TimerBenchmarks {
    static let all: [Benchmark] = [asyncAfterChurn]

    /// The first deadline, after the start of scheduling.
    static let firstDelay: UInt64 = 100_000_000
    /// Deadlines are spread evenly over this span after the first one.
    static let span: UInt64 = 400_000_000

    static let asyncAfterChurn = Benchmark(
        name: "async-after",
        title: "asyncAfter churn: N blocks onto the default global queue, deadlines spread over 100-500 ms "
            + "in shuffled order; figure = N / the whole process's CPU time from the first schedule to the last "
            + "fire (blocks per CPU second: the runtime's cost of scheduling and firing a delayed block); beside "
            + "it N / wall time to the last fire (bounded by the 500 ms of deadlines plus their leeway) and the "
            + "mean lateness",
        unit: "blocks/CPU-s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 100_000, quick: 20_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n))" },
        run: runAsyncAfterChurn,
        extraRows: [
            ExtraRow(label: "  async-after to the last fire", extra: "wall blocks/s", unit: "blocks/s",
                     lowerIsBetter: false, style: .rate),
            ExtraRow(label: "  async-after mean lateness", extra: "mean lateness ms", unit: "ms",
                     lowerIsBetter: true, style: .decimal),
        ]
    )

    /// Offsets (ns after the start) of N deadlines, evenly spread over [100 ms, 500 ms) and
    /// shuffled with a fixed seed, so that every run schedules the same sequence.
    static func shuffledOffsets(count: Int) -> [UInt64] {
        var offsets = (0..<count).map { index in
            firstDelay + span * UInt64(index) / UInt64(max(count, 1))
        }
        var generator = SplitMix64(seed: 0x4C75_6C6C)
        offsets.shuffle(using: &generator)
        return offsets
    }

    @Sendable
    static func runAsyncAfterChurn(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let n = parameters.n
        let offsets = shuffledOffsets(count: n)
        let lastOffset = offsets.max() ?? 0
        let fired = SharedCounter()
        let lateness = Lateness()
        let completion = Completion()
        let cpuAtStart = Clock.cpuNanoseconds()
        let start = Clock.now()
        // Each block knows its deadline on the harness clock (CLOCK_MONOTONIC, like both
        // runtimes' uptime clocks) and adds how late it ran.
        @inline(__always)
        func block(due: UInt64) -> @Sendable () -> Void {
            {
                lateness.add(Clock.now(), due: due)
                if fired.increment() == n { completion.finish(count: n) }
            }
        }
        switch runtime {
        case .lull:
            let queue = WorkQueue.global()
            let base = Deadline(uptimeNanoseconds: start)
            for offset in offsets {
                queue.asyncAfter(deadline: base + .nanoseconds(offset), execute: block(due: start &+ offset))
            }
        case .dispatch:
            let queue = DispatchQueue.global()
            let base = DispatchTime(uptimeNanoseconds: start)
            for offset in offsets {
                queue.asyncAfter(deadline: base + .nanoseconds(Int(offset)), execute: block(due: start &+ offset))
            }
        }
        let scheduled = Clock.now()
        let schedulingCPU = Clock.cpuNanoseconds().thread &- cpuAtStart.thread
        let waitLimit = parameters.runTimeout + Double(firstDelay + span) / 1e9
        guard completion.wait(seconds: waitLimit) else {
            let ran = fired.value.load(ordering: .relaxed)
            return .failed("TIMEOUT: \(Format.grouped(ran)) of \(Format.grouped(n)) asyncAfter blocks had fired "
                + "\(Format.seconds(waitLimit)) after scheduling began (last deadline at "
                + "\(Format.milliseconds(Double(lastOffset) / 1e9)))")
        }
        // Every thread's CPU from the first schedule to the last fire (the measuring thread
        // sleeps in between): what the churn cost the process, idle waits excluded.
        let processCPU = Clock.cpuNanoseconds().process &- cpuAtStart.process
        Clock.sleep(seconds: 0.001)
        let total = fired.value.load(ordering: .relaxed)
        guard total == n else {
            return .failed("WRONG COUNT: \(Format.grouped(total)) fires for \(Format.grouped(n)) asyncAfter blocks")
        }
        let finished = completion.finishedAt.load(ordering: .acquiring)
        let seconds = Clock.seconds(from: start, to: finished)
        let lastDeadline = start &+ lastOffset
        let tail = finished >= lastDeadline ? Clock.seconds(from: lastDeadline, to: finished) : 0
        return .ok(
            value: Double(n) / (Double(max(processCPU, 1)) / 1e9),
            seconds: seconds,
            extras: [
                ("wall blocks/s", Double(n) / seconds),
                ("scheduling took ms", Clock.seconds(from: start, to: scheduled) * 1000),
                ("scheduling CPU ns/block", Double(schedulingCPU) / Double(max(n, 1))),
                ("process CPU ns/block", Double(processCPU) / Double(max(n, 1))),
                ("mean lateness ms", lateness.meanMilliseconds(count: n)),
                ("max lateness ms", lateness.maxMilliseconds),
                ("last fire after the last deadline ms", tail * 1000),
            ],
            notes: [lateness.earlyCount > 0
                ? "\(lateness.earlyCount) blocks ran BEFORE their deadline (earliest by \(Format.milliseconds(lateness.maxEarlySeconds)))"
                : "no block ran before its deadline"]
        )
    }
}

/// How late delayed blocks ran after their deadlines.
final class Lateness: Sendable {
    private let totalNanoseconds = Atomic<UInt64>(0)
    private let maxNanoseconds = Atomic<UInt64>(0)
    private let early = Atomic<Int>(0)
    private let maxEarlyNanoseconds = Atomic<UInt64>(0)

    func add(_ now: UInt64, due: UInt64) {
        if now >= due {
            let late = now - due
            totalNanoseconds.wrappingAdd(late, ordering: .relaxed)
            maxNanoseconds.max(late, ordering: .relaxed)
        } else {
            early.wrappingAdd(1, ordering: .relaxed)
            maxEarlyNanoseconds.max(due - now, ordering: .relaxed)
        }
    }

    func meanMilliseconds(count: Int) -> Double {
        Double(totalNanoseconds.load(ordering: .relaxed)) / Double(max(count, 1)) / 1e6
    }

    var maxMilliseconds: Double { Double(maxNanoseconds.load(ordering: .relaxed)) / 1e6 }
    var earlyCount: Int { early.load(ordering: .relaxed) }
    var maxEarlySeconds: Double { Double(maxEarlyNanoseconds.load(ordering: .relaxed)) / 1e9 }
}

/// A small deterministic generator for shuffling (SplitMix64).
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
