import CLullShims
import Glibc
import Testing
@testable import Lull

/// One thread's scheduling as the kernel reports it: /proc/self/task/<tid>/stat, and
/// /proc/<tid>/timerslack_ns (the thread's own; only the per-process directory has the
/// file, and the kernel lets a thread read another's slack only with CAP_SYS_NICE).
struct KernelScheduling: Equatable, Sendable, CustomStringConvertible {
    /// `stat` field 41 (0 SCHED_OTHER, 5 SCHED_IDLE).
    let policy: Int32
    /// `stat` field 19.
    let nice: Int32
    /// `timerslack_ns`, nil where it cannot be read (another thread, without CAP_SYS_NICE).
    let timerSlack: UInt64?

    static let schedOther: Int32 = 0
    static let schedIdle: Int32 = 5

    var description: String { "policy \(policy), nice \(nice), slack \(timerSlack.map { "\($0) ns" } ?? "unknown")" }

    /// Reads thread `tid` of this process; nil if it cannot be read (it exited).
    static func read(_ tid: Int32) -> KernelScheduling? {
        guard let stat = readProc("/proc/self/task/\(tid)/stat"),
              let close = stat.lastIndex(of: ")") else { return nil }
        let slack = readProc("/proc/\(tid)/timerslack_ns").flatMap { UInt64($0.filter(\.isNumber)) }
        // After "tid (comm)" come fields 3, 4, ...: field n is at index n - 3.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 38, let nice = Int32(fields[16]), let policy = Int32(fields[38]) else { return nil }
        return KernelScheduling(policy: policy, nice: nice, timerSlack: slack)
    }

    static func readProc(_ path: String) -> String? {
        var length: UInt = 0
        var text: UnsafeMutablePointer<CChar>?
        guard lull_read_small_file(path, &text, &length) == 0, let text else { return nil }
        defer { lull_free(text) }
        return String(decoding: UnsafeRawBufferPointer(start: text, count: Int(length)), as: UTF8.self)
    }

    /// The calling thread.
    static func current() -> KernelScheduling? { read(lull_gettid()) }
}

/// What this process's rights and environment make of the energy policy, worked out by the
/// kernel's rules independently of the runtime.
enum ExpectedEnergy {
    /// `LULL_BACKGROUND_SCHED_IDLE` does not turn SCHED_IDLE off.
    static let schedIdleOn: Bool = {
        guard let value = getenv("LULL_BACKGROUND_SCHED_IDLE").map({ String(cString: $0) }) else { return true }
        return !["0", "off", "no", "false"].contains(value.lowercased())
    }()

    /// A thread may leave SCHED_IDLE: CAP_SYS_NICE, or RLIMIT_NICE >= 20 - the background nice.
    static let idleReversible: Bool = {
        let allowance = NiceAllowance.current
        return allowance.privileged || allowance.niceLimit >= UInt64(max(0, 20 - allowance.nice(for: .background)))
    }()

    /// The kernel has utilization clamping (CONFIG_UCLAMP_TASK adds these sysctls).
    static let utilClamp = access("/proc/sys/kernel/sched_util_clamp_max", F_OK) == 0

    static func policy(_ qosClass: QoS.QoSClass) -> Int32 {
        qosClass == .background && schedIdleOn ? KernelScheduling.schedIdle : KernelScheduling.schedOther
    }

    static func timerSlack(_ qosClass: QoS.QoSClass) -> UInt64 {
        switch qosClass {
        case .utility: 10_000_000
        case .background: 100_000_000
        default: TimerSlack.threadDefault
        }
    }
}

/// Runs `submit` with a block that reads its own thread from /proc, and waits for the reading.
func kernelScheduling(of submit: (@escaping @Sendable () -> Void) -> Void) -> KernelScheduling? {
    let seen = Captured<KernelScheduling>()
    submit { if let reading = KernelScheduling.current() { seen.set(reading) } }
    return seen.await()
}

