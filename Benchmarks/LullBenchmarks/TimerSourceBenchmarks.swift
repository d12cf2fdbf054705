// Timer sources: how often a process with many coalescable repeating timers wakes up, how
// close leeway-0 one-shots fire to their deadlines, how fast timer sources are created,
// scheduled and cancelled, and the memory a live idle timer costs. As in the other
// benchmarks, the Lull and Dispatch versions are written out side by side, with the same
// schedules (fixed seeds) and the same handler code.

import Dispatch
import Glibc
import Lull
import Synchronization

enum TimerSourceBenchmarks {
    static let all: [Benchmark] = [timerWakeUps, timerAccuracy, timerChurn, timerMemory]

    /// How long a run waits for the cancel handlers of its timers before it reports a hang.
    static let cancelTimeout = 10.0

    // MARK: - timer-wakeups

    static let wakeUpTimers = 10_000
    static let wakeUpInterval: UInt64 = 1_000_000_000
    static let wakeUpLeeway: UInt64 = 100_000_000
    /// First deadlines are uniform in [start + 0.1 s, start + 1.1 s).
    static let wakeUpFirstDelay: UInt64 = 100_000_000
    /// The window opens this long after the timers were scheduled: every timer has fired at
    /// least once by then, and the process is in its steady state.
    static let wakeUpWarmUp: UInt64 = 1_500_000_000

    static let timerWakeUps = Benchmark(
        name: "timer-wakeups",
        title: "wake-ups of 10,000 repeating 1 s timers (random phases, first deadline in [0.1 s, 1.1 s), fixed seed; "
            + "leeway 100 ms; default global queue; handlers count): voluntary context switches of all threads but "
            + "the measuring one over the window (from 1.5 s after scheduling; getrusage, so that a thread that "
            + "exits during it counts too), against the optimum for the same windows (greedy interval stabbing: the fewest instants that hit every fire's [deadline, deadline + leeway])",
        unit: "wake-ups",
        lowerIsBetter: true,
        singleShot: true,
        parameters: { options in
            Parameters(n: wakeUpTimers, seconds: options.quick ? 3 : 10, runTimeout: options.runTimeout)
        },
        sizeDescription: { "\(Format.grouped($0.n)) timers, \(Format.fixed($0.seconds, 0)) s" },
        run: runTimerWakeUps,
        extraRows: [
            ExtraRow(label: "timer-wakeups ÷ optimal", extra: "x optimal", unit: "x optimal", lowerIsBetter: true,
                     style: .ratio),
            ExtraRow(label: "timer-wakeups handler calls", extra: "handler calls", unit: "calls", lowerIsBetter: false,
                     style: .count),
        ]
    )

    /// First deadlines (ns after the start) of the wake-up timers, with a fixed seed.
    static func wakeUpPhases(count: Int) -> [UInt64] {
        var generator = SplitMix64(seed: 0x7469_6D65_7273)
        return (0..<count).map { _ in wakeUpFirstDelay + generator.next() % wakeUpInterval }
    }

