// Timers riding on other wake-ups: 1,000 repeating timers with 50 % leeway beside a busy
// socketpair ping-pong (two read sources on one serial queue, echoing one byte back and
// forth without pause), or beside a descriptor that a thread of the benchmark writes every
// 5 ms or 20 ms, where some windows close before the next descriptor event. Lull's poller
// fires every timer whose window has opened after each wake-up, whatever woke it, so the
// descriptor's wake-ups carry the timers. Lull counts its reactor's wake-ups by cause
// (RuntimeDiagnostics); Dispatch cannot say why it woke, so its column shows its fires and
// its context switches.

import Dispatch
import Glibc
import Lull
import Synchronization

enum TimerPiggybackBenchmark {
    static let all: [Benchmark] = [piggyback, make(paceMilliseconds: 5), make(paceMilliseconds: 20)]

    static let timerCount = 1_000
    /// Intervals are spread evenly over [10 ms, 100 ms]; each timer's leeway is half of it.
    static let shortestInterval: UInt64 = 10_000_000
    static let longestInterval: UInt64 = 100_000_000
    /// The window opens this long after the timers were scheduled (every timer has fired).
    static let warmUp: UInt64 = 500_000_000
    /// Room for every wake-up and fire of the window: the ping-pong wakes the reactor tens of
    /// thousands of times a second (64 bytes a record, touched only as used).
    static let recordCapacity = 1 << 22

    static let piggyback = make(paceMilliseconds: 0)

    /// The benchmark with the busy ping-pong (`paceMilliseconds` 0) or with one byte written
    /// every `paceMilliseconds` by a thread of the benchmark, drained by one read source.
    static func make(paceMilliseconds: Int) -> Benchmark {
        let busy = paceMilliseconds == 0
        let load = busy
            ? "a busy socketpair ping-pong (two read sources on one serial queue echoing one byte)"
            : "a socketpair to which a thread writes one byte every \(paceMilliseconds) ms (one read source drains it)"
        let rowPrefix = busy ? "piggyback" : "piggyback \(paceMilliseconds) ms"
        return Benchmark(
            name: busy ? "timer-piggyback" : "timer-piggyback-\(paceMilliseconds)ms",
            title: "timers riding on descriptor wake-ups: \(load) plus 1,000 repeating timers, intervals spread over "
                + "10-100 ms, leeway 50 %, default global queue; figure = timer fires in the window (from 0.5 s after "
                + "scheduling); Lull also counts its reactor's wake-ups by cause and the share of fires that cost no "
                + "timer wake-up of their own",
            unit: "timer fires",
            lowerIsBetter: false,
            singleShot: true,
            parameters: { options in
                Parameters(n: timerCount, seconds: options.quick ? 2 : 3, runTimeout: options.runTimeout)
            },
            sizeDescription: { "\(Format.grouped($0.n)) timers + \(busy ? "ping-pong" : "\(paceMilliseconds) ms writes"), "
                + "\(Format.fixed($0.seconds, 0)) s" },
            run: { runtime, parameters in run(runtime, parameters, pace: UInt64(paceMilliseconds) * 1_000_000) },
            extraRows: [
                ExtraRow(label: "\(rowPrefix) voluntary switches", extra: "voluntary switches", unit: "switches",
                         lowerIsBetter: true, style: .count),
                ExtraRow(label: busy ? "\(rowPrefix) ping-pong round trips" : "\(rowPrefix) descriptor events",
                         extra: "descriptor events", unit: busy ? "trips" : "events", lowerIsBetter: false, style: .count),
                ExtraRow(label: "\(rowPrefix) CPU ms", extra: "CPU ms", unit: "ms", lowerIsBetter: true, style: .count),
                ExtraRow(label: "\(rowPrefix) timer-expiry wake-ups", extra: "timer wake-ups", unit: "wake-ups",
                         lowerIsBetter: true, style: .count),
                ExtraRow(label: "\(rowPrefix) descriptor wake-ups", extra: "descriptor wake-ups", unit: "wake-ups",
                         lowerIsBetter: false, style: .count),
                ExtraRow(label: "\(rowPrefix) fires riding (%)", extra: "riding %", unit: "%",
                         lowerIsBetter: false, style: .count),
                ExtraRow(label: "\(rowPrefix) optimal timer wake-ups", extra: "optimal timer wake-ups", unit: "wake-ups",
                         lowerIsBetter: true, style: .count),
                ExtraRow(label: "\(rowPrefix) timer wake-ups saved (%)", extra: "timer wake-ups saved %", unit: "%",
                         lowerIsBetter: false, style: .count),
                ExtraRow(label: "\(rowPrefix) optimal timer wake-ups beside the writes",
                         extra: "optimal beside the writes", unit: "wake-ups", lowerIsBetter: true, style: .count),
            ]
        )
    }

