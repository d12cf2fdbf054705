// Echo against SwiftNIO (issue #18): Lull's echo server (Examples/EchoServerKit), SwiftNIO's
// idiomatic echo server (NIOEchoServer) and the Dispatch twin of Lull's (DispatchEchoServer),
// each in a process of its own, driven in turn by the same load generator (CEchoLoad, C on
// raw epoll, in a process of its own) at 100, 1,000 and 10,000 connections. One run starts
// the three servers one after the other (in an order that rotates from run to run), so the
// host's slow and fast phases fall on all three alike.
//
// Per server and run: messages/s over the load; the round-trip latency p50/p99/p99.9; the
// server's CPU (all threads, user + system, from /proc/<pid>/stat) per million messages;
// the memory per idle connection: the server's RSS with every connection open and idle
// (each has echoed one message) minus its RSS after a warm-up with none open, over N.

import Glibc

enum EchoPeersBenchmark {
    static let all: [Benchmark] = [benchmark(connections: 100, name: "echo-nio-100"),
                                   benchmark(connections: 1_000, name: "echo-nio-1k"),
                                   benchmark(connections: 10_000, name: "echo-nio-10k")]
    static let groups = ["echo-nio": all.map(\.name)]

    static let messageBytes = 64

    static func benchmark(connections: Int, name: String) -> Benchmark {
        Benchmark(
            name: name,
            title: "echo server against SwiftNIO: \(Format.grouped(connections)) loopback TCP connections, one "
                + "\(messageBytes)-byte message in flight on each, from a C epoll client in a process of its own; "
                + "Lull (Examples/EchoServerKit), SwiftNIO (ServerBootstrap, one event loop per core) and "
                + "Dispatch, each in its own process, in turn within each run",
            unit: "messages/s",
            lowerIsBetter: false,
            singleShot: true,
            parameters: { options in
                // `seconds` bounds one run of the three servers (the child's timeout).
                Parameters(n: options.size(full: 100_000, quick: 30_000), seconds: 30 * options.runTimeout,
                           runTimeout: options.runTimeout)
            },
            sizeDescription: { "\(Format.grouped(connections)) connections, N=\(Format.grouped($0.n)) messages per server" },
            run: { _, parameters in runRound(connections: connections, parameters: parameters) },
            peerInSameProcess: true,
            maxRuns: 3,
            extraRows: [
                ExtraRow(label: "  \(name) p50", extra: "p50 µs", unit: "µs", lowerIsBetter: true, style: .count),
                ExtraRow(label: "  \(name) p99", extra: "p99 µs", unit: "µs", lowerIsBetter: true, style: .count),
                ExtraRow(label: "  \(name) p99.9", extra: "p99.9 µs", unit: "µs", lowerIsBetter: true, style: .count),
                ExtraRow(label: "  \(name) server CPU per M messages", extra: "CPU ms per M", unit: "ms",
                         lowerIsBetter: true, style: .count),
                ExtraRow(label: "  \(name) memory per idle connection", extra: "B per connection", unit: "B",
                         lowerIsBetter: true, style: .count),
            ],
            peerName: EchoServerKind.nio.displayName,
            budgetSeconds: 300
        )
    }

    /// What one server did in one run.
    struct Figures {
        var messagesPerSecond: Double
        var p50: Double, p99: Double, p999: Double
        var cpuMillisecondsPerMillion: Double
        var bytesPerConnection: Double
        /// The client's CPU over the load's wall time: below 1, it was not the bottleneck.
        var clientBusy: Double

        var extras: [(String, Double)] {
            [("p50 µs", p50), ("p99 µs", p99), ("p99.9 µs", p999), ("CPU ms per M", cpuMillisecondsPerMillion),
             ("B per connection", bytesPerConnection), ("client busy", clientBusy)]
        }
    }

    static func runRound(connections: Int, parameters: Parameters) -> RunOutcome {
        EchoPeerProcesses.raiseDescriptorLimit()
        let perConnection = max(parameters.n / connections, 1)
        let servers = EchoServerKind.allCases
        let shift = Int(getpid()) % servers.count
        let order = Array(servers[shift...] + servers[..<shift])
        var figures: [EchoServerKind: Figures] = [:]
        for kind in order {
            switch measure(kind, connections: connections, messages: perConnection, parameters: parameters) {
            case .success(let figure): figures[kind] = figure
            case .failure(let failure): return .failed("\(kind.displayName): \(failure.message)")
            }
        }
        guard let lull = figures[.lull], let nio = figures[.nio], let dispatch = figures[.dispatch] else {
            return .failed("a server was not measured")
        }
        var extras = lull.extras
        extras.append(("peer messages/s", nio.messagesPerSecond))
        extras += nio.extras.map { ("peer " + $0.0, $0.1) }
        extras.append(("Dispatch messages/s", dispatch.messagesPerSecond))
        extras += dispatch.extras.map { ("Dispatch " + $0.0, $0.1) }
        return .ok(value: lull.messagesPerSecond, seconds: 0, extras: extras,
                   notes: ["order of the servers in a run: rotates from run to run (this one: "
                       + order.map(\.displayName).joined(separator: ", ") + ")"])
    }

    /// Starts `kind`'s server process, runs the client process against it, stops the server.
    static func measure(_ kind: EchoServerKind, connections: Int, messages: Int,
                        parameters: Parameters) -> Result<Figures, EchoPeerFailure> {
        let server: EchoServerChild
        switch EchoServerChild.start(kind, timeout: parameters.runTimeout) {
        case .success(let child): server = child
        case .failure(let failure): return .failure(failure)
        }
        let timeoutMilliseconds = Int(parameters.runTimeout * 1000)
        let client = ChildProcess.runSelf(
            [EchoPeerProcesses.clientSubcommand, String(server.port), String(server.pid), String(connections),
             String(messages), String(messageBytes), String(timeoutMilliseconds)],
            timeout: 10 * parameters.runTimeout)
        let serverOutput = server.stop(timeout: 5)
        let serverTail = serverOutput.suffix(3).joined(separator: " | ")
        guard let line = client.lines.first(where: { $0.hasPrefix("RESULT ") }) else {
            let problem = client.lines.first(where: { $0.hasPrefix("FAIL ") }).map { String($0.dropFirst(5)) }
                ?? "the client reported nothing (\(client.termination)): \(client.lines.suffix(3).joined(separator: " | "))"
            return .failure(.init(problem + (serverTail.isEmpty ? "" : "; the server said: \(serverTail)")))
        }
        var values: [String: Double] = [:]
        for field in line.dropFirst(7).split(separator: " ") {
            let parts = field.split(separator: "=", maxSplits: 1)
            if parts.count == 2, let value = Double(parts[1]) { values[String(parts[0])] = value }
        }
        guard let count = values["messages"], count > 0, let seconds = values["seconds"], seconds > 0,
              let p50 = values["p50"], let p99 = values["p99"], let p999 = values["p999"],
              let serverCPU = values["serverCPU"], let clientCPU = values["clientCPU"],
              let baseline = values["rssBaseline"], let connected = values["rssConnected"]
        else { return .failure(.init("unreadable client result: \(line)")) }
        return .success(Figures(
            messagesPerSecond: count / seconds,
            p50: p50 / 1000, p99: p99 / 1000, p999: p999 / 1000,
            cpuMillisecondsPerMillion: serverCPU / 1e6 / (count / 1e6),
            bytesPerConnection: (connected - baseline) * 1024 / Double(connections),
            clientBusy: clientCPU / 1e9 / seconds))
    }
}
