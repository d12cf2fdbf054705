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
        abstract: "Reports the timers and wake-ups of a program: a Lull program, or any Linux process.",
        discussion: """
            With -- PROGRAM ARGS..., runs a Lull program and reports when it exits (or on Ctrl-C). \
            With --pid PID, attaches to a running process and reports after --seconds N, on \
            Ctrl-C or when the process exits: a Lull program through its diagnostics socket, any \
            other process (or a Lull program with --kernel) through the kernel's tracepoints. With \
            --all, reports every process through the kernel's tracepoints. With --read-trace FILE, \
            reports on a trace kept with --trace. The report goes to standard output, or to the \
            file given with -o. With --json and no -o, the program's own standard output goes to \
            standard error, so that standard output is the report alone: timerfires --json -- PROGRAM | jq .

            The kernel's tracepoints (timer:hrtimer_*, timer:timer_*, irq:*, sched:sched_waking, \
            sched:sched_switch, raw_syscalls) are read through a tracefs instance of timerfires' \
            own, removed at the end (also on Ctrl-C); this needs root, and tracefs mounted \
            (mount -t tracefs nodev /sys/kernel/tracing, or --mount-tracefs). Each wake-up of the \
            process's threads is attributed to its cause: a timer (its callback and the system \
            call that armed it: clock_nanosleep, epoll_wait, futex, timerfd_settime...), an \
            interrupt, or another thread (named). Timers are grouped by site, one row per thread \
            unless -g; SLACK is the window the kernel allowed (soft to hard expiry), and the \
            optimal count is the fewest timer interrupts that could have hit every window.
            """)

    @Flag(name: [.customShort("g"), .long],
          help: "One row per timer identity (label or creation site); for the kernel, per site across threads.")
    var group = false

    @Flag(help: "Print the report as JSON.")
    var json = false

    @Option(name: [.customShort("o"), .long], help: "Write the report to this file instead of standard output.")
    var output: String?

    @Option(help: "Attach to this running process (a Lull program, or any process through the kernel's tracepoints).")
    var pid: Int32?

    @Flag(help: "Report every process, through the kernel's tracepoints (root).")
    var all = false

    @Flag(help: "With --pid: read the kernel's tracepoints even for a Lull program (root).")
    var kernel = false

    @Flag(name: .customLong("mount-tracefs"),
          help: "Mount tracefs at /sys/kernel/tracing if it is not mounted (root).")
    var mountTracefs = false

    @Option(help: "With --pid or --all: report after this many seconds (default: on Ctrl-C or when the process exits).")
    var seconds: Double?

    @Option(help: "Records the program keeps (wake-ups and timer fires, 64 bytes each; the oldest give way).")
    var records: Int = TraceLayout.defaultRecordCapacity

    @Option(help: "Keep the trace in this file (it must not exist yet); for the kernel, the tracepoints' text.")
    var trace: String?

    @Option(name: .customLong("read-trace"), help: "Report on a trace kept earlier with --trace.")
    var readTrace: String?

    @Argument(parsing: .postTerminator, help: "The program to run, and its arguments, after --.")
    var command: [String] = []

    func validate() throws {
        let modes = [pid != nil, all, !command.isEmpty, readTrace != nil].filter { $0 }.count
        guard modes == 1 else {
            throw ValidationError("give exactly one of: -- PROGRAM ARGS..., --pid PID, --all, --read-trace FILE")
        }
        if seconds != nil && pid == nil && !all { throw ValidationError("--seconds goes with --pid or --all") }
        if let seconds, !(seconds > 0) { throw ValidationError("--seconds must be positive") }
        if kernel && pid == nil { throw ValidationError("--kernel goes with --pid (--all always reads the kernel's tracepoints)") }
        if let pid, pid <= 0 { throw ValidationError("--pid must be a process id (a positive number)") }
        guard (1...TraceLayout.maximumRecordCapacity).contains(records) else {
            throw ValidationError("--records must be in 1...\(TraceLayout.maximumRecordCapacity)")
        }
    }

    func run() throws {
        let reportFile = try output.map { try ReportFile(path: $0) }
        let text: String
        let note: String?
        if let readTrace {
            (text, note) = try readKeptTrace(readTrace)
        } else if all {
            (text, note) = try traceKernel(.system)
        } else if let pid {
            if kernel {
                (text, note) = try traceKernel(.process(pid))
            } else {
                do {
                    let file = try TraceFile(keepingAt: trace)
                    defer { file.discard() }
                    let collected = try Attachment(pid: pid, traceFile: file, records: records).run(seconds: seconds)
                    (text, note) = (render(collected.report(groupingByIdentity: group)), collected.note)
                } catch let refusal as NotALullProgram {
                    // Any other process: the kernel's tracepoints.
                    if let trace { unlink(trace) }
                    printToStandardError("timerfires: \(refusal.reason): reading the kernel's tracepoints")
                    (text, note) = try traceKernel(.process(pid))
                }
            }
        } else {
            let file = try TraceFile(keepingAt: trace)
            defer { file.discard() }
            // Standard output is the report's when it is JSON: the program's goes to stderr.
            let collected = try ProgramRun(command: command, traceFile: file, records: records,
                                           outputToStandardError: json && output == nil).run()
            (text, note) = (render(collected.report(groupingByIdentity: group)), collected.note)
        }
        if let reportFile {
            try reportFile.write(text + "\n")
        } else {
            print(text)
        }
        if let note { printToStandardError("timerfires: \(note)") }
    }

    private func render(_ report: WakeupReport) -> String {
        json ? report.json() : report.formatted()
    }

    private func render(_ report: KernelWakeupReport) -> String {
        json ? report.json() : report.formatted()
    }

    private func traceKernel(_ target: KernelTracing.Target) throws -> (String, String?) {
        // The kept file is created now, so that a path that exists fails before tracing.
        if let trace { _ = try TraceFile(keepingAt: trace) }
        let outcome = try KernelTracing(target: target, keptTrace: trace, mountingTracefs: mountTracefs)
            .run(seconds: seconds, groupingBySite: group)
        return (render(outcome.report), outcome.note)
    }

    /// A kept trace: Lull's binary trace, or the kernel's text (`KernelTraceDocument`).
    private func readKeptTrace(_ path: String) throws -> (String, String?) {
        if TraceFile.starts(path, with: KernelTraceDocument.signature) {
            guard let text = KernelSwitches.readSmallFile(path) else {
                throw ToolError("cannot read \(path): \(String(cString: strerror(errno)))")
            }
            return (render(try KernelTracing.report(keptAt: path, text: text, groupingBySite: group)), nil)
        }
        let collected = try Collected(traceFile: path)
        return (render(collected.report(groupingByIdentity: group)), collected.note)
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
