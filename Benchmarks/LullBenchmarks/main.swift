// lull-bench: Lull against Apple's Dispatch, benchmark by benchmark, in the same run.
//
//   lull-bench [--quick] [--runs N] [--idle-seconds S] [--timeout S] [benchmark...]
//
// Runs the named benchmarks (all by default) for Lull and for Dispatch and prints both
// figures and their ratio. See `--help`.

import Glibc

enum Suite {
    static let all: [Benchmark] = QueueBenchmarks.all + TimerBenchmarks.all + IdleBenchmark.all + SourceBenchmarks.all
        + TimerSourceBenchmarks.all + TaskSleepBenchmark.all + TimerSlackBenchmark.all + FileSystemBenchmarks.all + EchoBenchmark.all
        + ContextBenchmarks.all + EventsBenchmarks.all + ExecutorBenchmarks.all + EchoPeersBenchmark.all
        + PingPongFloorBenchmark.all + QoSHogsBenchmark.all + TimerPiggybackBenchmark.all

    /// Names that select several benchmarks.
    static let groups: [String: [String]] = SourceBenchmarks.groups.merging(FileSystemBenchmarks.groups) { first, _ in first }
        .merging(EchoPeersBenchmark.groups) { first, _ in first }

    /// Short benchmarks whose single runs the host's load moves by 2x from one second to the
    /// next: their runtimes take turns, a child of one and then of the other (each a warm-up
    /// and one measured run), so that a slow phase of the host falls on both alike.
    static let interleaved: Set<String> = [
        "serial-async", "concurrent-async", "sync", "async-after", "ping-pong", "read-throughput", "timer-accuracy",
        "context-async", "tasks-spawn", "tasks-actor-pingpong",
    ]

    static func benchmark(named name: String) -> Benchmark? {
        all.first { $0.name == name }
    }
}

/// `text` in lines of at most `width` characters, each after `indent` spaces.
func wrapped(_ text: String, width: Int, indent: Int) -> String {
    var lines: [String] = []
    var line = ""
    for word in text.split(separator: " ") {
        if !line.isEmpty && line.count + 1 + word.count > width {
            lines.append(line)
            line = ""
        }
        line += (line.isEmpty ? "" : " ") + word
    }
    if !line.isEmpty { lines.append(line) }
    let margin = String(repeating: " ", count: indent)
    return lines.map { margin + $0 }.joined(separator: "\n")
}

let usage = """
    usage: lull-bench [options] [benchmark...]

    Runs each benchmark for Lull and for Apple's Dispatch (each in a child process of its
    own) and prints both figures and the ratio Lull/Dispatch. Dispatch has no file-system
    sources on Linux: the fs-* benchmarks compare with the peer their details name (a raw
    inotify loop, the floor, or inotifywait -r from inotify-tools) in Dispatch's column.

    benchmarks (default: all):
    \(Suite.all.map { "  \(Format.padRight($0.name, 23)) \($0.title)" }.joined(separator: "\n"))
    \(Suite.groups.sorted { $0.key < $1.key }.map { "  \(Format.padRight($0.key, 23)) all of: \($0.value.joined(separator: ", "))" }
        .joined(separator: "\n"))

    options:
      --quick             smaller N, 3 runs, 1 s idle window
      --runs N            measured runs after the warm-up run (default 5, quick 3); for
    \(wrapped(Suite.interleaved.sorted().joined(separator: ", ") + ": rounds of one child per runtime in turns, "
        + "each a warm-up and one run; for", width: 68, indent: 22))
                          idle-read-sources-* and timer-memory: fresh processes measured (each
                          warms up itself), at most 3 for timer-memory; timer-churn: fresh
                          processes (at most 5), each running both runtimes in turns; not
                          timer-wakeups (one fresh process, one window);
                          fs-tree-watch: fresh processes; at most 3 for fs-storm;
                          echo-nio-*: at most 3 fresh processes, each running the
                          three servers in turn
      --idle-seconds S    idle window of the idle benchmark (default 3, quick 1)
      --n N               size of one run for every benchmark but idle and idle-read-sources-*:
                          blocks or calls (default 1,000,000; async-after 100,000; quick: a
                          tenth, async-after a fifth), ping-pong round trips (30,000; quick
                          10,000), read-throughput MiB (1,024; quick 256), user-data-merges adds
                          per thread (5,000,000; quick 1,000,000), timer-churn timers (1,000,000;
                          quick 200,000), echo-load messages (200,000; quick 50,000), echo-nio-*
                          messages per server (100,000; quick 30,000); not
                          timer-wakeups (10,000 timers for 10 s, quick 3 s), timer-accuracy
                          (1,000 timers), timer-memory (K=100,000); fs-latency writes (5,000;
                          quick 1,000), fs-storm files (100,000; quick 20,000); not
                          fs-tree-watch (10,000 directories)
      --timeout S         per-run timeout in seconds (default 10)
      --help              this text
    """

