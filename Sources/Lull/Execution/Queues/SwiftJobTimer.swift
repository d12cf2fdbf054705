#if compiler(>=6.3) && os(Linux)
import CLullShims
@_spi(ExperimentalCustomExecutors) @_spi(ExperimentalScheduling) import _Concurrency

/// A delayed Swift job (`Task.sleep` on the continuous or suspending clock) as a timer of
/// the engine, the path `asyncAfter`'s blocks take: its window is [deadline, deadline +
/// leeway], the leeway the sleep's `tolerance` and never less than the default leeway of
/// the job's QoS (a timer without `.strict`; nil tolerance: that default). Sleeps whose
/// windows overlap therefore wake the process once. When it fires the job goes to `queue`;
/// when the sleeping task is cancelled first, the timer comes out and the job goes at once
/// (`PendingTaskSleeps`).
enum SwiftJobTimer {
    /// `isTask`: the job is a task's (a throwing `Task.sleep`'s wake task); a job of
    /// another kind (the deprecated `Task.sleep(_:)`, which cannot be cancelled) is a plain
    /// delayed job.
    static func schedule<C: Clock>(_ job: Job, isTask: Bool, on queue: WorkQueue, at instant: C.Instant,
                                   tolerance: C.Duration?, clock: C, timers: TimerEngine) {
        // The standard clocks count in Swift.Duration; the delay from their `now` carries
        // over to CLOCK_MONOTONIC, the engine's clock, whichever kernel clock they read.
        guard let delay = clock.now.duration(to: instant) as? Duration,
              let tolerance: Duration? = tolerance.map({ $0 as? Duration }) ?? .some(nil) else {
            lullFatal("Task.sleep on \(C.self), a clock whose durations are not Swift.Duration, cannot be scheduled "
                      + "by Lull's executors")
        }
        let delayNanoseconds = nanoseconds(delay)
        guard delayNanoseconds > 0 else {
            queue.enqueue(job)
            return
        }
        let (deadline, overflow) = SystemClock.monotonicNanoseconds().addingReportingOverflow(delayNanoseconds)
        let defaultLeeway = DefaultLeeway.nanoseconds(for: job.qos.qosClass, delay: delayNanoseconds)
        let leeway = max(tolerance.map(nanoseconds) ?? 0, defaultLeeway)
        let task = isTask ? lull_current_swift_task() : 0
        guard task != 0 else {
            let entry = DelayedEntry(queue: queue, job: job,
                                     origin: Diagnostics.delayedOrigin(TimerSite(file: #fileID, line: #line)))
            timers.schedule(entry, deadline: overflow ? UInt64.max : deadline, leeway: leeway)
            return
        }
        // The sleeping task's own: its cancellation takes the timer out (`PendingTaskSleeps`).
        let sleeps = PendingTaskSleeps.shared
        let entry = TaskSleepEntry(queue: queue, job: job, task: task, timers: timers, sleeps: sleeps)
        sleeps.register(entry)
        timers.schedule(entry, deadline: overflow ? UInt64.max : deadline, leeway: leeway)
    }

    /// A duration as nanoseconds: 0 when negative, saturating when huge.
    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        if seconds < 0 || (seconds == 0 && attoseconds <= 0) { return 0 }
        let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return UInt64.max }
        let (total, carry) = whole.addingReportingOverflow(UInt64(max(attoseconds, 0) / 1_000_000_000))
        return carry ? UInt64.max : total
    }
}
#endif
