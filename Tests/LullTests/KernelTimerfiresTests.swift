import Glibc
import LullWakeupReport
import Testing

extension IndependentSuite {
    /// `timerfires --pid` on a plain C program (`timerfires-sleep-loop`, Tools/) through the
    /// kernel's tracepoints: the report's numbers against the program's known timers. The
    /// tracing test needs root and a kernel with tracefs (the tool mounts it if needed).
    @Suite(.serialized) struct KernelTimerfiresTests {
        static let tracefs = "/sys/kernel/tracing"
        static let canTrace = geteuid() == 0 && access(tracefs, F_OK) == 0

        @Test(.enabled(if: canTrace, "needs root and a kernel with tracefs"))
        func reportsTheNanosleepsOfAPlainCProgram() throws {
            let directory = "/tmp/lull-kernel-timerfires.\(getpid())"
            mkdir(directory, 0o700)
            defer {
                for file in ["out", "err", "kept.trace"] { unlink("\(directory)/\(file)") }
                rmdir(directory)
            }
            // The program waits for SIGUSR1 (caught: it shows in SigCgt), so that its first
            // sleep comes after the tracing has started.
            let program = try spawn(try ToolProcess.executable("timerfires-sleep-loop"),
                                    ["--wait-signal", "20", "50", "nanosleep"])
            defer {
                kill(program, SIGKILL)
                _ = ToolProcess.reap(program)
            }
            try #require(waitUntil { catchesUserSignal(program) })
            let tool = try spawn(try ToolProcess.executable("timerfires"),
                                 ["--json", "-g", "--mount-tracefs", "--pid", "\(program)",
                                  "--trace", "\(directory)/kept.trace"],
                                 standardOutput: "\(directory)/out", standardError: "\(directory)/err")
            var toolStatus: Int32?
            defer { if toolStatus == nil { kill(tool, SIGKILL); _ = ToolProcess.reap(tool) } }
            // The last event the tool enables: once it is on, every event is.
            let instance = "\(KernelTimerfiresTests.tracefs)/instances/timerfires-\(tool)"
            let ready = waitUntil(timeout: .seconds(30)) {
                KernelSwitches.readSmallFile("\(instance)/events/raw_syscalls/sys_exit/enable") == "1\n"
                    || exited(tool, status: &toolStatus)
            }
            try #require(ready && toolStatus == nil,
                         "timerfires did not start tracing: \(KernelSwitches.readSmallFile("\(directory)/err") ?? "")")
            kill(program, SIGUSR1)
            // 20 sleeps of 50 ms: the tool reports when the program exits.
            #expect(waitUntil(timeout: .seconds(30)) { exited(tool, status: &toolStatus) })
            #expect(toolStatus == 0, "\(KernelSwitches.readSmallFile("\(directory)/err") ?? "")")
            #expect(access(instance, F_OK) != 0, "the tracefs instance is left behind")

            let report = try ParsedJSON.parse(KernelSwitches.readSmallFile("\(directory)/out") ?? "")
            try checkNanosleeps(report, program: program)
            // The kept trace reads back to the same numbers.
            let reread = try ToolProcess.run(try ToolProcess.executable("timerfires"),
                                             ["--json", "-g", "--read-trace", "\(directory)/kept.trace"])
            #expect(reread.status == 0, "\(reread.standardError)")
            try checkNanosleeps(try ParsedJSON.parse(reread.standardOutput), program: program)
        }

