// Every benchmark runs, for each runtime, in a child process of its own: the same binary
// started with a hidden subcommand. A runtime that hangs or crashes then costs one figure,
// not the whole report, and the runtimes never share a process (their idle threads do not
// disturb each other, and the idle benchmark sees only one runtime's threads).
//
// Protocol, one line each on the child's standard output:
//   SAMPLE <value> <seconds> [<extra name>=<number>]...   one measured run
//   WARMUP <value> <seconds>                              the warm-up run (not counted)
//   NOTE <text>                                           shown in the details
//   FAIL <text>                                           the runtime misbehaved
//   SKIP <text>                                           not measured, for the reason given
// Anything else (a crash message, for instance) is kept to explain a failure.

import Glibc

/// The hidden subcommand that runs one benchmark on one runtime.
let childSubcommand = "__run"

enum ChildMain {
    /// `lull-bench __run <benchmark> <runtime> <n> <seconds> <runTimeout> <runs> <budget>`
    static func run(_ arguments: [String]) -> Never {
        guard arguments.count == 7,
              let benchmark = Suite.benchmark(named: arguments[0]),
              let runtime = Runtime(rawValue: arguments[1]),
              let n = Int(arguments[2]), let seconds = Double(arguments[3]),
              let runTimeout = Double(arguments[4]), let runs = Int(arguments[5]),
              let budget = Double(arguments[6])
        else {
            emit("FAIL bad child arguments: \(arguments)")
            exit(2)
        }
        let parameters = Parameters(n: n, seconds: seconds, runTimeout: runTimeout)

        if benchmark.singleShot {
            report(benchmark.run(runtime, parameters), tag: "SAMPLE")
            exit(0)
        }
        report(benchmark.run(runtime, parameters), tag: "WARMUP")
        let start = Clock.now()
        var done = 0
        while done < runs {
            if done > 0 && Clock.seconds(from: start, to: Clock.now()) > budget {
                emit("NOTE stopped after \(done) of \(runs) runs (time budget of \(Format.seconds(budget)))")
                break
            }
            report(benchmark.run(runtime, parameters), tag: "SAMPLE")
            done += 1
        }
        exit(0)
    }

    /// Prints one run; a failed run ends the child.
    private static func report(_ outcome: RunOutcome, tag: String) {
        switch outcome {
        case .ok(let value, let seconds, let extras, let notes):
            var line = "\(tag) \(value) \(seconds)"
            for (name, extra) in extras {
                line += " \(name.split(separator: " ").joined(separator: "_"))=\(extra)"
            }
            emit(line)
            for note in notes { emit("NOTE \(note)") }
        case .failed(let message):
            emit("FAIL \(message)")
            exit(1)
        case .skipped(let reason):
            emit("SKIP \(reason)")
            exit(0)
        }
    }
}

/// How a child ended.
enum Termination {
    case exited(Int32)
    case signalled(Int32)
    case timedOut
    case couldNotStart(Int32)
}

struct ChildResult {
    var lines: [String]
    var termination: Termination
}

enum ChildProcess {
    /// Starts this binary with `arguments`, collects its standard output and error, and
    /// kills it (SIGKILL, by its pid) if it has not finished after `timeout` seconds.
    static func runSelf(_ arguments: [String], timeout: Double) -> ChildResult {
        switch start(arguments) {
        case .success(let child): child.collect(timeout: timeout)
        case .failure(let error): ChildResult(lines: [], termination: .couldNotStart(error.code))
        }
    }

    struct SpawnError: Error {
        let code: Int32
    }

    /// A started child whose standard output and error come through a pipe.
    struct Running {
        let pid: pid_t
        let output: Int32

        /// Reads its output to the end (killing it after `timeout` seconds) and reaps it.
        func collect(timeout: Double) -> ChildResult {
            var bytes: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            let deadline = Clock.now() &+ UInt64(timeout * 1e9)
            var timedOut = false
            while true {
                let now = Clock.now()
                guard now < deadline else {
                    timedOut = true
                    break
                }
                var descriptor = pollfd(fd: output, events: Int16(POLLIN), revents: 0)
                let waitMilliseconds = Int32(min((deadline - now) / 1_000_000 + 1, 1000))
                let ready = poll(&descriptor, 1, waitMilliseconds)
                if ready < 0 && errno == EINTR { continue }
                if ready < 0 { break }
                if ready == 0 { continue }
                let count = chunk.withUnsafeMutableBytes { read(output, $0.baseAddress, $0.count) }
                if count > 0 {
                    bytes.append(contentsOf: chunk[0..<count])
                } else if count < 0 && errno == EINTR {
                    continue
                } else {
                    break  // end of file: the child is done (or closed its output)
                }
            }
            close(output)
            if timedOut { kill(pid, SIGKILL) }

            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            let termination: Termination
            if timedOut {
                termination = .timedOut
            } else if status & 0x7F == 0 {
                termination = .exited((status >> 8) & 0xFF)
            } else {
                termination = .signalled(status & 0x7F)
            }
            let text = String(decoding: bytes, as: UTF8.self)
            return ChildResult(lines: text.split(separator: "\n").map(String.init), termination: termination)
        }
    }

