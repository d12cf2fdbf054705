import LullDiagnosticsFormat

/// What woke a Lull program and where its CPU time went, over one recording: the report of
/// `timerfires` and of `RuntimeDiagnostics.snapshot()`.
///
/// Times are in milliseconds, rates per second of the recording. `formatted()` renders it
/// for people, `json()` for machines (the same fields, camel-cased).
public struct WakeupReport: Sendable {
    /// One timer, or with grouping every timer of one identity.
    public struct TimerRow: Sendable {
        /// The timer's label, or where it was created ("File.swift:42"; for `asyncAfter`,
        /// the call site).
        public var identity: String
        /// The label of the queue its handler runs on (several, comma-separated, when grouped).
        public var queue: String
        /// The QoS class of its queue, as powermetrics names them ("default", "utility"...).
        public var qos: String
        /// How many timers the row stands for (timer sources; an `asyncAfter` call site is one).
        public var timers: Int
        /// Fires, counting those a repeating timer merged into one because it fired late.
        public var fires: Int
        /// The mean time between two fires, merged fires counted (nil with fewer than two).
        public var meanIntervalMilliseconds: Double?
        /// The mean leeway the timer engine gave the fires.
        public var leewayMilliseconds: Double
        /// How long after its deadline a fire came, on average.
        public var meanLatenessMilliseconds: Double
        /// How long after its deadline a fire came, at the 99th percentile (nearest rank).
        public var p99LatenessMilliseconds: Double
        /// The share of fires (0...1) that shared their wake-up with another timer or rode on
        /// a descriptor event: fires that cost no wake-up of their own.
        public var sharedWakeupFraction: Double
    }

    /// How often something happened, in all and per second.
    public struct Rate: Sendable {
        /// How many times over the recording.
        public var count: Int
        /// `count` divided by the recording's duration.
        public var perSecond: Double
    }

    /// Reactor wake-ups by cause.
    public struct Wakeups: Sendable {
        /// The reactor's next-timer expired.
        public var timer: Rate
        /// A descriptor (socket, pipe, signal, file watch, process) became ready.
        public var descriptor: Rate
        /// Another thread changed the reactor's events while it slept (libevent's notification).
        public var crossThread: Rate
        /// The poll returned for none of these.
        public var other: Rate
        /// Every reactor wake-up.
        public var total: Rate
    }

    /// The timer engine against the best possible schedule for the same windows.
    public struct Coalescing: Sendable {
        /// The windows [deadline, deadline + leeway] of the fires.
        public var windows: Int
        /// Wake-ups in which at least one timer fired.
        public var wakeupsWithTimerFires: Int
        /// The fewest wake-ups that hit every window (interval stabbing: by window end, greedy).
        public var optimalWakeups: Int
        /// `wakeupsWithTimerFires / optimalWakeups` (1: optimal; nil without windows).
        public var ratio: Double?
    }

    /// The kernel's count of the process's wake-ups: voluntary context switches of its threads.
    public struct KernelWakeups: Sendable {
        /// Voluntary context switches of the process's threads over the recording.
        public var voluntaryContextSwitches: Int
        /// `voluntaryContextSwitches` divided by the recording's duration.
        public var perSecond: Double
        /// Threads counted (nil when the count comes from the exit status, all threads in).
        public var threads: Int?
    }

    /// CPU time of the blocks that ran at one QoS class.
    public struct QoSTime: Sendable {
        /// The class, as powermetrics names them ("background", ..., "user-interactive").
        public var qos: String
        /// CPU time of the blocks that ran at this class, over the recording.
        public var milliseconds: Double
        /// `milliseconds` per second of the recording.
        public var millisecondsPerSecond: Double
    }

    /// The recorded process.
    public var pid: Int32
    /// How long the recording ran.
    public var durationSeconds: Double
    /// Rows are one per identity rather than one per timer.
    public var groupedByIdentity: Bool
    /// Records the ring overwrote: timer rows and coalescing cover the rest only.
    public var lostRecords: Int
    /// One row per timer (or identity), most fires first.
    public var timers: [TimerRow]
    /// Reactor wake-ups by cause (over the whole recording, lost records included).
    public var wakeups: Wakeups
    /// The wake-ups timers used against the fewest possible for their windows.
    public var coalescing: Coalescing
    /// nil when the process could not be read.
    public var kernel: KernelWakeups?
    /// Every QoS class from background to user-interactive, in that order.
    public var cpu: [QoSTime]

    init(trace: Trace, endTime: UInt64, groupingByIdentity: Bool, kernel: KernelCount?) {
        let end = trace.stopTime != 0 ? trace.stopTime : max(endTime, trace.startTime)
        let seconds = Double(end - trace.startTime) / 1e9
        func rate(_ count: Int) -> Rate { Rate(count: count, perSecond: seconds > 0 ? Double(count) / seconds : 0) }
        pid = trace.pid
        durationSeconds = seconds
        groupedByIdentity = groupingByIdentity
        lostRecords = Int(trace.lostRecords)
        let counts = trace.wakeupCounts.mapValues { Int($0) }
        let total = counts.values.reduce(0, +)
        wakeups = Wakeups(timer: rate(counts[.timer] ?? 0), descriptor: rate(counts[.descriptor] ?? 0),
                          crossThread: rate(counts[.crossThread] ?? 0), other: rate(counts[.other] ?? 0),
                          total: rate(total))
        timers = WakeupAnalysis.rows(trace, grouping: groupingByIdentity)
        coalescing = WakeupAnalysis.coalescing(trace.fires)
        self.kernel = kernel.map {
            KernelWakeups(voluntaryContextSwitches: $0.voluntarySwitches,
                          perSecond: seconds > 0 ? Double($0.voluntarySwitches) / seconds : 0, threads: $0.threads)
        }
        cpu = TraceQoS.allCases.dropFirst().map { qosClass in
            let milliseconds = Double(trace.cpuNanoseconds[qosClass] ?? 0) / 1e6
            return QoSTime(qos: qosClass.name, milliseconds: milliseconds,
                           millisecondsPerSecond: seconds > 0 ? milliseconds / seconds : 0)
        }
    }
}

/// The kernel's count for a report (see `WakeupReport.KernelWakeups`).
public struct KernelCount: Sendable {
    public var voluntarySwitches: Int
    public var threads: Int?

    public init(voluntarySwitches: Int, threads: Int?) {
        self.voluntarySwitches = voluntarySwitches
        self.threads = threads
    }
}

extension Trace {
    /// The report of this trace, which ends at `endTime` (monotonic ns) unless it says when
    /// it stopped; `kernel` is the kernel's count over the same time, when known.
    public func report(endTime: UInt64, groupingByIdentity: Bool, kernel: KernelCount?) -> WakeupReport {
        WakeupReport(trace: self, endTime: endTime, groupingByIdentity: groupingByIdentity, kernel: kernel)
    }
}
