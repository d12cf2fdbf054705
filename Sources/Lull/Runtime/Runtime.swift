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
/// Lock order: a thread that holds one of these locks takes only locks further down the
/// list (`LockRank` assigns the ranks; debug builds assert the order at every acquisition):
///
///     descriptor table (Mutex)
///     descriptor mux (Mutex; a new mux holds its lock while it retires its predecessor's)
///     signal hub (Mutex)
///     inotify hub: kernel, then state (Mutexes)
///     source core (Mutex, one per source)
///     queue (SpinFutexLock, one per queue; a queue's lock may be held while its target's is taken)
///     timer engine (SpinFutexLock)
///     reactor timer (Mutex)
///     worker class (SpinFutexLock, one per QoS class)
///     main thread's jobs (SpinFutexLock)
///     a worker's running inline batch (SpinFutexLock, one per worker)
///     diagnostics listener (Mutex)
///     wake-up recorder (SpinFutexLock, taken by diagnostics hooks under any of the above)
///     libevent's base lock (inside libevent)
///
/// No system call and no thread creation happens under a spin lock: the queues, the timer
/// engine and the pool decide under their locks and act after them (the engine arms the
/// reactor after its lock, ordered by generations). The reactor's timer lock is held across
/// `timerfd_settime` and `event_add`: a sleeping lock, the last of ours, it keeps the armed
/// window and the kernel's timer in step. The descriptor table and muxes, the signal hub and
/// the inotify hub's kernel lock are sleeping locks held across the `epoll_ctl`, `sigaction`
/// and `inotify_add_watch` calls whose results they record (docs/EventSources.md and
/// docs/FileSystem.md say why each must).
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
            disarm: { generation in reactor.setTimer(nil, generation: generation) },
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