    @Sendable
    static func runTimerWakeUps(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let n = parameters.n
        let phases = wakeUpPhases(count: n)
        let calls = SharedCounter()
        // The sum of `data` (fires per handler call), to tell coalesced fires from lost ones.
        let fires = Atomic<Int>(0)
        let cancelled = Countdown(n)
        let onCancel: @Sendable () -> Void = { cancelled.countDown() }

        let start = Clock.now()
        let cancelAll: () -> Void
        switch runtime {
        case .lull:
            let queue = WorkQueue.global()
            let base = Deadline(uptimeNanoseconds: start)
            var sources: [TimerSource] = []
            sources.reserveCapacity(n)
            for phase in phases {
                let source = EventSource.makeTimerSource(queue: queue)
                source.setEventHandler {
                    _ = calls.increment()
                    fires.wrappingAdd(Int(source.data), ordering: .relaxed)
                }
                source.setCancelHandler(handler: onCancel)
                source.schedule(deadline: base + .nanoseconds(phase), repeating: .nanoseconds(wakeUpInterval),
                                leeway: .nanoseconds(wakeUpLeeway))
                source.activate()
                sources.append(source)
            }
            cancelAll = { for source in sources { source.cancel() } }
        case .dispatch:
            let queue = DispatchQueue.global()
            var sources: [any DispatchSourceTimer] = []
            sources.reserveCapacity(n)
            for phase in phases {
                let source = DispatchSource.makeTimerSource(queue: queue)
                let box = DispatchTimerBox(source)
                source.setEventHandler {
                    _ = calls.increment()
                    fires.wrappingAdd(Int(box.source.data), ordering: .relaxed)
                }
                source.setCancelHandler(handler: onCancel)
                source.schedule(deadline: DispatchTime(uptimeNanoseconds: start &+ phase),
                                repeating: .nanoseconds(Int(wakeUpInterval)), leeway: .nanoseconds(Int(wakeUpLeeway)))
                source.activate()
                sources.append(source)
            }
            cancelAll = { for source in sources { source.cancel() } }
        }
        let scheduled = Clock.now()
        var notes = ["scheduling the \(Format.grouped(n)) timers took \(Format.milliseconds(Clock.seconds(from: start, to: scheduled)))"]

        // The window.
        let windowOpens = max(start &+ wakeUpWarmUp, scheduled &+ 200_000_000)
        let now = Clock.now()
        if windowOpens > now { Clock.sleep(seconds: Double(windowOpens - now) / 1e9) }
        // This runs on the child's main thread, whose thread id is the process id.
        let me = getpid()
        let before = ThreadSwitches.snapshot(excluding: me)
        let usageBefore = ProcessUsage.now()
        let callsBefore = calls.value.load(ordering: .relaxed)
        let firesBefore = fires.load(ordering: .relaxed)
        let windowStart = Clock.now()
        Clock.sleep(seconds: parameters.seconds)
        let windowEnd = Clock.now()
        let callsAfter = calls.value.load(ordering: .relaxed)
        let firesAfter = fires.load(ordering: .relaxed)
        let usageAfter = ProcessUsage.now()
        let after = ThreadSwitches.snapshot(excluding: me)

        cancelAll()
        guard cancelled.wait(seconds: cancelTimeout) else {
            return .failed("TIMEOUT: the cancel handlers of the \(Format.grouped(n)) timers had not all run "
                + "\(Format.seconds(cancelTimeout)) after cancel()")
        }

        var voluntary = 0
        var involuntary = 0
        var perThread: [(name: String, tid: Int32, switches: Int)] = []
        for (tid, end) in after {
            let start = before[tid]
            let delta = end.voluntary - (start?.voluntary ?? 0)
            voluntary += delta
            involuntary += (end.switches - end.voluntary) - ((start?.switches ?? 0) - (start?.voluntary ?? 0))
            perThread.append((end.name, tid, delta))
        }
        let gone = before.keys.filter { after[$0] == nil }.count
        let appeared = after.keys.filter { before[$0] == nil }.count
        let seconds = Clock.seconds(from: windowStart, to: windowEnd)
        let optimal = optimalWakeUps(phases: phases, start: start, from: windowStart, to: windowEnd)
        let handlerCalls = callsAfter - callsBefore
        let expectedCalls = Double(n) * seconds * 1e9 / Double(wakeUpInterval)

        notes.append("\(after.count) runtime threads at the end of the window"
            + (appeared > 0 ? ", \(appeared) started during it" : "")
            + (gone > 0 ? ", \(gone) exited during it (the figure includes them)" : ""))
        let busiest = perThread.filter { $0.switches > 0 }.sorted { $0.switches > $1.switches }
        if !busiest.isEmpty {
            notes.append("voluntary switches by thread: " + busiest.prefix(6).map { "\($0.name)[\($0.tid)] \($0.switches)" }
                .joined(separator: ", "))
        }
        let windowFires = firesAfter - firesBefore
        if windowFires != handlerCalls {
            notes.append("\(Format.grouped(windowFires)) fires (sum of data) in \(Format.grouped(handlerCalls)) handler calls "
                + "in the window")
        }
        // Every fire due by the window's end less the leeway (and 50 ms for the handler to
        // run) must have been delivered; none due after it may have been.
        let dueAtLeast = fireCount(phases: phases, start: start, upTo: windowEnd &- wakeUpLeeway &- 50_000_000)
        let dueAtMost = fireCount(phases: phases, start: start, upTo: windowEnd)
        if firesAfter < dueAtLeast || firesAfter > dueAtMost {
            notes.append("WRONG COUNT: \(Format.grouped(firesAfter)) fires delivered since the start at the window's end; "
                + "between \(Format.grouped(dueAtLeast)) and \(Format.grouped(dueAtMost)) were due")
        } else {
            notes.append("\(Format.grouped(firesAfter)) fires delivered since the start (\(Format.grouped(dueAtLeast))"
                + "–\(Format.grouped(dueAtMost)) due): none lost, none early")
        }
        if abs(Double(handlerCalls) - expectedCalls) > 0.02 * expectedCalls {
            notes.append("\(Format.grouped(handlerCalls)) handler calls in the window, "
                + "\(Format.grouped(Int(expectedCalls.rounded()))) expected (n × seconds)")
        }
        // The figure counts every thread that ran during the window, also one that exited
        // before its end (a worker retiring, a poller handing over): getrusage(RUSAGE_SELF)
        // folds an exited thread's switches into the process's, where /proc/self/task no
        // longer lists it. Less the measuring thread's own (its sleep).
        guard let usageBefore, let usageAfter else {
            return .failed("getrusage failed around the window")
        }
        let wakeUps = ProcessUsage.othersSwitches(from: usageBefore, to: usageAfter).voluntary
        if gone > 0 {
            notes.append("the threads listed at the window's end made \(Format.grouped(voluntary)) of the "
                + "\(Format.grouped(wakeUps)) voluntary switches")
        }
        let extras: [(String, Double)] = [
            ("optimal wake-ups", Double(optimal)),
            ("x optimal", optimal > 0 ? Double(wakeUps) / Double(optimal) : .infinity),
            ("handler calls", Double(handlerCalls)),
            ("expected calls", expectedCalls),
            ("live threads' voluntary switches", Double(voluntary)),
            ("involuntary switches", Double(involuntary)),
            ("CPU ms", (usageAfter.cpuSeconds - usageBefore.cpuSeconds) * 1000),
        ]
        return .ok(value: Double(wakeUps), seconds: seconds, extras: extras, notes: notes)
    }

