import Synchronization

/// The worker/poller hand-off: who polls the reactor, or who has been asked to, in one
/// atomic word (docs/WorkerPool.md).
///
/// States (`token` names one worker, `Worker.token`):
/// - `vacant`: no worker polls and no request is outstanding.
/// - `requested(token)`: `WorkerPool.ensurePoller` claimed that worker (took it off its idle
///   stack, or is starting it) to poll. The request and its designee are published by one
///   compare-and-exchange, made under the class lock of the claim, so that the worker sees
///   both together the next time it takes that lock.
/// - `polling(token)`: that worker polls (the leader slot).
///
/// Transitions:
/// - `vacant → requested(t)`: `ensurePoller`, under the class lock of worker t.
/// - `requested(t) → vacant`: worker t answering (it then looks at the need like any
///   worker), or the starter of t when its thread cannot be created.
/// - `vacant → polling(t)`: worker t, finding a need and the slot vacant.
/// - `polling(t) → vacant`: worker t, after its poll.
///
/// Invariants (asserted in debug builds):
/// - At most one poller: `polling` is entered only from `vacant`, by compare-and-exchange.
/// - Only the worker a state names leaves it (the starter of a thread that never ran, too).
/// - A request is always answered: its designee is off every idle stack, counted running,
///   and looks at the slot first thing under its class lock; it never parks while named.
///
/// Every access is sequentially consistent, as the reactor's interest count is: a worker
/// that leaves the slot then reads the interest, and `ensurePoller` that raised the interest
/// then reads the slot, so that one of the two always sees the other (no lost poller).
final class PollerSlot: Sendable {
    enum Phase: UInt64 {
        case vacant = 0
        case requested = 1
        case polling = 2
    }

    struct State: Equatable, CustomStringConvertible {
        let phase: Phase
        let token: UInt64

        static let vacant = State(phase: .vacant, token: 0)

        static func requested(_ token: UInt64) -> State { State(phase: .requested, token: token) }
        static func polling(_ token: UInt64) -> State { State(phase: .polling, token: token) }

        init(phase: Phase, token: UInt64) {
            self.phase = phase
            self.token = token
        }

        init(word: UInt64) {
            phase = Phase(rawValue: word & 3) ?? .vacant
            token = word >> 2
        }

        var word: UInt64 { phase.rawValue | token << 2 }

        var description: String {
            switch phase {
            case .vacant: "vacant"
            case .requested: "requested(\(token))"
            case .polling: "polling(\(token))"
            }
        }
    }

    private let word = Atomic<UInt64>(0)

    var state: State { State(word: word.load(ordering: .sequentiallyConsistent)) }

    var isVacant: Bool { state == .vacant }
    var isPolling: Bool { state.phase == .polling }

    /// `vacant → requested(token)`; false if the slot was not vacant.
    func request(for token: UInt64) -> Bool {
        transition(from: .vacant, to: .requested(token))
    }

    /// `vacant → polling(token)`; false if the slot was not vacant.
    func take(for token: UInt64) -> Bool {
        transition(from: .vacant, to: .polling(token))
    }

    /// `requested(token) → vacant`: the designee answers, or its thread never started.
    func withdraw(for token: UInt64) {
        let answered = transition(from: .requested(token), to: .vacant)
        assert(answered, "Lull: poller request withdrawn by a thread it does not name (\(state), token \(token))")
    }

    /// `polling(token) → vacant`: the poller gives up the slot.
    func release(for token: UInt64) {
        let released = transition(from: .polling(token), to: .vacant)
        assert(released, "Lull: poller slot released by a worker that does not hold it (\(state), token \(token))")
    }

    /// True when the slot names this worker (as its designee or its poller).
    func names(_ token: UInt64) -> Bool {
        state.token == token
    }

    private func transition(from old: State, to new: State) -> Bool {
        word.compareExchange(expected: old.word, desired: new.word, ordering: .sequentiallyConsistent).exchanged
    }
}