func fail(_ message: String) -> Never {
    emit("lull-bench: \(message)\n\n\(usage)")
    exit(2)
}

/// Parses the command line: options, then the benchmarks to run.
func parse(_ arguments: [String]) -> (Options, [Benchmark]) {
    var options = Options()
    var runs: Int?
    var idleSeconds: Double?
    var names: [String] = []
    var index = 0
    func value(for flag: String) -> String {
        index += 1
        guard index < arguments.count else { fail("\(flag) needs a value") }
        return arguments[index]
    }
    while index < arguments.count {
        let argument = arguments[index]
        switch argument {
        case "--quick":
            options.quick = true
        case "--runs":
            guard let count = Int(value(for: argument)), count >= 1 else { fail("--runs needs a count >= 1") }
            runs = count
        case "--idle-seconds":
            guard let seconds = Double(value(for: argument)), seconds > 0 else { fail("--idle-seconds needs seconds > 0") }
            idleSeconds = seconds
        case "--n":
            guard let count = Int(value(for: argument)), count >= 1 else { fail("--n needs a count >= 1") }
            options.n = count
        case "--timeout":
            guard let seconds = Double(value(for: argument)), seconds > 0 else { fail("--timeout needs seconds > 0") }
            options.runTimeout = seconds
        case "-h", "--help":
            emit(usage)
            exit(0)
        default:
            if argument.hasPrefix("-") { fail("unknown option \(argument)") }
            if let group = Suite.groups[argument] {
                for name in group where !names.contains(name) { names.append(name) }
            } else {
                guard Suite.benchmark(named: argument) != nil else { fail("unknown benchmark \(argument)") }
                if !names.contains(argument) { names.append(argument) }
            }
        }
        index += 1
    }
    options.runs = runs ?? (options.quick ? 3 : 5)
    options.idleSeconds = idleSeconds ?? (options.quick ? 1 : 3)
    if options.quick { options.budgetSeconds = 6 }
    let selected = names.isEmpty ? Suite.all : Suite.all.filter { names.contains($0.name) }
    return (options, selected)
}

