import LullDiagnosticsFormat
import LullWakeupReport
#if canImport(Glibc)
import Glibc
#endif

/// `timerfires -- PROGRAM ARGS...`: runs the program with recording on (through the
/// environment) and collects the trace when it exits.
///
/// On Ctrl-C the program ends (the terminal signals the whole foreground group; a SIGINT
/// sent to the tool alone is passed on) and the tool reports. The records survive the
/// program's death: they are in the shared file already.
struct ProgramRun {
    let command: [String]
    let traceFile: TraceFile
    let records: Int
    /// Whether the program's standard output goes to the tool's standard error (the report
    /// then has standard output to itself).
    var outputToStandardError = false

    func run() throws -> Collected {
        let executable = try resolve(command[0])
        // SIGINT is taken with sigtimedwait while the program runs (the program itself
        // starts with it unblocked and at its default).
        var interrupt = sigset_t()
        sigemptyset(&interrupt)
        sigaddset(&interrupt, SIGINT)
        pthread_sigmask(SIG_BLOCK, &interrupt, nil)
        defer { pthread_sigmask(SIG_UNBLOCK, &interrupt, nil) }
        let child = try spawn(executable)
        var status: Int32 = 0
        var usage = rusage()
        while true {
            let reaped = wait4(child, &status, WNOHANG, &usage)
            if reaped == child { break }
            if reaped < 0 && errno != EINTR {
                throw ToolError("waiting for \(command[0]) failed: \(String(cString: strerror(errno)))")
            }
            var step = timespec(tv_sec: 0, tv_nsec: 50_000_000)
            // Ctrl-C in a terminal reaches the program too; a SIGINT sent to the tool alone
            // is passed on. Either way the report comes when the program has ended.
            if sigtimedwait(&interrupt, nil, &step) == SIGINT { kill(child, SIGINT) }
        }
        let end = monotonicNow()
        let trace: Trace
        do {
            trace = try Trace(contentsOf: traceFile.path)
        } catch TraceError.empty {
            throw ToolError("\(command[0]) recorded nothing: it never started Lull's runtime (is it a Lull program?)"
                + exitDescription(status).map { "; it \($0)" }.orEmpty)
        } catch {
            throw ToolError("\(error)")
        }
        return Collected(trace: trace, endTime: end,
                         kernel: KernelCount(voluntarySwitches: Int(usage.ru_nvcsw), threads: nil),
                         note: exitDescription(status).map { "\(command[0]) \($0)" })
    }

    /// How the program ended, when it is worth saying (nil for a clean exit).
    private func exitDescription(_ status: Int32) -> String? {
        let signal = status & 0x7f
        if signal == 0 {
            let code = (status >> 8) & 0xff
            return code == 0 ? nil : "exited with status \(code)"
        }
        return signal == SIGINT ? "was interrupted (SIGINT)" : "was killed by signal \(signal)"
    }

    /// The program's path: as given if it names a file, else looked up in PATH.
    private func resolve(_ program: String) throws -> String {
        if program.contains("/") {
            guard access(program, F_OK) == 0 else { throw ToolError("the program \(program) does not exist") }
            guard access(program, X_OK) == 0 else { throw ToolError("the program \(program) is not executable") }
            return program
        }
        let path = getenv("PATH").map { String(cString: $0) } ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/\(program)"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        throw ToolError("the program \(program) does not exist (not found in PATH)")
    }

    private func spawn(_ executable: String) throws -> pid_t {
        var environment: [String] = []
        var index = 0
        while let entry = environ[index] {
            let text = String(cString: entry)
            if !text.hasPrefix(DiagnosticsEnvironment.traceFile + "=")
                && !text.hasPrefix(DiagnosticsEnvironment.capacity + "=") {
                environment.append(text)
            }
            index += 1
        }
        environment.append("\(DiagnosticsEnvironment.traceFile)=\(traceFile.path)")
        environment.append("\(DiagnosticsEnvironment.capacity)=\(records)")

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGINT)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        posix_spawnattr_setsigmask(&attributes, &unblocked)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        let arguments = ([executable] + command.dropFirst()).map { strdup($0) } + [nil]
        let environmentPointers = environment.map { strdup($0) } + [nil]
        defer {
            arguments.forEach { free($0) }
            environmentPointers.forEach { free($0) }
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if outputToStandardError { posix_spawn_file_actions_adddup2(&actions, 2, 1) }
        var child: pid_t = 0
        let result = posix_spawn(&child, executable, &actions, &attributes, arguments, environmentPointers)
        guard result == 0 else {
            throw ToolError("cannot run \(command[0]): \(String(cString: strerror(result)))")
        }
        return child
    }
}

extension Optional where Wrapped == String {
    var orEmpty: String { self ?? "" }
}
