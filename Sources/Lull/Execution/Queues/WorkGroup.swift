import Synchronization

/// A group of work to wait on or be notified about as a whole.
public final class WorkGroup: Sendable {
    private let state = Mutex<State>(State())

    private struct State {
        var count = 0
        var waiters = CompletionWaiters()
    }

    /// An empty group (count 0).
    public init() {}

    /// Counts one more piece of outstanding work.
    public func enter() {
        state.locked { $0.count += 1 }
    }

    /// Marks one piece of work as done; the group empties when the count returns to zero.
    /// - Precondition: each `leave` matches an `enter`.
    public func leave() {
        let waiters = state.locked { state -> CompletionWaiters in
            state.count -= 1
            if state.count < 0 {
                lullFatal("unbalanced WorkGroup.leave(): more leave() calls than enter() calls")
            }
            guard state.count == 0 else { return CompletionWaiters() }
            return state.waiters.takeAll()
        }
        waiters.release()
    }

    /// Blocks until the group is empty.
    public func wait() {
        _ = wait(timeout: .distantFuture)
    }

    /// Blocks until the group is empty or `timeout` passes.
    ///
    /// The wait raises nothing: a group has no owner to raise, and the QoS its blocks were
    /// given stands, as on Darwin (only `sync` and waiting on a work item resolve an
    /// inversion). A worker that waits counts as blocked, so the pool may start another.
    public func wait(timeout: Deadline) -> WaitResult {
        CompletionWaiters.wait(until: timeout, register: { parker in
            state.locked { state -> Bool in
                if state.count == 0 { return true }
                state.waiters.add(parker)
                return false
            }
        }, unregister: { parker in
            state.locked { $0.waiters.remove(parker) }
        })
    }

    /// Submits `execute` to `queue` once the group is empty (at once if it is empty now).
    public func notify(qos: QoS = .unspecified, flags: WorkItemFlags = [], queue: WorkQueue,
                       execute: @escaping @Sendable () -> Void) {
        let job = queue.makeJob(.block(execute), qos: qos, flags: flags)
        let empty = state.locked { state -> Bool in
            if state.count == 0 { return true }
            state.waiters.add(notification: job, on: queue)
            return false
        }
        if empty { queue.enqueue(job) }
    }

    /// Registers a suspended task to resume when the group is empty; false (nothing
    /// registered) when it is empty now.
    func addWaiting(task continuation: UnsafeContinuation<Void, Never>) -> Bool {
        state.locked { state -> Bool in
            if state.count == 0 { return false }
            state.waiters.add(task: continuation)
            return true
        }
    }
}
