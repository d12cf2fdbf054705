import Glibc
import Testing
import Lull

/// `GlobalExecutor.install()` is process-wide and comes before the first task, so each
/// check runs `lull-executor-probe` in a child and reads what it printed.
extension IndependentSuite {
    @Suite(.serialized) struct GlobalExecutorTests {
        /// Runs the probe in `mode` to its end; its output lines.
        static func probe(_ mode: String) throws -> [Substring] {
            try run("lull-executor-probe", [mode])
        }

        /// Runs `executable` with `arguments` to its end; its output lines.
        static func run(_ executable: String, _ arguments: [String]) throws -> [Substring] {
            let mode = arguments.joined(separator: " ")
            let process = try ExampleProcess(executable, arguments)
            let status = process.waitForExit()
            let text = process.text
            #expect(status == 0, "the probe (\(mode)) ended with \(String(describing: status)): \(text)")
            return text.split(separator: "\n")
        }

        /// The words of the line that starts with `key` and then `word`, after those two.
        static func fields(_ lines: [Substring], _ key: String, _ word: String) -> [Substring]? {
            lines.lazy.map { $0.split(separator: " ") }.first { $0.count >= 2 && $0[0] == key && $0[1] == word }.map { Array($0.dropFirst(2)) }
        }

        @Test func tasksRunOnTheWorkerPoolAtTheQoSOfTheirPriority() throws {
            let lines = try Self.probe("priority")
            let expected: [(String, String, String)] = [
                ("high", "userInitiated", "lull.user-init"), ("userInitiated", "userInitiated", "lull.user-init"),
                ("medium", "default", "lull.default"), ("low", "utility", "lull.utility"),
                ("utility", "utility", "lull.utility"), ("background", "background", "lull.background"),
                ("none", "default", "lull.default"),
            ]
            for (priority, qos, worker) in expected {
                let seen = Self.fields(lines, "priority", priority)
                #expect(seen == [Substring(qos), Substring(worker)], "priority \(priority): \(lines)")
            }
        }

        @Test func sleepsWithOverlappingTolerancesShareAWakeUp() throws {
            let lines = try Self.probe("sleep")
            let seen = try #require(Self.fields(lines, "sleep", "timer-wakeups"), "\(lines)")
            // "<wake-ups> optimal <optimum> early <count>"
            try #require(seen.count == 5, "\(lines)")
            let wakeups = try #require(Int(seen[0]))
            let optimum = try #require(Int(seen[2]))
            let early = try #require(Int(seen[4]))
            // 40 sleeps whose windows all overlap: through Lull's timers (at least one
            // wake-up recorded) and coalesced (not one wake-up per sleep), none early.
            #expect(wakeups >= 1, "the sleeps did not reach Lull's timers: \(lines)")
            #expect(wakeups <= max(optimum, 1) + 1, "\(wakeups) wake-ups for an optimum of \(optimum): \(lines)")
            #expect(early == 0)
            #expect(Self.fields(lines, "cancelled-sleep", "threw-cancellation") == ["true", "within-2s", "true"], "\(lines)")
        }

        @Test func cancelledSleepsLeaveNoTimerAndNoWakeUp() throws {
            let lines = try Self.probe("cancel")
            // 1,000 one-hour sleeps on the pool, the main actor and a queue, cancelled: each
            // threw, none is left in the engine or the map, and the reactor's timer is not
            // armed for their windows.
            #expect(Self.fields(lines, "cancel", "scheduled")?.first == "1000", "\(lines)")
            #expect(Self.fields(lines, "cancel", "threw")
                    == ["1000", "timers", "0", "mapped", "0", "armed-for-sleeps", "false"], "\(lines)")
        }

        @Test func mainActorJobsRunOnTheMainQueueInsideRunMain() throws {
            let lines = try Self.probe("main")
            #expect(Self.fields(lines, "mainactor", "main-thread") == ["true", "main-queue", "true"], "\(lines)")
            #expect(Self.fields(lines, "detached", "main-thread") == ["false"], "\(lines)")
            #expect(Self.fields(lines, "resumed", "main-thread") == ["true", "main-queue", "true"], "\(lines)")
            #expect(Self.fields(lines, "slept", "main-thread") == ["true", "main-queue", "true"], "\(lines)")
            #expect(Self.fields(lines, "assumed", "main-thread") == ["true", "main-queue", "true"], "\(lines)")
        }

