import Synchronization

/// Timer source options.
public struct TimerFlags: OptionSet, Sendable {
    public let rawValue: UInt
    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// Use exactly the requested leeway: no default leeway is added for coalescing.
    public static let strict = TimerFlags(rawValue: 1)
}

/// Fires at its deadline (within its leeway), once or repeatedly; `data` is the number of
/// fires since the handler last ran.
///
/// - A one-shot timer fires once and stays alive, idle, until rescheduled or cancelled.
/// - A repeating timer's fires are `deadline + k × interval`: it does not drift, and fires
///   missed while the handler was busy or the source suspended are counted in `data`.
/// - A fire is due in its window [deadline, deadline + leeway] — never earlier — and fires in
///   one wake-up with every other timer whose window is open then (see `TimerEngine`).
///   Without `.strict` the leeway is at least the documented default for the queue's QoS
///   (`DefaultLeeway`); the leeway of a repeating timer is capped at its interval.
/// - A deadline in the past fires at once; `.distantFuture` never fires; an interval of
///   zero or less makes the timer a one-shot.
/// - Wall-clock timers (`schedule(wallDeadline:...)`) follow changes of the system clock.
public final class TimerSource: EventSourceBase, EventSourceProtocol, @unchecked Sendable {  // Sendable: see EventSourceBase
    private let driver: TimerDriver

    init(flags: TimerFlags, queue: WorkQueue?, site: TimerSite) {
        let driver = TimerDriver(strict: flags.contains(.strict), site: site)
        self.driver = driver
        super.init(core: SourceCore(kindName: "TimerSource", target: queue, merge: .add,
                                    handle: 0, mask: flags.rawValue, driver: driver))
    }

    /// The name of this timer in wake-up diagnostics (`timerfires`, `RuntimeDiagnostics`);
    /// without one, the timer is named by where it was created ("File.swift:42").
    public var label: String? {
        get { driver.label }
        set { driver.label = newValue }
    }

    /// Schedules the timer on the monotonic clock; replaces any previous schedule, and fires
    /// of the previous schedule not yet delivered are dropped (as in Dispatch).
    public func schedule(deadline: Deadline, repeating: Duration? = nil, leeway: Duration = .zero) {
        driver.schedule(TimerDriver.Schedule(start: deadline.uptimeNanoseconds, isWall: false,
                                             interval: TimerDriver.nanoseconds(repeating),
                                             leeway: TimerDriver.nanoseconds(leeway) ?? 0),
                        core: core)
    }

    /// Schedules the timer on the wall clock; replaces any previous schedule (dropping its
    /// undelivered fires).
    public func schedule(wallDeadline: WallDeadline, repeating: Duration? = nil, leeway: Duration = .zero) {
        driver.schedule(TimerDriver.Schedule(start: wallDeadline.nanosecondsSinceEpoch, isWall: true,
                                             interval: TimerDriver.nanoseconds(repeating),
                                             leeway: TimerDriver.nanoseconds(leeway) ?? 0),
                        core: core)
    }
}

extension EventSource {
    /// A timer source; `file` and `line` name it in wake-up diagnostics unless it gets a
    /// `label`.
    public static func makeTimerSource(flags: TimerFlags = [], queue: WorkQueue? = nil,
                                       file: StaticString = #fileID, line: UInt = #line) -> TimerSource {
        TimerSource(flags: flags, queue: queue, site: TimerSite(file: file, line: line))
    }
}

/// Turns a timer source's schedule into timer-engine entries, one fire at a time.
final class TimerDriver: SourceDriver {
    struct Schedule {
        /// The first deadline: monotonic ns, or wall ns since the epoch for a wall timer.
        var start: UInt64
        var isWall: Bool
        /// nil: one-shot.
        var interval: UInt64?
        var leeway: UInt64
    }

    private struct State {
        var schedule: Schedule?
        /// The fire index the pending entry stands for (deadline = start + index × interval).
        var nextIndex: UInt64 = 0
        var entry: TimerEntry?
        var core: SourceCore?
        var registered = false
        var label: String?
        /// Tells this timer apart in wake-up diagnostics (0: not asked yet).
        var diagnosticsSerial: UInt64 = 0
    }

    let strict: Bool
    let site: TimerSite
    private let state = Mutex<State>(State())

    init(strict: Bool, site: TimerSite) {
        self.strict = strict
        self.site = site
    }

