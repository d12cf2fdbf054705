// The final report: one table row per benchmark (and per extra row), Lull's figure, the
// peer's, the ratio, and issue #18's target with whether it is met; the targets not met;
// then the details of each (run counts, spread, extras, notes, problems).

import Glibc

struct BenchmarkResult {
    let benchmark: Benchmark
    let parameters: Parameters
    /// Per runtime, in `Runtime.allCases` order.
    let series: [Runtime: Series]
}

enum Report {
    static func figure(_ series: Series?, lowerIsBetter: Bool) -> String {
        guard let series else { return "-" }
        if series.skipped != nil { return "skipped" }
        if let problem = series.problem {
            return problem.hasPrefix("TIMEOUT") ? "TIMEOUT" : problem.hasPrefix("CRASH") ? "CRASH" : "FAILED"
        }
        guard let median = series.median else { return "-" }
        return lowerIsBetter ? Format.grouped(Int(median.rounded())) : Format.si(median)
    }

    /// Lull/peer of a benchmark's medians; nil when either is missing. Both 0: 1 (as good).
    static func ratioValue(_ result: BenchmarkResult) -> Double? {
        guard let lull = result.series[.lull], lull.problem == nil, lull.skipped == nil,
              let dispatch = result.series[.dispatch], dispatch.problem == nil, dispatch.skipped == nil
        else { return nil }
        return ratioValue(lull.median, dispatch.median)
    }

    /// The median of an extra of a series without problems.
    static func extraFigure(_ series: Series?, _ row: ExtraRow) -> Double? {
        guard let series, series.problem == nil else { return nil }
        return series.medianExtra(row.extra)
    }

    static func format(_ value: Double, _ style: ExtraRow.Style) -> String {
        switch style {
        case .count: Format.grouped(Int(value.rounded()))
        case .rate: Format.si(value)
        case .ratio: Format.fixed(value, value < 10 ? 2 : 1) + "x"
        case .decimal: Format.si(value)
        }
    }

    static func ratioValue(_ lull: Double?, _ peer: Double?) -> Double? {
        guard let lull, let peer else { return nil }
        if peer == 0 { return lull == 0 ? 1 : .infinity }
        return lull / peer
    }

    static func ratioText(_ value: Double?) -> String {
        guard let value else { return "-" }
        return value.isFinite ? Format.fixed(value, value < 10 ? 2 : 1) + "x" : "inf"
    }

    /// One row's ratio against its target, for the closing note.
    struct Verdict {
        let row: String
        let ratio: Double?
        let target: Target
    }

    /// The closing note: how many rows meet their target, and each one that does not.
    static func emitTargets(_ verdicts: [Verdict]) {
        guard !verdicts.isEmpty else { return }
        let met = verdicts.filter { verdict in verdict.ratio.map { verdict.target.isMet(by: $0) } ?? false }
        emit("")
        emit("Targets (issues #16 and #18): \(met.count) of \(verdicts.count) rows met.")
        for verdict in verdicts where !met.contains(where: { $0.row == verdict.row }) {
            emit("  not met: \(verdict.row) \(ratioText(verdict.ratio)) (target \(verdict.target.text))"
                + (verdict.ratio == nil ? ": no figure (see its details)" : ""))
        }
    }