    /// Fires with deadline <= `upTo`, over all timers.
    static func fireCount(phases: [UInt64], start: UInt64, upTo: UInt64) -> Int {
        var count = 0
        for phase in phases where start &+ phase <= upTo {
            count += Int((upTo - (start &+ phase)) / wakeUpInterval) + 1
        }
        return count
    }

    /// The fewest instants that hit every window [d, d + leeway] for the fires d of every
    /// timer (d = start + phase + k × interval) with d in [from, to]: greedy interval stabbing
    /// (sort by window end; stab at the earliest end not yet hit; skip every window it hits).
    static func optimalWakeUps(phases: [UInt64], start: UInt64, from: UInt64, to: UInt64) -> Int {
        var windows: [(start: UInt64, end: UInt64)] = []
        windows.reserveCapacity(phases.count * Int(Double(to &- from) / Double(wakeUpInterval) + 2))
        for phase in phases {
            let first = start &+ phase
            var deadline = first
            if deadline < from {
                let steps = (from - deadline + wakeUpInterval - 1) / wakeUpInterval
                deadline += steps * wakeUpInterval
            }
            while deadline <= to {
                windows.append((deadline, deadline + wakeUpLeeway))
                deadline += wakeUpInterval
            }
        }
        windows.sort { $0.end < $1.end }
        var count = 0
        var lastStab: UInt64 = 0
        var stabbed = false
        for window in windows where !stabbed || window.start > lastStab {
            lastStab = window.end
            stabbed = true
            count += 1
        }
        return count
    }

