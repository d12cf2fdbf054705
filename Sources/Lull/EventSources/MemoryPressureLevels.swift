/// The levels of memory pressure a `MemoryPressureSource` reports, and how it decides them
/// from Linux's pressure-stall information (PSI): pure logic, no system calls, so that the
/// rules are checked exactly in tests.
///
/// The measure is PSI's "some" memory stall: the time in which at least one task waited
/// for memory (reclaim, refaults of its working set, throttling). Over a window of
/// `window` microseconds (2 s):
/// - `.warning` when at least `warningStall` of the window is stalled (10%, 200 ms);
/// - `.critical` when at least `criticalStall` is (40%, 800 ms);
/// - `.normal` again once a whole window after the last report stalled less than
///   `warningStall`.
/// The kernel's triggers (one per raised level) announce a rise; while the level is raised,
/// the source samples the file's cumulative `total` once per window to see it fall.
struct MemoryPressureThresholds: Sendable, Equatable {
    /// The window of the kernel's triggers, in µs. 2 s: kernels refuse shorter windows to
    /// programs without CAP_SYS_RESOURCE (and some, in virtual machines, to everyone).
    var window: UInt64 = 2_000_000
    /// Stall time in a window that raises `.warning`, in µs.
    var warningStall: UInt64 = 200_000
    /// Stall time in a window that raises `.critical`, in µs.
    var criticalStall: UInt64 = 800_000

    static let standard = MemoryPressureThresholds()

    /// The trigger line for a level's stall, as the kernel reads it ("some <stall> <window>").
    func trigger(stall: UInt64) -> String { "some \(stall) \(window)" }

    /// The level a window's worth of stall time amounts to: `stall` µs stalled over
    /// `elapsed` µs, scaled to one window.
    func level(stall: UInt64, elapsed: UInt64) -> MemoryPressureLevel {
        let share = Double(stall) / Double(max(elapsed, 1))
        if share >= Double(criticalStall) / Double(window) { return .critical }
        if share >= Double(warningStall) / Double(window) { return .warning }
        return .normal
    }
}

/// A level of memory pressure, ordered.
enum MemoryPressureLevel: Int, Sendable, Comparable {
    case normal, warning, critical

    static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }

    var event: MemoryPressureEvent {
        switch self {
        case .normal: .normal
        case .warning: .warning
        case .critical: .critical
        }
    }
}

/// What woke the source, merged (OR) into its pending data by the reactor and the sampling
/// timer, and read back at delivery.
struct MemoryPressureWake: OptionSet, Sendable {
    let rawValue: UInt
    /// The warning trigger's descriptor reported (the trigger fired, or the report every
    /// new registration makes once).
    static let warningTrigger = MemoryPressureWake(rawValue: 1)
    /// The critical trigger's descriptor reported.
    static let criticalTrigger = MemoryPressureWake(rawValue: 2)
    /// A window passed while the level was raised: time to sample.
    static let sample = MemoryPressureWake(rawValue: 4)
}

/// The source's reading of the pressure, moved only at deliveries (one at a time, on the
/// target queue): the level last decided, the stall total when the triggers were written,
/// and the last sample.
///
/// States: `normal` (no sampling; a trigger report raises it), `warning`/`critical`
/// (a sample is due one window after the last one; a trigger report raises it further, a
/// sample sets it to the level the last window measured).
struct MemoryPressureReading: Sendable {
    let thresholds: MemoryPressureThresholds
    /// The stall total (µs) when the triggers were written.
    let totalAtRegistration: UInt64
    private(set) var level = MemoryPressureLevel.normal
    /// The total (µs) and the monotonic time (ns) of the last sample, or of the rise.
    private(set) var lastSample: (total: UInt64, time: UInt64)

    init(thresholds: MemoryPressureThresholds, total: UInt64, now: UInt64) {
        self.thresholds = thresholds
        totalAtRegistration = total
        lastSample = (total, now)
    }

    /// What a delivery makes of `wake` with the file's `total` (µs) read at `now` (ns):
    /// the new level when it changed, or nil. Afterwards `level != .normal` means a sample
    /// is due one window later.
    ///
    /// A trigger's report counts only when the total grew by at least its stall since the
    /// trigger was written: the kernel starts a trigger's window empty when it is written,
    /// so it cannot fire before that much stall, and the report every registration makes
    /// at once (see `Reactor.registerPressureTrigger`) is told apart.
    mutating func decide(_ wake: MemoryPressureWake, total: UInt64, now: UInt64) -> MemoryPressureLevel? {
        var next = level
        if wake.contains(.sample) {
            let stall = total &- lastSample.total
            let elapsed = (now &- lastSample.time) / 1_000
            next = thresholds.level(stall: total >= lastSample.total ? stall : 0, elapsed: elapsed)
            lastSample = (total, now)
        }
        let grown = total >= totalAtRegistration ? total - totalAtRegistration : 0
        var raised: MemoryPressureLevel?
        if wake.contains(.criticalTrigger), grown >= thresholds.criticalStall { raised = .critical }
        if raised == nil, wake.contains(.warningTrigger) || wake.contains(.criticalTrigger),
           grown >= thresholds.warningStall {
            raised = .warning
        }
        if let raised, raised > next {
            next = raised
            // A rise starts the window the next sample measures.
            lastSample = (total, now)
        }
        guard next != level else { return nil }
        level = next
        return next
    }
}
