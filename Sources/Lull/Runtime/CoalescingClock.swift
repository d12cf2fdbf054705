/// A clock on `CLOCK_MONOTONIC` whose sleeps are Lull timers: the `tolerance` of a sleep is
/// its timer's leeway, so sleeps (and timers, and `asyncAfter` blocks) whose windows overlap
/// wake the process once.
///
/// ```swift
/// try await Task.sleep(for: .seconds(1), tolerance: .milliseconds(500), clock: CoalescingClock())
/// ```
///
/// A sleep ends somewhere in [deadline, deadline + tolerance], never before its deadline. A
/// `nil` tolerance gets the default leeway of the current task's QoS, as a timer source
/// without `.strict` does (see the article "Timers and leeway"). A sleep whose task is
/// cancelled, before or while it sleeps, throws `CancellationError` at once and leaves no
/// timer behind.
public struct CoalescingClock: Clock, Sendable {
    public typealias Instant = Deadline

    /// The clock (it has no state: every `CoalescingClock` is the same clock).
    public init() {}

    /// The current instant on `CLOCK_MONOTONIC`.
    public var now: Deadline { Deadline.now() }

    /// One nanosecond: deadlines are exact; when a sleep ends within its window is the
    /// engine's choice.
    public var minimumResolution: Duration { .nanoseconds(1) }

    /// Suspends the task until `deadline`, within `tolerance` after it (nil: the default
    /// leeway of the task's QoS). Throws `CancellationError` if the task is cancelled.
    public func sleep(until deadline: Deadline, tolerance: Duration? = nil) async throws {
        try await CoalescingClock.sleep(until: deadline, tolerance: tolerance, on: Runtime.shared.timers)
    }

    /// `sleep(until:tolerance:)` on a given engine.
    static func sleep(until deadline: Deadline, tolerance: Duration?, on timers: TimerEngine) async throws {
        let now = SystemClock.monotonicNanoseconds()
        guard deadline.uptimeNanoseconds > now else {
            try Task.checkCancellation()
            return
        }
        // A deadline that never comes still sleeps, until the task is cancelled.
        let qosClass = QoS.QoSClass(sleepingTaskPriority: Task.currentPriority)
        let leeway = SleepTimer.leeway(tolerance: tolerance, delay: deadline.uptimeNanoseconds - now, qosClass: qosClass)
        try await SleepTimer.sleep(until: deadline.uptimeNanoseconds, leeway: leeway, qosClass: qosClass, on: timers)
    }
}

extension QoS.QoSClass {
    /// The class whose default leeway a sleep of a task at `priority` gets: the contract's
    /// mapping of task priorities (high and user-initiated → userInitiated, medium →
    /// default, low and utility → utility, background → background).
    fileprivate init(sleepingTaskPriority priority: TaskPriority) {
        switch priority.rawValue {
        case TaskPriority.userInitiated.rawValue...: self = .userInitiated
        case TaskPriority.medium.rawValue...: self = .default
        case TaskPriority.utility.rawValue...: self = .utility
        case 1...: self = .background
        default: self = .default
        }
    }
}
