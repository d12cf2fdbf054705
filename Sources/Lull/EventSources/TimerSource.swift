import Synchronization

/// Timer source options.
public struct TimerFlags: OptionSet, Sendable {
    /// The bits of the timer flags.
    public let rawValue: UInt
    /// The timer flags with these bits.
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
    /// The core's driver, not a field of its own: every idle timer is a word smaller.
    private var driver: TimerDriver { unsafeDowncast(core.driver, to: TimerDriver.self) }

    init(flags: TimerFlags, queue: WorkQueue?, site: TimerSite) {
        let driver = TimerDriver(strict: flags.contains(.strict), site: site)
        super.init(core: SourceCore(kind: TimerSource.self, target: queue, merge: .add,
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
        driver.schedule(TimerDriver.Schedule(start: deadline.uptimeNanoseconds,
                                             leeway: TimerDriver.nanoseconds(leeway) ?? 0,
                                             interval: TimerDriver.nanoseconds(repeating), isWall: false),
                        core: core)
    }

    /// Schedules the timer on the wall clock; replaces any previous schedule (dropping its
    /// undelivered fires).
    public func schedule(wallDeadline: WallDeadline, repeating: Duration? = nil, leeway: Duration = .zero) {
        driver.schedule(TimerDriver.Schedule(start: wallDeadline.nanosecondsSinceEpoch,
                                             leeway: TimerDriver.nanoseconds(leeway) ?? 0,
                                             interval: TimerDriver.nanoseconds(repeating), isWall: true),
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

/// Turns a timer source's schedule into fires, one at a time. The driver is itself the
/// timer's entry in the engine, rescheduled in place from fire to fire: a timer is one
/// object beside its source, and a fire allocates nothing.
final class TimerDriver: TimerEntry, SourceDriver, @unchecked Sendable {  // Sendable: see TimerEntry; `state` is behind its mutex; `siteFile` is a literal (see TimerSite)
    struct Schedule {
        /// The first deadline: monotonic ns, or wall ns since the epoch for a wall timer.
        var start: UInt64
        var leeway: UInt64
        /// nil: one-shot.
        var interval: UInt64?
        var isWall: Bool
    }

    // Fields in declaration order, each small one in the padding after a larger one: every
    // idle timer is a size class smaller.
    private struct State {
        var schedule: Schedule?
        var registered = false
        /// The fire index the engine holds (deadline = start + index × interval).
        var nextIndex: UInt64 = 0
        /// The sequence of the scheduling in the engine that counts; 0: none (the engine's
        /// sequences start at 1). Not an optional: that would take another word.
        var armedSequence: UInt64 = 0
        var core: SourceCore?
        /// A label and a serial number for diagnostics, boxed: most timers have neither.
        var identity: TimerIdentity?
    }

    let strict: Bool
    private let siteLine: UInt32
    private let siteFile: UnsafePointer<UInt8>
    private let state = Mutex<State>(State())

    init(strict: Bool, site: TimerSite) {
        self.strict = strict
        siteLine = site.line
        siteFile = site.file
        super.init()
    }

    /// Where the timer was made: its name in diagnostics unless it has a label.
    var site: TimerSite { TimerSite(file: siteFile, line: siteLine) }

    var label: String? {
        get { state.locked { $0.identity?.label } }
        set { state.locked { state in TimerIdentity.of(&state.identity).label = newValue } }
    }

    /// How wake-up diagnostics name this timer, and its interval (nil: one-shot).
    func diagnosticsOrigin() -> (TimerFireOrigin, interval: UInt64?) {
        state.locked { state in
            let qos = state.core?.floorQoS.qosClass ?? .unspecified
            let identity = TimerIdentity.of(&state.identity)
            if identity.serial == 0 { identity.serial = Diagnostics.nextTimerSerial() }
            let origin = TimerFireOrigin(identity: identity.label ?? site.description,
                                         queue: state.core?.target.label ?? "?",
                                         qos: qos == .unspecified ? .default : qos,
                                         instance: identity.serial)
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
        state.locked { state in
            state.armedSequence = 0
            state.core = nil
            state.registered = false
        }
        TimerEngine.shared.cancel(self)
    }

    /// Puts the next fire of the schedule in the engine (under this driver's lock), or takes
    /// the entry out when there is none. Rescheduling in place replaces the old window in
    /// one step: the engine never looks empty in between, so the reactor is not disarmed
    /// and re-armed.
    private func arm(_ state: inout State) {
        guard let (deadline, leeway, wall) = nextWindow(state) else {
            state.armedSequence = 0
            TimerEngine.shared.cancel(self)
            return
        }
        state.armedSequence = TimerEngine.shared.schedule(self, deadline: deadline, leeway: leeway, wallDeadline: wall)
    }

    /// The window of fire `nextIndex` of the schedule: nil when it never comes.
    private func nextWindow(_ state: State) -> (deadline: UInt64, leeway: UInt64, wall: UInt64?)? {
        guard let schedule = state.schedule, let core = state.core else { return nil }
        let (offset, overflow) = (schedule.interval ?? 0).multipliedReportingOverflow(by: state.nextIndex)
        if overflow { return nil }
        let target = schedule.start.saturatingAdding(nanoseconds: Int128(offset))
        if target == .max { return nil }  // distantFuture: never fires
        let deadline = schedule.isWall ? monotonicDeadline(forWall: target) : target
        let now = SystemClock.monotonicNanoseconds()
        let delay = schedule.interval ?? (deadline > now ? deadline - now : 0)
        var leeway = schedule.leeway
        if !strict {
            let floorClass = core.floorQoS.qosClass
            leeway = max(leeway, DefaultLeeway.nanoseconds(for: floorClass, delay: delay))
        }
        if let interval = schedule.interval { leeway = min(leeway, interval) }
        return (deadline, leeway, schedule.isWall ? target : nil)
    }

    /// The engine fired a scheduling of this timer (outside its lock): count the fires,
    /// schedule the next one.
    override func fired(sequence: UInt64, now: UInt64) {
        // Merged under the lock: a reschedule (which drops pending fires under it) is either
        // before this fire, which then finds its sequence replaced, or after the merge.
        state.locked { state in
            guard state.armedSequence == sequence, let schedule = state.schedule else { return }
            state.armedSequence = 0
            guard let interval = schedule.interval else {
                state.schedule = nil  // one-shot: idle until rescheduled
                state.core?.merge(1)
                return
            }
            // Fires missed (handler busy, process stopped) are counted, and the next fire
            // stays on the grid start + k × interval: no drift. `deadline` is the engine's
            // field, but the engine took the entry out to fire it, on this thread, and only
            // `arm` (under this lock) puts it back: it still holds the window that fired.
            let firedDeadline = deadline
            let missed = now > firedDeadline ? (now - firedDeadline) / interval : 0
            state.nextIndex &+= 1 + missed
            arm(&state)
            state.core?.merge(UInt(truncatingIfNeeded: 1 + missed))
        }
    }
}

/// A timer's name in diagnostics, when it has one or diagnostics asked for it.
///
/// `@unchecked Sendable`: only read and written under its driver's lock.
final class TimerIdentity: @unchecked Sendable {
    var label: String?
    /// Tells this timer apart in wake-up diagnostics (0: not asked yet).
    var serial: UInt64 = 0

    /// The box in `slot`, made on first use.
    static func of(_ slot: inout TimerIdentity?) -> TimerIdentity {
        if let identity = slot { return identity }
        let identity = TimerIdentity()
        slot = identity
        return identity
    }
}