/// Runs one benchmark for both runtimes, printing each figure as it comes.
func measure(_ benchmark: Benchmark, options: Options) -> BenchmarkResult {
    let parameters = benchmark.parameters(options)
    emit("== \(benchmark.name) (\(benchmark.sizeDescription(parameters))): \(benchmark.title)")
    let cleanUp = benchmark.prepare?(parameters)
    defer { cleanUp?() }
    let runs = min(options.runs, benchmark.maxRuns ?? options.runs)
    if benchmark.peerInSameProcess {
        return measureInOneProcess(benchmark, parameters: parameters, runs: runs, options: options)
    }
    if Suite.interleaved.contains(benchmark.name) && !benchmark.singleShot && !benchmark.freshProcessPerRun {
        return measureInterleaved(benchmark, parameters: parameters, runs: runs, options: options)
    }
    var series: [Runtime: Series] = [:]
    for runtime in Runtime.allCases {
        let started = Clock.now()
        var runtimeSeries = Series()
        // Fresh-process benchmarks: one child per measurement, within the same time budget.
        let processes = benchmark.freshProcessPerRun ? runs : 1
        for index in 0..<processes {
            if index > 0 && Clock.seconds(from: started, to: Clock.now()) > options.budgetSeconds {
                runtimeSeries.notes.append("stopped after \(index) of \(processes) processes "
                    + "(time budget of \(Format.seconds(options.budgetSeconds)))")
                break
            }
            runtimeSeries.absorb(runChild(benchmark, runtime, parameters: parameters, runs: runs, options: options))
            if runtimeSeries.problem != nil || runtimeSeries.skipped != nil { break }
        }
        series[runtime] = runtimeSeries
        emitSeries(benchmark, runtime, runtimeSeries, seconds: Clock.seconds(from: started, to: Clock.now()))
    }
    return BenchmarkResult(benchmark: benchmark, parameters: parameters, series: series)
}

/// `runs` rounds of one child per runtime (a warm-up and one measured run each), the order
/// alternating from round to round; within twice the time budget of one runtime.
func measureInterleaved(_ benchmark: Benchmark, parameters: Parameters, runs: Int, options: Options) -> BenchmarkResult {
    let started = Clock.now()
    var series: [Runtime: Series] = [.lull: Series(), .dispatch: Series()]
    var elapsed: [Runtime: Double] = [.lull: 0, .dispatch: 0]
    rounds: for round in 0..<runs {
        if round > 0 && Clock.seconds(from: started, to: Clock.now()) > 2 * options.budgetSeconds {
            let note = "stopped after \(round) of \(runs) rounds (time budget of \(Format.seconds(2 * options.budgetSeconds)))"
            for runtime in Runtime.allCases { series[runtime]?.notes.append(note) }
            break
        }
        let order = round % 2 == 0 ? Runtime.allCases : Runtime.allCases.reversed()
        for runtime in order {
            let childStarted = Clock.now()
            series[runtime]?.absorb(runChild(benchmark, runtime, parameters: parameters, runs: 1, options: options))
            elapsed[runtime, default: 0] += Clock.seconds(from: childStarted, to: Clock.now())
            if series[runtime]?.problem != nil || series[runtime]?.skipped != nil { break rounds }
        }
    }
    for runtime in Runtime.allCases {
        let runtimeSeries = series[runtime] ?? Series()
        emitSeries(benchmark, runtime, runtimeSeries, seconds: elapsed[runtime] ?? 0)
    }
    return BenchmarkResult(benchmark: benchmark, parameters: parameters, series: series)
}

/// `runs` Lull children, each measuring the peer too (see `Benchmark.peerInSameProcess`).
func measureInOneProcess(_ benchmark: Benchmark, parameters: Parameters, runs: Int, options: Options) -> BenchmarkResult {
    let started = Clock.now()
    let budget = benchmark.budgetSeconds ?? options.budgetSeconds
    var lull = Series()
    for index in 0..<runs {
        if index > 0 && Clock.seconds(from: started, to: Clock.now()) > budget {
            lull.notes.append("stopped after \(index) of \(runs) processes (time budget of \(Format.seconds(budget)))")
            break
        }
        lull.absorb(runChild(benchmark, .lull, parameters: parameters, runs: 1, options: options))
        if lull.problem != nil || lull.skipped != nil { break }
    }
    // The peer's figures, out of the extras prefixed "peer ".
    var peer = Series()
    peer.problem = lull.problem
    peer.skipped = lull.skipped
    peer.samples = lull.extras["peer " + benchmark.unit] ?? []
    var own = Series()
    own.samples = lull.samples
    own.notes = lull.notes
    own.problem = lull.problem
    own.skipped = lull.skipped
    for name in lull.extraOrder {
        if name.hasPrefix("peer ") {
            let peerName = String(name.dropFirst(5))
            if peerName == benchmark.unit { continue }
            peer.extraOrder.append(peerName)
            peer.extras[peerName] = lull.extras[name]
        } else {
            own.extraOrder.append(name)
            own.extras[name] = lull.extras[name]
        }
    }
    let seconds = Clock.seconds(from: started, to: Clock.now())
    emitSeries(benchmark, .lull, own, seconds: seconds)
    emitSeries(benchmark, .dispatch, peer, seconds: seconds)
    return BenchmarkResult(benchmark: benchmark, parameters: parameters, series: [.lull: own, .dispatch: peer])
}

