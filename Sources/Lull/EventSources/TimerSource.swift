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
///   (`DefaultLeeway`); the leeway of a repeating timer is capped at its interval. A leeway
///   above about 2.1 s is kept in whole milliseconds, rounded down (never a later fire), and
///   at most about 24.8 days unless it is unbounded (`.distantFuture`-sized).
/// - A deadline in the past fires at once; `.distantFuture` never fires; an interval of
///   zero or less makes the timer a one-shot.
/// - Wall-clock timers (`schedule(wallDeadline:...)`) follow changes of the system clock.
///   A repeating one whose start is in the past (or that the clock jumped past) fires once
///   for all the missed fires, `data` counting them, and then stays on its grid.
/// - A cancelled timer ignores `schedule` (as in Dispatch).
public final class TimerSource: EventSourceBase, EventSourceProtocol, @unchecked Sendable {  // Sendable: see EventSourceBase
    /// The core, which is the timer's entry in the engine (one object per timer beside this one).
    private var timer: TimerCore { unsafeDowncast(core, to: TimerCore.self) }

    /// Calls `body` with the core, counting no reference: this handle holds one for its
    /// whole life.
    @inline(__always)
    private func withTimer<R>(_ body: (TimerCore) -> R) -> R {
        Unmanaged.passUnretained(timer)._withUnsafeGuaranteedRef(body)
    }

    init(flags: TimerFlags, queue: WorkQueue, site: TimerSite) {
        super.init(core: TimerCore(strict: flags.contains(.strict), target: queue, site: site))
    }

    /// The name of this timer in wake-up diagnostics (`timerfires`, `RuntimeDiagnostics`);
    /// without one, the timer is named by where it was created ("File.swift:42").
    public var label: String? {
        get { timer.label }
        set { timer.label = newValue }
    }

    /// Schedules the timer on the monotonic clock; replaces any previous schedule, and fires
    /// of the previous schedule not yet delivered are dropped (as in Dispatch).
    public func schedule(deadline: Deadline, repeating: Duration? = nil, leeway: Duration = .zero) {
        withTimer {
            $0.schedule(start: deadline.uptimeNanoseconds, interval: TimerCore.nanoseconds(repeating),
                        leeway: TimerCore.nanoseconds(leeway) ?? 0, isWall: false)
        }
    }

    /// Schedules the timer on the wall clock; replaces any previous schedule (dropping its
    /// undelivered fires).
    public func schedule(wallDeadline: WallDeadline, repeating: Duration? = nil, leeway: Duration = .zero) {
        withTimer {
            $0.schedule(start: wallDeadline.nanosecondsSinceEpoch, interval: TimerCore.nanoseconds(repeating),
                        leeway: TimerCore.nanoseconds(leeway) ?? 0, isWall: true)
        }
    }
}

/// A timer source's core: the source machinery, the timer's schedule, its kind (a timer is
/// its own `SourceKind`) and its entry in the engine (`TimerEntry`) in one object,
/// rescheduled in place from fire to fire (a fire allocates nothing).
///
/// Where the schedule lives: a one-shot on the monotonic clock — most timers, timeouts —
/// keeps its window in the entry's own fields (`heapFields`); a repeating or wall-clock
/// timer keeps its grid in the extras box (`TimerExtras`), made for it. Everything here is
/// read and written under the core's lock (`withState`; `register` and `unregister` run
/// under it, as the timer `registersUnderLock`); the heap fields also by the engine, under
/// its lock, nested inside ours (`arm`), and only while the entry is in the engine — so a
/// one-shot writes its window straight into them only while it is not.
final class TimerCore: SourceCore, SourceKind, TimerEntry, @unchecked Sendable {  // Sendable: see SourceCore; `heapFields` follows `TimerEntry`'s rule, `word` is atomic
    /// `@exclusivity(unchecked)`: `TimerEntry`'s rule keeps its accesses apart.
    @exclusivity(unchecked) var heapFields = TimerHeapFields()
    /// The site's number (`TimerSiteTable`) and three flags: `strict` (fixed at creation)
    /// and the schedule state, `hasSchedule` and `live`, written only under the core's lock.
    /// Atomic so that the fixed bits can be read without the lock.
    private let word: Atomic<UInt32>

    /// The timer has a schedule whose fires are not all delivered to the engine yet.
    private static let hasSchedule: UInt32 = 1 << 29
    /// Registered (activated and not cancelled): the schedule goes to the engine.
    private static let live: UInt32 = 1 << 30
    private static let strictBit: UInt32 = 1 << 31
    private static let siteBits: UInt32 = hasSchedule - 1

    init(strict: Bool, target: WorkQueue, site: TimerSite) {
        let number = TimerSiteTable.number(for: site)
        assert(number <= TimerCore.siteBits, "timer site number \(number) does not fit")
        word = Atomic(number & TimerCore.siteBits | (strict ? TimerCore.strictBit : 0))
        super.init(target: target, merge: .add)
    }

