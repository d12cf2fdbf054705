import Glibc
import Synchronization
import Testing
@testable import Lull
import LullDiagnosticsFormat
@testable import LullWakeupReport

extension IndependentSuite {
    /// The report's arithmetic on known inputs.
    @Suite(.serialized) struct WakeupAnalysisTests {
        @Test func optimalWakeupsStabEveryWindowGreedily() {
            let windows: [(start: UInt64, end: UInt64)] = [(0, 10), (5, 15), (12, 20), (30, 30), (31, 40), (32, 35)]
            // By end: 10 hits (0,10) and (5,15); 20 hits (12,20); 30; 35 hits (31,40) and (32,35).
            #expect(WakeupAnalysis.optimalWakeups(windows) == 4)
            #expect(WakeupAnalysis.optimalWakeups([]) == 0)
            #expect(WakeupAnalysis.optimalWakeups([(7, 7), (7, 7), (8, 8)]) == 2)
        }

        @Test func percentileIsNearestRank() {
            let values = (1...200).map(Double.init)
            #expect(WakeupAnalysis.percentile(values, 0.99) == 198)
            #expect(WakeupAnalysis.percentile([5], 0.99) == 5)
            #expect(WakeupAnalysis.percentile([], 0.99) == 0)
        }

        @Test func fixedDecimalsRound() {
            #expect(fixed(1.005, 1) == "1.0")
            #expect(fixed(12.345, 2) == "12.35")
            #expect(fixed(-0.5, 0) == "-1")
            #expect(fixed(0.04, 2) == "0.04")
            #expect(fixed(3, 0) == "3")
        }

        @Test func jsonEscapesAndParsesBack() throws {
            let value = JSONValue.object([("name", .string("a \"quoted\"\nline\\")), ("n", .integer(3)),
                                          ("x", .number(0.25)), ("none", .null), ("list", .array([.bool(true)]))])
            let parsed = try ParsedJSON.parse(value.rendered(indented: true))
            #expect(parsed["name"]?.string == "a \"quoted\"\nline\\")
            #expect(parsed["n"]?.integer == 3)
            #expect(parsed["x"]?.number == 0.25)
            #expect(parsed["none"] == .null)
            #expect(parsed["list"] == .array([.bool(true)]))
            #expect(try ParsedJSON.parse(value.rendered()) == parsed)
        }
    }
}

