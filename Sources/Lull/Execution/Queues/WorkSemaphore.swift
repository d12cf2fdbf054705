import Synchronization

/// A counting semaphore (`DispatchSemaphore`): `wait` takes one from the count, blocking
/// while there is none; `signal` gives one back, waking the longest waiter.
///
/// A waiting worker counts as blocked for the worker pool, which may start another thread
/// meanwhile (as for `WorkGroup.wait`); the wait raises no one's QoS (a semaphore has no
/// owner). Releasing a semaphore whose count is below its initial value stops the program:
/// someone still holds what it counts ("deallocated while in use", as Dispatch).
///
/// The count lives in one atomic word: `wait` with the count above zero and `signal` with
/// no one waiting take no lock and make no system call. Below zero it counts the waiters,
/// each of whom then parks in a FIFO list. The state model:
///
/// - `count >= 0`: no waiter is owed anything; a `signal` just adds.
/// - `count = -n`: n waits have taken what was not there. Each `signal` that finds the count
///   below zero owes one of them a wake-up: it wakes the first parked waiter, or, when none
///   has parked yet (one is between its decrement and its parking), leaves a `wakeup` that
///   the next waiter to park takes instead.
/// - A wait that times out takes itself off the list and gives its decrement back, but only
///   while the count is below zero. At zero or above, a `signal` has counted it and is on
///   its way: the waiter waits for that wake-up (or takes the `wakeup` it left) and succeeds,
///   so a timed-out waiter never swallows a later signal, and no signal is lost.
///
/// Invariants (asserted in debug builds, under the list's lock): `wakeups >= 0`, and a
/// waiter is listed at most once.
public final class WorkSemaphore: Sendable {
    private let count: Atomic<Int>
    private let initialValue: Int
    private let waiters = Mutex(Waiters())

    private struct Waiters: ~Copyable {
        /// Parked waiters, the longest waiting first.
        var parked: [Parker] = []
        /// Wake-ups owed to waiters that have not parked yet.
        var wakeups = 0

        /// Takes a wake-up left for a waiter, or lists `parker` (first or last).
        mutating func takeWakeupOrPark(_ parker: Parker, first: Bool) -> Bool {
            assert(wakeups >= 0, "a negative count of owed wake-ups")
            if wakeups > 0 {
                wakeups -= 1
                return true
            }
            assert(!parked.contains { $0 === parker }, "a waiter listed twice")
            if first { parked.insert(parker, at: 0) } else { parked.append(parker) }
            return false
        }
    }

    /// A semaphore with a count of `value` (0 to signal events, n to guard n resources).
    /// - Precondition: `value >= 0`.
    public init(value: Int) {
        guard value >= 0 else {
            lullFatal("WorkSemaphore(value: \(value)): the initial value must not be negative")
        }
        count = Atomic(value)
        initialValue = value
    }

    deinit {
        let current = count.load(ordering: .acquiring)
        if current < initialValue {
            lullFatal("WorkSemaphore deallocated while in use: its count (\(current)) is below its initial value (\(initialValue))")
        }
    }

    /// Adds one to the count; if a thread waits, wakes the longest waiting one.
    /// - Returns: nonzero when a waiter is woken, 0 otherwise.
    @discardableResult
    public func signal() -> Int {
        if count.add(1, ordering: .acquiringAndReleasing).oldValue >= 0 { return 0 }
        let parker = waiters.locked { waiters -> Parker? in
            if waiters.parked.isEmpty {
                waiters.wakeups += 1
                return nil
            }
            return waiters.parked.removeFirst()
        }
        parker?.unpark()
        return 1
    }

    /// Takes one from the count, waiting for as long as it takes.
    public func wait() {
        _ = wait(timeout: .distantFuture)
    }

    /// Takes one from the count, waiting until `timeout` at the latest.
    /// - Returns: `.timedOut` when the count stayed at zero until `timeout` (the count is
    ///   then as it was before the call).
    public func wait(timeout: Deadline) -> WaitResult {
        if count.subtract(1, ordering: .acquiringAndReleasing).newValue >= 0 { return .success }
        return waitForSignal(until: timeout)
    }

    private func waitForSignal(until timeout: Deadline) -> WaitResult {
        let parker = Parker()
        if waiters.locked({ $0.takeWakeupOrPark(parker, first: false) }) { return .success }
        if WorkerPool.blocking({ parker.park(until: timeout) }) { return .success }
        // Timed out. Off the list, unless a signal took this waiter off already (its unpark
        // is then on its way, to a parker no one waits on any more: the wait succeeded).
        let listed = waiters.locked { waiters -> Bool in
            guard let index = waiters.parked.firstIndex(where: { $0 === parker }) else { return false }
            waiters.parked.remove(at: index)
            return true
        }
        if !listed { return .success }
        // Give the decrement back while no signal has counted this waiter.
        var current = count.load(ordering: .relaxed)
        while current < 0 {
            let (exchanged, original) = count.compareExchange(expected: current, desired: current + 1,
                                                              ordering: .acquiringAndReleasing)
            if exchanged { return .timedOut }
            current = original
        }
        // A signal counted this waiter: it wakes the first listed waiter or leaves a wake-up.
        if waiters.locked({ $0.takeWakeupOrPark(parker, first: true) }) { return .success }
        WorkerPool.blocking { parker.park() }
        return .success
    }

    /// Waiters parked now (for tests).
    var parkedCount: Int {
        waiters.locked { $0.parked.count }
    }
}
