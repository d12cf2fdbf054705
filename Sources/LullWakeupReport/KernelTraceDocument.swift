/// A kernel trace kept by `timerfires --trace FILE` (for `--read-trace FILE`): the lines
/// read from tracefs, framed by comment lines that say whose wake-ups they are and when the
/// recording started and stopped.
///
/// ```text
/// # timerfires kernel trace
/// # scope: pid 1234 threads 1234 1240
/// # start: 10232471719000
///            sl-1234    (   1234) [001] ..... 10232.472578: sys_enter: NR 230 (0, 0, ...)
/// ...
/// # tgid: 1241 1234
/// # end: 10233480000000
/// ```
///
/// `# scope: all excluding PID` is the system-wide form; `# threads: TID...` lines add
/// threads of the process found while tracing (from that point on); `# tgid: TID TGID` lines
/// add thread groups the lines do not show (tracefs `saved_tgids`); `# task: TID NAME` lines
/// name threads (/proc/PID/task/TID/comm), for a process that sleeps through the trace.
public enum KernelTraceDocument {
    /// The first line of a kept kernel trace.
    public static let signature = "# timerfires kernel trace"

    /// The comment lines that open a kept trace.
    public static func header(scope: KernelTraceScope, start: UInt64) -> String {
        let scopeLine: String
        switch scope {
        case .process(let pid, let threads):
            scopeLine = "# scope: pid \(pid) threads " + threads.sorted().map(String.init).joined(separator: " ")
        case .system(let excluding):
            scopeLine = "# scope: all" + (excluding.map { " excluding \($0)" } ?? "")
        }
        return "\(signature)\n\(scopeLine)\n# start: \(start)\n"
    }

    /// The comment lines that name threads.
    public static func taskNames(_ names: [Int32: String]) -> String {
        names.sorted { $0.key < $1.key }.map { "# task: \($0.key) \($0.value)\n" }.joined()
    }

    /// The comment line that adds threads found while tracing.
    public static func threads(_ threads: Set<Int32>) -> String {
        "# threads: " + threads.sorted().map(String.init).joined(separator: " ") + "\n"
    }

    /// The comment lines that close a kept trace.
    public static func footer(threadGroups: [Int32: Int32], end: UInt64) -> String {
        threadGroups.sorted { $0.key < $1.key }.map { "# tgid: \($0.key) \($0.value)\n" }.joined() + "# end: \(end)\n"
    }

    /// A kept trace, read: the attribution and the recording's bounds on the trace clock.
    public struct Contents: Sendable {
        public var trace: KernelWakeupTrace
        public var startTime: UInt64?
        public var endTime: UInt64?
    }

    /// Reads a kept trace (or any tracefs text that starts with a scope line).
    public static func read(_ text: String) throws(TraceError) -> Contents {
        var trace: KernelWakeupTrace?
        var start: UInt64?
        var end: UInt64?
        var groups: [Int32: Int32] = [:]
        var names: [Int32: String] = [:]
        for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
            if line.hasPrefix("#") {
                let words = line.dropFirst().split(separator: " ")
                guard let key = words.first else { continue }
                switch key {
                case "scope:":
                    guard trace == nil else { throw .damaged("it has two scope lines") }
                    trace = KernelWakeupTrace(scope: try scope(Array(words.dropFirst())))
                case "start:":
                    start = words.dropFirst().first.flatMap { UInt64($0) }
                case "end:":
                    end = words.dropFirst().first.flatMap { UInt64($0) }
                case "threads:":
                    trace?.add(threads: Set(words.dropFirst().compactMap { Int32($0) }))
                case "task:":
                    if words.count >= 3, let tid = Int32(words[1]) { names[tid] = words.dropFirst(2).joined(separator: " ") }
                case "tgid:":
                    if words.count == 3, let tid = Int32(words[1]), let tgid = Int32(words[2]) { groups[tid] = tgid }
                default:
                    continue
                }
                continue
            }
            guard trace != nil else { throw .damaged("a trace line comes before the scope line") }
            trace!.consume(line)
        }
        guard var trace else { throw .damaged("it has no scope line (\"# scope: pid PID\" or \"# scope: all\")") }
        trace.learn(threadGroups: groups)
        trace.learn(taskNames: names)
        return Contents(trace: trace, startTime: start, endTime: end)
    }

    private static func scope(_ words: [Substring]) throws(TraceError) -> KernelTraceScope {
        if words.first == "all" {
            return .system(excluding: words.count == 3 && words[1] == "excluding" ? Int32(words[2]) : nil)
        }
        guard words.count >= 2, words[0] == "pid", let pid = Int32(words[1]) else {
            throw .damaged("its scope line names no pid")
        }
        var threads: Set<Int32> = [pid]
        if words.count > 3, words[2] == "threads" {
            for word in words.dropFirst(3) { if let tid = Int32(word) { threads.insert(tid) } }
        }
        return .process(pid: pid, threads: threads)
    }
}