    // MARK: - timer-accuracy

    static let accuracyTimers = 1_000
    static let accuracyFirst: UInt64 = 20_000_000
    static let accuracySpan: UInt64 = 500_000_000

    static let timerAccuracy = Benchmark(
        name: "timer-accuracy",
        title: "lateness of 1,000 one-shot timers with leeway 0 (Lull: .strict), deadlines spread evenly over "
            + "[20 ms, 520 ms], scheduled in shuffled order, default global queue; handlers record fire time − "
            + "deadline on CLOCK_MONOTONIC; figure = median lateness (p99 below)",
        unit: "µs (p50)",
        lowerIsBetter: true,
        singleShot: false,
        parameters: { options in
            Parameters(n: accuracyTimers, seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n))" },
        run: runTimerAccuracy,
        extraRows: [
            ExtraRow(label: "timer-accuracy p99", extra: "p99 µs", unit: "µs (p99)", lowerIsBetter: true, style: .count),
        ]
    )

    @Sendable
    static func runTimerAccuracy(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let n = parameters.n
        var generator = SplitMix64(seed: 0x6163_6375)
        var offsets = (0..<n).map { accuracyFirst + accuracySpan * UInt64($0) / UInt64(max(n - 1, 1)) }
        offsets.shuffle(using: &generator)
        let lateness = LatenessSlots(count: n)
        let calls = SharedCounter()
        let fired = Countdown(n)
        let cancelled = Countdown(n)
        let onCancel: @Sendable () -> Void = { cancelled.countDown() }

        let start = Clock.now()
        let cancelAll: () -> Void
        switch runtime {
        case .lull:
            let queue = WorkQueue.global()
            var sources: [TimerSource] = []
            sources.reserveCapacity(n)
            for (index, offset) in offsets.enumerated() {
                let due = start &+ offset
                let source = EventSource.makeTimerSource(flags: .strict, queue: queue)
                source.setEventHandler {
                    lateness.record(index, now: Clock.now(), due: due)
                    _ = calls.increment()
                    fired.countDown()
                }
                source.setCancelHandler(handler: onCancel)
                source.schedule(deadline: Deadline(uptimeNanoseconds: due), leeway: .zero)
                source.activate()
                sources.append(source)
            }
            cancelAll = { for source in sources { source.cancel() } }
        case .dispatch:
            let queue = DispatchQueue.global()
            var sources: [any DispatchSourceTimer] = []
            sources.reserveCapacity(n)
            for (index, offset) in offsets.enumerated() {
                let due = start &+ offset
                let source = DispatchSource.makeTimerSource(queue: queue)
                source.setEventHandler {
                    lateness.record(index, now: Clock.now(), due: due)
                    _ = calls.increment()
                    fired.countDown()
                }
                source.setCancelHandler(handler: onCancel)
                source.schedule(deadline: DispatchTime(uptimeNanoseconds: due), leeway: .nanoseconds(0))
                source.activate()
                sources.append(source)
            }
            cancelAll = { for source in sources { source.cancel() } }
        }
        let scheduled = Clock.now()
        let waitLimit = parameters.runTimeout + Double(accuracyFirst + accuracySpan) / 1e9
        let allFired = fired.wait(seconds: waitLimit)
        if allFired { Clock.sleep(seconds: 0.01) }  // a second fire of a one-shot would show now
        cancelAll()
        guard allFired else {
            return .failed("TIMEOUT: \(Format.grouped(calls.value.load(ordering: .relaxed))) of \(Format.grouped(n)) "
                + "one-shot timers had fired \(Format.seconds(waitLimit)) after scheduling began")
        }
        guard cancelled.wait(seconds: cancelTimeout) else {
            return .failed("TIMEOUT: the cancel handlers of the \(Format.grouped(n)) timers had not all run "
                + "\(Format.seconds(cancelTimeout)) after cancel()")
        }
        let total = calls.value.load(ordering: .relaxed)
        guard total == n else {
            return .failed("WRONG COUNT: \(Format.grouped(total)) handler calls for \(Format.grouped(n)) one-shot timers")
        }
        let values = lateness.sorted()
        let early = values.filter { $0 < 0 }
        let percentile = { (p: Double) -> Double in
            Double(values[min(values.count - 1, Int((p * Double(values.count)).rounded(.up)) - 1)]) / 1000
        }
        let mean = Double(values.reduce(0, +)) / Double(values.count) / 1000
        var notes: [String] = []
        notes.append(early.isEmpty ? "no timer fired before its deadline"
            : "\(early.count) timers fired BEFORE their deadline (earliest by \(Format.fixed(Double(-(early.first ?? 0)) / 1000, 1)) µs)")
        return .ok(value: percentile(0.5), seconds: Clock.seconds(from: start, to: Clock.now()),
                   extras: [("p99 µs", percentile(0.99)), ("p90 µs", percentile(0.9)), ("max µs", percentile(1)),
                            ("mean µs", mean), ("scheduling ms", Clock.seconds(from: start, to: scheduled) * 1000)],
                   notes: notes)
    }

