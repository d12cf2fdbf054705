/// The public entry points of queues that need the process's runtime: the global and main
/// queues, a queue's default target, delayed blocks on the runtime's timer engine, and
/// `concurrentPerform` on its worker pool.
extension WorkQueue {
    /// A serial queue (or with `.concurrent`, a concurrent one) that drains through `target`
    /// (nil: the global queue of `qos`'s class, the default one for `unspecified`).
    public convenience init(label: String, qos: QoS = .unspecified, attributes: Attributes = [],
                            target: WorkQueue? = nil) {
        self.init(label: label, qos: qos, attributes: attributes,
                  resolvedTarget: target ?? Runtime.shared.roots.defaultTarget(for: qos))
    }

    /// The concurrent global queue of a QoS class (`unspecified` gives the default one).
    public static func global(qos: QoS.QoSClass = .default) -> WorkQueue {
        Runtime.shared.roots.global(qos)
    }

    /// The serial queue drained by the thread that calls `runMain()`.
    public static var main: WorkQueue { Runtime.shared.roots.main }

    /// Drains the main queue on the calling thread forever. Call it once, from any thread.
    public static func runMain() -> Never {
        Runtime.shared.roots.mainThread.run()
    }

    /// Submits `work` to run once `deadline` (monotonic clock) has passed, within a leeway
    /// of 10% of the delay (1 ms ... 60 s). Delayed blocks run detached, with the empty
    /// execution context; to carry the current one, submit a `WorkItem` made with
    /// `.assignCurrentContext`. `file` and `line` name its timer in wake-up diagnostics.
    public func asyncAfter(deadline: Deadline, qos: QoS = .unspecified, flags: WorkItemFlags = [],
                           execute work: @escaping @Sendable () -> Void,
                           file: StaticString = #fileID, line: UInt = #line) {
        DelayedWork.schedule(makeDelayedJob(.block(work), qos: qos, flags: flags), on: self, at: deadline,
                             site: TimerSite(file: file, line: line), timers: Runtime.shared.timers)
    }

    /// Submits `work` to run once the wall clock reaches `wallDeadline` (it follows changes
    /// of the system date), within a leeway of 10% of the delay. `file` and `line` name its
    /// timer in wake-up diagnostics.
    public func asyncAfter(wallDeadline: WallDeadline, qos: QoS = .unspecified, flags: WorkItemFlags = [],
                           execute work: @escaping @Sendable () -> Void,
                           file: StaticString = #fileID, line: UInt = #line) {
        DelayedWork.schedule(makeDelayedJob(.block(work), qos: qos, flags: flags), on: self, at: wallDeadline,
                             site: TimerSite(file: file, line: line), timers: Runtime.shared.timers)
    }

    /// Submits `workItem` to run once `deadline` (monotonic clock) has passed, within a
    /// leeway of 10% of the delay. `file` and `line` name its timer in wake-up diagnostics.
    public func asyncAfter(deadline: Deadline, execute workItem: WorkItem,
                           file: StaticString = #fileID, line: UInt = #line) {
        DelayedWork.schedule(makeDelayedJob(for: workItem), on: self, at: deadline,
                             site: TimerSite(file: file, line: line), timers: Runtime.shared.timers)
    }

    /// Makes `queue` (nil: the default global queue for this queue's QoS) the target.
    /// Blocks already handed to the old target finish there; later ones go to the new one.
    /// - Precondition: no cycle, and not on a global queue.
    public func setTarget(queue: WorkQueue?) {
        let roots = Runtime.shared.roots
        guard !isGlobal, kind != .mainThread, self !== roots.main else {
            lullFatal("setTarget(queue:) on the global or main queue '\(label)' is not allowed")
        }
        retarget(to: queue ?? roots.defaultTarget(for: qos))
    }

    /// Runs `execute(0) ... execute(iterations - 1)` in parallel on the calling thread and
    /// the worker pool of the caller's QoS; returns when every iteration has returned.
    public static func concurrentPerform(iterations: Int, execute work: (Int) -> Void) {
        concurrentPerform(iterations: iterations, on: Runtime.shared.pool, execute: work)
    }
}
