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
/// with jobs left *parks* the watch without a deadline: an idle process gets no wake-up from
/// it. The poller wakes it (`batchStarted`) when it leaves its poll with a non-empty batch
/// while the watch is parked — the only way a poll-less stretch or a stuck batch can begin
/// while the poller was inside its poll.
///
/// State model (`parked` and the parker's permit):
///
/// | state | meaning |
/// |---|---|
/// | not started | no thread yet: the reactor never had interest |
/// | ticking (`parked` false) | waits `interval`, then ticks |
/// | parking (`parked` true) | published `parked`, looks once more before it sleeps |
/// | parked (`parked` true) | sleeps on its parker without a deadline |
///
/// | from | to | by |
/// |---|---|---|
/// | not started | ticking | the first `ensurePoller` (the reactor has interest): thread started after every lock |
/// | ticking | parking | a tick that finds nothing to watch: stores `parked`, then a full fence |
/// | parking | ticking | its last look finds a batch or a poll-less stretch: takes `parked` back (exchange) |
/// | parking | parked | its last look finds nothing either |
/// | parked | ticking | a poller that starts a non-empty batch takes `parked` (exchange) and unparks it |
/// | parked | parked | woken after a quiet spell of `interval` or more, it sees the batch end within `settleNanoseconds` |
///
/// Invariant (no missed batch): the poller publishes its batch, then a full fence, then
/// reads `parked`; the watch stores `parked`, then a full fence, then reads the batches. One
/// of the two sees the other: either the poller wakes the watch, or the watch does not
/// sleep. Only the one whose exchange takes `parked` from true acts on it, so a wake is
/// given at most once per park; a permit left over by a waker that lost the race ends a later
/// sleep early, and the watch then looks again (asserted: a tick never starts with `parked`).
///
/// Under load the watch is woken at most once per `interval`: it is woken only while parked,
/// and it parks only after a tick, a whole `interval` after it was woken. A sparse process
/// (one wake-up per timer) costs one thread switch per wake-up whose batch ends within
/// `settleNanoseconds`: the watch, woken after a quiet spell, looks for the batch's end that
/// long and parks again; a longer batch costs a tick too.
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
    /// How long the watch, woken by a batch after a quiet spell, looks for the batch's end
    /// before it waits a tick (ns): a timer's handler ends in microseconds.
    static let settleNanoseconds: UInt64 = 100_000

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
    /// Wakes after a quiet spell whose batch ended within `settleNanoseconds`, and those whose
    /// batch did not (tests and diagnostics).
    let settled = Atomic<UInt64>(0)
    let unsettled = Atomic<UInt64>(0)
    let shortSpells = Atomic<UInt64>(0)
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

    /// The poller, right after it published a non-empty inline batch: wakes the watch if it
    /// is parked. A fence and a load while the watch ticks.
    @inline(__always)
    func batchStarted() {
        atomicMemoryFence(ordering: .sequentiallyConsistent)
        if parked.load(ordering: .relaxed) { wake() }
    }

    private func wake() {
        guard parked.exchange(false, ordering: .sequentiallyConsistent) else { return }
        wakes.add(1, ordering: .relaxed)
        parker.unpark()
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

    /// Parks until a poller starts a batch; returns when the watch should tick again.
    private func parkUntilBatch(_ pool: WorkerPool) {
        while true {
            parked.store(true, ordering: .sequentiallyConsistent)
            atomicMemoryFence(ordering: .sequentiallyConsistent)
            guard pool.watchFindsQuiet() else {
                // Taken back, or a waker took it and its unpark ends the next wait early.
                _ = parked.exchange(false, ordering: .sequentiallyConsistent)
                return
            }
            parks.add(1, ordering: .relaxed)
            let parkedAt = SystemClock.monotonicNanoseconds()
            parker.park()
            // Still set: a permit left by an earlier waker, not a wake: look again.
            if parked.exchange(false, ordering: .sequentiallyConsistent) { continue }
            let quietSpell = SystemClock.monotonicNanoseconds() &- parkedAt >= PollWatch.interval
            guard quietSpell else {
                shortSpells.add(1, ordering: .relaxed)
                return
            }
            if settles(pool) {
                settled.add(1, ordering: .relaxed)
                continue
            }
            unsettled.add(1, ordering: .relaxed)
            return
        }
    }

    /// Whether the batch that woke the watch ends (and the poller is back in its poll)
    /// within `settleNanoseconds`. The watch yields its CPU between looks: woken by the
    /// poller, it often runs on the poller's CPU, and at its higher priority it would
    /// otherwise preempt the very batch it waits for. (`sched_yield` cannot fail on Linux.)
    private func settles(_ pool: WorkerPool) -> Bool {
        let end = SystemClock.monotonicNanoseconds() &+ PollWatch.settleNanoseconds
        repeat {
            if pool.pollerIsInsidePoll && pool.watchFindsQuiet() { return true }
            _ = sched_yield()
        } while SystemClock.monotonicNanoseconds() < end
        return false
    }
}
