import CLullShims
import Synchronization

/// Where sources whose target is a global queue post their cancel step: a lock-free stack
/// of the cores themselves, one per QoS class, emptied by a drain job.
///
/// Cancelling is most of a timeout's life — made, scheduled, cancelled before it fires —
/// and its cancel step is the one hand-off left. Posted as a job, each cost the cancelling
/// thread the pool's lock, queue and wake-up decision, all on cache lines the workers write
/// too. Here a post is one compare-and-swap while a drain job is active; only the post that
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
/// The link between posted cores is the core's `deadline`: a source whose cancel step is
/// posted is out of the timer engine for good (a timer is unregistered before its cancel
/// step is decided, and a cancelled timer ignores `schedule`), so nothing else reads or
/// writes that field any more. Only cancel steps whose handler has no QoS of its own come
/// here: they run at the global queue's class, as their job would have.
final class CancellationIntake: Sendable {
    private static let intakes: [CancellationIntake] = QoS.QoSClass.schedulable.map { CancellationIntake(qosClass: $0) }

    static func intake(for qosClass: QoS.QoSClass) -> CancellationIntake {
        intakes[qosClass.poolIndex]
    }

    let qosClass: QoS.QoSClass
    /// The posted cores, newest first (retained pointers linked through `deadline`), and in
    /// bit 0 (objects are aligned) whether a drain job is active.
    private let posted = Atomic<UInt>(0)
    private static let active: UInt = 1
    /// Taken from `posted`, not run yet: oldest first. Only drain jobs touch it.
    private let runList = Mutex<(first: UInt, last: UInt)>((0, 0))
    /// Cancel steps run so far: the stuck-step check's measure of progress.
    private let completed = Atomic<UInt64>(0)
    /// Cancel steps running now (drain jobs in a cancel handler).
    private let stepsRunning = Atomic<Int>(0)
    private let checkArmed = Atomic<Bool>(false)
    /// `completed` when the armed check was armed.
    private let completedAtArm = Atomic<UInt64>(0)

    /// How long an active drain job waits for more posts (pause instructions, tens of
    /// microseconds) before it ends: a thread cancelling timers one after another keeps it.
    private static let idleSpins = 1_000
    /// How long steps may wait behind a running one before another drain job takes them.
    static let rescueInterval: UInt64 = 2_000_000

    private init(qosClass: QoS.QoSClass) {
        self.qosClass = qosClass
    }

    /// Posts `core`'s cancel step (`postedStep` already says so); the intake holds the core
    /// until the step has run.
    func post(_ core: SourceCore) {
        let node = UInt(bitPattern: Unmanaged.passRetained(core).toOpaque())
        var old = posted.load(ordering: .relaxed)
        while true {
            core.deadline = UInt64(old & ~CancellationIntake.active)
            let (exchanged, original) = posted.compareExchange(
                expected: old, desired: node | CancellationIntake.active, ordering: .acquiringAndReleasing)
            if exchanged { break }
            old = original
        }
        if old & CancellationIntake.active == 0 {
            startDrainJob()
        } else if stepsRunning.load(ordering: .relaxed) > 0 {
            armStuckStepCheck()  // this step waits behind a running one
        }
    }

    private func startDrainJob() {
        WorkQueue.global(qos: qosClass).enqueue(
            Job(work: .cancellations(qosClass), qos: QoS(qosClass), flags: [], context: .empty, group: nil))
    }

    /// The drain job (on the global queue of the class, at its QoS). Several may run at
    /// once after a rescue; each ends when it finds nothing posted and nothing to run.
    func drain() {
        while true {
            if let (core, othersWait) = nextStep() {
                stepsRunning.add(1, ordering: .relaxed)
                if othersWait { armStuckStepCheck() }
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
            if runList.locked({ $0.first == 0 }),
               posted.compareExchange(expected: CancellationIntake.active, desired: 0, ordering: .acquiringAndReleasing).exchanged {
                return
            }
        }
    }

    /// Takes the oldest step of the run list, and whether more wait behind it.
    private func nextStep() -> (SourceCore, othersWait: Bool)? {
        let (first, rest) = runList.locked { list -> (UInt, UInt) in
            let first = list.first
            guard first != 0 else { return (0, 0) }
            let rest = UInt(Self.core(at: first).deadline)
            list.first = rest
            if rest == 0 { list.last = 0 }
            return (first, rest)
        }
        guard first != 0 else { return nil }
        let core = Unmanaged<SourceCore>.fromOpaque(UnsafeRawPointer(bitPattern: first)!).takeRetainedValue()
        core.deadline = .max
        return (core, rest != 0)
    }

    /// Appends a list taken from `posted` (newest first) to the run list, oldest first.
    private func append(newestFirst: UInt) {
        var oldestFirst: UInt = 0
        var next = newestFirst
        let last = newestFirst
        while next != 0 {
            let core = Self.core(at: next)
            let following = UInt(core.deadline)
            core.deadline = UInt64(oldestFirst)
            oldestFirst = next
            next = following
        }
        runList.locked { list in
            if list.last != 0 {
                Self.core(at: list.last).deadline = UInt64(oldestFirst)
            } else {
                list.first = oldestFirst
            }
            list.last = last
        }
    }

    /// Steps wait behind the one about to run: look again in `rescueInterval`.
    private func armStuckStepCheck() {
        guard !checkArmed.load(ordering: .relaxed), !checkArmed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        completedAtArm.store(completed.load(ordering: .acquiring), ordering: .relaxed)
        DelayedWork.scheduleHousekeeping(at: SystemClock.monotonicNanoseconds() + CancellationIntake.rescueInterval) {
            [self] in checkForStuckSteps()
        }
    }

    /// Starts another drain job if steps still wait and none ran since the check was armed
    /// (the running one is blocked or slow); looks again later if steps wait but ran.
    private func checkForStuckSteps() {
        checkArmed.store(false, ordering: .releasing)
        let waiting = runList.locked { $0.first != 0 } || posted.load(ordering: .acquiring) & ~CancellationIntake.active != 0
        guard waiting else { return }
        if completed.load(ordering: .acquiring) == completedAtArm.load(ordering: .relaxed) {
            startDrainJob()
        } else {
            armStuckStepCheck()
        }
    }

    private static func core(at bits: UInt) -> SourceCore {
        Unmanaged<SourceCore>.fromOpaque(UnsafeRawPointer(bitPattern: bits)!).takeUnretainedValue()
    }
}
