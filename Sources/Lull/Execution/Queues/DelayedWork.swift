/// `asyncAfter` and runtime housekeeping on the timer engine.
///
/// A delayed block's leeway is the contract's: 10% of the delay, at least 1 ms and at most
/// 60 s. Its window is [deadline, deadline + leeway]; see `TimerEngine` for how windows
/// become wake-ups.
enum DelayedWork {
    static func leeway(forDelay delay: UInt64) -> UInt64 {
        min(max(delay / 10, 1_000_000), 60_000_000_000)
    }

    /// Schedules `job` for `deadline`, within `leeway` ns (nil: the default, 10% of the
    /// delay).
    static func schedule(_ job: Job, on queue: WorkQueue, at deadline: Deadline, leeway requested: UInt64? = nil,
                         site: TimerSite, timers: TimerEngine) {
        if deadline == .distantFuture { return }  // never due: Dispatch drops it too
        let now = SystemClock.monotonicNanoseconds()
        guard deadline.uptimeNanoseconds > now else {
            queue.enqueue(job)
            return
        }
        // Never cancelled nor rescheduled: the engine's fire-once heap, whose sifts never
        // touch the entry.
        let entry = DelayedEntry(queue: queue, job: job, origin: Diagnostics.delayedOrigin(site))
        timers.scheduleOnce(entry, deadline: deadline.uptimeNanoseconds,
                            leeway: requested ?? leeway(forDelay: deadline.uptimeNanoseconds - now))
    }

    static func schedule(_ job: Job, on queue: WorkQueue, at wallDeadline: WallDeadline, site: TimerSite,
                         timers: TimerEngine) {
        if wallDeadline == .distantFuture { return }
        let wall = wallDeadline.nanosecondsSinceEpoch
        let deadline = timers.monotonicDeadline(forWall: wall)
        let now = SystemClock.monotonicNanoseconds()
        guard deadline > now else {
            queue.enqueue(job)
            return
        }
        let entry = DelayedEntry(queue: queue, job: job, origin: Diagnostics.delayedOrigin(site))
        timers.schedule(entry, deadline: deadline, leeway: leeway(forDelay: deadline - now), wallDeadline: wall)
    }

    /// Runs `action` on the polling thread once `deadline` (monotonic ns) has passed.
    static func scheduleHousekeeping(at deadline: UInt64, on timers: TimerEngine,
                                     _ action: @escaping @Sendable () -> Void) {
        timers.schedule(CallbackEntry(isHousekeeping: true, action), deadline: deadline, leeway: 0)
    }
}

/// A delayed block (`asyncAfter`): goes to its queue when fired.
final class DelayedEntry: TimerEntry, @unchecked Sendable {  // Sendable: `heapFields` follows `TimerEntry`'s rule
    @exclusivity(unchecked) var heapFields = TimerHeapFields()  // the engine's lock keeps accesses apart
    let queue: WorkQueue
    let job: Job
    /// Where the block was submitted, recorded only while diagnostics are on.
    let origin: DelayedWorkOrigin?

    init(queue: WorkQueue, job: Job, origin: DelayedWorkOrigin?) {
        self.queue = queue
        self.job = job
        self.origin = origin
    }

    func fired(sequence: UInt32, deadline: UInt64, now: UInt64) {
        queue.enqueue(job)
    }
}

extension WorkQueue {
    /// Submits `work` to run once `deadline` (monotonic clock) has passed, within a leeway
    /// of 10% of the delay (1 ms ... 60 s). Never early; a lone delayed block runs at the end
    /// of its window, so `asyncAfter(deadline: .now() + .seconds(1))` runs up to 100 ms late
    /// by design (earlier only when another timer's wake-up falls inside its window). For
    /// less, pass a smaller `leeway:`, or use a timer source with `.strict`. Delayed blocks
    /// run detached, with the empty execution context; to carry the current one, submit a
    /// `WorkItem` made with `.assignCurrentContext`. `file` and `line` name its timer in
    /// wake-up diagnostics.
    public func asyncAfter(deadline: Deadline, qos: QoS = .unspecified, flags: WorkItemFlags = [],
                           execute work: @escaping @Sendable () -> Void,
                           file: StaticString = #fileID, line: UInt = #line) {
        DelayedWork.schedule(makeDelayedJob(.block(work), qos: qos, flags: flags), on: self, at: deadline,
                             site: TimerSite(file: file, line: line), timers: services.timers)
    }

    /// Submits `work` to run once `deadline` (monotonic clock) has passed, at most `leeway`
    /// later: the window is [deadline, deadline + leeway], and the block runs where that
    /// window overlaps other timers' (coalescing), or at its end. The leeway replaces the
    /// default of 10% of the delay, smaller or larger; `.zero` asks for the deadline itself
    /// (a negative leeway counts as zero). Otherwise as `asyncAfter(deadline:qos:flags:execute:)`.
    public func asyncAfter(deadline: Deadline, leeway: Duration, qos: QoS = .unspecified,
                           flags: WorkItemFlags = [], execute work: @escaping @Sendable () -> Void,
                           file: StaticString = #fileID, line: UInt = #line) {
        let nanoseconds = leeway.nanoseconds128
        let requested: UInt64 = nanoseconds <= 0 ? 0 : (nanoseconds >= Int128(UInt64.max) ? .max : UInt64(nanoseconds))
        DelayedWork.schedule(makeDelayedJob(.block(work), qos: qos, flags: flags), on: self, at: deadline,
                             leeway: requested, site: TimerSite(file: file, line: line), timers: services.timers)
    }

    /// Submits `work` to run once the wall clock reaches `wallDeadline` (it follows changes
    /// of the system date), within a leeway of 10% of the delay. `file` and `line` name its
    /// timer in wake-up diagnostics.
    public func asyncAfter(wallDeadline: WallDeadline, qos: QoS = .unspecified, flags: WorkItemFlags = [],
                           execute work: @escaping @Sendable () -> Void,
                           file: StaticString = #fileID, line: UInt = #line) {
        DelayedWork.schedule(makeDelayedJob(.block(work), qos: qos, flags: flags), on: self, at: wallDeadline,
                             site: TimerSite(file: file, line: line), timers: services.timers)
    }

    /// Submits `workItem` to run once `deadline` (monotonic clock) has passed, within a
    /// leeway of 10% of the delay. `file` and `line` name its timer in wake-up diagnostics.
    public func asyncAfter(deadline: Deadline, execute workItem: WorkItem,
                           file: StaticString = #fileID, line: UInt = #line) {
        DelayedWork.schedule(makeDelayedJob(for: workItem), on: self, at: deadline,
                             site: TimerSite(file: file, line: line), timers: services.timers)
    }
}
