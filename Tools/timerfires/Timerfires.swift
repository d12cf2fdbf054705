import ArgumentParser
import LullDiagnosticsFormat
import LullWakeupReport
#if canImport(Glibc)
import Glibc
#endif

/// `timerfires`: which timers woke a Lull program, how late they fired, how many wake-ups
/// coalescing could still save, and where the CPU time went by QoS.
@main
struct Timerfires: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Reports the timers and wake-ups of a program that uses Lull.",
        discussion: """
            With -- PROGRAM ARGS..., runs the program and reports when it exits (or on Ctrl-C). \
            With --pid PID, attaches to a running Lull program and reports after --seconds N, \
            on Ctrl-C or when the program exits. With --read-trace FILE, reports on a trace \
            kept with --trace. The report goes to standard output, or to the file given \
            with -o. With --json and no -o, the program's own standard output goes to standard \
            error, so that standard output is the report alone: timerfires --json -- PROGRAM | jq .
            """)

    @Flag(name: [.customShort("g"), .long], help: "One row per timer identity (label or creation site).")
    var group = false

    @Flag(help: "Print the report as JSON.")
    var json = false

    @Option(name: [.customShort("o"), .long], help: "Write the report to this file instead of standard output.")
    var output: String?

    @Option(help: "Attach to this running Lull program.")
    var pid: Int32?

    @Option(help: "With --pid: report after this many seconds (default: on Ctrl-C or when the program exits).")
    var seconds: Double?

    @Option(help: "Records the program keeps (wake-ups and timer fires, 64 bytes each; the oldest give way).")
    var records: Int = TraceLayout.defaultRecordCapacity

    @Option(help: "Keep the trace in this file (it must not exist yet).")
    var trace: String?

    @Option(name: .customLong("read-trace"), help: "Report on a trace kept earlier with --trace.")
    var readTrace: String?

    @Argument(parsing: .postTerminator, help: "The program to run, and its arguments, after --.")
    var command: [String] = []

    func validate() throws {
        let modes = [pid != nil, !command.isEmpty, readTrace != nil].filter { $0 }.count
        guard modes == 1 else {
            throw ValidationError("give exactly one of: -- PROGRAM ARGS..., --pid PID, --read-trace FILE")
        }
        if seconds != nil && pid == nil { throw ValidationError("--seconds goes with --pid") }
        if let seconds, !(seconds > 0) { throw ValidationError("--seconds must be positive") }
        guard (1...TraceLayout.maximumRecordCapacity).contains(records) else {
            throw ValidationError("--records must be in 1...\(TraceLayout.maximumRecordCapacity)")
        }
    }

    func run() throws {
        let reportFile = try output.map { try ReportFile(path: $0) }
        let collected: Collected
        if let readTrace {
            collected = try Collected(traceFile: readTrace)
        } else {
            let file = try TraceFile(keepingAt: trace)
            defer { file.discard() }
            if let pid {
                collected = try Attachment(pid: pid, traceFile: file, records: records).run(seconds: seconds)
            } else {
                // Standard output is the report's when it is JSON: the program's goes to stderr.
                collected = try ProgramRun(command: command, traceFile: file, records: records,
                                           outputToStandardError: json && output == nil).run()
            }
        }
        let report = collected.report(groupingByIdentity: group)
        let text = json ? report.json() : report.formatted()
        if let reportFile {
            try reportFile.write(text + "\n")
        } else {
            print(text)
        }
        if let note = collected.note { printToStandardError("timerfires: \(note)") }
    }
}

/// A failure the user can act on; printed as "Error: ..." with exit status 1.
struct ToolError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}

func printToStandardError(_ text: String) {
    var line = text + "\n"
    line.withUTF8 { bytes in _ = write(2, bytes.baseAddress, bytes.count) }
}

/// What a run or an attachment leaves for the report.
struct Collected {
    var trace: Trace
    var endTime: UInt64
    var kernel: KernelCount?
    var note: String?

    init(trace: Trace, endTime: UInt64, kernel: KernelCount?, note: String?) {
        self.trace = trace
        self.endTime = endTime
        self.kernel = kernel
        self.note = note
    }

    init(traceFile path: String) throws {
        do {
            trace = try Trace(contentsOf: path)
        } catch {
            throw ToolError("\(path): \(error)")
        }
        // A trace of a program that died while recording has no stop time: it ends with
        // its last record.
        endTime = max(trace.fires.last?.time ?? 0, trace.wakeups.last?.time ?? 0)
        kernel = nil
        note = nil
    }

    func report(groupingByIdentity: Bool) -> WakeupReport {
        trace.report(endTime: endTime, groupingByIdentity: groupingByIdentity, kernel: kernel)
    }
}

func monotonicNow() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}
