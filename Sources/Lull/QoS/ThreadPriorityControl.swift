import CLullShims
import Synchronization

/// The nice value of one thread, as its own work and other threads' waits decide it.
///
/// The thread sets the QoS of the work it runs (`setOwn`). Other threads add *overrides*
/// while more important work waits on it — a block queued behind it on a serial queue, a
/// `sync` caller, a `wait` (inversion avoidance). The nice value in force is that of the
/// higher of the two. Every change goes through one lock: two threads moving the same
/// thread's nice value never leave a stale value behind.
///
/// Overrides are counted per class, so that several waiters compose and each takes back
/// exactly its own. Pairing (docs/QoSOverrides.md): every override put on a thread is taken
/// back by whoever put it, with the class it put; a count never goes below zero, and a
/// worker that goes idle carries none (both asserted in debug builds).
final class ThreadPriorityControl: Sendable {
    let tid: Int32
    private let state: Mutex<State>
    /// The rank of the highest override (0: none), for `QoS.current` without the lock.
    private let highestOverrideRank = Atomic<Int>(0)

    private struct State {
        var own: QoS
        /// Overrides in force, per class rank (index 0, unspecified, is unused).
        var overrides = [Int](repeating: 0, count: 6)
        var appliedNice: Int32
        /// Whether Lull has put the thread under SCHED_IDLE (`EnergyPolicy`).
        var appliedIdle = false
        /// The utilization clamps Lull requested last (a thread Lull did not create is
        /// taken to have the kernel's default).
        var appliedClamp = EnergyPolicy.UtilClamp.unclamped
    }

    init(tid: Int32, own: QoS, nice: Int32) {
        self.tid = tid
        state = Mutex(State(own: own, appliedNice: nice))
    }

    /// The class of the highest override in force, if any.
    var overrideClass: QoS.QoSClass? {
        let rank = highestOverrideRank.load(ordering: .relaxed)
        return rank == 0 ? nil : QoS.QoSClass.byRank[rank]
    }

    /// The nice value in force (as far as Lull set it).
    var appliedNice: Int32 {
        get { state.locked { $0.appliedNice } }
        set { state.locked { $0.appliedNice = newValue } }
    }

    /// A new worker of `qosClass` takes its class's policy and clamps, whatever it inherited
    /// from the thread that created it (a background creator's SCHED_IDLE and clamps).
    func startEnergyPolicy(_ qosClass: QoS.QoSClass) {
        state.locked { state in
            if EnergyPolicy.startsIdle(qosClass) {
                state.appliedIdle = EnergyPolicy.setIdle(true, tid: tid)
            } else if lull_get_thread_policy(tid) == LULL_SCHED_IDLE {
                state.appliedIdle = !EnergyPolicy.setIdle(false, tid: tid)
            }
            if EnergyPolicy.utilClampUsable {
                let clamp = EnergyPolicy.utilClamp(for: qosClass)
                if EnergyPolicy.setUtilClamp(clamp, tid: tid) { state.appliedClamp = clamp }
            }
        }
    }

    /// What Lull last applied of the energy policy (tests).
    var appliedEnergyPolicy: (idle: Bool, clamp: EnergyPolicy.UtilClamp) {
        state.locked { ($0.appliedIdle, $0.appliedClamp) }
    }

    /// The thread itself starts running work of `qos`.
    func setOwn(_ qos: QoS) {
        state.locked { state in
            state.own = qos
            apply(&state)
        }
    }

    /// Records `qos` as the thread's own QoS without touching its nice value (a thread that
    /// takes on a role, such as running the main queue).
    func adoptOwn(_ qos: QoS) {
        state.locked { $0.own = qos }
    }

    /// Replaces one override by another (either may be `unspecified`: none); the thread
    /// runs at the highest override in force until each is taken back.
    ///
    /// With `applyingNice: false` the counts change now and the nice value waits for
    /// `applyNice()`: a caller under a spin lock (a queue's) makes no system call there.
    func replaceOverride(_ old: QoS.QoSClass, with new: QoS.QoSClass, applyingNice: Bool = true) {
        guard old != new else { return }
        state.locked { state in
            assert(old == .unspecified || state.overrides[old.rank] > 0,
                   "Lull: a \(old.name) override taken back that was never put on thread \(tid)")
            if old != .unspecified { state.overrides[old.rank] -= 1 }
            if new != .unspecified { state.overrides[new.rank] += 1 }
            let highest = state.overrides.lastIndex { $0 > 0 } ?? 0
            highestOverrideRank.store(highest, ordering: .relaxed)
            if applyingNice { apply(&state) }
        }
    }

    /// Moves the nice value to what the counts ask for now (after `replaceOverride` with
    /// `applyingNice: false`, once the caller's spin lock is released).
    func applyNice() {
        state.locked { apply(&$0) }
    }

    /// True while any override is in force (debug checks: a worker that goes idle has had
    /// every override put on it taken back).
    var hasOverrides: Bool {
        state.locked { state in state.overrides.contains { $0 != 0 } }
    }

    /// Moves the nice value to what the own QoS and the overrides ask for, when the process
    /// may move it back (otherwise a raise would be one-way and nothing moves); and the
    /// scheduling policy and clamps of the class with it (`EnergyPolicy`).
    ///
    /// A thread leaves SCHED_IDLE before its nice value falls: the kernel lets an unprivileged
    /// process out of SCHED_IDLE by the thread's nice value at that moment (RLIMIT_NICE).
    private func apply(_ state: inout State) {
        let highest = highestOverrideRank.load(ordering: .relaxed)
        let target = highest > state.own.qosClass.rank ? QoS(QoS.QoSClass.byRank[highest]) : state.own
        let wantsIdle = EnergyPolicy.movesIntoIdle(target.qosClass)
        let movesIdle = wantsIdle != state.appliedIdle && EnergyPolicy.idleMode != .pinned
        if movesIdle && !wantsIdle {
            state.appliedIdle = !EnergyPolicy.setIdle(false, tid: tid)
        }
        let wanted = ThreadPriority.niceValue(for: target)
        #if DEBUG
        if wanted != state.appliedNice { LockOrder.assertNoSpinLockHeld("setpriority") }
        #endif
        if wanted != state.appliedNice && ThreadPriority.canRaise && lull_set_thread_nice(tid, wanted) == 0 {
            state.appliedNice = wanted
        }
        if movesIdle && wantsIdle {
            state.appliedIdle = EnergyPolicy.setIdle(true, tid: tid)
        }
        let clamp = EnergyPolicy.utilClamp(for: target.qosClass)
        if clamp != state.appliedClamp && EnergyPolicy.utilClampUsable && EnergyPolicy.setUtilClamp(clamp, tid: tid) {
            state.appliedClamp = clamp
        }
    }
}