    // MARK: - timer-churn

    static let timerChurn = Benchmark(
        name: "timer-churn",
        title: "timer churn: one thread creates N one-shot timer sources (default global queue; an event handler and "
            + "a counting cancel handler), schedules each 1 h ahead, activates and cancels it; figure = N / "
            + "(loop + drain until the last cancel handler ran). Lull and Dispatch run in the same process, in "
            + "\(churnChunks) alternating chunks of N/\(churnChunks) timers each (the first of each pair alternates too)",
        unit: "timers/s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 1_000_000, quick: 200_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n))" },
        run: runTimerChurn,
        peerInSameProcess: true,
        maxRuns: 5
    )

    /// Chunks per runtime in one run: short enough (~100 ms each) that the host's slow and
    /// fast phases, which last seconds on a shared VM, fall on both runtimes alike.
    static let churnChunks = 10

    /// Wall and CPU times (ns) of one chunk, or of the chunks of one runtime summed.
    struct ChurnTimes {
        var wall: UInt64 = 0
        var loopWall: UInt64 = 0
        var loopCPU: UInt64 = 0
        var processCPU: UInt64 = 0

        static func += (total: inout ChurnTimes, chunk: ChurnTimes) {
            total.wall += chunk.wall
            total.loopWall += chunk.loopWall
            total.loopCPU += chunk.loopCPU
            total.processCPU += chunk.processCPU
        }
    }

    /// One run: `churnChunks` chunks per runtime, taking turns; the figure is the rate of
    /// `runtime`, and the extras prefixed "peer" are the other runtime's in the same run.
    @Sendable
    static func runTimerChurn(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let chunk = max(1, parameters.n / churnChunks)
        var totals: [Runtime: ChurnTimes] = [:]
        var pairRatios: [Double] = []
        for index in 0..<churnChunks {
            let order: [Runtime] = index % 2 == 0 ? [.lull, .dispatch] : [.dispatch, .lull]
            var walls: [Runtime: UInt64] = [:]
            for side in order {
                switch churnChunk(side, count: chunk, timeout: parameters.runTimeout) {
                case .failure(let message):
                    return .failed("\(side.displayName): \(message)")
                case .success(let measured):
                    totals[side, default: ChurnTimes()] += measured
                    walls[side] = measured.wall
                }
            }
            if let lull = walls[.lull], let dispatch = walls[.dispatch], lull > 0 {
                pairRatios.append(Double(dispatch) / Double(lull))
            }
        }
        let peer: Runtime = runtime == .lull ? .dispatch : .lull
        let count = Double(chunk * churnChunks)
        func rate(_ side: Runtime) -> Double { count / (Double(totals[side]?.wall ?? 1) / 1e9) }
        func figures(_ side: Runtime, prefix: String) -> [(String, Double)] {
            let measured = totals[side] ?? ChurnTimes()
            return [(prefix + "timers/s", rate(side)),
                    (prefix + "loop only timers/s", count / (Double(measured.loopWall) / 1e9)),
                    (prefix + "ns per timer", Double(measured.wall) / count),
                    // CPU time is steadier than wall time on a shared machine.
                    (prefix + "loop thread CPU ns per timer", Double(measured.loopCPU) / count),
                    (prefix + "process CPU ns per timer", Double(measured.processCPU) / count)]
        }
        let ratio = rate(.lull) / rate(.dispatch)
        return .ok(value: rate(runtime), seconds: Double(totals[runtime]?.wall ?? 0) / 1e9,
                   extras: Array(figures(runtime, prefix: "").dropFirst()) + figures(peer, prefix: "peer ")
                       + [("Lull/Dispatch", ratio), ("median chunk-pair Lull/Dispatch", Series.median(pairRatios) ?? 0)],
                   notes: [])
    }

    /// `count` timers created, scheduled 1 h ahead, activated and cancelled by this thread,
    /// then the wait until the last cancel handler ran.
    static func churnChunk(_ runtime: Runtime, count: Int, timeout: Double) -> Result<ChurnTimes, ChurnFailure> {
        let cancelled = Countdown(count)
        let onCancel: @Sendable () -> Void = { cancelled.countDown() }
        let handler: @Sendable () -> Void = {}
        let hour: UInt64 = 3_600_000_000_000
        let loopLimit = Clock.now() &+ UInt64(2 * timeout * 1e9)
        var done = 0

        let start = Clock.now()
        let startCPU = Clock.cpuNanoseconds()
        switch runtime {
        case .lull:
            let queue = WorkQueue.global()
            while done < count {
                let source = EventSource.makeTimerSource(queue: queue)
                source.setEventHandler(handler: handler)
                source.setCancelHandler(handler: onCancel)
                source.schedule(deadline: .now() + .nanoseconds(hour))
                source.activate()
                source.cancel()
                done += 1
                if done & 1023 == 0 && Clock.now() > loopLimit { break }
            }
        case .dispatch:
            let queue = DispatchQueue.global()
            while done < count {
                let source = DispatchSource.makeTimerSource(queue: queue)
                source.setEventHandler(handler: handler)
                source.setCancelHandler(handler: onCancel)
                source.schedule(deadline: .now() + .nanoseconds(Int(hour)))
                source.activate()
                source.cancel()
                done += 1
                if done & 1023 == 0 && Clock.now() > loopLimit { break }
            }
        }
        let looped = Clock.now()
        let loopedCPU = Clock.cpuNanoseconds()
        guard done == count else {
            return .failure(ChurnFailure(message: "TIMEOUT: the loop had created, scheduled and cancelled only "
                + "\(Format.grouped(done)) of \(Format.grouped(count)) timers after \(Format.seconds(2 * timeout))"))
        }
        guard cancelled.wait(seconds: timeout) else {
            return .failure(ChurnFailure(message: "TIMEOUT: the cancel handlers of the \(Format.grouped(count)) timers "
                + "had not all run \(Format.seconds(timeout)) after the loop"))
        }
        let drained = Clock.now()
        let drainedCPU = Clock.cpuNanoseconds()
        return .success(ChurnTimes(wall: drained &- start, loopWall: looped &- start,
                                   loopCPU: loopedCPU.thread &- startCPU.thread,
                                   processCPU: drainedCPU.process &- startCPU.process))
    }

    struct ChurnFailure: Error {
        let message: String
    }

    // MARK: - timer-memory

    static let memoryTimers = 100_000
    static let memoryWarmUpTimers = 256

    static let timerMemory = Benchmark(
        name: "timer-memory",
        title: "memory per live idle timer: K one-shot timer sources (default global queue, event handler) scheduled "
            + "1 h ahead and activated, kept; figure = RSS increase / K once RSS is stable (fresh process per run)",
        unit: "bytes/timer",
        lowerIsBetter: true,
        singleShot: true,
        parameters: { options in Parameters(n: memoryTimers, seconds: 0, runTimeout: options.runTimeout) },
        sizeDescription: { "K=\(Format.grouped($0.n))" },
        run: runTimerMemory,
        freshProcessPerRun: true,
        maxRuns: 3
    )

    @Sendable
    static func runTimerMemory(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let k = parameters.n
        let handler: @Sendable () -> Void = {}
        var warmUpKeeper = TimerKeeper(runtime, count: memoryWarmUpTimers)
        var keeper = TimerKeeper(runtime, count: k)
        let deadline = Clock.now() &+ 3_600_000_000_000
        warmUpKeeper.create(memoryWarmUpTimers, deadline: deadline, handler: handler)
        guard let rssBefore = Memory.stableResidentBytes(timeout: parameters.runTimeout) else {
            return .failed("cannot read VmRSS from /proc/self/status")
        }
        let start = Clock.now()
        keeper.create(k, deadline: deadline, handler: handler)
        let created = Clock.now()
        guard let rssAfter = Memory.stableResidentBytes(timeout: parameters.runTimeout) else {
            return .failed("cannot read VmRSS from /proc/self/status")
        }
        let stable = Clock.now()
        withExtendedLifetime(warmUpKeeper) {}
        withExtendedLifetime(keeper) {}
        return .ok(value: Double(rssAfter - rssBefore) / Double(k), seconds: Clock.seconds(from: start, to: created),
                   extras: [("create+schedule+activate ms", Clock.seconds(from: start, to: created) * 1000),
                            ("RSS stable after ms", Clock.seconds(from: start, to: stable) * 1000),
                            ("RSS before MiB", Double(rssBefore) / 1_048_576)],
                   notes: [])
    }
}