extension LullSuite {
    /// Recording inside the process: `RuntimeDiagnostics`.
    @Suite struct RuntimeDiagnosticsTests {
        @Test func recordsKnownTimersAndCPU() throws {
            #expect(RuntimeDiagnostics.snapshot() == nil)
            try RuntimeDiagnostics.start()
            #expect(RuntimeDiagnostics.isRecording)
            #expect(throws: DiagnosticsError.self) { try RuntimeDiagnostics.start() }

            let queue = WorkQueue(label: "lull.test.diagnostics")
            let fired = Counter()
            let done = Flag()
            let timer = EventSource.makeTimerSource(flags: .strict, queue: queue)
            timer.label = "lull.test.ticker"
            timer.schedule(deadline: .now() + .milliseconds(20), repeating: .milliseconds(20), leeway: .milliseconds(2))
            timer.setEventHandler {
                for _ in 0..<timer.data where fired.increment() == 10 { timer.cancel() }
            }
            timer.setCancelHandler { done.set() }
            timer.activate()
            let delayedRan = Flag()
            let delayedLine = #line + 1
            queue.asyncAfter(deadline: .now() + .milliseconds(30)) { delayedRan.set() }
            let burned = Flag()
            WorkQueue(label: "lull.test.burn", qos: .utility).async {
                burnThreadCPU(milliseconds: 30)
                burned.set()
            }
            #expect(waitUntil { done.isSet && delayedRan.isSet && burned.isSet })

            let report = try #require(RuntimeDiagnostics.stop())
            #expect(!RuntimeDiagnostics.isRecording)
            #expect(RuntimeDiagnostics.snapshot() == nil)

            let ticker = try #require(report.timers.first { $0.identity == "lull.test.ticker" })
            #expect(ticker.fires == fired.value)
            #expect(ticker.queue == "lull.test.diagnostics")
            #expect(ticker.qos == "default")
            #expect(abs(ticker.leewayMilliseconds - 2) < 0.001)
            let interval = try #require(ticker.meanIntervalMilliseconds)
            #expect(interval > 10 && interval < 40, "mean interval \(interval) ms")
            #expect(ticker.meanLatenessMilliseconds >= 0 && ticker.p99LatenessMilliseconds >= ticker.meanLatenessMilliseconds)

            let delayed = try #require(report.timers.first { $0.identity == "LullTests/WakeupDiagnosticsTests.swift:\(delayedLine)" })
            #expect(delayed.fires == 1)
            #expect(delayed.meanIntervalMilliseconds == nil)
            // asyncAfter's leeway: 10% of the delay, at least 1 ms.
            #expect(delayed.leewayMilliseconds >= 1 && delayed.leewayMilliseconds <= 3.001)

            let utility = try #require(report.cpu.first { $0.qos == "utility" })
            #expect(utility.milliseconds >= 25, "utility CPU \(utility.milliseconds) ms")
            #expect(report.cpu.map(\.qos) == ["background", "utility", "default", "user-initiated", "user-interactive"])
            #expect(report.wakeups.timer.count >= 1)
            #expect(report.wakeups.total.count == report.wakeups.timer.count + report.wakeups.descriptor.count
                    + report.wakeups.crossThread.count + report.wakeups.other.count)
            // One window per fire record: a late repeating timer merges fires into one record.
            let allFires = report.timers.reduce(0) { $0 + $1.fires }
            #expect(report.coalescing.windows >= 2 && report.coalescing.windows <= allFires)
            #expect(report.kernel != nil)
        }

        @Test func countsChangesFromOtherThreadsWhileAPollIsInProgress() throws {
            try RuntimeDiagnostics.start()
            let queue = WorkQueue(label: "lull.test.diagnostics.cross-thread")
            // A far timer keeps a worker asleep in the reactor's poll.
            let far = EventSource.makeTimerSource(queue: queue)
            far.schedule(deadline: .now() + .seconds(60))
            far.setEventHandler {}
            far.activate()
            defer { far.cancel() }
            // The poll in progress started after the recording (the timer's activation made
            // the poller start a new one): the recorder knows which thread is in it.
            #expect(waitUntil { pollerIsAsleep() })
            // A descriptor registered by a thread other than the poller's: libevent wakes the
            // poller to look at its changed set.
            var ends: [Int32] = [0, 0]
            try #require(pipe(&ends) == 0)
            let source = EventSource.makeReadSource(fileDescriptor: ends[0], queue: queue)
            let readable = Flag()
            let cancelled = Flag()
            source.setEventHandler { readable.set() }
            source.setCancelHandler { cancelled.set() }
            source.activate()
            var byte: UInt8 = 1
            #expect(write(ends[1], &byte, 1) == 1)
            #expect(readable.await())
            source.cancel()
            #expect(cancelled.await())
            close(ends[0])
            close(ends[1])
            let report = try #require(RuntimeDiagnostics.stop())
            #expect(report.wakeups.crossThread.count >= 1)
            #expect(report.wakeups.descriptor.count >= 1)
        }

