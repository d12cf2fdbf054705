import Synchronization

/// The composition root: the one place that builds Lull's services and connects them.
///
/// Every part below receives, at construction, only the capabilities it needs; none reaches
/// another through a global. The layers, bottom to top, are the folders of the library
/// (docs/ARCHITECTURE.md draws them, `scripts/check-layers.py` checks them):
///
///     Support < Time < QoS < Context < Diagnostics < Timers < Reactor
///       < Execution (worker pool and queues) < EventSources < FileSystem < Runtime
///
/// The parts, in the order they are built:
/// 1. the reactor (libevent's base and the reactor's timers);
/// 2. the timer engine, given the reactor's `setTimer` as its `arm` capability and the
///    system clock, and a wall-clock watch on the reactor for wall-clock timers;
/// 3. the worker pool, given the reactor to poll and the engine to fire after each poll;
///    the reactor then gets the pool's poller requests (`PollerDemand`), the one link that
///    points back up, connected before anything can register;
/// 4. the queue services (pool and engine) and the root queues on them (the global queues on
///    the pool, the main queue on the main-thread runner);
/// 5. the source services (the descriptor table with its open-file witness, the signal hub)
///    and the inotify hub, on the reactor and the queues; none opens a descriptor before a
///    source needs one;
/// 6. the diagnostics socket, last, since it registers with the reactor.
///
/// `Runtime.shared` is the process's runtime, with Dispatch's process-wide semantics: the
/// public API's entry points (the files of this folder) use it, and only they do.
///
/// Lock order (a thread holding one may take only those after it; debug builds check it,
/// see `LockOrder`):
///
///     queue state (SpinFutexLock, one per queue)
///       < source core state (Mutex, one per source)
///       < descriptor mux (Mutex) < inotify hub / tree watcher (Mutex)
///       < timer engine (SpinFutexLock)
///       < worker class pool (Mutex, one per QoS class)
///       < reactor timer (Mutex) < diagnostics listener (Mutex)
///       < libevent's base lock (inside libevent)
///
/// No system call and no thread creation happens under a spin lock: the timer engine and
/// the pool decide under their locks and act after them. The reactor's timer lock is held
/// across `timerfd_settime` and `event_add`; it is a sleeping lock and the innermost of ours.
final class Runtime: Sendable {
    /// The process's runtime, built on first use.
    static let shared = Runtime()

    let reactor: Reactor
    let timers: TimerEngine
    let pool: WorkerPool
    let queues: QueueServices
    let roots: RootQueues
    let sources: SourceServices
    let inotify: InotifyHub
    private let wallClockWatch: WallClockWatch

    private init() {
        let reactor = Reactor()
        let clockWatch = WallClockWatchLink()
        let timers = TimerEngine(
            clock: SystemTimerClock(),
            arm: { window, generation in reactor.setTimer(window, generation: generation) },
            watchWallClock: { clockWatch.start() })
        let wallClockWatch = WallClockWatch(reactor: reactor, onChange: { timers.wallClockChanged() })
        clockWatch.connect(wallClockWatch)
        let pool = WorkerPool(reactor: reactor, timers: timers)
        reactor.connect(pool.pollerDemand)
        self.reactor = reactor
        self.timers = timers
        self.pool = pool
        self.wallClockWatch = wallClockWatch
        let queues = QueueServices(pool: pool, timers: timers)
        let roots = RootQueues(services: queues, mainThread: MainThreadRunner())
        queues.connect(roots)
        self.queues = queues
        self.roots = roots
        sources = SourceServices(reactor: reactor)
        inotify = InotifyHub(reactor: reactor, queues: queues)
        reactor.listenForDiagnostics()
    }
}

extension Runtime {
    /// The queue a public entry point was given, or the default-QoS global queue for nil.
    func queue(_ given: WorkQueue?) -> WorkQueue {
        given ?? roots.global(.default)
    }
}

/// The engine's `watchWallClock` capability, connected to the watch once the watch (which
/// needs the engine) exists.
private final class WallClockWatchLink: Sendable {
    private let watch = AtomicLazyReference<WallClockWatch>()

    func connect(_ target: WallClockWatch) {
        _ = watch.storeIfNil(target)
    }

    func start() {
        watch.load()?.start()
    }
}
