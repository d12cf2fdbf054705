// qos-hogs: two CPU hogs pinned to one core, one at background QoS and one at default, for
// a few seconds: the background hog's share of that core. Lull runs background work under
// SCHED_IDLE (kernel load weight 3 against 1024), so its share must fall under 1%;
// nice +15 alone (weight 36) still takes about 3%.

import Dispatch
import Glibc
import Lull
import Synchronization

enum QoSHogsBenchmark {
    static let all: [Benchmark] = [qosHogs]

    static let qosHogs = Benchmark(
        name: "qos-hogs",
        title: "two CPU hogs pinned to one core (sched_setaffinity), one at background and one at default QoS, "
            + "the default one first: the background hog's share of the CPU time both got, in per mille "
            + "(10 ‰ = 1%)",
        unit: "‰ background",
        lowerIsBetter: true,
        singleShot: true,
        parameters: { options in
            Parameters(n: 0, seconds: options.quick ? 1.5 : 4, runTimeout: options.runTimeout)
        },
        sizeDescription: { "\(Format.fixed($0.seconds, 1)) s" },
        run: runHogs,
        extraRows: [
            ExtraRow(label: "qos-hogs background CPU", extra: "background CPU ms", unit: "ms", lowerIsBetter: true,
                     style: .count),
            ExtraRow(label: "qos-hogs default CPU", extra: "default CPU ms", unit: "ms", lowerIsBetter: false,
                     style: .count),
        ]
    )

    /// What one hog measured of its own thread.
    struct HogReport: Sendable {
        let cpuNanoseconds: UInt64
        let policy: Int32
        let nice: Int32
    }

    /// One hog: pins its thread to `cpu`, spins until `stop`, reports its thread's CPU time
    /// (and puts the thread's affinity back, for whatever runs on it next).
    final class Hog: Sendable {
        let started = Atomic<Bool>(false)
        let report = Mutex<HogReport?>(nil)
        let done = Latch()

        func run(cpu: Int32, stop: StopFlag) {
            var original = cpu_set_t()
            let saved = Affinity.get(&original) == 0
            var only = cpu_set_t()
            withUnsafeMutableBytes(of: &only) { bytes in
                bytes[Int(cpu) / 8] = UInt8(1) << UInt8(Int(cpu) % 8)
            }
            _ = Affinity.set(&only)
            let start = Clock.cpuNanoseconds().thread
            started.store(true, ordering: .releasing)
            while !stop.isSet.load(ordering: .relaxed) {}
            let cpuTime = Clock.cpuNanoseconds().thread &- start
            let reading = HogReport(cpuNanoseconds: cpuTime, policy: sched_getscheduler(0),
                                    nice: getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0))
            if saved { _ = Affinity.set(&original) }
            report.withLock { $0 = reading }
            done.signal()
        }
    }

    /// sched_getaffinity and sched_setaffinity for the calling thread, which Swift's Glibc
    /// module leaves out (glibc declares them under _GNU_SOURCE only): looked up by name.
    enum Affinity {
        typealias Call = @convention(c) (pid_t, Int, UnsafeMutableRawPointer) -> Int32

        static let getCall: Call? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "sched_getaffinity")
            .map { unsafeBitCast($0, to: Call.self) }
        static let setCall: Call? = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "sched_setaffinity")
            .map { unsafeBitCast($0, to: Call.self) }

        /// 0 on success, -1 otherwise.
        static func get(_ set: inout cpu_set_t) -> Int32 {
            guard let getCall else { return -1 }
            return getCall(0, MemoryLayout<cpu_set_t>.size, &set)
        }

        static func set(_ set: inout cpu_set_t) -> Int32 {
            guard let setCall else { return -1 }
            return setCall(0, MemoryLayout<cpu_set_t>.size, &set)
        }
    }

    /// Set when the window ends.
    final class StopFlag: Sendable {
        let isSet = Atomic<Bool>(false)
    }

    /// The first CPU this process may run on.
    static func firstAllowedCPU() -> Int32 {
        var allowed = cpu_set_t()
        guard Affinity.get(&allowed) == 0 else { return 0 }
        return withUnsafeBytes(of: &allowed) { bytes in
            for index in 0..<bytes.count * 8 where bytes[index / 8] & (UInt8(1) << UInt8(index % 8)) != 0 {
                return Int32(index)
            }
            return 0
        }
    }

    @Sendable
    static func runHogs(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let cpu = firstAllowedCPU()
        let stop = StopFlag()
        let foreground = Hog()
        let background = Hog()
        let submit: (QoSClassChoice, Hog) -> Void = { choice, hog in
            switch runtime {
            case .lull:
                // The block's own QoS: from the main thread it would infer user-initiated.
                let qos: QoS = choice == .background ? .background : .default
                WorkQueue.global(qos: qos.qosClass).async(qos: qos) { hog.run(cpu: cpu, stop: stop) }
            case .dispatch:
                let qos: DispatchQoS = choice == .background ? .background : .default
                DispatchQueue.global(qos: qos.qosClass).async(qos: qos) { hog.run(cpu: cpu, stop: stop) }
            }
        }
        // The default hog holds the core first, so the background one never has it alone.
        submit(.default, foreground)
        let deadline = Clock.now() &+ UInt64(parameters.runTimeout * 1e9)
        while !foreground.started.load(ordering: .acquiring) {
            if Clock.now() > deadline { return .failed("TIMEOUT: the default hog did not start") }
            usleep(1_000)
        }
        submit(.background, background)
        let start = Clock.now()
        Clock.sleep(seconds: parameters.seconds)
        stop.isSet.store(true, ordering: .relaxed)
        let seconds = Clock.seconds(from: start, to: Clock.now())
        guard foreground.done.wait(seconds: parameters.runTimeout), background.done.wait(seconds: parameters.runTimeout),
              let low = background.report.withLock({ $0 }), let high = foreground.report.withLock({ $0 }) else {
            return .failed("TIMEOUT: a hog did not report")
        }
        let total = Double(low.cpuNanoseconds + high.cpuNanoseconds)
        let share = total > 0 ? Double(low.cpuNanoseconds) / total : 0
        let policyName: (Int32) -> String = { $0 == 5 ? "SCHED_IDLE" : $0 == 0 ? "SCHED_OTHER" : "policy \($0)" }
        return .ok(value: share * 1000, seconds: seconds,
                   extras: [("background CPU ms", Double(low.cpuNanoseconds) / 1e6),
                            ("default CPU ms", Double(high.cpuNanoseconds) / 1e6)],
                   notes: ["background share \(Format.fixed(share * 100, 2)) % on CPU \(cpu); background hog: \(policyName(low.policy)), nice \(low.nice); "
                           + "default hog: \(policyName(high.policy)), nice \(high.nice)"])
    }

    enum QoSClassChoice {
        case background
        case `default`
    }
}
