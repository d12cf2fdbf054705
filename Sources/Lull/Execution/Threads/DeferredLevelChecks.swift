import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A level check that a read delivery of the poller's inline batch left for later: the
/// zero-timeout `poll` after its handler (docs/EventSources.md, "Read sources: the check
/// after each handler"). The source holds its delivery token until the check completes, so
/// no other delivery of it runs in between, and its cancel handler waits for it too.
protocol DeferredLevelCheck: AnyObject, Sendable {
    /// The descriptor the check polls, and the events it polls for.
    var deferredCheckPoll: (descriptor: Int32, events: Int16) { get }
    /// Completes the check with what `poll` reported for the descriptor (nil: the batched
    /// poll failed, and the check polls the descriptor alone), then gives the source's token
    /// back. Called exactly once per deferral, by the thread that took the check.
    func completeDeferredCheck(revents: Int16?)
}

/// One worker's deferred level checks (docs/WorkerPool.md, "Deferred level checks"): its
/// own thread adds them while it runs its inline batch and completes them all with one
/// `poll` before anything else runs or waits; the stall check takes them from a worker
/// that blocked in a system call of its own while it held some.
///
/// `pending` is a small lock: its holders only append or swap the list out, and never
/// take another lock inside it. Whoever swaps a non-empty list out owns those checks and
/// completes each exactly once, after the lock.
final class DeferredLevelChecks: Sendable {
    private let pending = Mutex<[any DeferredLevelCheck]>([])
    /// Whether `pending` may hold checks: set by the owner under the lock when it adds the
    /// first, cleared under the lock by the take that empties it. The owner reads it
    /// before each job without the lock (a stale `true` only costs a look under the lock).
    private let holdsChecks = Atomic<Bool>(false)
    /// How many workers of the pool hold deferred checks now: the stall check's look stays
    /// armed while it is not 0 (see `WorkerPool.watchDeferredChecks`).
    private let holders: Holders

    /// The pool's count of workers holding deferred checks.
    final class Holders: Sendable {
        let count = Atomic<Int>(0)
    }

    init(holders: Holders) {
        self.holders = holders
    }

    /// Whether checks may be waiting (the owner's cheap look before each job).
    var mayHoldChecks: Bool { holdsChecks.load(ordering: .relaxed) }

    /// By the owner: one more check to complete later.
    func add(_ check: any DeferredLevelCheck) {
        pending.locked { list in
            if list.isEmpty {
                // Counted before the owner looks at the stall check's state (sequentially
                // consistent, paired with `WorkerPool.cancelStallCheckIfNothingWaits`).
                holders.count.add(1, ordering: .sequentiallyConsistent)
                holdsChecks.store(true, ordering: .relaxed)
            }
            list.append(check)
        }
        #if DEBUG
        DeferredLevelChecks.deferredCount.add(1, ordering: .relaxed)
        #endif
    }

    /// Takes every waiting check and completes them with one `poll` over their
    /// descriptors. By the owner, or by the stall check for a blocked owner; a thread that
    /// finds the list taken already does nothing.
    func completeAll() {
        let taken = pending.locked { list -> [any DeferredLevelCheck] in
            guard !list.isEmpty else { return [] }
            let taken = list
            list = []
            holdsChecks.store(false, ordering: .relaxed)
            let before = holders.count.subtract(1, ordering: .sequentiallyConsistent).oldValue
            assert(before > 0, "Lull: the count of workers holding deferred level checks went below 0")
            return taken
        }
        guard !taken.isEmpty else { return }
        DeferredLevelChecks.complete(taken)
    }

    /// One zero-timeout `poll` over the checks' descriptors, then each completed with its
    /// own `revents`. A failed `poll` (no memory for the kernel's copy) leaves each check to
    /// poll its descriptor alone.
    private static func complete(_ checks: [any DeferredLevelCheck]) {
        if checks.count == 1 {
            checks[0].completeDeferredCheck(revents: nil)
            return
        }
        #if DEBUG
        batchedPollCount.add(1, ordering: .relaxed)
        #endif
        withUnsafeTemporaryAllocation(of: pollfd.self, capacity: checks.count) { entries in
            for (index, check) in checks.enumerated() {
                let (descriptor, events) = check.deferredCheckPoll
                entries.initializeElement(at: index, to: pollfd(fd: descriptor, events: events, revents: 0))
            }
            let polled: Bool
            do throws(SystemError) {
                _ = try Syscall.posix("poll") { poll(entries.baseAddress, nfds_t(checks.count), 0) }
                polled = true
            } catch {
                polled = false
            }
            for (index, check) in checks.enumerated() {
                check.completeDeferredCheck(revents: polled ? entries[index].revents : nil)
            }
        }
    }

    #if DEBUG
    /// Test hooks: checks deferred, polls that completed two or more at once, and workers
    /// whose checks the stall check's look took.
    static let deferredCount = Atomic<Int>(0)
    static let batchedPollCount = Atomic<Int>(0)
    static let takenByLookCount = Atomic<Int>(0)
    #endif
}