/// Keeps idle timers alive (Lull cancels a source the program no longer references), in an
/// array filled before the baseline, so that storing a timer allocates nothing.
struct TimerKeeper {
    let runtime: Runtime
    private var lull: [TimerSource?]
    private var dispatch: [(any DispatchSourceTimer)?]
    private var used = 0

    init(_ runtime: Runtime, count: Int) {
        self.runtime = runtime
        lull = [TimerSource?](repeating: nil, count: runtime == .lull ? count : 0)
        dispatch = [(any DispatchSourceTimer)?](repeating: nil, count: runtime == .dispatch ? count : 0)
    }

    /// Creates `count` one-shot timers for `deadline` (CLOCK_MONOTONIC ns) with `handler`,
    /// and activates each.
    mutating func create(_ count: Int, deadline: UInt64, handler: @escaping @Sendable () -> Void) {
        for _ in 0..<count {
            switch runtime {
            case .lull:
                let source = EventSource.makeTimerSource(queue: WorkQueue.global())
                source.setEventHandler(handler: handler)
                source.schedule(deadline: Deadline(uptimeNanoseconds: deadline))
                source.activate()
                lull[used] = source
            case .dispatch:
                let source = DispatchSource.makeTimerSource(queue: DispatchQueue.global())
                source.setEventHandler(handler: handler)
                source.schedule(deadline: DispatchTime(uptimeNanoseconds: deadline))
                source.activate()
                dispatch[used] = source
            }
            used += 1
        }
    }
}

