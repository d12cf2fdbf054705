// Timer slack across processes: does letting the kernel pick the wake-up inside a window
// (the polling thread's PR_SET_TIMERSLACK over an epoll_wait timeout) line up one process's
// wake-ups with another's? Two Lull processes pinned to CPU 0 (hrtimers coalesce per CPU),
// each with wide-window repeating timers, the second 3 ms behind the first. Lull's column
// runs them with LULL_TIMER_SLACK=1; the other column with LULL_TIMER_SLACK=0 (the default:
// every window wakes on the precise timerfd at its end).

import Glibc
import Lull
import Synchronization

enum TimerSlackBenchmark {
    static let all: [Benchmark] = [timerSlack]

    static let helperSubcommand = "__slack-helper"
    static let processes = 2
    static let timersPerProcess = 4
    static let interval: UInt64 = 400_000_000
    static let leeway: UInt64 = 50_000_000
    /// Timers of one process are this far apart; process i runs i × `processOffset` later.
    static let spacing: UInt64 = 100_000_000
    static let processOffset: UInt64 = 3_000_000
    /// From the common base instant to the window (every timer fired at least twice).
    static let warmUp: UInt64 = 1_000_000_000
    /// Handler calls closer than this in one process count as one wake-up.
    static let sameWakeUp: UInt64 = 1_000_000

    static let timerSlack = Benchmark(
        name: "timer-slack",
        title: "timer slack across processes: 2 Lull processes pinned to CPU 0, each with 4 repeating 400 ms timers "
            + "(leeway 50 ms, 100 ms apart; the second process 3 ms behind the first); figure = % of the first "
            + "process's wake-ups within 50 µs of a wake-up of the second (handler times on CLOCK_MONOTONIC); Lull "
            + "with LULL_TIMER_SLACK=1, the other column the same with LULL_TIMER_SLACK=0 (the default)",
        unit: "% aligned",
        lowerIsBetter: false,
        singleShot: true,
        parameters: { options in
            Parameters(n: processes, seconds: options.quick ? 3 : 10, runTimeout: options.runTimeout)
        },
        sizeDescription: { "\($0.n) processes, \(Format.fixed($0.seconds, 0)) s" },
        run: runTimerSlack,
        extraRows: [
            ExtraRow(label: "timer-slack within 200 µs", extra: "within 200 µs %", unit: "%", lowerIsBetter: false,
                     style: .count),
            ExtraRow(label: "timer-slack switches", extra: "voluntary switches", unit: "switches", lowerIsBetter: true,
                     style: .count),
            ExtraRow(label: "timer-slack CPU wake instants", extra: "CPU wake instants", unit: "instants",
                     lowerIsBetter: true, style: .count),
        ],
        peerName: "Lull, no slack"
    )

    // MARK: - The measuring child