    /// Starts this binary with `arguments`, through `launcher` if given (a program and its
    /// arguments that run the rest of the command line, such as `taskset -c 0`).
    static func start(_ arguments: [String], launcher: [String] = []) -> Result<Running, SpawnError> {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return .failure(SpawnError(code: errno)) }
        let readEnd = fds[0]
        let writeEnd = fds[1]

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, 1)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, 2)
        posix_spawn_file_actions_addclose(&actions, writeEnd)
        posix_spawn_file_actions_addclose(&actions, readEnd)

        let argv0 = CommandLine.arguments.first ?? "lull-bench"
        // A launcher runs this binary by its path (/proc/self/exe would name the launcher).
        let program = launcher.first ?? "/proc/self/exe"
        let commandLine = launcher.isEmpty ? [argv0] + arguments : launcher + [selfPath()] + arguments
        var cArguments: [UnsafeMutablePointer<CChar>?] = commandLine.map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }

        var pid: pid_t = 0
        let spawnError = posix_spawn(&pid, program, &actions, nil, &cArguments, environ)
        posix_spawn_file_actions_destroy(&actions)
        close(writeEnd)
        guard spawnError == 0 else {
            close(readEnd)
            return .failure(SpawnError(code: spawnError))
        }
        return .success(Running(pid: pid, output: readEnd))
    }

    /// The path of this binary.
    static func selfPath() -> String {
        guard let pointer = realpath("/proc/self/exe", nil) else { return "/proc/self/exe" }
        defer { free(pointer) }
        return String(cString: pointer)
    }
}

/// Reads a child's report into a series of samples.
enum ChildReport {
    static func series(from result: ChildResult, timeout: Double) -> Series {
        var series = Series()
        var other: [String] = []
        for line in result.lines {
            if line.hasPrefix("SAMPLE ") {
                let fields = line.split(separator: " ").dropFirst()
                guard let value = fields.first.flatMap({ Double($0) }) else { continue }
                series.samples.append(value)
                for field in fields.dropFirst(2) {
                    let parts = field.split(separator: "=", maxSplits: 1)
                    guard parts.count == 2, let extra = Double(parts[1]) else { continue }
                    let name = parts[0].split(separator: "_").joined(separator: " ")
                    if series.extras[name] == nil { series.extraOrder.append(name) }
                    series.extras[name, default: []].append(extra)
                }
            } else if line.hasPrefix("NOTE ") {
                let note = String(line.dropFirst(5))
                if !series.notes.contains(note) { series.notes.append(note) }
            } else if line.hasPrefix("FAIL ") {
                series.problem = String(line.dropFirst(5))
            } else if line.hasPrefix("SKIP ") {
                series.skipped = String(line.dropFirst(5))
            } else if let marker = line.firstRange(of: "warning lull: ") {
                // The runtime's own warnings (on standard error), without their timestamp.
                let note = "runtime warning: " + line[marker.upperBound...]
                if !series.notes.contains(note) { series.notes.append(note) }
            } else if !line.hasPrefix("WARMUP ") {
                other.append(line)
            }
        }
        let tail = other.suffix(4).joined(separator: " | ")
        let explanation = tail.isEmpty ? "" : "; its output: \(tail)"
        switch result.termination {
        case .exited(0):
            if series.problem == nil && series.skipped == nil && series.samples.isEmpty {
                series.problem = "the child reported no result\(explanation)"
            }
        case .exited(let code):
            if series.problem == nil {
                series.problem = "CRASH: the child exited with status \(code)\(explanation)"
            }
        case .signalled(let signal):
            series.problem = "CRASH: the child died of signal \(signal)\(signalName(signal).map { " (\($0))" } ?? "")"
                + " after \(series.samples.count) measured runs\(explanation)"
        case .timedOut:
            series.problem = "TIMEOUT: the child had not finished after \(Format.seconds(timeout))"
                + " (\(series.samples.count) measured runs done; killed)\(explanation)"
        case .couldNotStart(let error):
            series.problem = "could not start the child process: \(String(cString: strerror(error)))"
        }
        return series
    }

    static func signalName(_ signal: Int32) -> String? {
        switch signal {
        case SIGILL: "SIGILL, a Swift runtime trap or fatalError"
        case SIGTRAP: "SIGTRAP, a Swift runtime trap or fatalError"
        case SIGABRT: "SIGABRT"
        case SIGSEGV: "SIGSEGV"
        case SIGBUS: "SIGBUS"
        case SIGKILL: "SIGKILL"
        case SIGTERM: "SIGTERM"
        default: nil
        }
    }
}
