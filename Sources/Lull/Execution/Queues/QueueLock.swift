import Synchronization

/// A queue's lock: a spin lock around its `QueueState`, after which the nice values that the
/// section's QoS overrides changed are applied. Overrides are counted under the queue's lock
/// (that is where their pairing is decided, docs/QoSOverrides.md), but `setpriority` is a
/// system call and waits until the lock is released.
///
/// Each section of a serial queue ends by publishing what its producers may decide without
/// the lock (`fastPath`, see `QueueState.fastPathWord` and docs/Queues.md); each section of a
/// concurrent queue, whether its blocks may go straight to its global target
/// (`forwardGate`).
final class QueueLock: Sendable {
    private let lock: SpinFutexLock<QueueState>
    /// Serial: the class up to which a block that finds others waiting needs no lock
    /// (rank, high byte) and the queue's floor (rank, low byte).
    let fastPath = Atomic<UInt16>(0)
    /// Concurrent: the lock-free way of a block to the global target (closed on the others).
    let forwardGate = ForwardGate()

    init(_ state: QueueState) {
        lock = SpinFutexLock(state, rank: .queue)
        // The floor holds from the queue's first block on.
        if state.usesInbox {
            var initial = state
            fastPath.store(initial.fastPathWord(), ordering: .relaxed)
        }
        if state.gatesForwarding {
            var initial = state
            forwardGate.publish(openTo: initial.forwardTarget())
        }
    }

    @inline(__always)
    func locked<Result>(_ body: (inout QueueState) throws -> Result) rethrows -> Result {
        lock.acquire()
        let result: Result
        do {
            result = try body(&lock.guarded)
        } catch {
            releaseApplyingNice()
            throw error
        }
        releaseApplyingNice()
        return result
    }

    /// `locked` for a body that moves `argument` into the state (see `SpinFutexLock`).
    @inline(__always)
    func locked<Argument, Result>(moving argument: consuming Argument,
                                  _ body: (inout QueueState, consuming Argument) throws -> Result) rethrows -> Result {
        lock.acquire()
        let result: Result
        do {
            result = try body(&lock.guarded, argument)
        } catch {
            releaseApplyingNice()
            throw error
        }
        releaseApplyingNice()
        return result
    }

    /// Unlocks, then applies what the section deferred. One level of closure, as a plain
    /// `SpinFutexLock.locked`: a wrapping closure would make the compiler copy the `Job`s
    /// that drains move through their sections.
    @inline(__always)
    private func releaseApplyingNice() {
        if lock.guarded.usesInbox {
            publishFastPath(&lock.guarded)
        } else if lock.guarded.gatesForwarding {
            forwardGate.publish(openTo: lock.guarded.forwardTarget())
        }
        let deferred = lock.guarded.deferredNice.0 == nil ? (nil, nil) : lock.guarded.takeDeferredNice()
        lock.release()
        if deferred.0 != nil { QueueLock.apply(deferred) }
    }

    /// Publishes the section's `fastPathWord` (the state in place: a getter on the guarded
    /// value would copy the whole state), storing only a change.
    @inline(__always)
    private func publishFastPath(_ state: inout QueueState) {
        let word = state.fastPathWord()
        if fastPath.load(ordering: .relaxed) != word { fastPath.store(word, ordering: .sequentiallyConsistent) }
    }

    /// Applies the nice values and lets the controls go (retained while deferred).
    private static func apply(_ deferred: (Unmanaged<ThreadPriorityControl>?, Unmanaged<ThreadPriorityControl>?)) {
        for control in [deferred.0, deferred.1] {
            guard let control else { continue }
            control.takeUnretainedValue().applyNice()
            control.release()
        }
    }
}
