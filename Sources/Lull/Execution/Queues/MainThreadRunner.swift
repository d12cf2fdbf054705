import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Runs the main queue's drains: on the thread inside `WorkQueue.runMain()`, or, once
/// ``hostOnDispatchMainQueue()`` succeeded (`GlobalExecutor.install()` from an async main
/// after its first suspension), as callouts of Dispatch's main queue, which the async
/// main's run loop drains.
///
/// State model (under `state`): `jobs` waits for a drainer. Unhosted, the drainer is the
/// `runMain()` thread, woken by `parker`. Hosted, `calloutPending` is true exactly while one
/// callout is submitted or running and has not yet seen `jobs` empty: `submit` submits a
/// callout only when it flips `calloutPending` from false, and the callout clears it in the
/// same critical section in which it finds `jobs` empty, so no job waits without a callout
/// to come and at most one callout drains at a time. `runMain()` takes the main queue over
/// from a host (`hosted` false): a callout still running stops after its current job.
final class MainThreadRunner: Sendable {
    private struct State {
        var jobs = Fifo<Job>()
        var hosted = false
        var calloutPending = false
        /// A thread is inside `runMain()`: the main queue has its thread for good.
        var runMainStarted = false
    }

    private let state = SpinFutexLock<State>(State(), rank: .mainThreadJobs)
    private let parker = Parker()
    private let started = Atomic<Bool>(false)
    /// The thread inside `runMain()` (0 until one is).
    private let runnerTid = Atomic<Int32>(0)
    /// `state.hosted`, readable without the lock.
    private let hostedNow = Atomic<Bool>(false)

    /// Whether `thread` stands for the main queue when it runs no block: the process's main
    /// thread while no other thread drains the main queue (as on Darwin, where the main
    /// queue is bound to the main thread, code on the main thread is on the main queue);
    /// while Dispatch's main queue hosts the main queue, a thread that runs its callout.
    func representsMainQueue(_ thread: ThreadState) -> Bool {
        if hostRuns(thread) { return true }
        guard thread.tid == getpid() else { return false }
        let runner = runnerTid.load(ordering: .acquiring)
        return runner == 0 || runner == thread.tid
    }

    func submit(_ job: Job) {
        let submitCallout = state.locked { state -> Bool in
            state.jobs.append(job)
            guard state.hosted, !state.calloutPending else { return false }
            state.calloutPending = true
            return true
        }
        if submitCallout { submitDispatchCallout() } else { parker.unpark() }
    }

    /// Makes Dispatch's main queue the main queue's drainer, when the caller runs on it and
    /// no thread is inside `runMain()`: false otherwise, and nothing changes.
    func hostOnDispatchMainQueue() -> Bool {
        guard lull_dispatch_main_queue_is_current() != 0 else { return false }
        let (hosted, submitCallout) = state.locked { state -> (Bool, Bool) in
            guard !state.runMainStarted else { return (false, false) }
            state.hosted = true
            hostedNow.store(true, ordering: .releasing)
            guard !state.jobs.isEmpty, !state.calloutPending else { return (true, false) }
            state.calloutPending = true
            return (true, true)
        }
        if submitCallout { submitDispatchCallout() }
        return hosted
    }

    /// Whether `thread`, which holds no queue, runs a callout of Dispatch's main queue while
    /// that queue hosts the main queue: such code (the async main's own continuations, a
    /// MainActor job enqueued before the install) is serialized with the main queue's drains.
    func hostRuns(_ thread: ThreadState) -> Bool {
        thread.heldQueues.isEmpty && hostedNow.load(ordering: .acquiring) && lull_dispatch_main_queue_is_current() != 0
    }

    /// Whether a thread has entered `runMain()`.
    var hasRunMainThread: Bool {
        state.locked { $0.runMainStarted }
    }

    private func submitDispatchCallout() {
        let context = Unmanaged.passRetained(self).toOpaque()
        let status = lull_dispatch_main_async(context) { context in
            guard let context else { return }
            Unmanaged<MainThreadRunner>.fromOpaque(context).takeRetainedValue().drainAsCallout()
        }
        // The host was found when hosting began, and libdispatch never unloads.
        if status != 0 { lullFatal("Dispatch's main queue disappeared under Lull's main queue") }
    }

    /// One callout of Dispatch's main queue: runs the main queue's jobs until none waits.
    private func drainAsCallout() {
        let thread = ThreadState.current
        while let job = state.locked({ state -> Job? in
            guard state.hosted else { return nil }
            assert(state.calloutPending, "a callout of Dispatch's main queue drains while none is pending")
            if let job = state.jobs.popFirst() { return job }
            state.calloutPending = false
            return nil
        }) {
            JobRunner.run(job, floor: .unspecified, drainQoS: nil, thread: thread)
        }
    }

    func run() -> Never {
        guard started.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else {
            lullFatal("WorkQueue.runMain() called twice: the main queue already has its thread")
        }
        let thread = ThreadState.current
        runnerTid.store(thread.tid, ordering: .releasing)
        state.locked { state in
            state.runMainStarted = true
            state.hosted = false
            hostedNow.store(false, ordering: .releasing)
            state.calloutPending = false
        }
        thread.adoptQoS(.userInteractive)
        while true {
            while let job = state.locked({ $0.jobs.popFirst() }) {
                JobRunner.run(job, floor: .unspecified, drainQoS: nil, thread: thread)
            }
            parker.park()
        }
    }
}
