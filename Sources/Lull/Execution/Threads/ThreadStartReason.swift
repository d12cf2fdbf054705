import Synchronization

/// Why the pool started a worker thread. Every creation is counted by its reason
/// (`ThreadStartCounts`), and the count is in the log line that says the pool reached its
/// ceiling, so that a pool that grows says which path made it grow.
enum ThreadStartReason: CaseIterable, Sendable {
    /// Queued work with fewer than the CPU count running (`recruit`: a submit, a cascade,
    /// a worker leaving a Lull wait).
    case work
    /// The reactor needed a poller and no worker of a polling class was idle (`ensurePoller`).
    case poller
    /// The stall check replaced workers blocked in the kernel without Lull knowing.
    case stallReplacement
    /// The stall check started a thread whose creation had failed before.
    case retry

    var name: String {
        switch self {
        case .work: "work"
        case .poller: "poller"
        case .stallReplacement: "stall replacement"
        case .retry: "retry"
        }
    }
}

/// Worker threads started so far, by reason (relaxed counters: one add per thread creation).
final class ThreadStartCounts: Sendable {
    private let work = Atomic<Int>(0)
    private let poller = Atomic<Int>(0)
    private let stallReplacement = Atomic<Int>(0)
    private let retry = Atomic<Int>(0)

    func record(_ reason: ThreadStartReason) {
        switch reason {
        case .work: work.add(1, ordering: .relaxed)
        case .poller: poller.add(1, ordering: .relaxed)
        case .stallReplacement: stallReplacement.add(1, ordering: .relaxed)
        case .retry: retry.add(1, ordering: .relaxed)
        }
    }

    subscript(reason: ThreadStartReason) -> Int {
        switch reason {
        case .work: work.load(ordering: .relaxed)
        case .poller: poller.load(ordering: .relaxed)
        case .stallReplacement: stallReplacement.load(ordering: .relaxed)
        case .retry: retry.load(ordering: .relaxed)
        }
    }

    /// "work 3, poller 1, stall replacement 0, retry 0".
    var summary: String {
        ThreadStartReason.allCases.map { "\($0.name) \(self[$0])" }.joined(separator: ", ")
    }
}