extension LullSuite {
    /// QoS classes as Linux energy policy: the scheduling policy, the nice value, the timer
    /// slack and the utilization clamps each class's threads run with, read back from the kernel.
    @Suite struct QoSEnergyTests {
        @Test(arguments: schedulableClasses)
        func aBlockRunsWithItsClasssPolicyNiceValueAndTimerSlack(_ qosClass: QoS.QoSClass) {
            let queue = WorkQueue(label: "lull.test.energy.class", qos: QoS(qosClass: qosClass, relativePriority: 0))
            let seen = kernelScheduling { queue.async(execute: $0) }
            #expect(seen == KernelScheduling(policy: ExpectedEnergy.policy(qosClass), nice: expectedNice(qosClass),
                                             timerSlack: ExpectedEnergy.timerSlack(qosClass)))
        }

        @Test func backgroundRunsUnderSchedIdleAndUtilityAndBackgroundGetTheirLeewayCapsAsSlack() {
            // The concrete values, whatever the helpers above say.
            if ExpectedEnergy.schedIdleOn { #expect(ExpectedEnergy.policy(.background) == 5) }
            #expect(ThreadState.classTimerSlack(.background) == DefaultLeeway.cap(for: .background))
            #expect(ThreadState.classTimerSlack(.utility) == DefaultLeeway.cap(for: .utility))
            #expect(DefaultLeeway.cap(for: .background) == 100_000_000)
            #expect(DefaultLeeway.cap(for: .utility) == 10_000_000)
            for qosClass: QoS.QoSClass in [.default, .userInitiated, .userInteractive] {
                #expect(ThreadState.classTimerSlack(qosClass) == 0)
            }
        }

        @Test func aBackgroundWorkerRunningDefaultWorkLeavesIdleAndItsSlackThenTakesThemBack() {
            let plain = WorkQueue(label: "lull.test.energy.raise")
            let inner = Captured<KernelScheduling>()
            let after = Captured<KernelScheduling>()
            let before = kernelScheduling { block in
                WorkQueue.global(qos: .background).async {
                    block()
                    plain.sync(execute: WorkItem(qos: .default) { KernelScheduling.current().map(inner.set) })
                    KernelScheduling.current().map(after.set)
                }
            }
            let background = KernelScheduling(policy: ExpectedEnergy.policy(.background), nice: expectedNice(.background),
                                              timerSlack: ExpectedEnergy.timerSlack(.background))
            #expect(before == background)
            // Where the process may take a thread out of SCHED_IDLE, it does; elsewhere the
            // thread stays there, as its nice value stays up.
            let innerPolicy = ExpectedEnergy.idleReversible ? KernelScheduling.schedOther : ExpectedEnergy.policy(.background)
            #expect(inner.await() == KernelScheduling(policy: innerPolicy, nice: expectedNice(.default, onAWorkerOf: .background),
                                                      timerSlack: TimerSlack.threadDefault))
            #expect(after.await() == background)
        }

        @Test func aWaitThatRaisesABackgroundQueueTakesItsThreadOutOfIdleUntilTheBlockHasRun() {
            let queue = WorkQueue(label: "lull.test.energy.override", qos: .background)
            let holder = Holder()
            queue.async(execute: holder.block)
            #expect(holder.waitUntilRunning(at: .background))
            guard let tid = holder.tid.value else {
                Issue.record("the holding block published no thread")
                return
            }
            #expect(KernelScheduling.read(tid)?.policy == ExpectedEnergy.policy(.background))
            let important = Captured<Int32>()
            queue.async(qos: .userInitiated, flags: .enforceQoS) { important.set(lull_gettid()) }
            #expect(holder.waitUntilRunning(at: .userInitiated))
            // An override moves the policy (another thread makes the call), not the slack.
            let raisedPolicy = ExpectedEnergy.idleReversible ? KernelScheduling.schedOther : ExpectedEnergy.policy(.background)
            #expect(waitUntil { KernelScheduling.read(tid)?.policy == raisedPolicy }, "\(String(describing: KernelScheduling.read(tid)))")
            if NiceAllowance.current.privileged {
                #expect(KernelScheduling.read(tid)?.timerSlack == ExpectedEnergy.timerSlack(.background))
            }
            holder.gate.open()
            #expect(important.await() != nil)
            #expect(waitUntil { holder.finished.isSet && KernelScheduling.read(tid)?.policy == ExpectedEnergy.policy(.background) })
        }

        @Test func whereThreadsCannotLeaveIdleBackgroundWorkersStayThereWhenRaised() {
            // What a refused move out of SCHED_IDLE leaves behind (`EnergyPolicy.setIdle`), and
            // what a process without the right to leave runs with from the start.
            let saved = EnergyPolicy.idleMode
            guard saved != .off else { return }
            EnergyPolicy.idleMode = .pinned
            defer { EnergyPolicy.idleMode = saved }
            let plain = WorkQueue(label: "lull.test.energy.pinned")
            let inner = Captured<KernelScheduling>()
            WorkQueue.global(qos: .background).async {
                plain.sync(execute: WorkItem(qos: .userInitiated) { KernelScheduling.current().map(inner.set) })
            }
            #expect(inner.await()?.policy == KernelScheduling.schedIdle)
            #expect(inner.value?.timerSlack == TimerSlack.threadDefault)
            // A thread of another class never enters SCHED_IDLE when it runs background work.
            let lowered = kernelScheduling { block in
                WorkQueue.global(qos: .default).async { ThreadState.current.withQoS(.background, block) }
            }
            #expect(lowered?.policy == KernelScheduling.schedOther)
            #expect(lowered?.timerSlack == ExpectedEnergy.timerSlack(.background))
        }

        @Test func aDefaultWorkerRunningBackgroundWorkEntersIdleAndComesBack() {
            let after = Captured<KernelScheduling>()
            let lowered = kernelScheduling { block in
                WorkQueue.global(qos: .default).async {
                    ThreadState.current.withQoS(.background, block)
                    KernelScheduling.current().map(after.set)
                }
            }
            let loweredPolicy = ExpectedEnergy.idleReversible ? ExpectedEnergy.policy(.background) : KernelScheduling.schedOther
            #expect(lowered?.policy == loweredPolicy)
            #expect(lowered?.timerSlack == ExpectedEnergy.timerSlack(.background))
            #expect(after.await() == KernelScheduling(policy: KernelScheduling.schedOther, nice: expectedNice(.default),
                                                      timerSlack: TimerSlack.threadDefault))
        }

        /// A thread inherits its creator's policy and slack: a worker of a private pool's
        /// default class, started from one of its background workers (directly, or through
        /// the thread starter where SCHED_IDLE cannot be left), still runs as default.
        @Test func aWorkerStartedByABackgroundWorkerRunsWithItsOwnClasssPolicyAndSlack() {
            let driven = DrivenPool()
            defer { driven.shutDown() }
            let creator = Captured<KernelScheduling>()
            let seen = Captured<KernelScheduling>()
            let pool = driven.pool
            pool.submit(Job(work: .block {
                KernelScheduling.current().map(creator.set)
                pool.submit(DrivenPool.job { KernelScheduling.current().map(seen.set) })
            }, qos: QoS(.background), flags: [], context: .empty, group: nil))
            #expect(creator.await()?.policy == ExpectedEnergy.policy(.background))
            #expect(seen.await() == KernelScheduling(policy: KernelScheduling.schedOther, nice: expectedNice(.default),
                                                     timerSlack: TimerSlack.threadDefault))
        }

        @Test func theDetectedCapabilitiesAgreeWithTheKernelsRules() {
            let detected = EnergyCapabilities.current
            #expect(detected.schedIdleWanted == ExpectedEnergy.schedIdleOn)
            #expect(detected.schedIdleReversible == ExpectedEnergy.idleReversible)
            #expect((detected.utilClampFailure == nil) == ExpectedEnergy.utilClamp, "\(String(describing: detected.utilClampFailure))")
            #expect(detected.timerSlackFailure == nil)
            let mode: EnergyPolicy.IdleMode = !ExpectedEnergy.schedIdleOn ? .off : ExpectedEnergy.idleReversible ? .movable : .pinned
            #expect(EnergyPolicy.idleMode == mode)
        }

        @Test(arguments: schedulableClasses)
        func whereTheKernelClampsUtilizationEachClassGetsItsClamps(_ qosClass: QoS.QoSClass) throws {
            try #require(ExpectedEnergy.utilClamp == EnergyPolicy.utilClampUsable)
            guard ExpectedEnergy.utilClamp else { return }
            let queue = WorkQueue(label: "lull.test.energy.clamp", qos: QoS(qosClass: qosClass, relativePriority: 0))
            let seen = Captured<[UInt32]>()
            queue.async {
                var low: UInt32 = 0
                var high: UInt32 = 0
                if lull_get_thread_util_clamp(lull_gettid(), &low, &high) == 0 { seen.set([low, high]) }
            }
            let expected: [UInt32] = switch qosClass {
            case .background: [0, 256]
            case .utility: [0, 512]
            case .userInteractive: [512, 1024]
            default: [0, 1024]
            }
            #expect(seen.await() == expected)
        }

        @Test func theOptOutIsReadFromTheEnvironment() {
            #expect(EnergyCapabilities.schedIdleWanted(environmentValue: nil))
            #expect(EnergyCapabilities.schedIdleWanted(environmentValue: "1"))
            for off in ["0", "off", "OFF", "no", "false", "False"] {
                #expect(!EnergyCapabilities.schedIdleWanted(environmentValue: off), "\(off)")
            }
        }

        @Test func withTheOptOutBackgroundWorkersRunUnderSchedOther() async {
            await #expect(processExitsWith: .success) {
                setenv("LULL_BACKGROUND_SCHED_IDLE", "0", 1)
                let seen = kernelScheduling { WorkQueue.global(qos: .background).async(execute: $0) }
                exit(seen?.policy == KernelScheduling.schedOther
                     && seen?.timerSlack == ExpectedEnergy.timerSlack(.background) ? 0 : 1)
            }
        }
    }
}
