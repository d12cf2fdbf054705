import Synchronization

/// `DirectoryTreeWatcher.changes`: the batches as an asynchronous sequence, with
/// backpressure. While the loop's body runs, the watcher holds its batch back and goes on
/// merging changes into it (per path, as within one batch); the consumer's next `next()`
/// gets everything merged so far at once. A held batch that grows past the watcher's limit
/// becomes `.mustRescan` of the root (the tree stays watched; only the report is collapsed),
/// so memory stays bounded and nothing is dropped silently.
///
/// Iterating activates the watcher. The watcher ends the loop when it is cancelled;
/// cancelling the consuming task, or leaving the loop early, cancels the watcher. The
/// watcher is iterated at most once: a second iteration ends at once.
struct TreeWatcherChanges: AsyncSequence, Sendable {
    let watcher: DirectoryTreeWatcher
    let core: TreeWatcherCore

    func makeAsyncIterator() -> AsyncIterator {
        guard core.changesChannel.claim() else { return AsyncIterator(loop: nil) }
        core.activate()
        return AsyncIterator(loop: TreeWatcherLoop(watcher: watcher, core: core))
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        fileprivate let loop: TreeWatcherLoop?

        mutating func next(isolation actor: isolated (any Actor)? = #isolation) async -> [DirectoryTreeWatcher.Change]? {
            guard let loop else { return nil }
            return await loop.core.nextBatch(isolation: actor)
        }

        mutating func next() async -> [DirectoryTreeWatcher.Change]? {
            await next(isolation: nil)
        }
    }
}

/// The one iteration of a watcher's `changes`, owned by its iterator: keeps the watcher
/// alive while the loop runs, and cancels it when the loop is gone.
private final class TreeWatcherLoop: Sendable {
    let watcher: DirectoryTreeWatcher
    let core: TreeWatcherCore

    init(watcher: DirectoryTreeWatcher, core: TreeWatcherCore) {
        self.watcher = watcher
        self.core = core
    }

    deinit {
        core.cancel()
    }
}

/// The hand-off between the watcher's processing queue and the `changes` loop. The state
/// model is in docs/FileSystem.md, "The tree watcher: changes with backpressure".
///
/// Lock: `state` is a leaf (nothing else is taken, nothing called, while it is held).
final class TreeWatcherChangesChannel: Sendable {
    typealias Change = DirectoryTreeWatcher.Change

    private struct State {
        /// A loop takes the batches: set at the first use of `changes`, so that batches
        /// from then on wait for it.
        var attached = false
        /// Its one iterator was made.
        var claimed = false
        var waiting: UnsafeContinuation<[Change]?, Never>?
        /// The processing queue holds a batch back for the loop.
        var holding = false
        var finished = false
    }

    private let state = Mutex(State())

    /// What the processing queue does with a batch ready to go.
    enum Offer {
        /// No loop: the batch goes to the handler alone.
        case handlerOnly
        /// The loop waits: the batch goes to it (and to the handler).
        case consumer(UnsafeContinuation<[Change]?, Never>)
        /// The loop is busy: keep the batch and merge into it (`holding` is now set, and
        /// the loop's next `next()` asks for a delivery).
        case hold
        /// The loop ended (the watcher is cancelled): the batch is not delivered.
        case finished
    }

    /// The first use of `changes`: batches wait for the loop from now on.
    func attach() {
        state.locked { $0.attached = true }
    }

    /// Claims the one iteration; false for a later one.
    func claim() -> Bool {
        state.locked { state in
            defer { state.claimed = true; state.attached = true }
            return !state.claimed
        }
    }

    /// By the processing queue, with a batch ready.
    func offer() -> Offer {
        state.locked { state in
            if state.finished { return .finished }
            guard state.attached else { return .handlerOnly }
            guard let waiting = state.waiting else {
                state.holding = true
                return .hold
            }
            state.waiting = nil
            return .consumer(waiting)
        }
    }

    /// The loop's `next()`: waits for a batch; true in `requestsDelivery` when a batch was
    /// held back for it (the caller asks the processing queue to deliver it).
    func next(isolation actor: isolated (any Actor)?, requestDelivery: () -> Void) async -> [Change]? {
        await withUnsafeContinuation(isolation: actor) { (continuation: UnsafeContinuation<[Change]?, Never>) in
            let (accepted, deliverHeld) = state.locked { state -> (Bool, Bool) in
                // Finished; or a copy of the iterator already waits (one consumer): this one ends.
                if state.finished || state.waiting != nil { return (false, false) }
                state.waiting = continuation
                defer { state.holding = false }
                return (true, state.holding)
            }
            guard accepted else {
                continuation.resume(returning: nil)
                return
            }
            if deliverHeld { requestDelivery() }
        }
    }

    /// The watcher was cancelled: the loop ends; later batches are not delivered.
    func finish() {
        let waiting = state.locked { state -> UnsafeContinuation<[Change]?, Never>? in
            state.finished = true
            defer { state.waiting = nil }
            return state.waiting
        }
        waiting?.resume(returning: nil)
    }

    /// Whether the loop waits in `next()` (for tests).
    var hasWaitingConsumer: Bool { state.locked { $0.waiting != nil } }
}