    @Sendable
    static func runTimerSlack(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let slack = runtime == .lull
        let base = Clock.now() &+ 500_000_000
        let pinned = access("/usr/bin/taskset", X_OK) == 0
        var helpers: [ChildProcess.Running] = []
        for index in 0..<parameters.n {
            let arguments = [helperSubcommand, slack ? "on" : "off", String(index), String(base), "\(parameters.seconds)"]
            switch ChildProcess.start(arguments, launcher: pinned ? ["/usr/bin/taskset", "-c", "0"] : []) {
            case .success(let helper): helpers.append(helper)
            case .failure(let error): return .failed("could not start helper process \(index): errno \(error.code)")
            }
        }
        // Collected one after the other: the others' few lines wait in their pipes.
        let timeout = Double(warmUp) / 1e9 + parameters.seconds + parameters.runTimeout
        var reports: [HelperReport] = []
        for (index, helper) in helpers.enumerated() {
            let lines = helper.collect(timeout: timeout).lines
            guard let report = HelperReport(lines) else {
                return .failed("helper process \(index) reported nothing usable: \(lines.suffix(3).joined(separator: " | "))")
            }
            reports.append(report)
        }
        let first = wakeUps(reports[0].times)
        let others = reports.dropFirst().flatMap { wakeUps($0.times) }.sorted()
        guard !first.isEmpty, !others.isEmpty else { return .failed("no wake-ups recorded") }
        let distances = first.map { nearest(to: $0, in: others) }.sorted()
        func share(within limit: UInt64) -> Double {
            Double(distances.filter { $0 <= limit }.count) * 100 / Double(distances.count)
        }
        let median = Double(distances[distances.count / 2]) / 1000
        let switches = reports.reduce(0) { $0 + $1.voluntarySwitches }
        // The instants at which the CPU had to wake for these processes: handler wake-ups of
        // either process within 200 µs of each other are one, and every voluntary switch
        // beyond a handler wake-up (libevent sleeping once more, say) is one of its own.
        let perProcess = reports.map { wakeUps($0.times) }
        let shared = clusters(perProcess.flatMap { $0 }.sorted(), within: 200_000)
        let instants = shared + max(0, switches - perProcess.reduce(0) { $0 + $1.count })
        let calls = reports.reduce(0) { $0 + $1.times.count }
        let expectedCalls = Double(parameters.n * timersPerProcess) * parameters.seconds * 1e9 / Double(interval)
        var notes = [pinned ? "both processes pinned to CPU 0 (taskset -c 0)" : "taskset not found: processes NOT pinned"]
        notes.append("wake-ups: " + reports.indices.map { "process \($0) \(wakeUps(reports[$0].times).count)" }
            .joined(separator: ", ") + "; \(Format.grouped(calls)) handler calls (\(Format.grouped(Int(expectedCalls))) expected)")
        let late = reports.map(\.maxLateness).max() ?? 0
        let early = reports.reduce(0) { $0 + $1.early }
        notes.append(early > 0 ? "\(early) fires BEFORE their deadline"
            : "no fire before its deadline; latest fire \(Format.milliseconds(Double(late) / 1e9)) after its deadline "
                + "(leeway \(Format.milliseconds(Double(leeway) / 1e9)))")
        return .ok(value: share(within: 50_000), seconds: parameters.seconds,
                   extras: [("within 200 µs %", share(within: 200_000)), ("within 1 ms %", share(within: 1_000_000)),
                            ("median distance µs", median), ("voluntary switches", Double(switches)),
                            ("CPU wake instants", Double(instants)),
                            ("first process wake-ups", Double(first.count))],
                   notes: notes)
    }

    /// Handler times grouped into wake-ups (the first time of each group).
    static func wakeUps(_ times: [UInt64]) -> [UInt64] {
        var result: [UInt64] = []
        for time in times.sorted() where result.last.map({ time - $0 > sameWakeUp }) ?? true {
            result.append(time)
        }
        return result
    }

    /// How many groups `sorted` falls into when times closer than `within` group together.
    static func clusters(_ sorted: [UInt64], within: UInt64) -> Int {
        var count = 0
        var last: UInt64?
        for time in sorted {
            if last.map({ time - $0 > within }) ?? true { count += 1 }
            last = time
        }
        return count
    }

    /// The distance from `time` to the nearest element of `sorted`.
    static func nearest(to time: UInt64, in sorted: [UInt64]) -> UInt64 {
        var low = 0
        var high = sorted.count
        while low < high {
            let middle = (low + high) / 2
            if sorted[middle] < time { low = middle + 1 } else { high = middle }
        }
        var best = UInt64.max
        if low < sorted.count { best = sorted[low] - time }
        if low > 0 { best = min(best, time - sorted[low - 1]) }
        return best
    }

    // MARK: - One timer process

