/// What woke a process (or every process), read from the kernel's tracepoints: the report of
/// `timerfires` for a program that is not a Lull program, in the shape of `WakeupReport`.
///
/// Rows are timers grouped by site (the callback and the system call that armed it), one
/// row per thread unless grouped; wake-ups are counted by cause; the coalescing line sets
/// the timer-interrupt runs that fired the timers against the fewest that could have hit
/// every window the kernel allowed ([soft expiry, hard expiry]: the thread's timer slack).
/// Times are in milliseconds, rates per second of the recording.
public struct KernelWakeupReport: Sendable {
    /// Timers of one site (and, unless grouped, one thread).
    public struct TimerRow: Sendable {
        /// The process, "name[pid]" (only when tracing every process).
        public var process: String?
        /// The timer's callback: `hrtimer_wakeup` (a sleep, or a wait with a timeout),
        /// `timerfd_tmrproc`, `posix_timer_fn`, `it_real_fn`...
        public var function: String
        /// The system call that armed it; "-" when it was armed in a call not traced, "?"
        /// when it was armed before the trace started, "kernel" for a kernel timer (armed
        /// in an interrupt) that woke the process.
        public var syscall: String
        /// The threads that armed (or, for a kernel timer, were woken by) the row's timers.
        public var threads: String
        /// Distinct timers (addresses).
        public var timers: Int
        public var fires: Int
        /// The mean time between two fires (nil with fewer than two).
        public var meanIntervalMilliseconds: Double?
        /// The mean window the kernel allowed (hard minus soft expiry; nil for the timer wheel).
        public var slackMilliseconds: Double?
        /// How long after the window opened a fire came, on average and at the 99th
        /// percentile (nil when no fire's window is known).
        public var meanLatenessMilliseconds: Double?
        public var p99LatenessMilliseconds: Double?
        /// The share of fires (0...1) that woke a thread of the process.
        public var wokeFraction: Double
        /// The share of fires (0...1) that expired in the same interrupt run as another
        /// timer of the process: fires that cost no interrupt of their own.
        public var sharedWakeupFraction: Double
    }

    /// Wake-ups by cause.
    public struct Wakeups: Sendable {
        /// A timer expired (its callback woke the thread).
        public var timer: WakeupReport.Rate
        /// A device interrupt or a soft interrupt (network, block...) woke the thread.
        public var interrupt: WakeupReport.Rate
        /// Another thread woke it (of the process or not).
        public var thread: WakeupReport.Rate
        /// The waker is unknown.
        public var other: WakeupReport.Rate
        public var total: WakeupReport.Rate
    }

    /// One source of wake-ups.
    public struct Cause: Sendable {
        /// The woken process, "name[pid]" (only when tracing every process).
        public var process: String?
        /// "timer", "interrupt", "thread" or "other".
        public var kind: String
        /// The timer's site ("clock_nanosleep hrtimer_wakeup"), the interrupt's name, or
        /// the waking thread ("name[tid]", with "(same process)" for the process's own).
        public var source: String
        public var wakeups: WakeupReport.Rate
    }

    /// "pid 1234 (name)" or "all processes".
    public var scope: String
    /// The traced process (nil for every process).
    public var pid: Int32?
    public var durationSeconds: Double
    /// One row per site rather than per site and thread.
    public var groupedBySite: Bool
    /// Events the kernel's ring buffer dropped: counts may be short.
    public var lostEvents: Int
    /// Most fires first.
    public var timers: [TimerRow]
    public var wakeups: Wakeups
    /// Most wake-ups first.
    public var causes: [Cause]
    /// Interrupt runs that fired the process's timers against the fewest possible for
    /// their windows (high-resolution timers whose window is known).
    public var coalescing: WakeupReport.Coalescing
    /// Windows with slack (hard expiry after soft expiry): the timers that let the kernel
    /// coalesce them.
    public var windowsWithSlack: Int
    /// The process's voluntary context switches.
    public var kernel: WakeupReport.KernelWakeups?