    override var kind: any SourceKind { self }
    override func activate() { activate(with: self) }
    override func cancel() { cancel(with: self) }
    override var sourceType: EventSourceBase.Type { TimerSource.self }
    override var mask: UInt { strict ? TimerFlags.strict.rawValue : 0 }
    var strict: Bool { word.load(ordering: .relaxed) & TimerCore.strictBit != 0 }

    /// Where the timer was made: its name in diagnostics unless it has a label.
    var siteDescription: String {
        TimerSiteTable.site(word.load(ordering: .relaxed) & TimerCore.siteBits)?.description ?? "?"
    }

    /// Whether a schedule-state flag is set (under the core's lock).
    private func isSet(_ flag: UInt32) -> Bool {
        word.load(ordering: .relaxed) & flag != 0
    }

    /// Sets or clears a schedule-state flag (under the core's lock, so no other thread
    /// writes the word meanwhile).
    private func set(_ flag: UInt32, _ on: Bool) {
        let old = word.load(ordering: .relaxed)
        word.store(on ? old | flag : old & ~flag, ordering: .relaxed)
    }

    var label: String? {
        get { withState { _ in timerBox?.label } }
        set { withState { _ in timerExtras().label = newValue } }
    }

    /// The timer's extras box, if it has one (under the lock).
    private var timerBox: TimerExtras? {
        guard let box = extras, type(of: box) == TimerExtras.self else { return nil }
        return unsafeDowncast(box, to: TimerExtras.self)
    }

