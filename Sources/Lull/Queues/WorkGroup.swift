import Synchronization

/// A group of work to wait on or be notified about as a whole.
public final class WorkGroup: Sendable {
    private let state = Mutex<State>(State())

    private struct State {
        var count = 0
        var waiters: [Parker] = []
        var notifications: [(WorkQueue, Job)] = []
    }

    public init() {}

    /// Counts one more piece of outstanding work.
    public func enter() {
        state.locked { $0.count += 1 }
    }

    /// Marks one piece of work as done; the group empties when the count returns to zero.
    /// - Precondition: each `leave` matches an `enter`.
    public func leave() {
        let (waiters, notifications) = state.locked { state -> ([Parker], [(WorkQueue, Job)]) in
            state.count -= 1
            if state.count < 0 {
                lullFatal("unbalanced WorkGroup.leave(): more leave() calls than enter() calls")
            }
            guard state.count == 0 else { return ([], []) }
            defer { state.waiters = []; state.notifications = [] }
            return (state.waiters, state.notifications)
        }
        for waiter in waiters { waiter.unpark() }
        for (queue, job) in notifications { queue.enqueue(job) }
    }

    /// Blocks until the group is empty.
    public func wait() {
        _ = wait(timeout: .distantFuture)
    }

    /// Blocks until the group is empty or `timeout` passes.
    public func wait(timeout: Deadline) -> WaitResult {
        let parker = Parker()
        let empty = state.locked { state -> Bool in
            if state.count == 0 { return true }
            state.waiters.append(parker)
            return false
        }
        if empty { return .success }
        if WorkerPool.shared.blocking({ parker.park(until: timeout) }) { return .success }
        let removed = state.locked { state -> Bool in
            guard let index = state.waiters.firstIndex(where: { $0 === parker }) else { return false }
            state.waiters.remove(at: index)
            return true
        }
        return removed ? .timedOut : .success
    }

    /// Submits `execute` to `queue` once the group is empty (at once if it is empty now).
    public func notify(qos: QoS = .unspecified, flags: WorkItemFlags = [], queue: WorkQueue,
                       execute: @escaping @Sendable () -> Void) {
        let job = queue.makeJob(.block(execute), qos: qos, flags: flags)
        let empty = state.locked { state -> Bool in
            if state.count == 0 { return true }
            state.notifications.append((queue, job))
            return false
        }
        if empty { queue.enqueue(job) }
    }
}
