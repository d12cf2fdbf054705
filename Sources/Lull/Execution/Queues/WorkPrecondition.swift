/// What `workPrecondition(condition:)` checks about the calling thread (`DispatchPredicate`).
public enum WorkPredicate: Sendable {
    /// The calling thread runs a block of the queue, or of a queue that targets it (a
    /// `sync` onto either included). On the process's main thread, outside any block, the
    /// main queue holds while no other thread runs `WorkQueue.runMain()`.
    case onQueue(WorkQueue)
    /// As `onQueue`, and the block runs alone on the queue: always on a serial queue; on a
    /// concurrent one, inside a barrier (`.barrier` block or `sync`). Never on a global queue.
    case onQueueAsBarrier(WorkQueue)
    /// The calling thread runs no block of the queue nor of any queue that targets it.
    case notOnQueue(WorkQueue)
}

/// Stops the program, with a message naming the queue, unless `condition` holds for the
/// calling thread (`dispatchPrecondition`). Checked in every build, as Dispatch checks it.
public func workPrecondition(condition: @autoclosure () -> WorkPredicate,
                             file: StaticString = #fileID, line: UInt = #line) {
    let predicate = condition()
    if let failure = predicate.failure(on: ThreadState.current) {
        lullFatal("workPrecondition failed: \(failure)", file: file, line: line)
    }
}

extension WorkPredicate {
    /// Why the predicate does not hold on `thread`, or nil when it does.
    func failure(on thread: ThreadState) -> String? {
        switch self {
        case .onQueue(let queue):
            return queue.isRunBy(thread) ? nil : "the block was expected to run on WorkQueue '\(queue.label)'"
        case .onQueueAsBarrier(let queue):
            guard queue.isRunBy(thread), queue.runsAlone else {
                return "the block was expected to run as a barrier on WorkQueue '\(queue.label)'"
            }
            return nil
        case .notOnQueue(let queue):
            return queue.isRunBy(thread) ? "the block was expected not to run on WorkQueue '\(queue.label)'" : nil
        }
    }
}

extension WorkQueue {
    /// For a thread on this queue: whether nothing else of the queue runs meanwhile (a
    /// serial queue, or a concurrent one inside a barrier), as Dispatch's barrier check.
    fileprivate var runsAlone: Bool {
        switch kind {
        case .serial, .mainThread: true
        case .concurrent: state.locked { $0.barrierActive }
        case .root: false
        }
    }
}