        @Test func memoryIsBoundedByTheRing() throws {
            #expect(throws: DiagnosticsError.self) { try RuntimeDiagnostics.start(capacity: 0) }
            try RuntimeDiagnostics.start(capacity: 16)
            let queue = WorkQueue(label: "lull.test.diagnostics.ring")
            let fired = Counter()
            let timer = EventSource.makeTimerSource(flags: .strict, queue: queue)
            timer.schedule(deadline: .now(), repeating: .milliseconds(2))
            timer.setEventHandler { if fired.increment() == 40 { timer.cancel() } }
            timer.activate()
            #expect(fired.await { $0 >= 40 })
            let report = try #require(RuntimeDiagnostics.stop())
            #expect(report.lostRecords > 0)
            // The ring keeps 16 records (fires and wake-ups): at most 16 windows are left.
            #expect(report.coalescing.windows <= 16)
            #expect(report.timers.reduce(0) { $0 + $1.fires } <= 16 * 65_535)
        }
    }
}

extension IndependentSuite {
    /// `timerfires` on the timer example: every number of the report against what the
    /// program did.
    @Suite(.serialized) struct TimerfiresToolTests {
        static let plans: [String: (intervalMilliseconds: Double, fires: Int)] = [
            "heartbeat": (50, 40), "metrics": (70, 28), "cache-sweep": (110, 18), "status-poll": (130, 15),
        ]

        /// "fired a=1 b=2" from the example's output.
        func firedCounts(_ output: String) throws -> [String: Int] {
            let line = try #require(output.split(separator: "\n").first { $0.hasPrefix("fired ") })
            var counts: [String: Int] = [:]
            for pair in line.dropFirst("fired ".count).split(separator: " ") {
                let parts = pair.split(separator: "=")
                counts[String(parts[0])] = Int(parts[1])
            }
            return counts
        }

        /// The JSON report: the tool's whole standard output, nothing else in it (the traced
        /// program's own output goes to standard error), as `timerfires --json -- prog | jq .`
        /// needs.
        func jsonReport(_ output: String) throws -> ParsedJSON {
            try ParsedJSON.parse(output)
        }

