/// How many threads the stall check starts for a saturated class that finished no job
/// since its previous look (see `StallMonitor`): a pure decision over what the look saw, so
/// that it can be checked case by case.
///
/// - A class whose own workers waited for a CPU (on a run queue) for `starvedRunQueueWait`
///   or more since the previous look is short of CPU, not of threads: its workers are
///   runnable but descheduled — on a loaded machine, or behind a lock holder that is — and
///   those that sleep most likely wait for one that does not run. More threads would only
///   join the queue for the same cores and make the next look likelier still to find
///   sleepers. It gets none.
/// - Otherwise the class should have `cpuCount` workers that are not blocked. The workers
///   blocked unknown to Lull are the sleepers in one job (`blocked`) less those in Lull's own
///   waits (counted apart, not in `running`); each thread started at an earlier look for a
///   blocked worker is in `running`, so a worker that stays blocked is replaced once, not at
///   every look.
/// - Never more than the jobs queued and not yet claimed by a worker on its way.
enum StallPolicy {
    /// Run-queue wait since the previous look (ns) that marks a worker as descheduled
    /// rather than idle: a tenth of the interval. A thread that runs when it is runnable
    /// waits microseconds; one on a machine with more runnable threads than cores, tens
    /// of milliseconds.
    static let starvedRunQueueWait: UInt64 = StallMonitor.interval / 10

    /// What one look saw of one worker of the class (the poller excluded).
    struct Look: Sendable, Equatable {
        /// Inside the same job as at the previous look, having used (almost) no CPU since.
        var inOneJobWithoutCPU: Bool
        /// The kernel reports the thread sleeping (`S` or `D`).
        var sleeping: Bool
        /// How long the thread waited on a run queue since the previous look (nil: unknown).
        var runQueueWait: UInt64?
    }

    static func threadsToStart(looks: [Look], running: Int, knownBlocked: Int, queued: Int, waking: Int,
                               cpuCount: Int) -> Int {
        if looks.contains(where: { ($0.runQueueWait ?? 0) >= starvedRunQueueWait }) { return 0 }
        let sleepers = looks.count { $0.inOneJobWithoutCPU && $0.sleeping }
        let unknownBlocked = sleepers - knownBlocked
        guard unknownBlocked > 0 else { return 0 }
        let unblockedRunning = running - unknownBlocked
        return max(0, min(cpuCount - unblockedRunning, queued - waking))
    }
}
