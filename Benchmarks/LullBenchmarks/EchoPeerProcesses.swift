// The processes of the echo comparison (EchoPeersBenchmark): a server process per runtime
// and a load-generator process, both this binary started with a hidden subcommand, so that
// the server's CPU and memory (read in /proc by the client) are the server's alone.
//
//   lull-bench __echo-server lull|nio|dispatch
//       listens on 127.0.0.1, prints "PORT <port>", serves until its standard input closes.
//   lull-bench __echo-client <port> <server pid> <connections> <messages each> <bytes> <timeout ms>
//       runs CEchoLoad's echo_load_run and prints "RESULT <name>=<value>..." or "FAIL <text>".

import CEchoLoad
import EchoServerKit
import Glibc
import Lull

/// The servers compared.
enum EchoServerKind: String, CaseIterable, Sendable {
    case lull
    case nio
    case dispatch

    var displayName: String {
        switch self {
        case .lull: "Lull"
        case .nio: "SwiftNIO"
        case .dispatch: "Dispatch"
        }
    }
}

enum EchoPeerProcesses {
    static let serverSubcommand = "__echo-server"
    static let clientSubcommand = "__echo-client"
    /// The listen backlog of every server (the client opens at most this many at a time).
    static let backlog: Int32 = 1024
    /// Idle timeout of the EchoServerKit servers (Lull's and Dispatch's): far beyond a run.
    static let idleTimeout: Duration = .seconds(600)

    /// Lets this process open as many descriptors as its hard limit allows (10,000
    /// connections need 10,000 descriptors on each side).
    static func raiseDescriptorLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }

    /// `__echo-server <kind>`: serves until standard input reaches its end, then exits.
    static func serverMain(_ arguments: [String]) -> Never {
        raiseDescriptorLimit()
        guard let kind = arguments.first.flatMap(EchoServerKind.init(rawValue:)) else {
            emit("FAIL \(serverSubcommand) needs lull, nio or dispatch")
            exit(2)
        }
        let server: any Sendable
        let port: UInt16
        do {
            switch kind {
            case .lull:
                let lull = try EchoServer(configuration: .init(port: 0, idleTimeout: idleTimeout))
                lull.start()
                (server, port) = (lull, lull.port)
            case .nio:
                let nio = try NIOEchoServer(backlog: backlog)
                (server, port) = (nio, nio.port)
            case .dispatch:
                let dispatch = try DispatchEchoServer(idleTimeout: idleTimeout)
                dispatch.start()
                (server, port) = (dispatch, dispatch.port)
            }
        } catch {
            emit("FAIL the \(kind.displayName) server could not listen: \(error)")
            exit(1)
        }
        emit("PORT \(port)")
        var byte: UInt8 = 0
        while true {
            let count = read(0, &byte, 1)
            if count == 0 || (count < 0 && errno != EINTR) { break }
        }
        withExtendedLifetime(server) {}
        // No orderly shutdown: the process ends with its connections (the client closed them).
        _exit(0)
    }

    /// `__echo-client …`: one load run against a server process.
    static func clientMain(_ arguments: [String]) -> Never {
        raiseDescriptorLimit()
        guard arguments.count == 6, let port = UInt16(arguments[0]), let pid = Int32(arguments[1]),
              let connections = Int32(arguments[2]), let messages = Int32(arguments[3]),
              let bytes = Int32(arguments[4]), let timeout = Int32(arguments[5])
        else {
            emit("FAIL bad \(clientSubcommand) arguments: \(arguments)")
            exit(2)
        }
        var config = echo_load_config()
        config.port = port
        config.server_pid = pid
        config.connections = connections
        config.messages_per_connection = messages
        config.message_bytes = bytes
        config.warm_connections = 64
        config.warm_messages = 200
        config.settle_milliseconds = 300
        config.connect_batch = backlog / 2
        config.timeout_milliseconds = timeout
        var result = echo_load_result()
        var error = [CChar](repeating: 0, count: 512)
        guard echo_load_run(&config, &result, &error, error.count) == 0 else {
            emit("FAIL " + String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            exit(1)
        }
        emit("RESULT messages=\(result.messages) seconds=\(result.seconds) p50=\(result.p50_ns) p99=\(result.p99_ns)"
            + " p999=\(result.p999_ns) serverCPU=\(result.server_cpu_ns) clientCPU=\(result.client_cpu_ns)"
            + " rssBaseline=\(result.rss_baseline_kib) rssConnected=\(result.rss_connected_kib)")
        exit(0)
    }
}