        @Test func reportMatchesWhatTheProgramDid() throws {
            let outcome = try ToolProcess.run(try ToolProcess.executable("timerfires"),
                                              ["--json", "--", try ToolProcess.executable("timer-coalescing"),
                                               "--leeway-ms", "10", "--burn-ms", "100"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            // The program's lines went to standard error; standard output is the report alone.
            let fired = try firedCounts(outcome.standardError)
            #expect(!outcome.standardOutput.contains("fired "))
            let report = try jsonReport(outcome.standardOutput)
            checkSchema(report)
            #expect(report["groupedByIdentity"] == .bool(false))
            #expect(report["lostRecords"]?.integer == 0)
            let duration = try #require(report["durationSeconds"]?.number)
            #expect(duration > 1.5 && duration < 60)

            let rows = try #require(report["timers"]?.array)
            for (label, plan) in TimerfiresToolTests.plans {
                let row = try #require(rows.first { $0["identity"]?.string == label }, "no row for \(label)")
                #expect(row["fires"]?.integer == fired[label], "\(label)")
                // At least the planned fires: a late fire may merge two into one handler call.
                #expect((fired[label] ?? 0) >= plan.fires, "the program fired \(label) \(fired[label] ?? 0) times")
                #expect(row["queue"]?.string == "example.timers")
                #expect(row["qos"]?.string == "default")
                #expect(row["timers"]?.integer == 1)
                #expect(abs((row["leewayMilliseconds"]?.number ?? 0) - 10) < 0.001)
                let interval = try #require(row["meanIntervalMilliseconds"]?.number)
                #expect(abs(interval - plan.intervalMilliseconds) < plan.intervalMilliseconds * 0.25, "\(label): \(interval)")
                let late = try #require(row["meanLatenessMilliseconds"]?.number)
                let p99 = try #require(row["p99LatenessMilliseconds"]?.number)
                #expect(late >= 0 && late < 100, "\(label): mean lateness \(late)")
                #expect(p99 >= late)
                let shared = try #require(row["sharedWakeupFraction"]?.number)
                #expect(shared >= 0 && shared <= 1)
            }
            let retry = try #require(rows.first { $0["identity"]?.string?.hasPrefix("timer_coalescing/main.swift:") == true })
            #expect(retry["fires"]?.integer == fired["retry"])
            #expect(fired["retry"] == 12)
            let retryInterval = try #require(retry["meanIntervalMilliseconds"]?.number)
            #expect(retryInterval >= 150 && retryInterval < 300, "retry interval \(retryInterval)")
            // 10% of a delay just under 150 ms.
            let retryLeeway = try #require(retry["leewayMilliseconds"]?.number)
            #expect(retryLeeway > 14 && retryLeeway <= 15.001)
            let known = Set(TimerfiresToolTests.plans.keys).union([retry["identity"]?.string ?? "", "lull.housekeeping"])
            #expect(rows.allSatisfy { known.contains($0["identity"]?.string ?? "") })

            let totalFires = rows.reduce(0) { $0 + ($1["fires"]?.integer ?? 0) }
            let wakeups = try #require(report["wakeups"])
            let causes = ["timer", "descriptor", "crossThread", "other"].map { wakeups[$0]?["count"]?.integer ?? -1 }
            #expect(wakeups["total"]?["count"]?.integer == causes.reduce(0, +))
            let timerWakeups = causes[0]
            #expect(timerWakeups >= 1)
            let timerRate = try #require(wakeups["timer"]?["perSecond"]?.number)
            #expect(abs(timerRate - Double(timerWakeups) / duration) < 0.01)

            let coalescing = try #require(report["coalescing"])
            let windows = try #require(coalescing["windows"]?.integer)
            let used = try #require(coalescing["wakeupsWithTimerFires"]?.integer)
            let optimal = try #require(coalescing["optimalWakeups"]?.integer)
            #expect(windows >= 1 && windows <= totalFires)
            #expect(used >= 1 && used <= windows)
            #expect(optimal >= 1 && optimal <= windows)
            #expect(abs((coalescing["ratio"]?.number ?? 0) - Double(used) / Double(optimal)) < 1e-9)

            let kernel = try #require(report["kernel"])
            let switches = try #require(kernel["voluntaryContextSwitches"]?.integer)
            // Every timer wake-up is the poller coming back from sleep, nearly always.
            #expect(switches >= timerWakeups / 2, "kernel \(switches), timer wake-ups \(timerWakeups)")
            #expect(kernel["threads"] == .null)

            let cpu = try #require(report["cpu"]?.array)
            let utility = try #require(cpu.first { $0["qos"]?.string == "utility" })
            let burned = try #require(utility["milliseconds"]?.number)
            #expect(burned >= 90 && burned < 2_000, "utility CPU \(burned) ms for 100 ms burned")
            #expect(cpu.first { $0["qos"]?.string == "background" }?["milliseconds"]?.number == 0)
        }

        @Test func leewaySavesWakeups() throws {
            var timerWakeups: [Int] = []
            // The second run writes its report to a file (-o): the program keeps its standard
            // output, the file holds the report alone.
            let path = "/tmp/lull-timerfires-output.\(getpid()).json"
            defer { unlink(path) }
            for (leeway, toFile) in [("0", false), ("20", true)] {
                let outcome = try ToolProcess.run(try ToolProcess.executable("timerfires"),
                                                  ["--json"] + (toFile ? ["-o", path] : [])
                                                  + ["--", try ToolProcess.executable("timer-coalescing"), "--leeway-ms", leeway])
                #expect(outcome.status == 0, "\(outcome.standardError)")
                let report: ParsedJSON
                if toFile {
                    #expect(try firedCounts(outcome.standardOutput)["heartbeat"] ?? 0 >= 40)
                    #expect(!outcome.standardOutput.contains("{"))
                    report = try jsonReport(try #require(PressureStallFile.readSmallFile(path), "no report in \(path)"))
                    checkSchema(report)
                } else {
                    report = try jsonReport(outcome.standardOutput)
                }
                timerWakeups.append(try #require(report["wakeups"]?["timer"]?["count"]?.integer))
            }
            // 113 windows: about 100 wake-ups without leeway, about half with 20 ms.
            #expect(timerWakeups[1] < timerWakeups[0], "\(timerWakeups)")
        }

        @Test func groupedHumanReport() throws {
            let outcome = try ToolProcess.run(try ToolProcess.executable("timerfires"),
                                              ["-g", "--", try ToolProcess.executable("timer-coalescing"), "--leeway-ms", "5"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            let lines = outcome.standardOutput.split(separator: "\n").map(String.init)
            let header = try #require(lines.first { $0.hasPrefix("TIMER ") })
            for column in ["QUEUE", "QOS", "TIMERS", "FIRES", "INTERVAL", "LEEWAY", "LATE MEAN", "LATE P99", "SHARED"] {
                #expect(header.contains(column))
            }
            let heartbeat = try #require(lines.first { $0.hasPrefix("heartbeat ") })
            // heartbeat, queue, QoS, timers, fires, ...
            let cells = heartbeat.split(separator: " ")
            #expect(cells.count >= 5 && cells[1] == "example.timers" && cells[2] == "default" && cells[3] == "1")
            #expect(cells.count >= 5 && (Int(cells[4]) ?? 0) >= 40, "\(heartbeat)")
            #expect(lines.contains { $0.hasPrefix("Wake-ups: ") })
            #expect(lines.contains { $0.hasPrefix("Timer windows: ") && $0.contains("optimal") })
            #expect(lines.contains { $0.hasPrefix("Kernel: ") && $0.contains("voluntary context switches") })
            #expect(lines.contains { $0.hasPrefix("CPU time per QoS (ms/s): background") })
        }

        @Test func attachesToARunningProgram() throws {
            let devNull = open("/dev/null", O_WRONLY | O_CLOEXEC)
            defer { close(devNull) }
            let program = try ToolProcess.spawn(try ToolProcess.executable("timer-coalescing"),
                                                ["--leeway-ms", "5", "--rounds", "30"], output: (devNull, devNull))
            defer {
                kill(program, SIGKILL)
                _ = ToolProcess.reap(program)
            }
            #expect(waitUntil { listensForDiagnostics(pid: program) })
            let outcome = try ToolProcess.run(try ToolProcess.executable("timerfires"),
                                              ["--json", "-g", "--pid", "\(program)", "--seconds", "0.6"])
            #expect(outcome.status == 0, "\(outcome.standardError)")
            let report = try jsonReport(outcome.standardOutput)
            checkSchema(report)
            #expect(report["pid"]?.integer == Int(program))
            #expect(report["groupedByIdentity"] == .bool(true))
            let rows = try #require(report["timers"]?.array)
            let heartbeat = try #require(rows.first { $0["identity"]?.string == "heartbeat" })
            let fires = try #require(heartbeat["fires"]?.integer)
            #expect(fires >= 3 && fires <= 20, "heartbeat fired \(fires) times in 0.6 s")
            #expect(abs((heartbeat["leewayMilliseconds"]?.number ?? 0) - 5) < 0.001)
            let interval = try #require(heartbeat["meanIntervalMilliseconds"]?.number)
            #expect(abs(interval - 50) < 15, "interval \(interval)")
            let kernel = try #require(report["kernel"])
            #expect((kernel["voluntaryContextSwitches"]?.integer ?? -1) >= 1)
            #expect((kernel["threads"]?.integer ?? 0) >= 1)
        }

        @Test func clearErrors() throws {
            let tool = try ToolProcess.executable("timerfires")
            func failure(_ arguments: [String]) throws -> String {
                let outcome = try ToolProcess.run(tool, arguments)
                #expect(outcome.status != 0, "\(arguments) succeeded")
                return outcome.standardError
            }
            #expect(try failure(["--", "/nonexistent/lull-program"]).contains("does not exist"))
            #expect(try failure(["--", "no-such-lull-program-in-path"]).contains("does not exist (not found in PATH)"))
            #expect(try failure(["--", "/bin/true"]).contains("recorded nothing"))

            let gone = try ToolProcess.spawn("/bin/true", [])
            _ = ToolProcess.reap(gone)
            #expect(try failure(["--pid", "\(gone)"]).contains("there is no process \(gone)"))

            let sleeper = try ToolProcess.spawn("/bin/sleep", ["20"])
            defer {
                kill(sleeper, SIGKILL)
                _ = ToolProcess.reap(sleeper)
            }
            // Not a Lull program: the kernel's tracepoints, which need root and tracefs
            // (KernelTimerfiresTests checks the report).
            let foreign = try ToolProcess.run(tool, ["--pid", "\(sleeper)", "--seconds", "0.2"])
            #expect(foreign.standardError.contains("is not a Lull program"), "\(foreign.standardError)")
            if foreign.status == 0 {
                #expect(foreign.standardOutput.hasPrefix("Kernel wake-ups of pid \(sleeper) (sleep)"))
            } else {
                #expect(foreign.standardError.contains("root") || foreign.standardError.contains("tracefs"),
                        "\(foreign.standardError)")
            }

            // This process (a Lull program) seen by another user. Root can read every process,
            // so the check needs root to become someone else.
            if geteuid() == 0 && access("/usr/bin/setpriv", X_OK) == 0 {
                let stranger = try ToolProcess.run("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups",
                                                                        tool, "--pid", "\(getpid())", "--seconds", "1"])
                #expect(stranger.status != 0)
                #expect(stranger.standardError.contains("is not ours to read"), "\(stranger.standardError)")
            }

            let directory = "/tmp/lull-timerfires-test.\(getpid())"
            mkdir(directory, 0o700)
            defer {
                unlink("\(directory)/garbage.trace")
                unlink("\(directory)/kept.trace")
                rmdir(directory)
            }
            let garbage = open("\(directory)/garbage.trace", O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0o600)
            let noise = [UInt8](repeating: 0x5a, count: 8_192)
            _ = noise.withUnsafeBytes { write(garbage, $0.baseAddress, $0.count) }
            close(garbage)
            #expect(try failure(["--read-trace", "\(directory)/garbage.trace"]).contains("the trace is damaged"))

            // A real trace, cut short.
            let kept = try ToolProcess.run(tool, ["--records", "1024", "--trace", "\(directory)/kept.trace", "--",
                                                  try ToolProcess.executable("timer-coalescing"), "--leeway-ms", "20"])
            #expect(kept.status == 0, "\(kept.standardError)")
            let reread = try ToolProcess.run(tool, ["--json", "--read-trace", "\(directory)/kept.trace"])
            #expect(reread.status == 0, "\(reread.standardError)")
            checkSchema(try jsonReport(reread.standardOutput))
            #expect(truncate("\(directory)/kept.trace", 10_000) == 0)
            #expect(try failure(["--read-trace", "\(directory)/kept.trace"]).contains("the trace is damaged"))

            #expect(try failure(["--json"]).contains("give exactly one of"))
            // An unwritable -o fails before the program runs.
            #expect(try failure(["-o", "/proc/no-such-directory/report", "--", "/bin/true"])
                .contains("cannot write the report to /proc/no-such-directory/report"))
        }

        /// Keys and types of every part of the JSON report.
        func checkSchema(_ report: ParsedJSON) {
            #expect(report.keys == ["pid", "durationSeconds", "groupedByIdentity", "lostRecords", "timers", "wakeups",
                                    "coalescing", "kernel", "cpu"])
            #expect(report["pid"]?.integer != nil)
            #expect(report["durationSeconds"]?.number != nil)
            #expect(report["lostRecords"]?.integer != nil)
            if case .bool = report["groupedByIdentity"] {} else { Issue.record("groupedByIdentity is not a bool") }
            for row in report["timers"]?.array ?? [] {
                #expect(row.keys == ["identity", "queue", "qos", "timers", "fires", "meanIntervalMilliseconds",
                                     "leewayMilliseconds", "meanLatenessMilliseconds", "p99LatenessMilliseconds",
                                     "sharedWakeupFraction"])
                #expect(row["identity"]?.string != nil && row["queue"]?.string != nil && row["qos"]?.string != nil)
                #expect(row["timers"]?.integer != nil && row["fires"]?.integer != nil)
                #expect(row["meanIntervalMilliseconds"]?.number != nil || row["meanIntervalMilliseconds"] == .null)
                for key in ["leewayMilliseconds", "meanLatenessMilliseconds", "p99LatenessMilliseconds", "sharedWakeupFraction"] {
                    #expect(row[key]?.number != nil, "\(key)")
                }
            }
            #expect(report["timers"]?.array != nil)
            let wakeups = report["wakeups"]
            #expect(wakeups?.keys == ["timer", "descriptor", "crossThread", "other", "total"])
            for cause in ["timer", "descriptor", "crossThread", "other", "total"] {
                #expect(wakeups?[cause]?.keys == ["count", "perSecond"])
                #expect(wakeups?[cause]?["count"]?.integer != nil && wakeups?[cause]?["perSecond"]?.number != nil)
            }
            let coalescing = report["coalescing"]
            #expect(coalescing?.keys == ["windows", "wakeupsWithTimerFires", "optimalWakeups", "ratio"])
            for key in ["windows", "wakeupsWithTimerFires", "optimalWakeups"] { #expect(coalescing?[key]?.integer != nil) }
            #expect(coalescing?["ratio"]?.number != nil || coalescing?["ratio"] == .null)
            if let kernel = report["kernel"], kernel != .null {
                #expect(kernel.keys == ["voluntaryContextSwitches", "perSecond", "threads"])
                #expect(kernel["voluntaryContextSwitches"]?.integer != nil && kernel["perSecond"]?.number != nil)
                #expect(kernel["threads"]?.integer != nil || kernel["threads"] == .null)
            }
            let cpu = report["cpu"]?.array ?? []
            #expect(cpu.compactMap { $0["qos"]?.string } == ["background", "utility", "default", "user-initiated",
                                                              "user-interactive"])
            for entry in cpu {
                #expect(entry.keys == ["qos", "milliseconds", "millisecondsPerSecond"])
                #expect(entry["milliseconds"]?.number != nil && entry["millisecondsPerSecond"]?.number != nil)
            }
        }
    }
}

/// True once `pid` listens on its Lull diagnostics socket (and its timers run: the example
/// creates them right at start).
func listensForDiagnostics(pid: pid_t) -> Bool {
    guard let table = KernelSwitches.readSmallFile("/proc/net/unix") else { return false }
    return table.contains("@\(ControlSocketAddress.name(pid: pid))")
}

/// True while the polling worker sleeps in the kernel: inside libevent's loop (the only
/// place a polling worker sleeps).
func pollerIsAsleep() -> Bool {
    let tid = Runtime.shared.pool.pollerThreadID.load(ordering: .acquiring)
    guard tid != 0, let stat = KernelSwitches.readSmallFile("/proc/self/task/\(tid)/stat"),
          let nameEnd = stat.lastIndex(of: ")") else { return false }
    // "tid (name) S ...": the state follows the name.
    return stat[stat.index(after: nameEnd)...].dropFirst().first == "S"
}

/// Spins until the calling thread has used `milliseconds` of CPU time.
func burnThreadCPU(milliseconds: Double) {
    let end = Diagnostics.threadCPUNanoseconds() + UInt64(milliseconds * 1_000_000)
    while Diagnostics.threadCPUNanoseconds() < end {}
}
