import Synchronization

/// The contract's invariants for one source, checked as its handlers run: every handler
/// the harness installs enters and leaves through its probe.
///
/// - No two handlers of the source run at once (the event handler never runs concurrently
///   with itself; the registration handler runs before the first event, the cancel handler
///   after the last one returned): an atomic "inside a handler" flag.
/// - The cancel handler runs exactly once (`isFinished` counts it; the runner checks it ran)
///   and last: no handler starts after it.
/// - The registration handler runs at most once, never after an event handler (the
///   harness installs one before the source can be activated).
///
/// A violation is appended to the run's log, naming the source.
final class StressProbe: Sendable {
    enum Role: String, Sendable {
        case registration, event, cancel
    }

    let name: String
    private let violations: Recorder<String>
    private let inside = Atomic<Bool>(false)
    private let cancelRuns = Atomic<Int>(0)
    private let eventRuns = Atomic<Int>(0)
    private let registrationRuns = Atomic<Int>(0)

    init(name: String, violations: Recorder<String>) {
        self.name = name
        self.violations = violations
    }

    /// Call first thing in a handler; pair with `leave`.
    func enter(_ role: Role) {
        if inside.exchange(true, ordering: .acquiringAndReleasing) {
            violations.append("\(name): the \(role.rawValue) handler started while another handler of the source ran")
        }
        if cancelRuns.load(ordering: .acquiring) > 0 {
            violations.append("\(name): the \(role.rawValue) handler ran after the cancel handler")
        }
        switch role {
        case .event:
            eventRuns.add(1, ordering: .relaxed)
        case .registration:
            if registrationRuns.add(1, ordering: .relaxed).newValue > 1 {
                violations.append("\(name): the registration handler ran twice")
            }
            if eventRuns.load(ordering: .relaxed) > 0 {
                violations.append("\(name): the registration handler ran after an event handler")
            }
        case .cancel:
            break
        }
    }

    func leave(_ role: Role) {
        if role == .cancel && cancelRuns.add(1, ordering: .acquiringAndReleasing).newValue > 1 {
            violations.append("\(name): the cancel handler ran twice")
        }
        inside.store(false, ordering: .releasing)
    }

    /// The cancel handler has run (and returned).
    var isFinished: Bool { cancelRuns.load(ordering: .acquiring) > 0 }

    var summary: String {
        "\(name): \(registrationRuns.load(ordering: .relaxed)) registration, "
            + "\(eventRuns.load(ordering: .relaxed)) event, \(cancelRuns.load(ordering: .relaxed)) cancel handler runs"
    }
}
