import Synchronization

/// The slot table the threads of a run share: each slot holds at most one subject, the
/// program's reference to its source. A step takes a strong reference out under the lock
/// and calls the source after it; releasing the slot's reference (drop, or create's
/// replacement) happens after the lock too, so a source's release never runs under it.
final class StressSlots: Sendable {
    private let slots: Mutex<[StressSubject?]>

    init(count: Int) {
        slots = Mutex(Array(repeating: nil, count: count))
    }

    subscript(slot: Int) -> StressSubject? {
        slots.locked { $0[slot] }
    }

    /// Puts `subject` in the slot; returns the subject it replaced, for the caller to release.
    func replace(_ slot: Int, with subject: StressSubject?) -> StressSubject? {
        slots.locked { slots in
            defer { slots[slot] = subject }
            return slots[slot]
        }
    }

    /// Empties the slot if it still holds `subject`; the reference is released by the caller
    /// (it holds `subject`), after the lock.
    func remove(_ slot: Int, ifHolding subject: StressSubject) {
        let taken = slots.locked { slots -> StressSubject? in
            guard slots[slot] === subject else { return nil }
            defer { slots[slot] = nil }
            return slots[slot]
        }
        _ = taken
    }
}