/// A server process started by the orchestrator: its pid, the port it printed, and the pipe
/// whose closing ends it.
struct EchoServerChild {
    let pid: pid_t
    let port: UInt16
    private let input: Int32
    private let output: Int32

    /// Starts `lull-bench __echo-server <kind>` and waits (up to `timeout` seconds) for its port.
    static func start(_ kind: EchoServerKind, timeout: Double) -> Result<EchoServerChild, EchoPeerFailure> {
        var inputPipe: [Int32] = [-1, -1]
        var outputPipe: [Int32] = [-1, -1]
        guard closeOnExecPipe(&inputPipe) else { return .failure(.init("pipe: \(Descriptors.lastError())")) }
        guard closeOnExecPipe(&outputPipe) else {
            Descriptors.close(inputPipe)
            return .failure(.init("pipe: \(Descriptors.lastError())"))
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_adddup2(&actions, inputPipe[0], 0)
        posix_spawn_file_actions_adddup2(&actions, outputPipe[1], 1)
        posix_spawn_file_actions_adddup2(&actions, outputPipe[1], 2)
        let commandLine = [CommandLine.arguments.first ?? "lull-bench", EchoPeerProcesses.serverSubcommand, kind.rawValue]
        var cArguments: [UnsafeMutablePointer<CChar>?] = commandLine.map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        var pid: pid_t = 0
        let spawnError = posix_spawn(&pid, "/proc/self/exe", &actions, nil, &cArguments, environ)
        posix_spawn_file_actions_destroy(&actions)
        Descriptors.close([inputPipe[0], outputPipe[1]])
        guard spawnError == 0 else {
            Descriptors.close([inputPipe[1], outputPipe[0]])
            return .failure(.init("posix_spawn: \(String(cString: strerror(spawnError)))"))
        }
        // Reads lines up to "PORT <port>" or "FAIL …" (why it could not listen): the runtime
        // may log a line first (a kernel without utilization clamping, say).
        var line: [UInt8] = []
        var text = ""
        let deadline = Clock.now() &+ UInt64(timeout * 1e9)
        var byte: UInt8 = 0
        while Clock.now() < deadline {
            var descriptor = pollfd(fd: outputPipe[0], events: Int16(POLLIN), revents: 0)
            if poll(&descriptor, 1, 100) <= 0 { continue }
            let count = read(outputPipe[0], &byte, 1)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            guard byte == UInt8(ascii: "\n") else {
                line.append(byte)
                continue
            }
            text = String(decoding: line, as: UTF8.self)
            line = []
            if text.hasPrefix("PORT ") || text.hasPrefix("FAIL ") { break }
        }
        if text.isEmpty { text = String(decoding: line, as: UTF8.self) }
        let child = EchoServerChild(pid: pid, port: 0, input: inputPipe[1], output: outputPipe[0])
        guard text.hasPrefix("PORT "), let port = UInt16(text.dropFirst(5)) else {
            _ = child.stop(timeout: 1)
            return .failure(.init("the \(kind.displayName) server did not start: \(text.isEmpty ? "no output" : text)"))
        }
        return .success(EchoServerChild(pid: pid, port: port, input: inputPipe[1], output: outputPipe[0]))
    }

    /// A pipe whose ends a spawned child does not inherit (but for the ends it dup2s).
    private static func closeOnExecPipe(_ ends: inout [Int32]) -> Bool {
        guard pipe(&ends) == 0 else { return false }
        for end in ends where fcntl(end, F_SETFD, FD_CLOEXEC) != 0 {
            Descriptors.close(ends)
            return false
        }
        return true
    }

    /// Closes its input, waits up to `timeout` seconds for it to exit (then kills it by its
    /// pid), and returns what else it printed.
    func stop(timeout: Double) -> [String] {
        Descriptors.close([input])
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        let deadline = Clock.now() &+ UInt64(timeout * 1e9)
        while Clock.now() < deadline {
            var descriptor = pollfd(fd: output, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, 100)
            if ready < 0 && errno != EINTR { break }
            if ready <= 0 { continue }
            let count = chunk.withUnsafeMutableBytes { read(output, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
        }
        Descriptors.close([output])
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == 0 {
            kill(pid, SIGKILL)
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        }
        return String(decoding: bytes, as: UTF8.self).split(separator: "\n").map(String.init)
    }
}

struct EchoPeerFailure: Error {
    let message: String
    init(_ message: String) { self.message = message }
}
