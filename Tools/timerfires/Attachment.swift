import LullDiagnosticsFormat
import LullWakeupReport
#if canImport(Glibc)
import Glibc
#endif

/// `timerfires --pid PID`: asks a running Lull program, through its diagnostics socket
/// (at `ControlSocketAddress`; ControlSocket in the runtime serves it), to record into a
/// file for a while.
struct Attachment {
    let pid: Int32
    let traceFile: TraceFile
    let records: Int

    /// How long the program has to answer: its poller serves the socket.
    private static let answerTimeoutMilliseconds: Int32 = 5_000

    func run(seconds: Double?) throws -> Collected {
        try checkProcess()
        let connection = try connect()
        defer { close(connection) }
        try send("start \(records) \(traceFile.path)", on: connection)
        let answer = try receive(on: connection)
        guard answer.hasPrefix("ok") else {
            throw ToolError("process \(pid) refused to record: \(answer.dropFirst("error ".count))")
        }
        let baseline = KernelSwitches.voluntary(pid: pid)
        var latest = baseline
        let exited = waitForEnd(seconds: seconds) { latest = KernelSwitches.voluntary(pid: pid) ?? latest }
        let end = monotonicNow()
        if !exited {
            // The stop is acknowledged once the recording is closed: the file is complete.
            try? send("stop", on: connection)
            _ = try? receive(on: connection)
        }
        let trace: Trace
        do {
            trace = try Trace(contentsOf: traceFile.path)
        } catch {
            throw ToolError("\(error)")
        }
        var kernel: KernelCount?
        if let baseline, let latest {
            kernel = KernelCount(voluntarySwitches: latest.total - baseline.total, threads: latest.threads)
        }
        return Collected(trace: trace, endTime: end, kernel: kernel,
                         note: exited ? "process \(pid) exited during the recording" : nil)
    }

    private func checkProcess() throws {
        if kill(pid, 0) != 0 {
            if errno == ESRCH { throw ToolError("there is no process \(pid)") }
            if errno == EPERM { throw ToolError("process \(pid) is not ours to read (it belongs to another user)") }
            throw ToolError("cannot signal process \(pid): \(String(cString: strerror(errno)))")
        }
        if let status = KernelSwitches.readSmallFile("/proc/\(pid)/status"),
           let uidLine = status.split(separator: "\n").first(where: { $0.hasPrefix("Uid:") }),
           let uid = uidLine.split(whereSeparator: { $0 == "\t" || $0 == " " }).dropFirst().first.flatMap({ UInt32($0) }),
           uid != geteuid() && geteuid() != 0 {
            throw ToolError("process \(pid) is not ours to read (it belongs to user \(uid))")
        }
    }

    private func connect() throws -> Int32 {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw ToolError("socket() failed: \(String(cString: strerror(errno)))") }
        var address = ControlSocketAddress.of(pid: pid)
        let connected = withUnsafePointer(to: &address.address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, address.length) }
        }
        guard connected == 0 else {
            let code = errno
            close(descriptor)
            if code == ECONNREFUSED || code == ENOENT {
                if socketTurnedOff() {
                    throw NotALullProgram(reason: "process \(pid) turned its diagnostics socket off "
                        + "(\(DiagnosticsEnvironment.socketSwitch)=off in its environment)")
                }
                throw NotALullProgram(reason: "process \(pid) is not a Lull program (it has no Lull diagnostics socket)")
            }
            throw ToolError("cannot reach process \(pid): \(String(cString: strerror(code)))")
        }
        return descriptor
    }

    /// Whether the process started with `LULL_DIAGNOSTICS=off` (its /proc/PID/environ).
    private func socketTurnedOff() -> Bool {
        guard let environment = KernelSwitches.readSmallFile("/proc/\(pid)/environ") else { return false }
        let prefix = DiagnosticsEnvironment.socketSwitch + "="
        return environment.split(separator: "\0").contains {
            $0.hasPrefix(prefix) && DiagnosticsEnvironment.turnsSocketOff(String($0.dropFirst(prefix.count)))
        }
    }

    private func send(_ line: String, on connection: Int32) throws {
        let bytes = Array((line + "\n").utf8)
        let written = bytes.withUnsafeBytes { Glibc.send(connection, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard written == bytes.count else { throw ToolError("process \(pid) closed its diagnostics connection") }
    }

    private func receive(on connection: Int32) throws -> String {
        var received: [UInt8] = []
        let deadline = monotonicNow() + UInt64(Attachment.answerTimeoutMilliseconds) * 1_000_000
        while !received.contains(UInt8(ascii: "\n")) {
            let now = monotonicNow()
            guard now < deadline else {
                throw ToolError("process \(pid) did not answer within \(Attachment.answerTimeoutMilliseconds / 1000) s: "
                    + "nothing polls its reactor (it has not used a timer or an event source yet)")
            }
            var descriptor = pollfd(fd: connection, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, Int32((deadline - now) / 1_000_000) + 1)
            if ready < 0 && errno == EINTR { continue }
            guard ready > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 256)
            let count = chunk.withUnsafeMutableBytes { read(connection, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { throw ToolError("process \(pid) closed its diagnostics connection") }
            received += chunk[0..<count]
        }
        return String(decoding: received.prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
    }

    /// Waits for `seconds` (forever if nil), Ctrl-C or the process's exit, sampling as it
    /// goes; true if the process exited.
    private func waitForEnd(seconds: Double?, sample: () -> Void) -> Bool {
        var interrupt = sigset_t()
        sigemptyset(&interrupt)
        sigaddset(&interrupt, SIGINT)
        pthread_sigmask(SIG_BLOCK, &interrupt, nil)
        defer { pthread_sigmask(SIG_UNBLOCK, &interrupt, nil) }
        let end = seconds.map { monotonicNow() + UInt64($0 * 1e9) }
        while true {
            sample()
            if kill(pid, 0) != 0 && errno == ESRCH { return true }
            if let end, monotonicNow() >= end { return false }
            var step = timespec(tv_sec: 0, tv_nsec: 100_000_000)
            if sigtimedwait(&interrupt, nil, &step) == SIGINT { return false }
        }
    }
}

/// The process has no Lull diagnostics socket to attach to (not a Lull program, or one that
/// turned the socket off): `timerfires` reads the kernel's tracepoints instead.
struct NotALullProgram: Error {
    let reason: String
}
