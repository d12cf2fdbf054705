import CLullShims
import Synchronization

/// What the stall check reads of one worker, without the class lock: which job it is in,
/// and what it saw of it at its previous look (see `StallMonitor`).
///
/// The worker alone writes `jobs`: twice the jobs it started, plus one while it runs one
/// (odd: inside a job). The stall check alone (one look at a time) writes the rest.
final class WorkerActivity: Sendable {
    let jobs = Atomic<UInt64>(0)
    /// `jobs` at the stall check's previous look.
    let jobsAtLastCheck = Atomic<UInt64>(0)
    /// The thread's CPU time (ns) at the stall check's previous look.
    let cpuAtLastCheck = Atomic<UInt64>(0)
    /// The thread's run-queue wait (ns, `ThreadSchedStat`) at the stall check's previous
    /// look; `UInt64.max`: not read yet.
    let runQueueWaitAtLastCheck = Atomic<UInt64>(.max)
    /// The level checks the worker's inline batch deferred, which the stall check takes
    /// from a worker that blocked while it held them.
    let deferredChecks: DeferredLevelChecks
    /// The jobs of the worker's inline batch not yet started, which the poll watch hands to
    /// the class queue when the worker is stuck in one job (nil for a stand-in activity).
    let inlineBatch: InlineBatch?

    init(deferredCheckHolders: DeferredLevelChecks.Holders = DeferredLevelChecks.Holders(),
         inlineBatch: InlineBatch? = nil) {
        deferredChecks = DeferredLevelChecks(holders: deferredCheckHolders)
        self.inlineBatch = inlineBatch
    }

    /// The worker starts a job (only the worker's thread calls it).
    @inline(__always)
    func enterJob() {
        jobs.store(jobs.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
    }

    /// The worker finished the job it started.
    @inline(__always)
    func leaveJob() {
        jobs.store(jobs.load(ordering: .relaxed) &+ 1, ordering: .relaxed)
    }

    /// The stall check's look at thread `tid`: true when the worker has been inside one
    /// job since the previous look and its thread used less than `cpuBudget` ns of CPU
    /// meanwhile — it waited through the interval rather than worked (a busy worker that
    /// the kernel catches asleep for an instant, on a lock or the allocator, used CPU). The
    /// first look at a job only records it.
    func waitedThroughInterval(tid: Int32, cpuBudget: UInt64) -> Bool {
        let job = jobs.load(ordering: .relaxed)
        let cpu = lull_thread_cpu_nanoseconds(tid)
        let previousJob = jobsAtLastCheck.exchange(job, ordering: .relaxed)
        let previousCPU = cpuAtLastCheck.exchange(cpu < 0 ? 0 : UInt64(cpu), ordering: .relaxed)
        // The thread's CPU clock unreadable (it is exiting): not waiting.
        guard cpu >= 0, job & 1 == 1, job == previousJob else { return false }
        return UInt64(cpu) &- previousCPU < cpuBudget
    }

    /// The stall check's look at how long thread `tid` waited for a CPU since the previous
    /// look (nil: unknown — the first look, or no scheduler statistics). Records the total.
    func runQueueWaitSinceLastCheck(tid: Int32) -> UInt64? {
        guard let stat = ThreadSchedStat.read(tid: tid) else {
            runQueueWaitAtLastCheck.store(.max, ordering: .relaxed)
            return nil
        }
        let previous = runQueueWaitAtLastCheck.exchange(stat.runQueueWaitNanoseconds, ordering: .relaxed)
        guard previous != .max, stat.runQueueWaitNanoseconds >= previous else { return nil }
        return stat.runQueueWaitNanoseconds - previous
    }
}