    /// Each timer's interval (ns): evenly spread from the shortest to the longest.
    static func intervals(count: Int) -> [UInt64] {
        (0..<count).map { index in
            shortestInterval + (longestInterval - shortestInterval) * UInt64(index) / UInt64(max(count - 1, 1))
        }
    }

    /// Each timer's first deadline (ns after the start): a random phase within its interval,
    /// after 20 ms, with a fixed seed.
    static func phases(_ intervals: [UInt64]) -> [UInt64] {
        var generator = SplitMix64(seed: 0x7069_6767_7962_6163)
        return intervals.map { 20_000_000 + generator.next() % $0 }
    }

    /// The socketpair's two ends, what crossed it, and whether it should go on.
    final class PingPong: Sendable {
        let ends: (Int32, Int32)
        let stopped = Atomic<Bool>(false)
        let ioError = Atomic<Int32>(0)
        /// Round trips (busy) or bytes drained (paced): written by handlers of the one
        /// serial queue.
        let events = Atomic<Int>(0)
        /// Signalled when the paced writer has returned.
        let writerDone = Latch()
        /// When the paced writer wrote each byte (monotonic ns).
        let writeTimes = Mutex<[UInt64]>([])

        init(ends: (Int32, Int32)) {
            self.ends = ends
        }

        /// The handler of the read source of `end` in the busy ping-pong: takes the byte
        /// and sends it back, until stopped.
        func echo(_ end: Int32, countsTrips: Bool) {
            var byte: UInt8 = 0
            guard read(end, &byte, 1) == 1 else { return }
            if countsTrips { events.wrappingAdd(1, ordering: .relaxed) }
            guard !stopped.load(ordering: .relaxed) else { return }
            if write(end, &byte, 1) != 1 { ioError.store(errno, ordering: .relaxed) }
        }

        /// The handler of the read source of end 1 when paced: takes every byte waiting.
        func drain() {
            var bytes = (UInt64(0), UInt64(0), UInt64(0), UInt64(0))
            while true {
                let count = withUnsafeMutableBytes(of: &bytes) { read(ends.1, $0.baseAddress, $0.count) }
                guard count > 0 else { return }
                events.wrappingAdd(count, ordering: .relaxed)
            }
        }

        /// Sends the first byte of the busy ping-pong.
        func serve() -> Bool {
            var byte: UInt8 = 1
            return write(ends.0, &byte, 1) == 1
        }