    /// The timer's extras box, made on first use (under the lock): it takes over the plain
    /// box a handler or an error made before.
    private func timerExtras() -> TimerExtras {
        if let box = timerBox { return box }
        let made = TimerExtras()
        if let plain = extras {
            made.cancelHandler = plain.cancelHandler
            made.registrationHandler = plain.registrationHandler
            made.registrationError = plain.registrationError
            made.eventsChannel = plain.eventsChannel
            made.eventsLoopHandles = plain.eventsLoopHandles
        }
        replaceExtras(with: made)
        return made
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
    ///
    /// The effective leeway is decided here, once: the larger of the requested one and the
    /// default for the queue's QoS (unless `.strict`), at most the interval.
    func schedule(start: UInt64, interval: UInt64?, leeway requested: UInt64, isWall: Bool) {
        var leeway = requested
        if !strict {
            let delay: UInt64
            if let interval {
                delay = interval
            } else if !isWall, start > SystemClock.coarseMonotonicNanoseconds() &+ DefaultLeeway.saturatingDelay {
                // Far enough that the default is at its cap whatever the exact delay: the
                // coarse clock (behind by at most a tick) is enough, and cheaper.
                delay = DefaultLeeway.saturatingDelay
            } else {
                let now = SystemClock.monotonicNanoseconds()
                let deadline = isWall ? monotonicDeadline(forWall: start, monotonicNow: now) : start
                delay = deadline > now ? deadline - now : 0
            }
            leeway = max(leeway, DefaultLeeway.nanoseconds(for: floorQoS.qosClass, delay: delay))
        }
        if let interval { leeway = min(leeway, interval) }
        withState { _ in
            // A cancelled timer keeps no schedule.
            guard !isCancelled else { return }
            discardPending()
            set(TimerCore.hasSchedule, true)
            let live = isSet(TimerCore.live)
            if interval != nil || isWall {
                timerExtras().grid = TimerGrid(start: start, interval: interval ?? 0, leeway: leeway, isWall: isWall)
                if live { arm() }
                return
            }
            timerBox?.grid = nil
            if !live {
                // Not live, so not in the engine: the window waits in the entry's fields.
                heapFields.deadline = start
                heapFields.leeway = leeway
            } else if start == .max {
                disarm()  // distantFuture: never fires
            } else {
                target.services.timers.schedule(self, deadline: start, leeway: leeway)
            }
        }
    }

    // MARK: The kind's operations (under the core's lock)

    var registersUnderLock: Bool { true }

    /// In the registering phase, under the core's lock: the schedule goes to the engine from
    /// now on. `cancel` unregisters under the same lock, so a cancel that races with
    /// activation disarms after this arms, or finds the timer never registered.
    func register(_ core: SourceCore) -> (any Error)? {
        set(TimerCore.live, true)
        if isSet(TimerCore.hasSchedule) { arm() }
        return nil
    }

    /// In the unregistering phase, under the core's lock: out of the engine for good.
    func unregister(_ core: SourceCore) {
        set(TimerCore.live, false)
        disarm()
    }

    /// Puts the next fire of the schedule in the engine (under this core's lock), or takes
    /// the entry out when there is none. Rescheduling in place replaces the old window in
    /// one step: the engine never looks empty in between, so the reactor is not disarmed
    /// and re-armed.
    private func arm() {
        guard let (deadline, leeway, wall) = nextWindow() else {
            disarm()
            return
        }
        target.services.timers.schedule(self, deadline: deadline, leeway: leeway, wallDeadline: wall)
    }

    /// Out of the engine, and no scheduling of it counts any more (a fire of one that is
    /// on its way finds sequence 0). Safe to write once the engine let go of the entry.
    private func disarm() {
        target.services.timers.cancel(self)
        heapFields.sequence = 0
    }

    /// The window of the schedule's next fire: nil when it never comes.
    private func nextWindow() -> (deadline: UInt64, leeway: UInt64, wall: UInt64?)? {
        guard let grid = timerBox?.grid else {
            // A one-shot on the monotonic clock: its window waited in the entry's fields.
            let window = heapFields
            return window.deadline == .max ? nil : (window.deadline, window.leeway, nil)  // distantFuture: never fires
        }
        let target = grid.nextTarget
        if target == .max { return nil }
        let deadline = grid.isWall ? monotonicDeadline(forWall: target) : target
        return (deadline, grid.leeway, grid.isWall ? target : nil)
    }

    /// The engine fired the scheduling `sequence` of this timer, due at `firedDeadline`
    /// (outside the engine's lock): count the fires, schedule the next one.
    func fired(sequence: UInt32, deadline firedDeadline: UInt64, now: UInt64) {
        // Counted under the lock: a reschedule (which drops pending fires under it) is
        // either before this fire, which then finds its sequence replaced, or after it.
        let fires = withState { _ -> UInt in
            guard isSet(TimerCore.live), isSet(TimerCore.hasSchedule), heapFields.sequence == sequence else { return 0 }
            let box = timerBox
            guard let grid = box?.grid, grid.interval > 0 else {
                // A one-shot: idle until rescheduled.
                set(TimerCore.hasSchedule, false)
                box?.grid = nil
                addPending(1)
                return 1
            }
            // Fires missed (handler busy, process stopped, a start in the past) are counted
            // in one delivery, by arithmetic, and the next fire stays on the grid
            // start + k × interval: no drift. A wall-clock fire's lateness is measured on
            // the wall clock: its monotonic deadline is never before the moment it was
            // scheduled, so a start years ago would look on time, fire after fire.
            let lateness: UInt64
            if grid.isWall {
                let due = grid.nextTarget
                let wallNow = SystemClock.realtimeNanoseconds()
                lateness = wallNow > due ? wallNow - due : 0
            } else {
                lateness = now > firedDeadline ? now - firedDeadline : 0
            }
            let missed = lateness / grid.interval
            box?.grid?.nextIndex &+= 1 + missed
            arm()
            let count = UInt(truncatingIfNeeded: 1 + missed)
            addPending(count)
            return count
        }
        if fires > 0 { changed() }
    }

    /// How wake-up diagnostics name this timer, and its interval (nil: one-shot).
    func diagnosticsOrigin() -> (TimerFireOrigin, interval: UInt64?) {
        let qos = floorQoS.qosClass
        return withState { _ in
            let extras = timerExtras()
            if extras.serial == 0 { extras.serial = Diagnostics.nextTimerSerial() }
            let origin = TimerFireOrigin(identity: extras.label ?? siteDescription,
                                         queue: target.label,
                                         qos: qos == .unspecified ? .default : qos,
                                         instance: extras.serial)
            return (origin, extras.grid.map(\.interval).flatMap { $0 > 0 ? $0 : nil })
        }
    }
}

extension TimerCore: DiagnosedTimer {}

/// The schedule of a repeating or wall-clock timer: fire k is due at start + k × interval
/// (on the wall clock for a wall timer).
struct TimerGrid {
    /// The first deadline: monotonic ns, or wall ns since the epoch for a wall timer.
    var start: UInt64
    /// 0: a one-shot (on the wall clock).
    var interval: UInt64
    /// The effective leeway of every fire.
    var leeway: UInt64
    var isWall: Bool
    /// The fire the engine holds.
    var nextIndex: UInt64 = 0

    /// When fire `nextIndex` is due, on the grid's clock: `.max` (never) past the end of
    /// the clock.
    var nextTarget: UInt64 {
        let (offset, overflow) = interval.multipliedReportingOverflow(by: nextIndex)
        return overflow ? .max : start.saturatingAdding(nanoseconds: Int128(offset))
    }
}

/// A timer's extras box: what every source keeps there, and what a timer keeps only when
/// it has it: a repeating or wall-clock schedule, a label, and a serial number for
/// diagnostics.
///
/// `@unchecked Sendable`: only read and written under its core's lock.
final class TimerExtras: SourceExtras, @unchecked Sendable {
    var grid: TimerGrid?
    var label: String?
    /// Tells this timer apart in wake-up diagnostics (0: not asked yet).
    var serial: UInt64 = 0
}