/// One child process measuring `runs` runs (after its warm-up run) of one runtime.
func runChild(_ benchmark: Benchmark, _ runtime: Runtime, parameters: Parameters, runs: Int, options: Options) -> Series {
    let childArguments = [
        childSubcommand, benchmark.name, runtime.rawValue, String(parameters.n), "\(parameters.seconds)",
        "\(parameters.runTimeout)", String(runs), "\(options.budgetSeconds)",
    ]
    // One run may take up to its timeout; the child stops starting runs after its budget.
    let childTimeout = benchmark.freshProcessPerRun
        ? 2 * parameters.runTimeout + 10
        : benchmark.singleShot
        ? parameters.runTimeout + IdleBenchmark.settleSeconds + parameters.seconds + 10
        : 2 * parameters.runTimeout + options.budgetSeconds + 10
    let result = ChildProcess.runSelf(childArguments, timeout: childTimeout)
    return ChildReport.series(from: result, timeout: childTimeout)
}

func emitSeries(_ benchmark: Benchmark, _ runtime: Runtime, _ series: Series, seconds: Double) {
    emit("   \(Format.padRight(benchmark.displayName(of: runtime) + ":", 9)) \(Report.describe(series, benchmark))"
        + "  [\(Format.fixed(seconds, 1)) s]")
    for note in series.notes { emit("              \(note)") }
}

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.first == childSubcommand {
    ChildMain.run(Array(arguments.dropFirst()))
}
if arguments.first == TimerSlackBenchmark.helperSubcommand {
    TimerSlackBenchmark.helperMain(Array(arguments.dropFirst()))
}
if arguments.first == EchoPeerProcesses.serverSubcommand {
    EchoPeerProcesses.serverMain(Array(arguments.dropFirst()))
}
if arguments.first == EchoPeerProcesses.clientSubcommand {
    EchoPeerProcesses.clientMain(Array(arguments.dropFirst()))
}
if arguments.first == "idle-child" {
    // `lull-bench idle-child lull|dispatch [seconds]`: the idle benchmark alone, in this process.
    let runtime = arguments.count > 1 ? Runtime(rawValue: arguments[1]) : nil
    guard let runtime else { fail("idle-child needs lull or dispatch") }
    let seconds = arguments.count > 2 ? Double(arguments[2]) ?? 3 : 3
    ChildMain.run(["idle", runtime.rawValue, "0", "\(seconds)", "10", "1", "0"])
}

let (options, selected) = parse(arguments)
let suiteStart = Clock.now()
let loadAtStart = Report.loadAverage()
if let warning = Report.loadWarning(loadAtStart) { emit(warning) }
emit("lull-bench: \(selected.map(\.name).joined(separator: ", "))"
    + (options.quick ? " (quick)" : "") + ", \(options.runs) measured runs after a warm-up run")
var results: [BenchmarkResult] = []
for benchmark in selected {
    results.append(measure(benchmark, options: options))
}
Report.print(results, options: options, arguments: arguments, loadAtStart: loadAtStart)
emit("Total time: \(Format.fixed(Clock.seconds(from: suiteStart, to: Clock.now()), 1)) s")