        /// The paced writer's thread: one byte into end 0 every `pace` ns (absolute ticks,
        /// so that its own delays do not add up) until stopped.
        func writePaced(every pace: UInt64) {
            defer { writerDone.signal() }
            var tick = Clock.now()
            while !stopped.load(ordering: .relaxed) {
                var byte: UInt8 = 1
                let now = Clock.now()
                writeTimes.withLock { $0.append(now) }
                if write(ends.0, &byte, 1) != 1 && errno != EAGAIN {
                    ioError.store(errno, ordering: .relaxed)
                    return
                }
                tick &+= pace
                var until = timespec(tv_sec: Int(tick / 1_000_000_000), tv_nsec: Int(tick % 1_000_000_000))
                while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nil) == EINTR {}
            }
        }
    }

    /// The fewest timer wake-ups for the windows [deadline, deadline + interval / 2] of every
    /// fire due in [from, to], when the wake-ups at `freeInstants` come anyway: the windows
    /// those instants hit cost nothing, the rest are stabbed greedily (by window end).
    static func optimalWakeUps(intervals: [UInt64], phases: [UInt64], start: UInt64, from: UInt64, to: UInt64,
                               freeInstants: [UInt64]) -> Int {
        let free = freeInstants.sorted()
        var windows: [(start: UInt64, end: UInt64)] = []
        for (interval, phase) in zip(intervals, phases) {
            var deadline = start &+ phase
            if deadline < from { deadline += (from - deadline + interval - 1) / interval * interval }
            while deadline <= to {
                let end = deadline + interval / 2
                // The first free instant at or after the deadline: does it fall in the window?
                var low = 0
                var high = free.count
                while low < high {
                    let middle = (low + high) / 2
                    if free[middle] < deadline { low = middle + 1 } else { high = middle }
                }
                if low == free.count || free[low] > end { windows.append((deadline, end)) }
                deadline += interval
            }
        }
        windows.sort { $0.end < $1.end }
        var count = 0
        var lastStab: UInt64?
        for window in windows where lastStab.map({ window.start > $0 }) ?? true {
            lastStab = window.end
            count += 1
        }
        return count
    }

    @Sendable
    static func run(_ runtime: Runtime, _ parameters: Parameters, pace: UInt64) -> RunOutcome {
        let n = parameters.n
        let intervals = intervals(count: n)
        let phases = phases(intervals)
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            return .failed("socketpair() failed: \(Descriptors.lastError())")
        }
        defer { Descriptors.close(fds) }
        for descriptor in fds {
            let flags = fcntl(descriptor, F_GETFL)
            guard flags >= 0, fcntl(descriptor, F_SETFL, flags | O_NONBLOCK) == 0 else {
                return .failed("fcntl(O_NONBLOCK) failed: \(Descriptors.lastError())")
            }
        }
        let pingPong = PingPong(ends: (fds[0], fds[1]))
        let fires = Atomic<Int>(0)
        // Busy: both ends echo. Paced: end 1 drains what the writer thread sends into end 0.
        let echoFirst: @Sendable () -> Void = { pingPong.echo(pingPong.ends.0, countsTrips: true) }
        let echoSecond: @Sendable () -> Void = { pingPong.echo(pingPong.ends.1, countsTrips: false) }
        let drain: @Sendable () -> Void = { pingPong.drain() }
        let handlers: [(end: Int32, handler: @Sendable () -> Void)] = pace == 0
            ? [(fds[0], echoFirst), (fds[1], echoSecond)]
            : [(fds[1], drain)]
        let cancelled = Countdown(n + handlers.count)
        let onCancel: @Sendable () -> Void = { cancelled.countDown() }

        let start = Clock.now()
        let cancelAll: () -> Void
        switch runtime {
        case .lull:
            let serial = WorkQueue(label: "bench.piggyback.ping-pong")
            let sources = handlers.map { end, handler in
                let source = EventSource.makeReadSource(fileDescriptor: end, queue: serial)
                source.setEventHandler(handler: handler)
                source.setCancelHandler(handler: onCancel)
                source.activate()
                return source
            }
            let queue = WorkQueue.global()
            let base = Deadline(uptimeNanoseconds: start)
            var timers: [TimerSource] = []
            timers.reserveCapacity(n)
            for (interval, phase) in zip(intervals, phases) {
                let timer = EventSource.makeTimerSource(queue: queue)
                timer.setEventHandler { fires.wrappingAdd(Int(timer.data), ordering: .relaxed) }
                timer.setCancelHandler(handler: onCancel)
                timer.schedule(deadline: base + .nanoseconds(phase), repeating: .nanoseconds(interval),
                               leeway: .nanoseconds(interval / 2))
                timer.activate()
                timers.append(timer)
            }
            cancelAll = {
                for source in sources { source.cancel() }
                for timer in timers { timer.cancel() }
            }
        case .dispatch:
            let serial = DispatchQueue(label: "bench.piggyback.ping-pong")
            let sources = handlers.map { end, handler in
                let source = DispatchSource.makeReadSource(fileDescriptor: end, queue: serial)
                source.setEventHandler(handler: handler)
                source.setCancelHandler(handler: onCancel)
                source.activate()
                return source
            }
            let queue = DispatchQueue.global()
            var timers: [any DispatchSourceTimer] = []
            timers.reserveCapacity(n)
            for (interval, phase) in zip(intervals, phases) {
                let timer = DispatchSource.makeTimerSource(queue: queue)
                let box = DispatchTimerBox(timer)
                timer.setEventHandler { fires.wrappingAdd(Int(box.source.data), ordering: .relaxed) }
                timer.setCancelHandler(handler: onCancel)
                timer.schedule(deadline: DispatchTime(uptimeNanoseconds: start &+ phase),
                               repeating: .nanoseconds(Int(interval)), leeway: .nanoseconds(Int(interval / 2)))
                timer.activate()
                timers.append(timer)
            }
            cancelAll = {
                for source in sources { source.cancel() }
                for timer in timers { timer.cancel() }
            }
        }
        if pace == 0 {
            guard pingPong.serve() else {
                cancelAll()
                return .failed("the first byte could not be written: \(Descriptors.lastError())")
            }
        } else if !ThreadStarter.start({ pingPong.writePaced(every: pace) }) {
            cancelAll()
            return .failed("the writer thread could not be started")
        }
        let scheduled = Clock.now()
        let windowOpens = max(start &+ warmUp, scheduled &+ 200_000_000)
        let now = Clock.now()
        if windowOpens > now { Clock.sleep(seconds: Double(windowOpens - now) / 1e9) }

        if runtime == .lull {
            do { try RuntimeDiagnostics.start(capacity: recordCapacity) } catch {
                cancelAll()
                return .failed("diagnostics: \(error)")
            }
        }
        let usageBefore = ProcessUsage.now()
        let firesBefore = fires.load(ordering: .relaxed)
        let tripsBefore = pingPong.events.load(ordering: .relaxed)
        let windowStart = Clock.now()
        Clock.sleep(seconds: parameters.seconds)
        let windowEnd = Clock.now()
        let firesAfter = fires.load(ordering: .relaxed)
        let tripsAfter = pingPong.events.load(ordering: .relaxed)
        let usageAfter = ProcessUsage.now()
        let report = runtime == .lull ? RuntimeDiagnostics.stop() : nil

        pingPong.stopped.store(true, ordering: .relaxed)
        if pace > 0 && !pingPong.writerDone.wait(seconds: 5) {
            return .failed("TIMEOUT: the writer thread had not returned 5 s after it was stopped")
        }
        cancelAll()
        guard cancelled.wait(seconds: TimerSourceBenchmarks.cancelTimeout) else {
            return .failed("TIMEOUT: the cancel handlers of the timers and read sources had not all run "
                + "\(Format.seconds(TimerSourceBenchmarks.cancelTimeout)) after cancel()")
        }
        let error = pingPong.ioError.load(ordering: .relaxed)
        if error != 0 { return .failed("the ping-pong failed to write: \(String(cString: strerror(error)))") }

        let seconds = Clock.seconds(from: windowStart, to: windowEnd)
        let windowFires = firesAfter - firesBefore
        let trips = tripsAfter - tripsBefore
        let expected = intervals.reduce(0.0) { $0 + seconds * 1e9 / Double($1) }
        var notes: [String] = []
        if abs(Double(windowFires) - expected) > 0.03 * expected {
            notes.append("WRONG COUNT: \(Format.grouped(windowFires)) fires in the window, "
                + "\(Format.grouped(Int(expected.rounded()))) expected (seconds / interval, summed)")
        } else {
            notes.append("\(Format.grouped(windowFires)) fires in the window, \(Format.grouped(Int(expected.rounded()))) "
                + "expected: none lost")
        }
        if trips == 0 { notes.append("STALLED: no descriptor event was handled in the window") }
        var extras: [(String, Double)] = [
            ("descriptor events", Double(trips)),
            ("expected fires", expected),
        ]
        if let usageBefore, let usageAfter {
            // getrusage counts every thread; less the measuring one, which sleeps.
            extras.append(("voluntary switches", Double((usageAfter.processVoluntary - usageBefore.processVoluntary)
                - (usageAfter.threadVoluntary - usageBefore.threadVoluntary))))
            extras.append(("CPU ms", (usageAfter.cpuSeconds - usageBefore.cpuSeconds) * 1000))
        }
        if let report {
            let recordedFires = report.timers.reduce(0) { $0 + $1.fires }
            let timerWakeups = report.wakeups.timer.count
            extras.append(("timer wake-ups", Double(timerWakeups)))
            extras.append(("descriptor wake-ups", Double(report.wakeups.descriptor.count)))
            extras.append(("cross-thread wake-ups", Double(report.wakeups.crossThread.count)))
            extras.append(("reactor wake-ups", Double(report.wakeups.total.count)))
            extras.append(("recorded fires", Double(recordedFires)))
            extras.append(("wake-ups with fires", Double(report.coalescing.wakeupsWithTimerFires)))
            extras.append(("optimal timer wake-ups", Double(report.coalescing.optimalWakeups)))
            // Every timer-expiry wake-up is charged to one fire: the other fires cost no
            // wake-up of their own (they rode on a descriptor's or on another timer's).
            let riding = recordedFires > 0 ? 100 * Double(max(0, recordedFires - timerWakeups)) / Double(recordedFires) : 0
            extras.append(("riding %", riding))
            // The wake-ups the timers alone would need at best, against those they caused.
            let optimal = report.coalescing.optimalWakeups
            extras.append(("timer wake-ups saved %",
                           optimal > 0 ? 100 * Double(max(0, optimal - timerWakeups)) / Double(optimal) : 0))
            if pace > 0 {
                // What riding could save at best: the windows the writes hit cost nothing.
                let writes = pingPong.writeTimes.withLock { $0 }
                let alone = optimalWakeUps(intervals: intervals, phases: phases, start: start, from: windowStart,
                                           to: windowEnd, freeInstants: [])
                let beside = optimalWakeUps(intervals: intervals, phases: phases, start: start, from: windowStart,
                                            to: windowEnd, freeInstants: writes)
                extras.append(("optimal alone (computed)", Double(alone)))
                extras.append(("optimal beside the writes", Double(beside)))
                notes.append("timer wake-ups: \(Format.grouped(timerWakeups)) against an optimum of "
                    + "\(Format.grouped(beside)) beside the \(Format.grouped(writes.count)) writes "
                    + "(\(Format.grouped(alone)) for the timers alone, as computed from their schedule)")
            }
            let ownShare = report.timers.isEmpty ? 0
                : report.timers.reduce(0.0) { $0 + $1.sharedWakeupFraction * Double($1.fires) } / Double(max(recordedFires, 1))
            extras.append(("shared-wake-up fires %", 100 * ownShare))
            if report.lostRecords > 0 {
                notes.append("the diagnostics ring overwrote \(Format.grouped(report.lostRecords)) records: "
                    + "the fire figures cover the rest only")
            }
            notes.append("reactor: \(Format.grouped(report.wakeups.total.count)) wake-ups "
                + "(\(Format.grouped(timerWakeups)) timer expiry, \(Format.grouped(report.wakeups.descriptor.count)) "
                + "descriptor, \(Format.grouped(report.wakeups.crossThread.count)) cross-thread, "
                + "\(Format.grouped(report.wakeups.other.count)) other); \(Format.grouped(recordedFires)) fires recorded "
                + "in \(Format.grouped(report.coalescing.wakeupsWithTimerFires)) wake-ups "
                + "(\(Format.grouped(report.coalescing.optimalWakeups)) would do for the timers alone)")
        }
        return .ok(value: Double(windowFires), seconds: seconds, extras: extras, notes: notes)
    }
}