        func checkNanosleeps(_ report: ParsedJSON, program: pid_t) throws {
            #expect(report["pid"]?.integer == Int(program))
            #expect(report["scope"]?.string == "pid \(program) (timerfires-slee)")
            let rows = try #require(report["timers"]?.array)
            let sleeps = try #require(rows.first {
                $0["function"]?.string == "hrtimer_wakeup" && $0["syscall"]?.string?.contains("nanosleep") == true
            }, "no nanosleep timer in \(rows)")
            let fires = try #require(sleeps["fires"]?.integer)
            #expect((19...21).contains(fires), "\(fires) nanosleep fires for 20 sleeps")
            let interval = try #require(sleeps["meanIntervalMilliseconds"]?.number)
            #expect(interval >= 49 && interval < 100, "interval \(interval) ms for sleeps of 50 ms")
            #expect(sleeps["slackMilliseconds"]?.number != nil)
            #expect((sleeps["wokeFraction"]?.number ?? 0) == 1)
            let causes = try #require(report["causes"]?.array)
            let woken = causes.filter {
                $0["kind"]?.string == "timer" && $0["source"]?.string?.contains("nanosleep hrtimer_wakeup") == true
            }.compactMap { $0["wakeups"]?["count"]?.integer }.reduce(0, +)
            #expect((19...21).contains(woken), "\(woken) wake-ups by nanosleep for 20 sleeps")
            let timerWakeups = try #require(report["wakeups"]?["timer"]?["count"]?.integer)
            #expect(timerWakeups >= woken && timerWakeups <= woken + 1)
            let coalescing = try #require(report["coalescing"])
            #expect((coalescing["windows"]?.integer ?? 0) >= 19)
            #expect((coalescing["optimalWakeups"]?.integer ?? 0) >= 19, "sleeps 50 ms apart cannot share a wake-up")
        }

        /// The timer example on Apple's Dispatch, seen by the kernel: its four repeating
        /// timers and delayed blocks with no leeway (about 58 handler fires a second, on
        /// fewer distinct deadlines) arm one timerfd, which wakes the process about as often.
        @Test(.enabled(if: canTrace, "needs root and a kernel with tracefs"))
        func reportsTheTimersOfADispatchProgram() throws {
            let program = try spawn(try ToolProcess.executable("timer-coalescing"),
                                    ["--leeway-ms", "0", "--rounds", "3", "--runtime", "dispatch"])
            defer {
                kill(program, SIGKILL)
                _ = ToolProcess.reap(program)
            }
            // Dispatch's threads are up once the first timer is armed.
            try #require(waitUntil { KernelTimerfiresTests.threadCount(program) >= 2 })
            let outcome = try ToolProcess.run(try ToolProcess.executable("timerfires"),
                                              ["--json", "-g", "--kernel", "--mount-tracefs", "--pid", "\(program)",
                                               "--seconds", "0.5"], timeoutSeconds: 30)
            #expect(outcome.status == 0, "\(outcome.standardError)")
            let report = try ParsedJSON.parse(outcome.standardOutput)
            let seconds = try #require(report["durationSeconds"]?.number)
            let rows = try #require(report["timers"]?.array)
            let timerfd = rows.filter { $0["function"]?.string == "timerfd_tmrproc" }
            #expect(timerfd.contains { $0["syscall"]?.string == "timerfd_settime" }, "\(rows)")
            let fires = timerfd.compactMap { $0["fires"]?.integer }.reduce(0, +)
            let rate = Double(fires) / seconds
            #expect(rate >= 25 && rate <= 120, "\(fires) timerfd fires in \(seconds) s")
            // Each timerfd wake-up is one of its fires; a fire finds its thread asleep unless
            // the handlers of the fire before are still running.
            let causes = try #require(report["causes"]?.array)
            let woken = causes.filter {
                $0["kind"]?.string == "timer" && $0["source"]?.string?.hasSuffix("timerfd_tmrproc") == true
            }.compactMap { $0["wakeups"]?["count"]?.integer }.reduce(0, +)
            #expect(woken <= fires && woken >= fires / 2, "\(woken) wake-ups by the timerfd, \(fires) fires")
        }

        static func threadCount(_ pid: pid_t) -> Int {
            guard let status = KernelSwitches.readSmallFile("/proc/\(pid)/status"),
                  let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Threads:") }) else { return 0 }
            return Int(line.dropFirst("Threads:".count).drop { $0 == " " || $0 == "\t" }) ?? 0
        }

        @Test func kernelModeErrors() throws {
            let tool = try ToolProcess.executable("timerfires")
            let gone = try ToolProcess.spawn("/bin/true", [])
            _ = ToolProcess.reap(gone)
            let missing = try ToolProcess.run(tool, ["--kernel", "--pid", "\(gone)"])
            #expect(missing.status != 0 && missing.standardError.contains("there is no process \(gone)"))
            let alone = try ToolProcess.run(tool, ["--kernel", "--", "/bin/true"])
            #expect(alone.status != 0 && alone.standardError.contains("--kernel goes with --pid"))
            let twice = try ToolProcess.run(tool, ["--all", "--pid", "1"])
            #expect(twice.status != 0 && twice.standardError.contains("give exactly one of"))
            // Another user than root is told it needs root (as root, the check becomes nobody).
            var asOtherUser: [String]?
            if geteuid() != 0 {
                asOtherUser = [tool]
            } else if access("/usr/bin/setpriv", X_OK) == 0 {
                asOtherUser = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", tool]
            }
            if let asOtherUser {
                let denied = try ToolProcess.run(asOtherUser[0], Array(asOtherUser.dropFirst()) + ["--all", "--seconds", "0.1"])
                #expect(denied.status != 0 && denied.standardError.contains("needs root"), "\(denied.standardError)")
            }
        }

        /// Starts `path` with its output in files (or /dev/null).
        func spawn(_ path: String, _ arguments: [String], standardOutput: String = "/dev/null", standardError: String = "/dev/null") throws -> pid_t {
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_addopen(&actions, 1, standardOutput, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            posix_spawn_file_actions_addopen(&actions, 2, standardError, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            let words = [path] + arguments
            let argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
            defer { argv.forEach { free($0) } }
            var pid: pid_t = 0
            let result = posix_spawn(&pid, path, &actions, nil, argv, environ)
            guard result == 0 else {
                throw ToolProcess.Failure(description: "posix_spawn \(path): \(String(cString: strerror(result)))")
            }
            return pid
        }
    }
}

/// Whether `pid` (a child) has exited; reaps it and keeps its status if so.
private func exited(_ pid: pid_t, status: inout Int32?) -> Bool {
    if status != nil { return true }
    var raw: Int32 = 0
    guard waitpid(pid, &raw, WNOHANG) == pid else { return false }
    status = raw & 0x7f == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
    return true
}

/// Whether `pid` catches SIGUSR1 (SigCgt in /proc/PID/status).
private func catchesUserSignal(_ pid: pid_t) -> Bool {
    guard let status = KernelSwitches.readSmallFile("/proc/\(pid)/status"),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigCgt:") }),
          let mask = UInt64(line.dropFirst("SigCgt:".count).drop { $0 == " " || $0 == "\t" }, radix: 16) else { return false }
    return mask & (1 << (UInt64(SIGUSR1) - 1)) != 0
}
