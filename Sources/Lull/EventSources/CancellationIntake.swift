import CLullShims
import Synchronization

/// Where sources whose target is a global queue post their cancel step: a lock-free stack
/// of the cores themselves, one per QoS class, emptied by a drain job.
///
/// Cancelling is most of a timeout's life — made, scheduled, cancelled before it fires —
/// and its cancel step is the one hand-off left. Posted as a job, each would cost the
/// cancelling thread the pool's lock, queue and wake-up decision, all on cache lines the
/// workers write too. Here a post is one compare-and-swap while a drain job is active; only the post that
/// finds none active submits one. The drain job moves what was posted to its run list
/// (oldest first), runs the cancel steps one by one, and waits briefly for more before it
/// gives up the role.
///
/// A global queue runs its blocks concurrently, and a cancel handler may block (on I/O, on
/// a lock, on another source's cancel handler): steps waiting behind one that runs longer
/// than `rescueInterval` get another drain job (`checkForStuckSteps`, armed only while steps
/// wait behind a running one, so that an idle program never wakes for it), and none waits
/// behind a blocked handler for longer than about twice that.
///
/// The link between posted cores is the core's `cancellationLink`, a field only the intake
/// reads and writes: the posting thread writes it before the compare-and-swap that
/// publishes the core, a drain job reads it after the exchange that takes the stack, and
/// relinks it under the run list's lock. Only cancel steps whose handler has no QoS of its
/// own come here: they run at the global queue's class, as their job would have.
///
/// State model (the states, transitions and why each invariant holds are in
/// docs/CancellationIntake.md):
/// - `posted` is the stack's top and the *active* bit: a post pushes with the bit set; a
///   drain job takes the whole stack with one exchange and ends only with a
///   compare-and-swap from exactly "active, empty" to 0.
/// - A core is *posted* (in the stack), *queued* (in the run list), *taken* (owned by the
///   one drain job that popped it), *running* its cancel step, then *done* (released).
/// - Invariants: a non-empty stack has the active bit; while the bit is set a drain job is
///   alive or being started, and it empties the stack before it ends (no lost wake-up);
///   each core is posted once, in one place at a time, run once (its link says whether it
///   is unlinked, linked or taken, and debug builds assert it); a drain job is started by the
///   post that sets the bit (at most one more than drain jobs ended) or by the rescue check
///   when every live drain job is inside a cancel step; a step waiting behind a running one
///   always has the check armed (post and drain job see each other's write: both sides
///   sequentially consistent).
final class CancellationIntake: PostedWork, @unchecked Sendable {  // Sendable: every stored property is a `let` of a Sendable type (atomics, mutexes)
    private static let intakes: [CancellationIntake] = QoS.QoSClass.schedulable.map { CancellationIntake(qosClass: $0) }

    static func intake(for qosClass: QoS.QoSClass) -> CancellationIntake {
        intakes[qosClass.poolIndex]
    }

    let qosClass: QoS.QoSClass
    /// The global queue of `qosClass` the drain jobs run on, bound by the first post (the
    /// queue of the posted source): the runtime's, which lives as long as the process.
    private let root = AtomicLazyReference<WorkQueue>()
    /// `root` is set: a post checks this word, not the reference (no reference count shared
    /// by every posting thread).
    private let rootBound = Atomic<Bool>(false)
    /// The posted cores, newest first (retained pointers linked through `cancellationLink`), and in
    /// bit 0 (objects are aligned) whether a drain job is active.
    private let posted = Atomic<UInt>(0)
    private static let active: UInt = 1
    /// Taken from `posted`, not run yet: oldest first. Only drain jobs touch it.
    private let runList = Mutex<(first: UInt, last: UInt)>((0, 0))
    /// Cancel steps run so far: the stuck-step check's measure of progress.
    private let completed = Atomic<UInt64>(0)
    /// Cancel steps running now (drain jobs in a cancel handler).
    private let stepsRunning = Atomic<Int>(0)
    /// Drain jobs started and not ended (queued on the pool or running): those not in a
    /// cancel step are free to take waiting steps, and the rescue check leaves them to it.
    private let drainJobs = Atomic<Int>(0)
    private let checkArmed = Atomic<Bool>(false)
    /// `completed` when the armed check was armed.
    private let completedAtArm = Atomic<UInt64>(0)
    #if DEBUG
    /// Drain jobs started by a post that found the active bit clear, less drain jobs that
    /// ended (counted just before the compare-and-swap that clears the bit, taken back if it
    /// fails): never above 1. One word, so that each read is one consistent count.
    private let postStartsLessEnds = Atomic<Int>(0)
    #endif

