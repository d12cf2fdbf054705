// task-sleep-wakeups: tasks that sleep "about a second", on Swift's default clock and
// executor against Lull's CoalescingClock.

import Glibc
import Lull
import Synchronization

enum TaskSleepBenchmark {
    static let all: [Benchmark] = [taskSleepWakeUps]

    static let sleepInterval: Duration = .seconds(1)
    static let sleepTolerance: Duration = .milliseconds(500)
    static let toleranceNanoseconds: UInt64 = 500_000_000
    /// Tasks start at random phases in [0, 1 s) (fixed seed), then loop; the window opens
    /// once every task has slept a few times.
    static let warmUp: UInt64 = 2_000_000_000

    static let taskSleepWakeUps = Benchmark(
        name: "task-sleep-wakeups",
        title: "wake-ups of N tasks looping Task.sleep(for: 1 s, tolerance: 500 ms) (random first phases in [0, 1 s), "
            + "fixed seed): voluntary context switches of all threads but the measuring one over the window (from 2 s "
            + "after the start), Lull's CoalescingClock against the default clock and executor, against the optimum "
            + "for the sleeps' own windows [deadline, deadline + tolerance] (greedy interval stabbing)",
        unit: "wake-ups",
        lowerIsBetter: true,
        singleShot: true,
        parameters: { options in
            Parameters(n: 1_000, seconds: options.quick ? 3 : 10, runTimeout: options.runTimeout)
        },
        sizeDescription: { "\(Format.grouped($0.n)) tasks, \(Format.fixed($0.seconds, 0)) s" },
        run: runTaskSleepWakeUps,
        extraRows: [
            ExtraRow(label: "task-sleep-wakeups ÷ optimal", extra: "x optimal", unit: "x optimal", lowerIsBetter: true,
                     style: .ratio),
            ExtraRow(label: "task-sleep-wakeups sleeps", extra: "sleeps", unit: "sleeps", lowerIsBetter: false,
                     style: .count),
            ExtraRow(label: "task-sleep-wakeups reactor", extra: "reactor wake-ups", unit: "wake-ups",
                     lowerIsBetter: true, style: .count),
        ],
        peerName: "default clock"
    )

    /// The windows [deadline, deadline + tolerance] of the sleeps that ended, per task.
    final class Windows: Sendable {
        private let windows = Mutex<[(start: UInt64, end: UInt64)]>([])

        func add(_ deadline: UInt64) {
            windows.withLock { $0.append((deadline, deadline &+ TaskSleepBenchmark.toleranceNanoseconds)) }
        }

        /// The fewest instants that hit every window lying in [from, to].
        func optimal(from: UInt64, to: UInt64) -> (wakeUps: Int, sleeps: Int) {
            let inside = windows.withLock { $0 }.filter { $0.start >= from && $0.end <= to }
            var count = 0
            var last: UInt64?
            for window in inside.sorted(by: { $0.end < $1.end }) {
                if let last, window.start <= last { continue }
                last = window.end
                count += 1
            }
            return (count, inside.count)
        }
    }

    /// Tells the tasks to stop looping.
    final class StopFlag: Sendable {
        private let value = Atomic<Bool>(false)
        var isSet: Bool { value.load(ordering: .relaxed) }
        func set() { value.store(true, ordering: .relaxed) }
    }

    @Sendable
    static func runTaskSleepWakeUps(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let n = parameters.n
        var generator = SplitMix64(seed: 0x736C_6565_70)
        let phases = (0..<n).map { _ in generator.next() % 1_000_000_000 }
        let windows = Windows()
        let stop = StopFlag()
        let finished = Countdown(n)
        let start = Clock.now()
        for phase in phases {
            Task {
                defer { _ = finished.countDown() }
                // Both variants sleep on the same deadlines: the previous wake-up plus 1 s.
                var deadline = start &+ phase
                do {
                    while !stop.isSet {
                        switch runtime {
                        case .lull:
                            let clock = CoalescingClock()
                            try await clock.sleep(until: Deadline(uptimeNanoseconds: deadline), tolerance: sleepTolerance)
                        case .dispatch:
                            let clock = ContinuousClock()
                            let delay = Int64(deadline) - Int64(Clock.now())
                            try await clock.sleep(until: clock.now.advanced(by: .nanoseconds(max(0, delay))),
                                                  tolerance: sleepTolerance)
                        }
                        windows.add(deadline)
                        deadline = Clock.now() &+ 1_000_000_000
                    }
                } catch {}
            }
        }
        Clock.sleep(seconds: Double(warmUp) / 1e9)
        // This runs on the child's main thread, whose thread id is the process id.
        let me = getpid()
        // Lull also counts its reactor's wake-ups (RuntimeDiagnostics), which the default
        // clock cannot show: there only the context switches tell.
        let recording = runtime == .lull && (try? RuntimeDiagnostics.start()) != nil
        let before = ThreadSwitches.snapshot(excluding: me)
        let usageBefore = ProcessUsage.now()
        let windowStart = Clock.now()
        Clock.sleep(seconds: parameters.seconds)
        let windowEnd = Clock.now()
        let usageAfter = ProcessUsage.now()
        let after = ThreadSwitches.snapshot(excluding: me)
        let report = recording ? RuntimeDiagnostics.stop() : nil
        stop.set()
        guard finished.wait(seconds: 5) else {
            return .failed("TIMEOUT: the tasks had not all ended 5 s after the window")
        }

        // getrusage, so that a thread that exits during the window counts too.
        guard let usageBefore, let usageAfter else {
            return .failed("getrusage failed around the window")
        }
        let voluntary = ProcessUsage.othersSwitches(from: usageBefore, to: usageAfter).voluntary
        var liveVoluntary = 0
        for (tid, end) in after {
            liveVoluntary += end.voluntary - (before[tid]?.voluntary ?? 0)
        }
        let (optimal, sleeps) = windows.optimal(from: windowStart, to: windowEnd)
        var extras: [(String, Double)] = [
            ("optimal wake-ups", Double(optimal)),
            ("x optimal", optimal > 0 ? Double(voluntary) / Double(optimal) : .infinity),
            ("sleeps", Double(sleeps)),
            ("live threads' voluntary switches", Double(liveVoluntary)),
            ("CPU ms", (usageAfter.cpuSeconds - usageBefore.cpuSeconds) * 1000),
        ]
        if let report {
            extras.append(("reactor wake-ups", Double(report.wakeups.total.count)))
            extras.append(("wake-ups firing timers", Double(report.coalescing.wakeupsWithTimerFires)))
            extras.append(("engine x optimal", report.coalescing.ratio ?? .infinity))
        }
        let notes = ["\(after.count) threads at the end of the window; \(Format.grouped(sleeps)) sleeps ended in it"]
        return .ok(value: Double(voluntary), seconds: Clock.seconds(from: windowStart, to: windowEnd),
                   extras: extras, notes: notes)
    }
}