    var label: String? {
        get { state.locked { $0.label } }
        set { state.locked { $0.label = newValue } }
    }

    /// How wake-up diagnostics name this timer, and its interval (nil: one-shot).
    func diagnosticsOrigin() -> (TimerFireOrigin, interval: UInt64?) {
        state.locked { state in
            let qos = state.core?.floorQoS.qosClass ?? .unspecified
            if state.diagnosticsSerial == 0 { state.diagnosticsSerial = Diagnostics.nextTimerSerial() }
            let origin = TimerFireOrigin(identity: state.label ?? site.description,
                                         queue: state.core?.target.label ?? "?",
                                         qos: qos == .unspecified ? .default : qos,
                                         instance: state.diagnosticsSerial)
            return (origin, state.schedule?.interval)
        }
    }

    /// A duration in nanoseconds for a timer: nil for nil or a non-positive interval.
    static func nanoseconds(_ duration: Duration?) -> UInt64? {
        guard let duration else { return nil }
        let nanoseconds = duration.nanoseconds128
        if nanoseconds <= 0 { return nil }
        return nanoseconds >= Int128(UInt64.max) ? .max : UInt64(nanoseconds)
    }

    /// Replaces the schedule. Fires of the old one not delivered yet are dropped — under
    /// the lock that `fired` merges under, so that a fire in progress cannot slip in after.
    func schedule(_ schedule: Schedule, core: SourceCore) {
        state.locked { state in
            state.schedule = schedule
            state.nextIndex = 0
            core.discardPending()
            if state.registered { arm(&state) }
        }
    }

    func register(_ core: SourceCore) -> (any Error)? {
        state.locked { state in
            state.core = core
            state.registered = true
            if state.schedule != nil { arm(&state) }
        }
        return nil
    }

    func unregister(_ core: SourceCore) {
        let entry = state.locked { state -> TimerEntry? in
            defer {
                state.entry = nil
                state.core = nil
                state.registered = false
            }
            return state.entry
        }
        if let entry { TimerEngine.shared.cancel(entry) }
    }

    /// Puts the next fire of the schedule in the engine (under this driver's lock).
    private func arm(_ state: inout State) {
        // The old entry goes after the new one is in: the engine never looks empty in
        // between, so a reschedule does not disarm and re-arm the reactor.
        let old = state.entry
        state.entry = nil
        defer { if let old { TimerEngine.shared.cancel(old) } }
        guard let schedule = state.schedule, let core = state.core else { return }
        let (offset, overflow) = (schedule.interval ?? 0).multipliedReportingOverflow(by: state.nextIndex)
        if overflow { return }
        let target = schedule.start.saturatingAdding(nanoseconds: Int128(offset))
        if target == .max { return }  // distantFuture: never fires
        let deadline = schedule.isWall ? monotonicDeadline(forWall: target) : target
        let now = SystemClock.monotonicNanoseconds()
        let delay = schedule.interval ?? (deadline > now ? deadline - now : 0)
        var leeway = schedule.leeway
        if !strict {
            let floorClass = core.floorQoS.qosClass
            leeway = max(leeway, DefaultLeeway.nanoseconds(for: floorClass, delay: delay))
        }
        if let interval = schedule.interval { leeway = min(leeway, interval) }
        let entry = TimerEntry(action: .source(self))
        state.entry = entry
        TimerEngine.shared.schedule(entry, deadline: deadline, leeway: leeway,
                                    wallDeadline: schedule.isWall ? target : nil)
    }

    /// The engine fired `entry` (outside its lock): count the fires, schedule the next one.
    func fired(_ entry: TimerEntry, now: UInt64) {
        // Merged under the lock: a reschedule (which drops pending fires under it) is either
        // before this fire, which then finds its entry replaced, or after the merge.
        state.locked { state in
            guard state.entry === entry, let schedule = state.schedule else { return }
            guard let interval = schedule.interval else {
                state.entry = nil
                state.schedule = nil  // one-shot: idle until rescheduled
                state.core?.merge(1)
                return
            }
            // Fires missed (handler busy, process stopped) are counted, and the next fire
            // stays on the grid start + k × interval: no drift.
            let firedDeadline = entry.deadline
            let missed = now > firedDeadline ? (now - firedDeadline) / interval : 0
            state.nextIndex &+= 1 + missed
            state.entry = nil
            arm(&state)
            state.core?.merge(UInt(truncatingIfNeeded: 1 + missed))
        }
    }
}
