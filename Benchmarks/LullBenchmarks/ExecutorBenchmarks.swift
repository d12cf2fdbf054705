// Swift concurrency on Lull (`GlobalExecutor.install()`) against the default executor.
// Install is process-wide, so each runtime's child is one process: the Lull child installs
// before its first task, the other ("default executor", in Dispatch's column) never does.
// Every run starts its tasks detached from the child's main thread, which waits on a latch
// (no MainActor involved: the main queue has no thread in these children).

import Glibc
import Lull
import Synchronization

enum ExecutorBenchmarks {
    static let all: [Benchmark] = [childTasks, actorPingPong, sleepTolerance]

    static let defaultExecutorName = "default executor"

    /// In the Lull child, before its first task; later calls find it installed.
    static func prepare(_ runtime: Runtime) -> String? {
        guard runtime == .lull, !GlobalExecutor.isInstalled else { return nil }
        do {
            try GlobalExecutor.install()
            return nil
        } catch {
            return "install() failed: \(error)"
        }
    }

    /// Runs `body` in a detached task and waits for it on this thread; its seconds.
    static func timed(_ parameters: Parameters, _ body: @escaping @Sendable () async -> Void) -> Double? {
        let completion = Completion()
        let start = Clock.now()
        Task.detached {
            await body()
            completion.finish(count: 1)
        }
        guard completion.wait(seconds: parameters.runTimeout) else { return nil }
        return Clock.seconds(from: start, to: completion.finishedAt.load(ordering: .acquiring))
    }

    static let childTasks = Benchmark(
        name: "tasks-spawn",
        title: "1 M empty child tasks in a discarding task group: install() vs the default executor",
        unit: "tasks/s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 1_000_000, quick: 100_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n))" },
        run: { runtime, parameters in
            if let problem = prepare(runtime) { return .failed(problem) }
            let n = parameters.n
            let ran = SharedCounter()
            guard let seconds = timed(parameters, {
                await withDiscardingTaskGroup { group in
                    for _ in 0..<n {
                        group.addTask { _ = ran.increment() }
                    }
                }
            }) else { return .failed("timed out after \(parameters.runTimeout) s") }
            guard ran.value.load(ordering: .acquiring) == n else { return .failed("ran \(ran.value.load(ordering: .acquiring)) of \(n) tasks") }
            return .ok(value: Double(n) / seconds, seconds: seconds)
        },
        peerName: defaultExecutorName
    )

    static let actorPingPong = Benchmark(
        name: "tasks-actor-pingpong",
        title: "actor ping-pong: one actor awaits another N times (two default actors): install() vs the default executor",
        unit: "round trips/s",
        lowerIsBetter: false,
        singleShot: false,
        // A round trip takes some 15 ns (the runtime switches between the two actors on one
        // thread): 20 M of them make a run of a few tenths of a second, not a few milliseconds
        // that the host's scheduling decides.
        parameters: { options in
            Parameters(n: options.size(full: 20_000_000, quick: 2_000_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n))" },
        run: { runtime, parameters in
            if let problem = prepare(runtime) { return .failed(problem) }
            let n = parameters.n
            let ping = PingActor(pong: PongActor())
            guard let seconds = timed(parameters, { await ping.play(n) }) else {
                return .failed("timed out after \(parameters.runTimeout) s")
            }
            return .ok(value: Double(n) / seconds, seconds: seconds)
        },
        peerName: defaultExecutorName
    )

    static let sleepTolerance = Benchmark(
        name: "tasks-sleep-tolerance",
        title: "1,000 tasks looping Task.sleep(for: 1 s, tolerance: 500 ms): context switches of all threads; "
            + "install() (Lull timers) vs the default executor",
        unit: "switches",
        lowerIsBetter: true,
        singleShot: true,
        parameters: { options in
            Parameters(n: 1_000, seconds: options.quick ? 3 : 10, runTimeout: options.runTimeout + 12)
        },
        sizeDescription: { "\(Format.grouped($0.n)) tasks, \(Format.fixed($0.seconds, 0)) s" },
        run: runSleepers,
        maxRuns: 1,
        extraRows: [
            ExtraRow(label: "timer wake-ups (Lull's count)", extra: "timer wakeups", unit: "wake-ups",
                     lowerIsBetter: true, style: .count),
            ExtraRow(label: "wake-ups / optimum", extra: "wakeups per optimum", unit: "",
                     lowerIsBetter: true, style: .ratio),
        ],
        peerName: defaultExecutorName
    )

    @Sendable
    static func runSleepers(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        if let problem = prepare(runtime) { return .failed(problem) }
        if runtime == .lull {
            do { try RuntimeDiagnostics.start() } catch { return .failed("diagnostics: \(error)") }
        }
        guard let usageBefore = ProcessUsage.now() else { return .failed("getrusage failed") }
        let sleepers = SharedCounter()
        let loops = SharedCounter()
        let start = Clock.now()
        let end = start &+ UInt64(parameters.seconds * 1e9)
        let latch = Latch()
        for _ in 0..<parameters.n {
            Task.detached {
                while Clock.now() < end {
                    try? await Task.sleep(for: .seconds(1), tolerance: .milliseconds(500))
                    _ = loops.increment()
                }
                if sleepers.increment() == parameters.n { latch.signal() }
            }
        }
        guard latch.wait(seconds: parameters.seconds + parameters.runTimeout) else {
            return .failed("the sleepers did not finish")
        }
        let seconds = Clock.seconds(from: start, to: Clock.now())
        // getrusage, so that a thread that exits before the end counts too.
        guard let usageAfter = ProcessUsage.now() else { return .failed("getrusage failed") }
        let total = ProcessUsage.othersSwitches(from: usageBefore, to: usageAfter).all
        var extras: [(String, Double)] = [("sleeps", Double(loops.value.load(ordering: .acquiring)))]
        var notes: [String] = []
        if runtime == .lull, let report = RuntimeDiagnostics.stop() {
            let optimum = max(report.coalescing.optimalWakeups, 1)
            extras.append(("timer wakeups", Double(report.wakeups.timer.count)))
            extras.append(("wakeups per optimum", Double(report.wakeups.timer.count) / Double(optimum)))
            notes.append("Lull: \(report.wakeups.timer.count) timer wake-ups, optimum \(report.coalescing.optimalWakeups), "
                         + "\(report.wakeups.total.count) reactor wake-ups in all, \(loops.value.load(ordering: .acquiring)) sleeps")
        } else {
            notes.append("default executor: \(loops.value.load(ordering: .acquiring)) sleeps")
        }
        return .ok(value: Double(total), seconds: seconds, extras: extras, notes: notes)
    }
}

actor PongActor {
    private var hits = 0
    func hit() -> Int {
        hits += 1
        return hits
    }
}

actor PingActor {
    let pong: PongActor
    init(pong: PongActor) { self.pong = pong }
    func play(_ rounds: Int) async {
        for _ in 0..<rounds { _ = await pong.hit() }
    }
}
