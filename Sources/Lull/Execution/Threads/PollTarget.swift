/// What the worker pool's poller polls: the reactor in a program; in a test, a stand-in that
/// the test wakes itself, with the timer engine on a `ManualClock` (as tokio's paused time or
/// NIO's embedded loop let a test drive time). The pool uses nothing else of the reactor.
///
/// The hand-off's rule that the pool relies on (docs/WorkerPool.md, invariant 4): whoever
/// raises the need reads the poller slot after it (`PollerDemand.request`), and the pool
/// reads `needsPoller` after it leaves the slot; both sides are sequentially consistent.
protocol PollTarget: AnyObject, Sendable {
    /// True while there is something to poll for (sequentially consistent).
    var needsPoller: Bool { get }
    /// The timer slack (ns; 0: the thread's default) the poller sleeps with.
    var sleepSlackForPoll: UInt64 { get }
    /// One iteration of the event loop on the calling (polling) worker; true when the timer
    /// expired: the pool then fires the timer engine and calls `timerFireHandled()`.
    func pollOnce() -> Bool
    /// After the pool fired the timer engine for an expiry `pollOnce` reported.
    func timerFireHandled()
}

extension Reactor: PollTarget {}
