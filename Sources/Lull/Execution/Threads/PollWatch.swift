import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The poll watch: one thread per pool that keeps a worker stuck in a job from stalling the
/// reactor and the rest of its wake-up, without depending on the poller (docs/WorkerPool.md,
/// "The poll watch"). In the spirit of Go's sysmon.
///
/// While something is to watch it *ticks* every `interval`; at each tick it
/// - asks for a poller (`WorkerPool.ensurePoller`) when the reactor has interest, no worker
///   is inside a poll, and no poll ended since the previous tick (`pollEpoch` unchanged);
/// - hands to the class queue the jobs not yet started of every inline batch whose owner is
///   inside the same job as at the previous tick (`WorkerPool.handOverInlineBatch`).
/// A tick that finds the poller inside its poll (or nothing to poll for) and no inline batch
/// with jobs left *parks* the watch on its alarm (`PollWatchAlarm`): an idle process gets no
/// wake-up from it. A poller that leaves its poll with a non-empty batch while the watch is
/// parked (`batchStarted`) arms the alarm for that batch when batches are sparse (no wake-up
/// unless the batch is still running an interval later), or wakes the watch to tick when
/// they come within `busyBatchSpacing` of each other (a busy process: at most one wake-up
/// per interval).
///
/// The state model, its transitions and invariants are in docs/WorkerPool.md ("The poll
/// watch"). Asserted: a tick never starts while the watch counts as parked.
///
/// The thread does not exist in a forked child: as for the pool's workers, Lull refuses to
/// be used there (`ForkGuard`), so nothing in the child starts a poll or a batch.
final class PollWatch: Sendable {
    /// The watch's tick, and how long a job runs before the batch behind it is handed over
    /// (between one and two ticks): long beside a handler's ordinary run and beside a busy
    /// machine's scheduling delays (a few milliseconds), so that a batch is not taken from
    /// a worker that was merely preempted, and short beside the delays users notice, so that
    /// a timer behind a stuck handler fires at most about two ticks late. While active, 50
    /// ticks a second.
    static let interval: UInt64 = 20_000_000
    /// Batches that follow each other closer than this (a busy process) wake the parked
    /// watch to tick, one wake-up per `interval`; sparser ones arm its alarm, two
    /// `timerfd_settime` per batch on a thread that is awake anyway, and no wake-up. Five
    /// hundred batches a second cost a thousand system calls, which is about what fifty
    /// thread wake-ups cost, and wake no CPU.
    static let busyBatchSpacing: UInt64 = 2_000_000

    private let started = Atomic<Bool>(false)
    /// True while the watch sleeps without a deadline (or is about to); taken by exchange.
    private let parked = Atomic<Bool>(false)
    private let parker = Parker()
    /// Bumped by the poller each time it leaves its poll.
    let pollEpoch = Atomic<UInt64>(0)
    /// Ticks so far (diagnostics and tests: an idle process adds none).
    let ticks = Atomic<UInt64>(0)
    /// Times the watch parked without a deadline, and times a poller woke it (tests).
    let parks = Atomic<UInt64>(0)
    let wakes = Atomic<UInt64>(0)
    /// Batches the parked watch's alarm watched (tests and diagnostics).
    let alarmedBatches = Atomic<UInt64>(0)
    /// The parked watch's alarm, opened before its thread starts (nil when it could not be:
    /// the parker then wakes it for every batch).
    let alarm = AtomicLazyReference<PollWatchAlarm>()
    /// When the last batch that found the watch parked started (ns).
    private let lastParkedBatch = Atomic<UInt64>(0)
    /// Poller requests and batch hand-overs the watch made (diagnostics and tests).
    let pollerRequests = Atomic<UInt64>(0)
    let handOvers = Atomic<UInt64>(0)

    init() {}

    var isStarted: Bool { started.load(ordering: .relaxed) }
    /// Parked, or about to park (diagnostics and tests).
    var isParked: Bool { parked.load(ordering: .relaxed) }

    /// Claims the start of the watch's thread: true once, for the caller that then starts it.
    @inline(__always)
    func claimStart() -> Bool {
        if started.load(ordering: .relaxed) { return false }
        return started.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged
    }

    /// The poller, right after it published a non-empty inline batch: a fence and a load
    /// while the watch ticks. While the watch is parked, a batch that follows the previous
    /// one within `interval` (a busy process) wakes it, to tick; any other arms the alarm for
    /// itself and returns true: the caller calls `batchEnded` when its batch ends.
    @inline(__always)
    func batchStarted() -> Bool {
        atomicMemoryFence(ordering: .sequentiallyConsistent)
        guard parked.load(ordering: .relaxed) else { return false }
        return parkedBatchStarted()
    }

    private func parkedBatchStarted() -> Bool {
        guard let alarm = alarm.load() else {
            wake()
            return false
        }
        let now = SystemClock.monotonicNanoseconds()
        let previous = lastParkedBatch.exchange(now, ordering: .relaxed)
        if now &- previous < PollWatch.busyBatchSpacing {
            wake()
            return false
        }
        alarmedBatches.add(1, ordering: .relaxed)
        alarm.batchStarted()
        return true
    }

    /// The end of a batch for which `batchStarted` returned true.
    func batchEnded() {
        alarm.load()?.batchEnded()
    }

    private func wake() {
        guard parked.exchange(false, ordering: .sequentiallyConsistent) else { return }
        wakes.add(1, ordering: .relaxed)
        if let alarm = alarm.load() { alarm.wakeNow() } else { parker.unpark() }
    }

    /// The watch thread's loop (never returns).
    func run(for pool: WorkerPool) {
        var lastEpoch = pollEpoch.load(ordering: .relaxed)
        while true {
            waitOneInterval()
            assert(!parked.load(ordering: .relaxed), "Lull: the poll watch ticks while it counts as parked")
            ticks.add(1, ordering: .relaxed)
            if pool.watchTick(lastEpoch: &lastEpoch) { continue }
            parkUntilBatch(pool)
            lastEpoch = pollEpoch.load(ordering: .relaxed)
        }
    }

    /// Sleeps one whole interval: a stale permit only ends one sleep early.
    private func waitOneInterval() {
        let deadline = Deadline(uptimeNanoseconds: SystemClock.monotonicNanoseconds() &+ PollWatch.interval)
        while SystemClock.monotonicNanoseconds() < deadline.uptimeNanoseconds {
            _ = parker.park(until: deadline)
        }
    }

    /// Parks until a batch needs watching; returns when the watch should tick again.
    private func parkUntilBatch(_ pool: WorkerPool) {
        while true {
            parked.store(true, ordering: .sequentiallyConsistent)
            atomicMemoryFence(ordering: .sequentiallyConsistent)
            guard pool.watchFindsQuiet() else {
                // Taken back, or a waker took it and its wake ends the next sleep early.
                _ = parked.exchange(false, ordering: .sequentiallyConsistent)
                return
            }
            parks.add(1, ordering: .relaxed)
            if let alarm = alarm.load() {
                // Woken by a busy process's batch, or by a batch still running an interval
                // after it armed the alarm (or by a wake left from an earlier park): ticks.
                alarm.sleep()
                _ = parked.exchange(false, ordering: .sequentiallyConsistent)
                return
            }
            parker.park()
            // Still set: a permit left by an earlier waker, not a wake: look again.
            if parked.exchange(false, ordering: .sequentiallyConsistent) { continue }
            return
        }
    }
}