/// Lets a Dispatch timer source be read from its own `@Sendable` handler.
///
/// `@unchecked Sendable`: Dispatch sources are thread-safe objects (reading `data` in the
/// handler is their documented use); the Swift overlay does not mark them.
final class DispatchTimerBox: @unchecked Sendable {
    let source: any DispatchSourceTimer

    init(_ source: any DispatchSourceTimer) {
        self.source = source
    }
}

/// One lateness per timer, in ns (negative: early), written once by the timer's handler.
///
/// `@unchecked Sendable`: slot i is written only by timer i's handler, which runs once; the
/// main thread reads the slots after every handler has counted down a `Countdown`.
final class LatenessSlots: @unchecked Sendable {
    private let values: UnsafeMutablePointer<Int64>
    private let count: Int

    init(count: Int) {
        self.count = count
        values = UnsafeMutablePointer<Int64>.allocate(capacity: count)
        values.initialize(repeating: 0, count: count)
    }

    deinit {
        values.deallocate()
    }

    func record(_ index: Int, now: UInt64, due: UInt64) {
        values[index] = Int64(bitPattern: now &- due)
    }

    func sorted() -> [Int64] {
        UnsafeBufferPointer(start: values, count: count).sorted()
    }
}

/// The process's and the calling thread's context switches and CPU time. The process's
/// counts include every thread that has exited (the kernel folds them in at exit), which
/// /proc/self/task no longer lists: a window's switches are the difference of two samples,
/// less the calling (measuring) thread's.
enum ProcessUsage {
    struct Sample {
        var processVoluntary: Int
        var processInvoluntary: Int
        var threadVoluntary: Int
        var threadInvoluntary: Int
        var cpuSeconds: Double
    }