    static func print(_ results: [BenchmarkResult], options: Options, arguments: [String], loadAtStart: Double?) {
        emit("")
        emit("Details:")
        for result in results {
            let benchmark = result.benchmark
            emit("  \(benchmark.name): \(benchmark.title)")
            for runtime in Runtime.allCases {
                guard let series = result.series[runtime] else { continue }
                emit("    \(Format.padRight(benchmark.displayName(of: runtime) + ":", 9)) \(describe(series, benchmark))")
                for note in series.notes { emit("              \(note)") }
            }
        }

        emit("")
        emit("Lull vs its peers — \(timestamp()) — \(machine())"
            + (loadAtStart.map { ", load average \(Format.fixed($0, 2)) at the start" } ?? "")
            + (loadAverage().map { ", \(Format.fixed($0, 2)) at the end" } ?? ""))
        if let warning = loadWarning(loadAtStart) { emit(warning) }
        emit("Each runtime runs each benchmark in a child process of its own. Each figure is the median of the measured")
        emit("runs after one warm-up run (idle: a single measurement after its own warm-up; idle-read-sources-*:")
        emit("the median of \(options.runs) fresh processes, each measuring once after its own warm-up; the short")
        emit("benchmarks the host's load moves most, \(Suite.interleaved.sorted().joined(separator: ", ")):")
        emit("\(options.runs) rounds of one child per runtime in turns, each a warm-up and one measured run).")
        emit("Each row names its peer: Apple's Dispatch unless the row says otherwise (SwiftNIO, raw libevent, the default")
        emit("executor, inotifywait -r...). \"target\" is the issue's bound on Lull/peer (\"Lull ≤ …\": on Lull's own figure,")
        emit("a ratio to the optimum), \"met\" whether this run reaches it.")
        emit("Rates (…/s): higher is better, and Lull/Dispatch > 1 means Lull is faster.")
        emit("Idle wake-ups (switches): lower is better, and Lull/Dispatch < 1 means Lull wakes up less.")
        emit("Memory (bytes/source, bytes/timer): lower is better, and Lull/Dispatch < 1 means Lull uses less memory.")
        if results.contains(where: { $0.benchmark.name.hasPrefix("timer-") }) {
            emit("Timer wake-ups and lateness (µs): lower is better, and Lull/Dispatch < 1 means Lull wakes the process")
            emit("less often / fires closer to the deadline. \"timer-wakeups ÷ optimal\": each runtime's wake-ups divided by")
            emit("the optimal number of wake-up instants for the same timer windows over the same span (greedy interval")
            emit("stabbing, computed by the benchmark); 1.00x would mean a single thread waking once per optimal instant.")
            emit("timer-wakeups is a single window in a fresh process; timer-memory the median of up to 3 fresh processes;")
            emit("timer-churn: up to 5 fresh processes, each running both runtimes in alternating chunks of 100 k timers")
            emit("(a warm-up run, then one measured run), so that the host's slow and fast phases fall on both alike.")
        }
        if results.contains(where: { $0.benchmark.name.hasPrefix("echo-nio-") }) {
            emit("echo-nio-*: the peer is SwiftNIO's echo server, and Lull/peer is Lull/NIO; the Dispatch twin's figures")
            emit("are in the details (\"Dispatch …\"). Latency, CPU and memory: lower is better.")
        }
        if results.contains(where: { $0.benchmark.name.hasPrefix("fs-") }) {
            emit("fs-*: Dispatch has no file-system sources on Linux; the peer is \(FileSystemBenchmarks.rawPeer) (a thread")
            emit("blocked in poll(2) on a raw inotify descriptor, the floor) or inotifywait -r (Debian's inotify-tools).")
            emit("Latency and set-up time: lower is better; paths/s: higher is better.")
        }
        emit("")

        let header = ["benchmark", "size", "unit", "Lull", "peer", "peer's", "Lull/peer", "target", "met"]
        var rows: [[String]] = [header]
        var verdicts: [Verdict] = []
        func addRow(label: String, size: String, unit: String, peer: String, lull: String, peerFigure: String,
                    ratio: Double?, lullValue: Double? = nil) {
            let target = Targets.target(forRow: label)
            var met = ""
            if let target {
                // The value the target bounds: Lull/peer, or Lull's own figure.
                let judged = target.onLullsFigure ? lullValue : ratio
                if let judged {
                    met = target.isMet(by: judged) ? "yes" : "NO"
                    verdicts.append(Verdict(row: label.trimmingLeadingSpaces, ratio: judged, target: target))
                } else {
                    met = "?"
                    verdicts.append(Verdict(row: label.trimmingLeadingSpaces, ratio: nil, target: target))
                }
            }
            rows.append([label, size, unit, lull, peer, peerFigure, ratioText(ratio), target?.text ?? "", met])
        }
        for result in results {
            let benchmark = result.benchmark
            let peer = benchmark.peerName
            addRow(label: benchmark.name, size: benchmark.sizeDescription(result.parameters), unit: benchmark.unit,
                   peer: peer,
                   lull: figure(result.series[.lull], lowerIsBetter: benchmark.lowerIsBetter),
                   peerFigure: figure(result.series[.dispatch], lowerIsBetter: benchmark.lowerIsBetter),
                   ratio: ratioValue(result))
            for extraRow in benchmark.extraRows {
                let lull = extraFigure(result.series[.lull], extraRow)
                let dispatch = extraFigure(result.series[.dispatch], extraRow)
                addRow(label: extraRow.label, size: "", unit: extraRow.unit, peer: peer,
                       lull: lull.map { format($0, extraRow.style) } ?? "-",
                       peerFigure: dispatch.map { format($0, extraRow.style) } ?? "-",
                       ratio: ratioValue(lull, dispatch), lullValue: lull)
            }
        }
        var widths = [Int](repeating: 0, count: header.count)
        for row in rows {
            for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) }
        }
        let leftAligned: Set<Int> = [0, 1, 2, 4]
        for (rowIndex, row) in rows.enumerated() {
            let cells = row.enumerated().map { index, cell in
                leftAligned.contains(index) ? Format.padRight(cell, widths[index]) : Format.padLeft(cell, widths[index])
            }
            emit(cells.joined(separator: "  "))
            if rowIndex == 0 {
                emit(widths.map { String(repeating: "-", count: $0) }.joined(separator: "  "))
            }
        }
        emitTargets(verdicts)

        emit("")
        let shellArguments = arguments.map(shellQuoted).joined(separator: " ")
        emit("Reproduce: " + (arguments.isEmpty ? "make bench" : "make bench BENCH_ARGS=\(shellQuoted(shellArguments))"))
        emit("       or: swift run -c release --package-path Benchmarks lull-bench"
            + (arguments.isEmpty ? "" : " " + shellArguments))
    }

    static func describe(_ series: Series, _ benchmark: Benchmark) -> String {
        if let problem = series.problem { return problem }
        if let skipped = series.skipped { return skipped }
        guard let median = series.median else { return "no result" }
        let unit = benchmark.unit
        var text: String
        if benchmark.lowerIsBetter {
            text = "\(Format.grouped(Int(median.rounded()))) \(unit)"
            if series.samples.count > 1, let low = series.samples.min(), let high = series.samples.max() {
                text += ", median of \(series.samples.count) runs (min \(Format.grouped(Int(low.rounded()))), "
                    + "max \(Format.grouped(Int(high.rounded()))))"
            }
        } else {
            let low = series.samples.min() ?? median
            let high = series.samples.max() ?? median
            text = "\(Format.si(median)) \(unit), median of \(series.samples.count) runs "
                + "(min \(Format.si(low)), max \(Format.si(high)))"
        }
        for name in series.extraOrder {
            guard let value = series.medianExtra(name) else { continue }
            let number = Format.fixed(value, value < 100 ? 2 : 0)
            text += name.hasSuffix(" ms") ? "; \(name.dropLast(3)) \(number) ms" : "; \(name) \(number)"
        }
        return text
    }

    /// The current UTC date and time, "2025-01-31 12:34:56 UTC".
    static func timestamp() -> String {
        var now = time(nil)
        var parts = tm()
        gmtime_r(&now, &parts)
        var buffer = [CChar](repeating: 0, count: 64)
        let count = strftime(&buffer, buffer.count, "%Y-%m-%d %H:%M:%S UTC", &parts)
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func machine() -> String {
        let cores = sysconf(Int32(_SC_NPROCESSORS_ONLN))
        let kernel = ThreadSwitches.readFile("/proc/sys/kernel/osrelease").map { String($0.split(separator: "\n").first ?? "") }
        var text = "Linux"
        if let kernel, !kernel.isEmpty { text += " \(kernel)" }
        #if arch(x86_64)
        text += " x86_64"
        #elseif arch(arm64)
        text += " arm64"
        #endif
        return text + ", \(cores) cores"
    }

    /// The 1-minute load average, from /proc/loadavg.
    static func loadAverage() -> Double? {
        ThreadSwitches.readFile("/proc/loadavg")?.split(separator: " ").first.flatMap { Double($0) }
    }

    /// A warning when other work was running on the machine when the suite started.
    static func loadWarning(_ load: Double?) -> String? {
        let cores = Double(max(sysconf(Int32(_SC_NPROCESSORS_ONLN)), 1))
        guard let load, load >= cores / 2 else { return nil }
        return "WARNING: the 1-minute load average was \(Format.fixed(load, 2)) when the suite started: "
            + "other work on this machine may distort the figures."
    }

    static func shellQuoted(_ text: String) -> String {
        let safe = text.allSatisfy { $0.isLetter || $0.isNumber || "-_./=:,".contains($0) }
        if safe && !text.isEmpty { return text }
        return "'" + text.split(separator: "'", omittingEmptySubsequences: false).joined(separator: "'\\''") + "'"
    }
}

extension String {
    fileprivate var trimmingLeadingSpaces: String { String(drop { $0 == " " }) }
}