    /// How long an active drain job waits for more posts (pause instructions, tens of
    /// microseconds) before it ends: a thread cancelling timers one after another keeps it.
    private static let idleSpins = 1_000
    /// How long steps may wait behind a running one before another drain job takes them.
    static let rescueInterval: UInt64 = 2_000_000

    #if DEBUG
    /// Tests only: runs on a drain job between taking a step and counting it as running.
    static let stepTaken = Mutex<(@Sendable (SourceCore) -> Void)?>(nil)
    #endif

    /// A core's `cancellationLink` before it is posted: not a pointer (objects are aligned),
    /// nor 0, which ends a list.
    static let unlinked: UInt = 1
    /// A core's `cancellationLink` once a drain job took it: posted once, run once.
    private static let taken: UInt = 3

    private init(qosClass: QoS.QoSClass) {
        self.qosClass = qosClass
    }

    /// Posts `core`'s cancel step (`postedStep` already says so); the intake holds the core
    /// until the step has run.
    func post(_ core: SourceCore) {
        assert(core.cancellationLink == CancellationIntake.unlinked, "\(core.name): cancel step posted twice")
        if !rootBound.load(ordering: .acquiring) {
            _ = root.storeIfNil(core.target)
            rootBound.store(true, ordering: .releasing)
        }
        assert(root.load() === core.target, "cancellation intake: sources of two runtimes post to one intake")
        let node = UInt(bitPattern: Unmanaged.passRetained(core).toOpaque())
        var old = posted.load(ordering: .relaxed)
        while true {
            core.cancellationLink = old & ~CancellationIntake.active
            // Sequentially consistent, as the drain job's count of running steps and its
            // look at this word after it: one of the two sees the other (see `drain`).
            let (exchanged, original) = posted.compareExchange(
                expected: old, desired: node | CancellationIntake.active,
                successOrdering: .sequentiallyConsistent, failureOrdering: .relaxed)
            if exchanged { break }
            old = original
        }
        if old & CancellationIntake.active == 0 {
            #if DEBUG
            let surplus = postStartsLessEnds.add(1, ordering: .relaxed).newValue
            assert(surplus <= 1, "cancellation intake: a post started a drain job while one was active")
            #endif
            startDrainJob()
        } else if stepsRunning.load(ordering: .sequentiallyConsistent) > 0 {
            armStuckStepCheck()  // this step waits behind a running one
        }
    }

    private func startDrainJob() {
        drainJobs.add(1, ordering: .relaxed)
        rootQueue.enqueue(
            Job(work: .posted(self), qos: QoS(qosClass), flags: [], context: .empty, group: nil))
    }

    /// The bound global queue (a post binds it before anything needs it).
    private var rootQueue: WorkQueue {
        guard let root = root.load() else { lullFatal("cancellation intake: used before a post bound its queue") }
        return root
    }

    override func performPostedWork() {
        drain()
    }

    /// The drain job (on the global queue of the class, at its QoS). Several may run at
    /// once after a rescue; each ends when it finds nothing posted and nothing to run.
    func drain() {
        assert(drainJobs.load(ordering: .relaxed) > 0, "cancellation intake: a drain job that was not counted")
        while true {
            if let (core, othersQueued) = nextStep() {
                #if DEBUG
                if let hook = CancellationIntake.stepTaken.locked({ $0 }) { hook(core) }
                #endif
                stepsRunning.add(1, ordering: .sequentiallyConsistent)
                // A post that has not seen this step counted pushed before this look.
                if othersQueued || posted.load(ordering: .sequentiallyConsistent) & ~CancellationIntake.active != 0 {
                    armStuckStepCheck()
                }
                core.runPostedStep()
                stepsRunning.subtract(1, ordering: .relaxed)
                completed.add(1, ordering: .releasing)
                continue
            }
            var spins = 0
            while posted.load(ordering: .relaxed) == CancellationIntake.active && spins < CancellationIntake.idleSpins {
                lull_cpu_relax()
                spins += 1
            }
            let taken = posted.exchange(CancellationIntake.active, ordering: .acquiringAndReleasing) & ~CancellationIntake.active
            if taken != 0 {
                append(newestFirst: taken)
                continue
            }
            if runList.locked({ $0.first == 0 }) {
                #if DEBUG
                postStartsLessEnds.subtract(1, ordering: .relaxed)
                #endif
                if posted.compareExchange(expected: CancellationIntake.active, desired: 0,
                                          ordering: .acquiringAndReleasing).exchanged {
                    drainJobs.subtract(1, ordering: .relaxed)
                    return
                }
                #if DEBUG
                postStartsLessEnds.add(1, ordering: .relaxed)
                #endif
            }
        }
    }

