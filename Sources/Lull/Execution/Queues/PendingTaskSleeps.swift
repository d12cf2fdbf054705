import CLullShims
import Synchronization

/// The `Task.sleep` timers of Lull's executors by the task that sleeps, so that a sleep
/// that its task's cancellation ended takes its timer out at once.
///
/// What the runtime does (Swift 6.2 and 6.3, `Task._sleep` in the standard library's
/// Concurrency module): a sleep keeps a state word (not started, the continuation,
/// finished, cancelled) and creates a second, unstructured task, the *wake task*, whose one
/// job resumes the continuation; it hands that job to the current scheduling executor's
/// `enqueue(_:at:tolerance:clock:)` and suspends. A cancellation moves the word to
/// `cancelled` and resumes the sleeping task with `CancellationError` itself; the wake
/// task stays scheduled, and when it runs it only frees the word. The runtime never tells
/// the executor: left alone, a cancelled one-hour sleep keeps its timer for the hour and
/// wakes the process at its end.
///
/// What tells Lull: a sleeping task is resumed only by its wake job or by its cancellation,
/// and a resumed task comes back to an executor as a job whose address is the task's. So
/// when one of Lull's executors (the pool's, the main queue's, a queue) receives a job of a
/// task whose sleep timer is still pending, that sleep was cancelled: the timer comes out
/// and the wake job runs right away (it frees the word; its task ends). No timer is left,
/// no wake-up spent, and the wake job still runs exactly once. The wake job runs early only
/// after the task came back, which the runtime does only after its cancellation handler
/// moved the word to `cancelled`: the sleep throws as it must. A cancellation that resumes
/// the continuation before the task has suspended causes no enqueue: that sleep's mapping
/// stays until the task's next enqueue or sleep (or the timer) ends it.
///
/// State model, per sleep (`TaskSleepEntry`, one atomic flag):
///
///     pending ──fire (the engine)─────────────────▶ done: the wake job goes to its queue
///        └─────the task came back (cancellation)──▶ done: timer out, the wake job goes now
///
/// The compare-and-swap out of `pending` decides which of the two (racing on any threads)
/// enqueues the wake job; the other does nothing. The map from task to sleep changes under
/// its shard's lock: `register` before the entry is in the engine; the fire removes its own
/// mapping before it enqueues the wake job (which resumes the task, whose enqueue then
/// finds nothing); a task that comes back removes the mapping it finds.
///
/// A task resumed onto a default actor comes back through the actor's own job, not its
/// own: its cancelled sleep keeps its timer to the deadline (as on the default executor),
/// or until a task at the same address (that one again, or a later one) is enqueued or
/// sleeps, which ends it then. That is right: a task that runs is not in that sleep.
final class PendingTaskSleeps: Sendable {
    /// The process's sleeps: task addresses are process-wide.
    static let shared = PendingTaskSleeps()

    /// A part of the map, under its own lock (a leaf).
    private final class Shard: Sendable {
        let map = Mutex<[UInt: TaskSleepEntry]>([:])
    }

    private static let shardCount = 16
    private let shards: [Shard]
    /// How many tasks have a mapped sleep: the executors' check costs one load while none.
    private let mapped = Atomic<Int>(0)

    init() {
        shards = (0..<PendingTaskSleeps.shardCount).map { _ in Shard() }
    }

    private func shard(_ task: UInt) -> Shard {
        // Tasks are 16-byte aligned allocations of a few hundred bytes.
        shards[Int(truncatingIfNeeded: (task >> 4) ^ (task >> 10)) & (PendingTaskSleeps.shardCount - 1)]
    }

    /// Maps `entry`'s task to it, before the entry goes into the engine. A sleep still
    /// mapped to the task is over (the task runs): it ends now.
    func register(_ entry: TaskSleepEntry) {
        let previous = shard(entry.task).map.locked { map -> TaskSleepEntry? in
            let previous = map.updateValue(entry, forKey: entry.task)
            if previous == nil { mapped.add(1, ordering: .sequentiallyConsistent) }
            return previous
        }
        previous?.endEarly()
    }

    /// A job of `task` came to one of Lull's executors: a sleep of it still pending ends now.
    /// Called before the job is enqueued: once a worker may run it, the task may be in a
    /// new sleep of its own, which this must not end.
    @inline(__always)
    func taskEnqueued(_ job: UnownedJob) {
        guard mapped.load(ordering: .sequentiallyConsistent) > 0 else { return }
        endSleep(ofTask: unsafeBitCast(job, to: UInt.self))
    }

    /// Ends the pending sleep of `task`, if it has one.
    func endSleep(ofTask task: UInt) {
        let entry = shard(task).map.locked { map -> TaskSleepEntry? in
            guard let entry = map.removeValue(forKey: task) else { return nil }
            mapped.subtract(1, ordering: .relaxed)
            return entry
        }
        entry?.endEarly()
    }

    /// The engine fired `entry`: its mapping goes, if it is still its task's.
    func remove(_ entry: TaskSleepEntry) {
        shard(entry.task).map.locked { map in
            guard map[entry.task] === entry else { return }
            map[entry.task] = nil
            mapped.subtract(1, ordering: .relaxed)
        }
    }

    /// How many sleeps are mapped (tests and diagnostics).
    var count: Int { mapped.load(ordering: .relaxed) }
}

/// One `Task.sleep` of a task on Lull's executors: its wake job, enqueued on `queue` by the
/// engine's fire or, when the task came back first, by `endEarly` (see `PendingTaskSleeps`).
final class TaskSleepEntry: TimerEntry, @unchecked Sendable {  // Sendable: `heapFields` follows `TimerEntry`'s rule; the rest is immutable or atomic
    @exclusivity(unchecked) var heapFields = TimerHeapFields()  // the engine's lock keeps accesses apart
    let queue: WorkQueue
    let job: Job
    /// The sleeping task's address.
    let task: UInt
    private let timers: TimerEngine
    private let sleeps: PendingTaskSleeps
    /// pending (false) → done (true), once.
    private let done = Atomic<Bool>(false)

    init(queue: WorkQueue, job: Job, task: UInt, timers: TimerEngine, sleeps: PendingTaskSleeps) {
        self.queue = queue
        self.job = job
        self.task = task
        self.timers = timers
        self.sleeps = sleeps
    }

    /// pending → done; true for the one caller that moved it.
    private func claim() -> Bool {
        done.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
    }

    func fired(sequence: UInt32, deadline: UInt64, now: UInt64) {
        guard claim() else { return }
        sleeps.remove(self)
        queue.enqueue(job)
    }

    /// The task came back before the fire (its sleep was cancelled): the timer comes out
    /// and the wake job (which frees the sleep's state) goes now. The caller has taken the
    /// mapping out.
    func endEarly() {
        guard claim() else { return }
        timers.cancel(self)
        queue.enqueue(job)
    }
}

extension TaskSleepEntry: DiagnosedTimer {
    /// All sleeps of tasks are one timer in wake-up reports, per queue and QoS class.
    func diagnosticsOrigin() -> (TimerFireOrigin, interval: UInt64?) {
        let qos = job.qos.qosClass == .unspecified ? QoS.QoSClass.default : job.qos.qosClass
        return (TimerFireOrigin(identity: "Task.sleep", queue: queue.label, qos: qos, instance: 0), nil)
    }
}
