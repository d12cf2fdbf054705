extension WorkQueue {
    /// Whether a job posted on this queue now would find nothing of its hierarchy ahead of it
    /// and nothing holding it back: no queue on the way to the pool is suspended or inactive,
    /// and no serial queue on the way has a block pending, running or a drain requested (a
    /// concurrent one: no block pending, no barrier). A global queue always is; the main
    /// queue never is (its thread decides when it runs).
    ///
    /// The answer holds at one instant: a block enqueued after it by another thread is
    /// concurrent with the caller's next step anyway, which is why a caller may then do on
    /// its own thread what such a job would have done (an `events` loop's delivery,
    /// `SourceCore`), without a block enqueued before it running after that step.
    var isIdleForPostedJob: Bool {
        var queue = self
        while true {
            switch queue.kind {
            case .root:
                return true
            case .mainThread:
                return false
            case .serial, .concurrent:
                let serial = queue.kind == .serial
                let next = queue.state.locked { state -> WorkQueue? in
                    guard !state.isPaused, !state.hasWaiting(queue), !state.barrierActive else { return nil }
                    guard !serial || (!state.isOwned && state.drainers == 0) else { return nil }
                    return state.target
                }
                guard let next else { return false }
                queue = next
            }
        }
    }
}