    /// Takes the oldest step of the run list, and whether more wait behind it there.
    private func nextStep() -> (SourceCore, othersQueued: Bool)? {
        let (first, rest) = runList.locked { list -> (UInt, UInt) in
            let first = list.first
            guard first != 0 else { return (0, 0) }
            let rest = Self.core(at: first).cancellationLink
            list.first = rest
            if rest == 0 { list.last = 0 }
            return (first, rest)
        }
        guard first != 0 else { return nil }
        let core = Unmanaged<SourceCore>.fromOpaque(UnsafeRawPointer(bitPattern: first)!).takeRetainedValue()
        core.cancellationLink = CancellationIntake.taken
        return (core, rest != 0)
    }

    /// Appends a list taken from `posted` (newest first) to the run list, oldest first.
    private func append(newestFirst: UInt) {
        var oldestFirst: UInt = 0
        var next = newestFirst
        let last = newestFirst
        while next != 0 {
            let core = Self.core(at: next)
            let following = core.cancellationLink
            assert(following != CancellationIntake.unlinked && following != CancellationIntake.taken,
                   "\(core.name): linked in the intake but not posted")
            core.cancellationLink = oldestFirst
            oldestFirst = next
            next = following
        }
        runList.locked { list in
            if list.last != 0 {
                Self.core(at: list.last).cancellationLink = oldestFirst
            } else {
                list.first = oldestFirst
            }
            list.last = last
        }
    }

    /// Steps wait behind the one about to run: look again in `rescueInterval`.
    private func armStuckStepCheck() {
        // Sequentially consistent, as the check's clearing of the flag and its look at the
        // stack after it: a post that finds the check still armed is seen by that check.
        guard !checkArmed.load(ordering: .sequentiallyConsistent),
              !checkArmed.exchange(true, ordering: .sequentiallyConsistent) else { return }
        completedAtArm.store(completed.load(ordering: .acquiring), ordering: .relaxed)
        DelayedWork.scheduleHousekeeping(at: SystemClock.monotonicNanoseconds() + CancellationIntake.rescueInterval,
                                         on: rootQueue.services.timers) {
            [self] in checkForStuckSteps()
        }
    }

    /// Starts another drain job if steps still wait, none ran since the check was armed and
    /// every live drain job is inside a cancel step (blocked or slow); looks again later if
    /// steps wait but ran, or a drain job is free to take them.
    private func checkForStuckSteps() {
        checkArmed.store(false, ordering: .sequentiallyConsistent)
        let waiting = posted.load(ordering: .sequentiallyConsistent) & ~CancellationIntake.active != 0
            || runList.locked { $0.first != 0 }
        guard waiting else { return }
        let progressed = completed.load(ordering: .acquiring) != completedAtArm.load(ordering: .relaxed)
        // Read apart, the two may be skewed by a step starting or ending between the reads:
        // at worst one drain job more is started, which finds nothing and ends.
        let freeDrainJobs = drainJobs.load(ordering: .acquiring) - stepsRunning.load(ordering: .acquiring)
        if !progressed && freeDrainJobs <= 0 {
            startDrainJob()
        } else {
            armStuckStepCheck()
        }
    }

    /// Nothing posted, queued or running, and no drain job alive (for tests).
    var isIdle: Bool {
        posted.load(ordering: .acquiring) == 0 && runList.locked { $0.first == 0 }
            && drainJobs.load(ordering: .acquiring) == 0 && stepsRunning.load(ordering: .acquiring) == 0
    }

    private static func core(at bits: UInt) -> SourceCore {
        Unmanaged<SourceCore>.fromOpaque(UnsafeRawPointer(bitPattern: bits)!).takeUnretainedValue()
    }
}