    /// The report of `trace` over [startTime, endTime] on the trace clock (the trace's own
    /// first and last times when nil); `kernel` is a count taken outside the trace (from
    /// /proc), else the trace's own count of switches into sleep.
    public init(trace: KernelWakeupTrace, startTime: UInt64? = nil, endTime: UInt64? = nil,
                groupingBySite: Bool, kernel: KernelCount? = nil) {
        let start = startTime ?? trace.firstTime ?? 0
        let end = max(start, endTime ?? trace.lastTime ?? start)
        let seconds = Double(end - start) / 1e9
        func rate(_ count: Int) -> WakeupReport.Rate {
            WakeupReport.Rate(count: count, perSecond: seconds > 0 ? Double(count) / seconds : 0)
        }
        let system: Bool
        switch trace.scope {
        case .process(let pid, _):
            system = false
            self.pid = pid
            scope = "pid \(pid)" + (trace.taskNames[pid].map { " (\($0))" } ?? "")
        case .system:
            system = true
            pid = nil
            scope = "all processes"
        }
        func thread(_ tid: Int32) -> String { "\(trace.taskNames[tid] ?? "?")[\(tid)]" }
        func process(_ tid: Int32) -> String? {
            guard system else { return nil }
            let group = trace.threadGroups[tid] ?? tid
            return "\(trace.taskNames[group] ?? trace.taskNames[tid] ?? "?")[\(group)]"
        }
        durationSeconds = seconds
        groupedBySite = groupingBySite
        lostEvents = trace.lostEvents

        // Timers by site.
        struct RowKey: Hashable {
            var process: String?
            var function: String
            var syscall: String
            var thread: Int32?
        }
        var batches: [String: Int] = [:]
        for fire in trace.fires where !fire.isWheel { batches["\(fire.cpu):\(fire.batch)", default: 0] += 1 }
        var groups: [RowKey: [KernelTimerFire]] = [:]
        var order: [RowKey] = []
        for fire in trace.fires {
            let thread = fire.owner ?? fire.firstWoken
            let key = RowKey(process: thread.flatMap(process), function: fire.function,
                             syscall: KernelWakeupReport.site(fire),
                             thread: groupingBySite ? nil : thread)
            if groups[key] == nil { order.append(key) }
            groups[key, default: []].append(fire)
        }
        timers = order.map { key in
            let fires = groups[key]!
            let windows = fires.compactMap { fire in fire.deadline.flatMap { deadline in fire.end.map { (deadline, $0) } } }
            let lateness = fires.compactMap { fire in
                fire.deadline.map { Double(fire.time > $0 ? fire.time - $0 : 0) / 1e6 }
            }.sorted()
            let threads = fires.compactMap { $0.owner ?? $0.firstWoken }
            var seen = Set<Int32>()
            // Fires come in trace order; their times, taken from each CPU's timer base, may
            // step back by microseconds across CPUs.
            let times = fires.map(\.time)
            let span = Double(times.max()! - times.min()!) / 1e6
            return TimerRow(
                process: key.process, function: key.function, syscall: key.syscall,
                threads: threads.filter { seen.insert($0).inserted }.map(thread).joined(separator: ", "),
                timers: Set(fires.map(\.timer)).count, fires: fires.count,
                meanIntervalMilliseconds: fires.count > 1 ? span / Double(fires.count - 1) : nil,
                slackMilliseconds: windows.isEmpty ? nil
                    : windows.reduce(0.0) { $0 + Double($1.1 - $1.0) } / Double(windows.count) / 1e6,
                meanLatenessMilliseconds: lateness.isEmpty ? nil : lateness.reduce(0, +) / Double(lateness.count),
                p99LatenessMilliseconds: lateness.isEmpty ? nil : WakeupAnalysis.percentile(lateness, 0.99),
                wokeFraction: Double(fires.filter { $0.woke > 0 }.count) / Double(fires.count),
                sharedWakeupFraction: Double(fires.filter {
                    !$0.isWheel && batches["\($0.cpu):\($0.batch)", default: 0] > 1
                }.count) / Double(fires.count))
        }.sorted { ($0.fires, $1.function, $1.syscall, $1.threads) > ($1.fires, $0.function, $0.syscall, $0.threads) }

        // Wake-ups by cause.
        var kinds: [String: Int] = [:]
        struct CauseKey: Hashable {
            var process: String?
            var kind: String
            var source: String
        }
        var causeCounts: [CauseKey: Int] = [:]
        for wakeup in trace.wakeups {
            let kind: String
            let source: String
            switch wakeup.cause {
            case .timer(let index):
                let fire = trace.fires[index]
                kind = "timer"
                source = "\(KernelWakeupReport.site(fire)) \(fire.function)"
            case .interrupt(let name):
                kind = "interrupt"
                source = name
            case .thread(let waker, _):
                kind = "thread"
                let sameProcess = (trace.threadGroups[waker] ?? waker) == (trace.threadGroups[wakeup.tid] ?? wakeup.tid)
                    || (!system && trace.inScope(waker))
                source = thread(waker) + (sameProcess ? " (same process)" : "")
            case .other:
                kind = "other"
                source = "-"
            }
            kinds[kind, default: 0] += 1
            causeCounts[CauseKey(process: process(wakeup.tid), kind: kind, source: source), default: 0] += 1
        }
        wakeups = Wakeups(timer: rate(kinds["timer"] ?? 0), interrupt: rate(kinds["interrupt"] ?? 0),
                          thread: rate(kinds["thread"] ?? 0), other: rate(kinds["other"] ?? 0),
                          total: rate(trace.wakeups.count))
        causes = causeCounts.map { Cause(process: $0.key.process, kind: $0.key.kind, source: $0.key.source, wakeups: rate($0.value)) }
            .sorted { ($0.wakeups.count, $1.kind, $1.source, $1.process ?? "") > ($1.wakeups.count, $0.kind, $0.source, $0.process ?? "") }

        // Coalescing of the high-resolution timers whose window is known.
        let windowed = trace.fires.filter { !$0.isWheel && $0.deadline != nil && $0.end != nil }
        let optimal = WakeupAnalysis.optimalWakeups(windowed.map { (start: $0.deadline!, end: $0.end!) })
        let used = Set(windowed.map { "\($0.cpu):\($0.batch)" }).count
        coalescing = WakeupReport.Coalescing(windows: windowed.count, wakeupsWithTimerFires: used, optimalWakeups: optimal,
                                             ratio: optimal > 0 ? Double(used) / Double(optimal) : nil)
        windowsWithSlack = windowed.filter { $0.end! > $0.deadline! }.count

        let count = kernel ?? KernelCount(voluntarySwitches: trace.voluntarySwitches.values.reduce(0, +),
                                          threads: trace.voluntarySwitches.count)
        self.kernel = WakeupReport.KernelWakeups(
            voluntaryContextSwitches: count.voluntarySwitches,
            perSecond: seconds > 0 ? Double(count.voluntarySwitches) / seconds : 0, threads: count.threads)
    }

    /// The arming call of a fire as the report names it.
    static func site(_ fire: KernelTimerFire) -> String {
        if let syscall = fire.syscall { return syscall }
        if !fire.armingSeen { return "?" }
        return fire.owner == nil ? "kernel" : "-"
    }
}
