import Synchronization

/// `asyncAfter`: blocks waiting for a deadline, each with a window [deadline, deadline +
/// leeway] in which it may run. The reactor's next-timer is armed at the earliest window end;
/// when it fires, every block whose window is over runs.
///
/// The leeway is the contract's: 10% of the delay, at least 1 ms and at most 60 s.
final class DelayedWork: Sendable {
    static let shared = DelayedWork()


    enum Action {
        /// A user's block: goes to its queue.
        case enqueue(WorkQueue, Job)
        /// Runtime housekeeping: runs on the polling thread itself, which must not block.
        case direct(@Sendable () -> Void)
    }

    private struct State {
        var heap = BinaryHeap<TimeKey, Action>()
        var nextSequence: UInt64 = 0
    }

    private let state = Mutex<State>(State())

    static func leeway(forDelay delay: UInt64) -> UInt64 {
        min(max(delay / 10, 1_000_000), 60_000_000_000)
    }

    func schedule(_ job: Job, on queue: WorkQueue, at deadline: Deadline) {
        if deadline == .distantFuture { return }  // never due: Dispatch drops it too
        let now = SystemClock.monotonicNanoseconds()
        guard deadline.uptimeNanoseconds > now else {
            queue.enqueue(job)
            return
        }
        let delay = deadline.uptimeNanoseconds - now
        let latest = deadline.uptimeNanoseconds.saturatingAdding(nanoseconds: Int64(DelayedWork.leeway(forDelay: delay)))
        insert(latest: latest, action: .enqueue(queue, job))
    }

    /// Runs `action` on the polling thread once `deadline` (monotonic ns) has passed.
    func scheduleHousekeeping(at deadline: UInt64, _ action: @escaping @Sendable () -> Void) {
        insert(latest: deadline, action: .direct(action))
    }

    private func insert(latest: UInt64, action: Action) {
        state.withLock { state in
            let previousFirst = state.heap.firstKey?.time
            state.heap.insert(action, key: TimeKey(time: latest, sequence: state.nextSequence))
            state.nextSequence += 1
            if previousFirst == nil || latest < previousFirst! {
                Reactor.shared.setTimer(latest)
            }
        }
    }

    /// Called by the reactor when the next-timer fires: runs what is due, re-arms.
    func fire() {
        let now = SystemClock.monotonicNanoseconds()
        var due: [Action] = []
        state.withLock { state in
            while let first = state.heap.firstKey, first.time <= now {
                due.append(state.heap.popFirst()!)
            }
            Reactor.shared.setTimer(state.heap.firstKey?.time)
        }
        for action in due {
            switch action {
            case .enqueue(let queue, let job): queue.enqueue(job)
            case .direct(let action): action()
            }
        }
    }
}
