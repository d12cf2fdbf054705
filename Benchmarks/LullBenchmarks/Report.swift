// The final report: one table row per benchmark, Lull's figure, Dispatch's, and the ratio,
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

    static func ratio(_ result: BenchmarkResult) -> String {
        guard let lull = result.series[.lull], lull.problem == nil, let lullMedian = lull.median,
              let dispatch = result.series[.dispatch], dispatch.problem == nil, let dispatchMedian = dispatch.median
        else { return "-" }
        if dispatchMedian == 0 { return lullMedian == 0 ? "1.00x (both 0)" : "inf" }
        let value = lullMedian / dispatchMedian
        return Format.fixed(value, value < 10 ? 2 : 1) + "x"
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
        }
    }

    static func ratioText(_ lull: Double?, _ dispatch: Double?) -> String {
        guard let lull, let dispatch else { return "-" }
        if dispatch == 0 { return lull == 0 ? "1.00x (both 0)" : "inf" }
        let value = lull / dispatch
        return Format.fixed(value, value < 10 ? 2 : 1) + "x"
    }

    static func print(_ results: [BenchmarkResult], options: Options, arguments: [String], loadAtStart: Double?) {
        emit("")
        emit("Lull vs Dispatch — \(timestamp()) — \(machine())"
            + (loadAtStart.map { ", load average \(Format.fixed($0, 2)) at the start" } ?? ""))
        if let warning = loadWarning(loadAtStart) { emit(warning) }
        emit("Each runtime runs each benchmark in a child process of its own. Each figure is the median of the measured")
        emit("runs after one warm-up run (idle: a single measurement after its own warm-up; idle-read-sources-*:")
        emit("the median of \(options.runs) fresh processes, each measuring once after its own warm-up).")
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
            emit("echo-nio-*: the Dispatch column holds SwiftNIO's echo server, and Lull/Dispatch is Lull/NIO; the")
            emit("Dispatch twin's figures are in the details (\"Dispatch …\"). Latency, CPU and memory: lower is better.")
        }
        if results.contains(where: { $0.benchmark.name.hasPrefix("fs-") }) {
            emit("fs-*: Dispatch has no file-system sources on Linux; the Dispatch column holds the peer named in the")
            emit("details (\(FileSystemBenchmarks.rawPeer): a thread blocked in poll(2) on a raw inotify descriptor, the floor;")
            emit("inotifywait -r: Debian's inotify-tools), and Lull/Dispatch is Lull/peer. Latency and set-up time: lower")
            emit("is better; paths/s: higher is better.")
        }
        emit("")

        let header = ["benchmark", "size", "unit", "Lull", "Dispatch", "Lull/Dispatch"]
        var rows: [[String]] = [header]
        for result in results {
            let benchmark = result.benchmark
            rows.append([
                benchmark.name,
                benchmark.sizeDescription(result.parameters),
                benchmark.unit,
                figure(result.series[.lull], lowerIsBetter: benchmark.lowerIsBetter),
                figure(result.series[.dispatch], lowerIsBetter: benchmark.lowerIsBetter),
                ratio(result),
            ])
            for extraRow in benchmark.extraRows {
                let lull = extraFigure(result.series[.lull], extraRow)
                let dispatch = extraFigure(result.series[.dispatch], extraRow)
                rows.append([
                    extraRow.label, "", extraRow.unit,
                    lull.map { format($0, extraRow.style) } ?? "-",
                    dispatch.map { format($0, extraRow.style) } ?? "-",
                    ratioText(lull, dispatch),
                ])
            }
        }
        var widths = [Int](repeating: 0, count: header.count)
        for row in rows {
            for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) }
        }
        for (rowIndex, row) in rows.enumerated() {
            let cells = row.enumerated().map { index, cell in
                index < 3 ? Format.padRight(cell, widths[index]) : Format.padLeft(cell, widths[index])
            }
            emit(cells.joined(separator: "  "))
            if rowIndex == 0 {
                emit(widths.map { String(repeating: "-", count: $0) }.joined(separator: "  "))
            }
        }

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
