#if compiler(>=6.3) && os(Linux)
@_spi(ExperimentalCustomExecutors) @_spi(ExperimentalScheduling) import _Concurrency

/// A delayed Swift job (`Task.sleep` on the continuous or suspending clock) as a timer of
/// the engine, the path `asyncAfter`'s blocks take: its window is [deadline, deadline +
/// leeway], the leeway the sleep's `tolerance` and never less than the default leeway of
/// the job's QoS (a timer without `.strict`; nil tolerance: that default). Sleeps whose
/// windows overlap therefore wake the process once. When it fires the job goes to `queue`.
enum SwiftJobTimer {
    static func schedule<C: Clock>(_ job: Job, on queue: WorkQueue, at instant: C.Instant, tolerance: C.Duration?,
                                   clock: C, timers: TimerEngine) {
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
        let entry = DelayedEntry(queue: queue, job: job,
                                 origin: Diagnostics.delayedOrigin(TimerSite(file: #fileID, line: #line)))
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