        @Test func installFromATaskOrTwiceThrowsAndChangesNothing() throws {
            let lines = try Self.probe("errors")
            let fromTask = lines.first { $0.hasPrefix("from-task ") }
            #expect(fromTask?.contains("called from a task") == true, "\(lines)")
            #expect(lines.contains("installed-after-task false"), "\(lines)")
            #expect(lines.contains("installed true"), "\(lines)")
            let second = lines.first { $0.hasPrefix("second ") }
            #expect(second?.contains("installed already") == true, "\(lines)")
        }

        /// The async-main probe's checks: `mainThread` is where MainActor work runs ("true":
        /// the main thread, "false": Dispatch's main-queue threads).
        static func checkAsyncMain(_ arguments: [String], mainThread: String) throws {
            let lines = try run("lull-async-main-probe", arguments)
            let fromTask = lines.first { $0.hasPrefix("from-task ") }
            #expect(fromTask?.contains("called from a task") == true, "\(lines)")
            #expect(lines.contains("installed-after-task false"), "\(lines)")
            #expect(lines.contains("installed true"), "\(lines)")
            #expect(lines.first { $0.hasPrefix("second ") }?.contains("installed already") == true, "\(lines)")
            let isolated: [Substring] = ["true", "main-queue", "true", "main-thread", Substring(mainThread)]
            #expect(Self.fields(lines, "body", "main-actor") == isolated, "\(lines)")
            #expect(Self.fields(lines, "resumed", "main-actor") == isolated, "\(lines)")
            #expect(Self.fields(lines, "main-actor-job", "main-queue") == ["true", "main-thread", Substring(mainThread)],
                    "\(lines)")
            #expect(Self.fields(lines, "priority", "high") == ["userInitiated", "lull.user-init"], "\(lines)")
            #expect(Self.fields(lines, "priority", "utility") == ["utility", "lull.utility"], "\(lines)")
            #expect(Self.fields(lines, "priority", "background") == ["background", "lull.background"], "\(lines)")
            // MainActor jobs and WorkQueue.main blocks never overlapped.
            #expect(Self.fields(lines, "overlap", "worst") == ["1"], "\(lines)")
            // "<windows> wakeups <count> optimal <optimum> early <count>": the 20 sleeps were
            // Lull timers, coalesced, none early.
            let sleep = try #require(Self.fields(lines, "sleep", "windows"), "\(lines)")
            try #require(sleep.count == 7, "\(lines)")
            let windows = try #require(Int(sleep[0]))
            let wakeups = try #require(Int(sleep[2]))
            let optimum = try #require(Int(sleep[4]))
            #expect(windows >= 20, "the sleeps did not reach Lull's timers: \(lines)")
            #expect(wakeups <= max(optimum, 1) + 1, "\(wakeups) wake-ups for an optimum of \(optimum): \(lines)")
            #expect(sleep[6] == "0", "\(lines)")
            #expect(Self.fields(lines, "slept", "at-least-30ms") == ["true", "main-actor", "true", "main-thread",
                                                                     Substring(mainThread)], "\(lines)")
            #expect(lines.last == "done", "\(lines)")
        }

        @Test func aSpawnStormFromManyThreadsRunsEveryTaskOnceAtItsPrioritysQoS() throws {
            let lines = try Self.probe("storm")
            // 3 parents × 6,000 children and 4 plain threads × 1,500 detached tasks.
            #expect(Self.fields(lines, "storm", "ran") == ["24000", "of", "24000", "qos-mismatches", "0"], "\(lines)")
        }

        @Test func asyncMainInstallingFirstRunsTheMainActorOnTheMainThread() throws {
            try Self.checkAsyncMain([], mainThread: "true")
        }

        @Test func asyncMainInstallingAfterAnAwaitRunsTheMainQueueOnDispatchsMainQueue() throws {
            try Self.checkAsyncMain(["after-await"], mainThread: "false")
        }

        @Test func asyncMainMayCallRunMainInItsFirstSlice() throws {
            try Self.checkAsyncMain(["run-main"], mainThread: "true")
        }

        @Test func withoutInstallNothingChanges() async {
            // This process never installs: tasks run on the platform's executors.
            #expect(!GlobalExecutor.isInstalled)
            let name = await Task.detached { () -> String in
                let descriptor = open("/proc/thread-self/comm", O_RDONLY | O_CLOEXEC)
                guard descriptor >= 0 else { return "?" }
                defer { close(descriptor) }
                var buffer = [UInt8](repeating: 0, count: 32)
                let count = read(descriptor, &buffer, buffer.count)
                return count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : "?"
            }.value
            #expect(!name.hasPrefix("lull."), "a task ran on Lull's worker \(name) without install()")
        }
    }
}
