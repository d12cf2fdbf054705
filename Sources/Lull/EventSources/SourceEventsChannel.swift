import Synchronization

/// What an `events` loop, the source's event handler and its cancel step share: the
/// demand of the consuming task, and the source's suspension that stands for its absence.
/// The state model is in docs/EventSources.md, "Events as an async sequence".
///
/// The source runs (is not suspended by the loop) exactly while the consumer waits in
/// `next()`: each delivery suspends the source before it hands its value over, and each
/// `next()` that finds nothing resumes the suspensions the deliveries left. So while the
/// consumer is busy, the source is suspended and its events merge in the core as for any
/// suspended source: memory stays bounded and nothing is lost.
///
/// - `held` counts the loop's `suspend()` calls not yet matched by a `resume()`; only this
///   channel makes them, so they stay balanced whatever the program's own calls are.
/// - `buffered` keeps a value delivered while nobody waits: a delivery posted before the
///   loop's first suspension took effect, or one let through by the program's unmatched
///   `resume()`. Each needs such an event, so the buffer stays small.
/// - The cancel step ends the loop (`sourceFinished`), after the program's cancel handler
///   ran; values buffered before it are still returned first.
/// - The loop's owner going away (`consumerLeft`: the loop ended early) cancels the source
///   and gives back the suspensions, so that the cancel handler runs.
///
/// Lock: `state` is a leaf. Nothing is called on the core while it is held (the core's
/// lock ranks above it, and `resume()` may post a job).
final class SourceEventsChannel: Sendable {
    let core: SourceCore

    private struct State {
        var waiting: UnsafeContinuation<UInt?, Never>?
        var buffered: [UInt] = []
        var held = 0
        var finished: Bool
        var consumerLeft = false
        /// Deliveries made by the handler's job and without one (`SourceCore.post`), for tests.
        var byJob = 0
        var withoutJob = 0
    }

    private let state: Mutex<State>

    init(core: SourceCore, finished: Bool) {
        self.core = core
        state = Mutex(State(finished: finished))
    }

    /// Starts the loop (once, by the iterator that claimed the source): the source is
    /// suspended until the first `next()`, its event handler is the loop's, and it is
    /// activated (nothing if it already was).
    func start() {
        core.suspend()
        let proceed = state.locked { state -> Bool in
            guard !state.finished else { return false }
            state.held += 1
            return true
        }
        // Finished meanwhile: the cancel step ran (it cannot while suspended, so this is the
        // program's unmatched resume()); give the suspension back.
        guard proceed else {
            core.resume()
            return
        }
        core.setEventsLoopHandler(SourceHandler(qos: .unspecified, flags: [], block: { [self] in delivered(core.data, withoutJob: false) }))
        core.activate()
    }

    /// The event handler: one value, merged since the last one. Called by the handler's job
    /// on the source's queue, or (`withoutJob`) by the thread that decided the delivery,
    /// when the queue had nothing else to run (`SourceCore.post`); either way one at a time.
    func delivered(_ value: UInt, withoutJob: Bool) {
        // Suspended before the value is handed over: the consumer's next `next()` resumes,
        // and must never find the source not yet suspended (that would be an over-resume).
        core.suspend()
        let (waiting, undo) = state.locked { state -> (UnsafeContinuation<UInt?, Never>?, Bool) in
            guard !state.finished, !state.consumerLeft else { return (nil, true) }
            state.held += 1
            if withoutJob { state.withoutJob += 1 } else { state.byJob += 1 }
            if let waiting = state.waiting {
                state.waiting = nil
                return (waiting, false)
            }
            state.buffered.append(value)
            return (nil, false)
        }
        if undo { core.resume() }
        waiting?.resume(returning: value)
    }

    /// The consumer's `next()`: a buffered value, nil once finished, or the next delivery.
    /// Cancelling the task cancels the source; the loop then ends when the cancel handler
    /// ran.
    func next(isolation actor: isolated (any Actor)?) async -> UInt? {
        // Fast path: events merged while the body ran are taken here, on the consumer's
        // thread, with the source still suspended — no job, no hand-off between threads.
        let inline = state.locked { state -> (buffered: UInt?, held: Int?) in
            if !state.buffered.isEmpty { return (state.buffered.removeFirst(), nil) }
            guard !state.finished, state.waiting == nil else { return (nil, nil) }
            return (nil, state.held)
        }
        if let buffered = inline.buffered { return buffered }
        if let held = inline.held, held > 0, !Task.isCancelled, let value = core.takeDeliveryInline(loopSuspensions: held) {
            return value
        }
        return await withTaskCancellationHandler {
            await withUnsafeContinuation(isolation: actor) { (continuation: UnsafeContinuation<UInt?, Never>) in
                let (answer, resumes) = state.locked { state -> (UInt??, Int) in
                    if !state.buffered.isEmpty { return (.some(state.buffered.removeFirst()), 0) }
                    // Finished; or a copy of the iterator already waits (one consumer):
                    // this one ends.
                    if state.finished || state.waiting != nil { return (.some(nil), 0) }
                    state.waiting = continuation
                    defer { state.held = 0 }
                    return (nil, state.held)
                }
                if let answer {
                    continuation.resume(returning: answer)
                    return
                }
                for _ in 0..<resumes { core.resume() }
            }
        } onCancel: {
            core.cancel()
        }
    }

    /// Values delivered while nobody waited, not yet taken (for tests: it stays small).
    var bufferedCount: Int { state.locked { $0.buffered.count } }
    /// Deliveries made so far by the handler's job, and without one (for tests).
    var deliveries: (byJob: Int, withoutJob: Int) { state.locked { ($0.byJob, $0.withoutJob) } }
    /// Whether the consumer waits in `next()` (for tests).
    var hasWaitingConsumer: Bool { state.locked { $0.waiting != nil } }

    /// After the cancel handler ran (by the cancel step, once): the loop ends.
    func sourceFinished() {
        let waiting = state.locked { state -> UnsafeContinuation<UInt?, Never>? in
            assert(!state.finished, "an events channel finished twice")
            state.finished = true
            defer { state.waiting = nil }
            return state.waiting
        }
        waiting?.resume(returning: nil)
    }

    /// The loop's iterator went away (the loop ended, or was left early): the source is
    /// cancelled, and the loop's suspensions given back so that its cancel handler runs.
    func consumerLeft() {
        let resumes = state.locked { state -> Int? in
            assert(state.waiting == nil, "an events iterator went away while its next() waited")
            state.consumerLeft = true
            state.buffered = []
            guard !state.finished else { return nil }
            defer { state.held = 0 }
            return state.held
        }
        guard let resumes else { return }
        // Cancelled first: no delivery starts once the suspensions are given back.
        core.cancel()
        for _ in 0..<resumes { core.resume() }
    }
}
