/// Serial: the work items a waiter raised (`WorkItem.wait` from a more important thread)
/// that were not found among the blocks put back in `pending`, so may still be in the
/// queue's inbox or not pushed yet, each with the class it was raised to. Guarded by the
/// queue's lock.
///
/// A raise lasts until its item runs (Darwin's rule): every take of the drain that does not
/// contain the item runs all it takes at the raised class (those blocks are ahead of the
/// item), the take that contains it marks the item's own position and ends the raise, and
/// so does the item when it starts (it may have been in a drain's batch already when the
/// waiter raised it). Items are named by identity, not retained: an entry exists only
/// while its item has not started (`WorkItem.hasStarted`, read under the queue's lock when
/// the raise is added; the item removes its entry as it starts), and until then the
/// submitter's reference or the queued job keeps the item alive.
struct InboxRaises: Sendable {
    private var raised: [(item: ObjectIdentifier, qosClass: QoS.QoSClass)] = []
    /// The highest class raised to; `.unspecified` when nothing is raised (the drain's one
    /// test per take).
    private(set) var highest: QoS.QoSClass = .unspecified

    var isEmpty: Bool { raised.isEmpty }

    /// `item`'s waiters raise it to `qosClass` (kept at the highest class of any of them).
    mutating func raise(_ item: ObjectIdentifier, to qosClass: QoS.QoSClass) {
        assert(qosClass != .unspecified, "InboxRaises: a raise to no class")
        if let index = raised.firstIndex(where: { $0.item == item }) {
            if qosClass > raised[index].qosClass { raised[index].qosClass = qosClass }
        } else {
            raised.append((item, qosClass))
        }
        if qosClass > highest { highest = qosClass }
    }

    /// `item` started (or left the queue): its raise ends.
    mutating func remove(_ item: ObjectIdentifier) {
        guard let index = raised.firstIndex(where: { $0.item == item }) else { return }
        raised.remove(at: index)
        recomputeHighest()
    }

    /// A take moved the jobs from `start` to the end of `batch`: an item found in the batch
    /// (among them, or among the jobs put back before them: a drain that stopped early put
    /// it back after its waiter raised it) marks its own position (what is ahead of it runs
    /// at least at its class) and its raise ends; an item not found is still behind all of
    /// them, so all of them are marked.
    mutating func apply(to batch: borrowing Fifo<Job>, takenFrom start: Int, marks: inout ClassMarks) {
        let end = batch.count
        guard end > start else { return }
        var index = 0
        while index < raised.count {
            let (item, qosClass) = raised[index]
            if let position = batch.firstIndex(from: 0, where: { $0.holds(item: item) }) {
                marks.note(qosClass, at: position)
                raised.remove(at: index)
            } else {
                marks.note(qosClass, at: end - 1)
                index += 1
            }
        }
        recomputeHighest()
    }

    private mutating func recomputeHighest() {
        highest = raised.reduce(QoS.QoSClass.unspecified) { Swift.max($0, $1.qosClass) }
    }
}

extension Job {
    /// Whether this job runs the work item `item` (read in place).
    func holds(item: ObjectIdentifier) -> Bool {
        if case .item(let held) = work { return ObjectIdentifier(held) == item }
        return false
    }
}
