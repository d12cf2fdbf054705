import Synchronization

/// A group of work to wait on or be notified about as a whole.
public final class WorkGroup: Sendable {
    private let state = Mutex<State>(State())

    private struct State {
        var count = 0
        var waiters = CompletionWaiters()
        /// Threads waiting raise the threads running the group's blocks.
        var overrides = WaitOverrides()
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
    /// The waiting thread raises the blocks submitted with `async(group:)` that run (or
    /// start) meanwhile to its QoS (synchronous inversion avoidance).
    public func wait(timeout: Deadline) -> WaitResult {
        let waitClass = ThreadState.current.currentQoS.qosClass
        var registered = false
        let result = CompletionWaiters.wait(until: timeout, register: { parker in
            let empty = state.locked { state -> Bool in
                if state.count == 0 { return true }
                state.waiters.add(parker)
                state.overrides.addWaiter(waitClass)
                return false
            }
            registered = !empty
            return empty
        }, unregister: { parker in
            state.locked { $0.waiters.remove(parker) }
        })
        if registered {
            state.locked { $0.overrides.removeWaiter(waitClass) }
        }
        return result
    }

    /// Runs a block of the group on `thread`, raised while threads wait on the group.
    func running(on thread: ThreadState, _ body: () -> Void) {
        state.locked { $0.overrides.addRunner(thread.priority) }
        body()
        state.locked { $0.overrides.removeRunner(thread.priority) }
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
