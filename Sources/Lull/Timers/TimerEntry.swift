/// One pending fire in the timer engine: a window [deadline, latest] on the monotonic clock.
/// What firing does is the subclass's: a delayed block (`DelayedEntry`), a callback on the
/// polling thread (`CallbackEntry`), or a timer source, whose driver is its own entry (one
/// object per timer, rescheduled in place from fire to fire).
///
/// `@unchecked Sendable`: the fields below are read and written only by `TimerEngine` under
/// its lock; subclasses add only `let`s of `Sendable` types or state behind locks of their own.
class TimerEntry: @unchecked Sendable {
    // Fields in declaration order, the odd-sized ones last: a timer source's driver
    // (which is its entry) stays a size class smaller.
    var deadline: UInt64 = 0
    var leeway: UInt64 = 0
    /// Unique per scheduling: orders equal deadlines, and tells a fire of an earlier
    /// scheduling of the same entry from the current one.
    var sequence: UInt64 = 0
    /// For a wall-clock timer, the deadline on CLOCK_REALTIME: the monotonic `deadline` is
    /// recomputed from it when the system clock is set.
    var wallDeadline: UInt64?
    /// Where the entry is in the engine's heap; -1: not scheduled.
    var slot: Int32 = -1
    /// The runtime's own (the stall check): not counted among the program's timers.
    let isHousekeeping: Bool

    init(isHousekeeping: Bool = false) {
        self.isHousekeeping = isHousekeeping
    }

    var isScheduled: Bool { slot >= 0 }

    /// The end of the window: the deadline plus the leeway, at most the end of the clock.
    var latest: UInt64 {
        let (sum, overflow) = deadline.addingReportingOverflow(leeway)
        return overflow ? .max : sum
    }

    /// The engine fired the scheduling `sequence` of this entry (outside the engine's lock:
    /// the entry may have been rescheduled since).
    func fired(sequence: UInt64, now: UInt64) {
        lullFatal("TimerEntry.fired(sequence:now:) must be overridden")
    }
}

/// A delayed block (`asyncAfter`): goes to its queue when fired.
final class DelayedEntry: TimerEntry, @unchecked Sendable {
    let queue: WorkQueue
    let job: Job
    /// Where the block was submitted, recorded only while diagnostics are on.
    let origin: DelayedWorkOrigin?

    init(queue: WorkQueue, job: Job, origin: DelayedWorkOrigin?) {
        self.queue = queue
        self.job = job
        self.origin = origin
        super.init()
    }

    override func fired(sequence: UInt64, now: UInt64) {
        queue.enqueue(job)
    }
}

/// A callback that runs on the polling thread itself, which must not block: runtime
/// housekeeping (and tests of the engine).
final class CallbackEntry: TimerEntry, @unchecked Sendable {
    let action: @Sendable () -> Void

    init(isHousekeeping: Bool = false, _ action: @escaping @Sendable () -> Void) {
        self.action = action
        super.init(isHousekeeping: isHousekeeping)
    }

    override func fired(sequence: UInt64, now: UInt64) {
        action()
    }
}