    /// `lull-bench __slack-helper on|off <index> <base ns> <seconds>`: runs this process's
    /// timers and prints what it saw.
    static func helperMain(_ arguments: [String]) -> Never {
        guard arguments.count == 4, let index = UInt64(arguments[1]), let base = UInt64(arguments[2]),
              let seconds = Double(arguments[3]) else {
            emit("FAIL bad helper arguments: \(arguments)")
            exit(2)
        }
        // Before Lull reads it (at its first timer).
        setenv("LULL_TIMER_SLACK", arguments[0] == "on" ? "1" : "0", 1)
        let windowStart = base &+ warmUp
        let windowEnd = windowStart &+ UInt64(seconds * 1e9)
        let recorder = FireRecorder(windowStart: windowStart, windowEnd: windowEnd)
        let queue = WorkQueue.global()
        var sources: [TimerSource] = []
        for timer in 0..<UInt64(timersPerProcess) {
            let phase = timer * spacing + index * processOffset
            let source = EventSource.makeTimerSource(queue: queue)
            source.setEventHandler { recorder.record(Clock.now(), phase: base &+ phase) }
            source.schedule(deadline: Deadline(uptimeNanoseconds: base &+ phase), repeating: .nanoseconds(interval),
                            leeway: .nanoseconds(leeway))
            source.activate()
            sources.append(source)
        }
        let me = getpid()
        sleepUntil(windowStart)
        let before = ThreadSwitches.snapshot(excluding: me)
        sleepUntil(windowEnd)
        let after = ThreadSwitches.snapshot(excluding: me)
        for source in sources { source.cancel() }
        var voluntary = 0
        for (tid, end) in after { voluntary += end.voluntary - (before[tid]?.voluntary ?? 0) }
        let seen = recorder.snapshot()
        emit("SWITCHES \(voluntary)")
        emit("LATENESS \(seen.early) \(seen.maxLateness)")
        emit("TIMES " + seen.times.map(String.init).joined(separator: " "))
        exit(0)
    }

    static func sleepUntil(_ instant: UInt64) {
        let now = Clock.now()
        if instant > now { Clock.sleep(seconds: Double(instant - now) / 1e9) }
    }
}

/// Handler times inside the measuring window, and how late each fire was.
final class FireRecorder: Sendable {
    struct Seen {
        var times: [UInt64] = []
        var early = 0
        var maxLateness: UInt64 = 0
    }

    private let windowStart: UInt64
    private let windowEnd: UInt64
    private let seen = Mutex<Seen>(Seen())

    init(windowStart: UInt64, windowEnd: UInt64) {
        self.windowStart = windowStart
        self.windowEnd = windowEnd
    }

    /// A fire at `now` of the timer whose first deadline was `phase`: its deadline is the last
    /// `phase + k × interval` not after `now` (a fire before its deadline would show as a
    /// lateness close to a whole interval).
    func record(_ now: UInt64, phase: UInt64) {
        let lateness = now >= phase ? (now - phase) % TimerSlackBenchmark.interval : 0
        seen.locked { seen in
            if now < phase { seen.early += 1 }
            seen.maxLateness = max(seen.maxLateness, lateness)
            if now >= windowStart && now < windowEnd { seen.times.append(now) }
        }
    }

    func snapshot() -> Seen { seen.locked { $0 } }
}

/// What one helper process printed.
struct HelperReport {
    var times: [UInt64] = []
    var voluntarySwitches = 0
    var early = 0
    var maxLateness: UInt64 = 0

    init?(_ lines: [String]) {
        var complete = 0
        for line in lines {
            let fields = line.split(separator: " ")
            switch fields.first {
            case "SWITCHES":
                voluntarySwitches = fields.count > 1 ? Int(fields[1]) ?? 0 : 0
                complete += 1
            case "LATENESS":
                early = fields.count > 1 ? Int(fields[1]) ?? 0 : 0
                maxLateness = fields.count > 2 ? UInt64(fields[2]) ?? 0 : 0
                complete += 1
            case "TIMES":
                times = fields.dropFirst().compactMap { UInt64($0) }
                complete += 1
            default:
                continue
            }
        }
        if complete < 3 { return nil }
    }
}
