/// One pending fire: a window [deadline, latest] on the monotonic clock and what to do.
///
/// `@unchecked Sendable`: every mutable field is read and written only by `TimerEngine`
/// under its lock; owners (a timer source, a delayed block) hold the reference only to hand
/// it back to the engine.
final class TimerEntry: @unchecked Sendable {
    enum Action {
        /// A delayed block: goes to its queue.
        case enqueue(WorkQueue, Job)
        /// Runtime housekeeping: runs on the polling thread itself, which must not block.
        case direct(@Sendable () -> Void)
        /// A timer source's fire.
        case source(TimerDriver)
    }

    var deadline: UInt64 = 0
    var latest: UInt64 = 0
    /// For a wall-clock timer, the deadline on CLOCK_REALTIME: the monotonic `deadline` is
    /// recomputed from it when the system clock is set.
    var wallDeadline: UInt64?
    var leeway: UInt64 = 0
    var sequence: UInt64 = 0
    var deadlineSlot = -1
    var latestSlot = -1
    /// Where an `asyncAfter` block came from, recorded only while diagnostics are on.
    var delayedOrigin: DelayedWorkOrigin?
    let action: Action
    /// The runtime's own (the stall check): not counted among the program's timers.
    let isHousekeeping: Bool

    init(action: Action, isHousekeeping: Bool = false) {
        self.action = action
        self.isHousekeeping = isHousekeeping
    }

    var isScheduled: Bool { deadlineSlot >= 0 }
}