    static func now() -> Sample? {
        var process = rusage()
        var thread = rusage()
        // RUSAGE_THREAD (1 on Linux) is not imported without _GNU_SOURCE.
        let rusageThread: __rusage_who_t = 1
        guard getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &process) == 0,
              getrusage(rusageThread, &thread) == 0 else { return nil }
        let cpu = Double(process.ru_utime.tv_sec + process.ru_stime.tv_sec)
            + Double(process.ru_utime.tv_usec + process.ru_stime.tv_usec) / 1e6
        return Sample(processVoluntary: process.ru_nvcsw, processInvoluntary: process.ru_nivcsw,
                      threadVoluntary: thread.ru_nvcsw, threadInvoluntary: thread.ru_nivcsw, cpuSeconds: cpu)
    }

    /// The switches of every thread but the calling one between two samples the calling
    /// thread took: voluntary ones, and voluntary plus involuntary ones.
    static func othersSwitches(from before: Sample, to after: Sample) -> (voluntary: Int, all: Int) {
        let voluntary = (after.processVoluntary - before.processVoluntary)
            - (after.threadVoluntary - before.threadVoluntary)
        let involuntary = (after.processInvoluntary - before.processInvoluntary)
            - (after.threadInvoluntary - before.threadInvoluntary)
        return (voluntary, voluntary + involuntary)
    }
}

extension Memory {
    /// VmRSS once two readings 100 ms apart differ by less than 64 KiB (the runtime may
    /// still be installing timers on another thread), or the last reading after `timeout`.
    static func stableResidentBytes(timeout: Double) -> Int? {
        let limit = Clock.now() &+ UInt64(timeout * 1e9)
        Clock.sleep(seconds: 0.1)
        guard var previous = residentBytes() else { return nil }
        while true {
            Clock.sleep(seconds: 0.1)
            guard let current = residentBytes() else { return nil }
            if abs(current - previous) < 65_536 || Clock.now() > limit { return current }
            previous = current
        }
    }
}
