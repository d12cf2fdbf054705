import LullWakeupReport
#if canImport(Glibc)
import Glibc
#endif

/// `timerfires --pid PID` for a program that is not a Lull program (or with `--kernel`), and
/// `timerfires --all`: reads the kernel's timer, interrupt and scheduler tracepoints through
/// a tracefs instance of the tool's own, and attributes every wake-up of the process's
/// threads (`KernelWakeupTrace`).
///
/// Runs for `seconds` (forever if nil), until Ctrl-C, SIGTERM or SIGHUP, or until the process
/// exits; the instance is removed on each of these ways out.
struct KernelTracing {
    enum Target {
        case process(Int32)
        case system
    }

    let target: Target
    /// `--trace FILE`: the text read from tracefs is kept there (the file exists, empty).
    let keptTrace: String?
    let mountingTracefs: Bool

    /// How often the reader wakes to drain the pipe and look at the clock and the process.
    private static let pollMilliseconds: Int32 = 100
    /// How often the process's threads are listed again (to trace a new thread's calls).
    private static let threadRefreshNanoseconds: UInt64 = 200_000_000

    struct Outcome {
        var report: KernelWakeupReport
        var note: String?
    }

    func run(seconds: Double?, groupingBySite: Bool) throws -> Outcome {
        let scope: KernelTraceScope
        var threads: Set<Int32> = []
        switch target {
        case .process(let pid):
            try KernelTracing.checkProcess(pid)
            threads = KernelTracing.threads(of: pid)
            threads.insert(pid)
            scope = .process(pid: pid, threads: threads)
        case .system:
            scope = .system(excluding: getpid())
        }
        // The signals that end the recording are taken here, so that the instance is
        // always removed (a default SIGINT would leave it behind).
        var endings = sigset_t()
        sigemptyset(&endings)
        for signal in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&endings, signal) }
        var previousMask = sigset_t()
        pthread_sigmask(SIG_BLOCK, &endings, &previousMask)
        defer { pthread_sigmask(SIG_SETMASK, &previousMask, nil) }

        let instance = try TracefsInstance.create(mounting: mountingTracefs)
        defer { instance.remove() }
        switch target {
        case .process: instance.restrict(to: threads)
        case .system: instance.restrict(excluding: getpid())
        }
        // The threads' names, taken while they live (a thread that sleeps through the trace
        // shows in no line as current).
        var names: [Int32: String] = [:]
        func nameThreads(_ threads: Set<Int32>) {
            for tid in threads where names[tid] == nil {
                if let name = KernelTracing.name(of: tid) { names[tid] = name }
            }
        }
        nameThreads(threads)
        let kept = try keptTrace.map { try KeptTraceWriter(path: $0) }
        var trace = KernelWakeupTrace(scope: scope)
        var baseline: (total: Int, threads: Int)?
        var latest: (total: Int, threads: Int)?
        if case .process(let pid) = target {
            baseline = KernelSwitches.voluntary(pid: pid)
            latest = baseline
        }
        try instance.start()
        let start = monotonicNow()
        try kept?.write(KernelTraceDocument.header(scope: scope, start: start))
        switch target {
        case .process(let pid):
            let name = KernelTracing.name(of: pid).map { " (\($0))" } ?? ""
            printToStandardError("timerfires: tracing pid \(pid)\(name) through tracefs; Ctrl-C to stop")
        case .system:
            printToStandardError("timerfires: tracing every process through tracefs; Ctrl-C to stop")
        }

        var pending: [UInt8] = []
        func feed(_ bytes: [UInt8]) throws {
            guard !bytes.isEmpty else { return }
            pending += bytes
            guard let last = pending.lastIndex(of: UInt8(ascii: "\n")) else { return }
            // Whole lines only, so that a comment line written between two reads stays whole.
            let complete = String(decoding: pending[...last], as: UTF8.self)
            pending.removeSubrange(...last)
            try kept?.write(complete)
            for line in complete.split(separator: "\n", omittingEmptySubsequences: true) { trace.consume(line) }
        }

        let deadline = seconds.map { start + UInt64($0 * 1e9) }
        var nextRefresh = start + KernelTracing.threadRefreshNanoseconds
        var note: String?
        var zero = timespec(tv_sec: 0, tv_nsec: 0)
        while true {
            try feed(try instance.read(waitingMilliseconds: KernelTracing.pollMilliseconds))
            let now = monotonicNow()
            if case .process(let pid) = target {
                if KernelTracing.isGone(pid) {
                    note = "process \(pid) exited during the recording"
                    break
                }
                latest = KernelSwitches.voluntary(pid: pid) ?? latest
                if now >= nextRefresh {
                    nextRefresh = now + KernelTracing.threadRefreshNanoseconds
                    let current = KernelTracing.threads(of: pid)
                    if !current.isSubset(of: threads) {
                        let added = current.subtracting(threads)
                        threads.formUnion(current)
                        instance.restrict(to: threads)
                        trace.add(threads: added)
                        nameThreads(added)
                        try kept?.write(KernelTraceDocument.threads(added))
                    }
                }
            }
            if let deadline, now >= deadline { break }
            let signal = sigtimedwait(&endings, nil, &zero)
            if signal > 0 {
                if signal != SIGINT { note = "stopped by signal \(signal)" }
                break
            }
        }
        let end = monotonicNow()
        instance.stop()
        // Everything recorded until the stop is read, however far behind the reader is.
        while true {
            let rest = try instance.read(waitingMilliseconds: 0)
            if rest.isEmpty { break }
            try feed(rest)
        }
        let groups = instance.savedThreadGroups()
        trace.learn(threadGroups: groups)
        nameThreads(threads)
        trace.learn(taskNames: names)
        try kept?.write(KernelTraceDocument.taskNames(names))
        try kept?.write(KernelTraceDocument.footer(threadGroups: groups.filter { trace.taskNames[$0.key] != nil }, end: end))
        instance.remove()

        var kernel: KernelCount?
        if let baseline, let latest {
            kernel = KernelCount(voluntarySwitches: latest.total - baseline.total, threads: latest.threads)
        }
        let report = KernelWakeupReport(trace: trace, startTime: start, endTime: end,
                                        groupingBySite: groupingBySite, kernel: kernel)
        return Outcome(report: report, note: note)
    }

    /// Reports on a trace kept with `--trace`.
    static func report(keptAt path: String, text: String, groupingBySite: Bool) throws -> KernelWakeupReport {
        let contents: KernelTraceDocument.Contents
        do {
            contents = try KernelTraceDocument.read(text)
        } catch {
            throw ToolError("\(path): \(error)")
        }
        return KernelWakeupReport(trace: contents.trace, startTime: contents.startTime, endTime: contents.endTime,
                                  groupingBySite: groupingBySite)
    }

    static func checkProcess(_ pid: Int32) throws {
        if kill(pid, 0) != 0 && errno == ESRCH { throw ToolError("there is no process \(pid)") }
        if isGone(pid) { throw ToolError("process \(pid) has exited (it is a zombie)") }
    }

    /// Whether the process has exited (a zombie counts: its threads never wake again).
    static func isGone(_ pid: Int32) -> Bool {
        if kill(pid, 0) != 0 && errno == ESRCH { return true }
        guard let stat = KernelSwitches.readSmallFile("/proc/\(pid)/stat"),
              let close = stat.lastIndex(of: ")") else { return true }
        let state = stat[stat.index(after: close)...].drop { $0 == " " }.first
        return state == "Z" || state == "X"
    }

    /// The threads of `pid` now (/proc/PID/task).
    static func threads(of pid: Int32) -> Set<Int32> {
        guard let directory = opendir("/proc/\(pid)/task") else { return [] }
        defer { closedir(directory) }
        var threads: Set<Int32> = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if let tid = Int32(name) { threads.insert(tid) }
        }
        return threads
    }

    static func name(of pid: Int32) -> String? {
        KernelSwitches.readSmallFile("/proc/\(pid)/comm").map { String($0.prefix { $0 != "\n" }) }
    }
}

/// The kept kernel trace (`--trace FILE`), written as it is read.
final class KeptTraceWriter {
    private let file: ReportFile

    init(path: String) throws {
        file = try ReportFile(path: path, contents: "the trace")
    }

    func write(_ text: String) throws {
        try file.write(text)
    }
}
