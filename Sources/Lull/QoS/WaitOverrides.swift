/// Synchronous inversion avoidance for something threads wait on (a work item):
/// while threads wait, every thread running its work runs at least at the QoS of the most
/// important waiter. Kept inside the owner's lock.
///
/// Invariant: each runner carries exactly one override, of `waitClass`, on its thread
/// (none while nobody waits), so that a change of waiters moves every runner and a runner
/// that finishes takes back exactly what it was given.
struct WaitOverrides: Sendable {
    /// Waiting threads per class rank.
    private var waiters = [Int](repeating: 0, count: 6)
    private(set) var waitClass: QoS.QoSClass = .unspecified
    private var runners: [(control: ThreadPriorityControl, applied: QoS.QoSClass)] = []

    mutating func addWaiter(_ qosClass: QoS.QoSClass) {
        waiters[qosClass.rank] += 1
        update()
    }

    mutating func removeWaiter(_ qosClass: QoS.QoSClass) {
        assert(waiters[qosClass.rank] > 0, "Lull: a \(qosClass.name) waiter removed that was never added")
        waiters[qosClass.rank] -= 1
        update()
    }

    mutating func addRunner(_ control: ThreadPriorityControl) {
        control.replaceOverride(.unspecified, with: waitClass)
        runners.append((control, waitClass))
    }

    mutating func removeRunner(_ control: ThreadPriorityControl) {
        guard let index = runners.lastIndex(where: { $0.control === control }) else {
            assertionFailure("Lull: a runner removed that was never added")
            return
        }
        control.replaceOverride(runners[index].applied, with: .unspecified)
        runners.remove(at: index)
    }

    private mutating func update() {
        let rank = waiters.lastIndex { $0 > 0 } ?? 0
        waitClass = QoS.QoSClass.byRank[rank]
        for index in runners.indices where runners[index].applied != waitClass {
            runners[index].control.replaceOverride(runners[index].applied, with: waitClass)
            runners[index].applied = waitClass
        }
        assert(runners.allSatisfy { $0.applied == waitClass }, "Lull: a runner carries an override other than the wait class")
    }
}
