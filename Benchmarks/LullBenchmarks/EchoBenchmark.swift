// The echo server under load: Examples/EchoServerKit's server on Lull against the same
// server on Dispatch (DispatchEchoServer.swift), each in its child process with the load
// client. The client is runtime-neutral: 2 plain threads, each driving half of the
// connections with poll(2); every connection keeps one message in flight (send, wait for
// the whole echo, send the next), so the figures are messages per second and the
// round-trip latency of each message.

import EchoServerKit
import Glibc
import Lull
import Synchronization

enum EchoBenchmark {
    static let all: [Benchmark] = [echoLoad]

    static let connections = 100
    static let clientThreads = 2
    static let messageBytes = 64

    static let echoLoad = Benchmark(
        name: "echo-load",
        title: "echo server under load: \(connections) loopback TCP connections from \(clientThreads) client threads "
            + "(poll), one \(messageBytes)-byte message in flight per connection; the server: a serial queue, read and "
            + "write sources and an idle timer per connection (Examples/EchoServerKit, and its Dispatch twin); "
            + "figure = N messages / time, with the round-trip latency p50 and p99",
        unit: "messages/s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 200_000, quick: 50_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n)), \(connections) connections" },
        run: runEchoLoad,
        maxRuns: 3,
        extraRows: [
            ExtraRow(label: "  echo-load p50", extra: "p50 µs", unit: "µs", lowerIsBetter: true, style: .count),
            ExtraRow(label: "  echo-load p99", extra: "p99 µs", unit: "µs", lowerIsBetter: true, style: .count),
        ]
    )

    /// How long the server gets to close its connections once the clients are gone.
    static let shutdownTimeout = 5.0

    @Sendable
    static func runEchoLoad(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let idleTimeout: Duration = .seconds(60)
        let port: UInt16
        let shutdown: (@escaping @Sendable () -> Void) -> Void
        do {
            switch runtime {
            case .lull:
                let server = try EchoServer(configuration: .init(port: 0, idleTimeout: idleTimeout))
                server.start()
                port = server.port
                shutdown = { done in server.shutdown(completion: done) }
            case .dispatch:
                let server = try DispatchEchoServer(idleTimeout: idleTimeout)
                server.start()
                port = server.port
                shutdown = { done in server.shutdown(completion: done) }
            }
        } catch {
            return .failed("the server could not listen: \(error)")
        }
        let closed = Latch()
        defer {
            shutdown { closed.signal() }
            _ = closed.wait(seconds: shutdownTimeout)
        }

        let perConnection = max(parameters.n / connections, 1)
        let load: EchoLoad
        do {
            load = try EchoLoad(port: port, connections: connections, messages: perConnection, bytes: messageBytes)
        } catch {
            return .failed("the clients could not connect: \(error)")
        }
        defer { load.closeAll() }
        let result = load.run(threads: clientThreads, timeout: parameters.runTimeout)
        switch result {
        case .failure(let message):
            return .failed(message)
        case .success(let seconds, var latencies):
            latencies.sort()
            let total = latencies.count
            let percentile = { (fraction: Double) -> Double in
                Double(latencies[min(Int(Double(total) * fraction), total - 1)]) / 1000
            }
            return .ok(value: Double(total) / seconds, seconds: seconds,
                       extras: [("p50 µs", percentile(0.50)), ("p99 µs", percentile(0.99))], notes: [])
        }
    }
}

/// The load client: connected sockets, each sending `messages` messages of `bytes` bytes one
/// after the other, and the round-trip time of each.
final class EchoLoad: Sendable {
    enum Outcome {
        case success(seconds: Double, latencies: [UInt64])
        case failure(String)
    }

    private let sockets: [Int32]
    private let messages: Int
    private let bytes: Int

    init(port: UInt16, connections: Int, messages: Int, bytes: Int) throws(SocketError) {
        var sockets: [Int32] = []
        do {
            for _ in 0..<connections { sockets.append(try LoopbackSocket.connect(port: port)) }
        } catch {
            Descriptors.close(sockets)
            throw error
        }
        self.sockets = sockets
        self.messages = messages
        self.bytes = bytes
    }

    func closeAll() {
        Descriptors.close(sockets)
    }

    /// Drives the connections from `threads` threads; the time is from the go signal to the
    /// last echo.
    func run(threads: Int, timeout: Double) -> Outcome {
        let go = Latch()
        let done = Countdown(threads)
        let results = Mutex<[[UInt64]]>([])
        let problems = Mutex<[String]>([])
        for thread in 0..<threads {
            let mine = stride(from: thread, to: sockets.count, by: threads).map { sockets[$0] }
            let started = ThreadStarter.start { [self] in
                _ = go.wait(seconds: timeout)
                switch drive(mine, until: Clock.now() + UInt64(timeout * 1e9)) {
                case .success(let latencies): results.locked { $0.append(latencies) }
                case .failure(let problem): problems.locked { $0.append(problem.message) }
                }
                done.countDown()
            }
            guard started else { return .failure("pthread_create failed for a client thread") }
        }
        let start = Clock.now()
        go.signal()
        guard done.wait(seconds: timeout + 1) else {
            return .failure("TIMEOUT: the clients had not finished after \(Format.seconds(timeout))")
        }
        let seconds = Clock.seconds(from: start, to: Clock.now())
        if let problem = problems.locked({ $0.first }) { return .failure(problem) }
        return .success(seconds: seconds, latencies: results.locked { $0.flatMap { $0 } })
    }

    struct Problem: Error {
        let message: String
    }

    /// One client thread: keeps one message in flight on each of `sockets`.
    private func drive(_ sockets: [Int32], until deadline: UInt64) -> Result<[UInt64], Problem> {
        let message = [UInt8](repeating: 0x6C, count: bytes)
        var buffer = [UInt8](repeating: 0, count: bytes)
        var sentAt = [UInt64](repeating: 0, count: sockets.count)
        var received = [Int](repeating: 0, count: sockets.count)
        var completed = [Int](repeating: 0, count: sockets.count)
        var latencies: [UInt64] = []
        latencies.reserveCapacity(sockets.count * messages)
        var watched = sockets.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }

        func sendMessage(_ index: Int) -> Bool {
            sentAt[index] = Clock.now()
            return message.withUnsafeBytes { send(sockets[index], $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes
        }
        for index in sockets.indices where !sendMessage(index) {
            return .failure(Problem(message: "send failed: \(Descriptors.lastError())"))
        }
        var remaining = sockets.count
        while remaining > 0 {
            guard Clock.now() < deadline else {
                return .failure(Problem(message: "TIMEOUT: \(latencies.count) of \(sockets.count * messages) echoes"))
            }
            let ready = poll(&watched, nfds_t(watched.count), 100)
            if ready < 0 && errno != EINTR {
                return .failure(Problem(message: "poll failed: \(Descriptors.lastError())"))
            }
            for index in watched.indices where watched[index].revents != 0 {
                let count = buffer.withUnsafeMutableBytes {
                    recv(sockets[index], $0.baseAddress, bytes - received[index], 0)
                }
                guard count > 0 else {
                    return .failure(Problem(message: count == 0 ? "the server closed a connection"
                        : "recv failed: \(Descriptors.lastError())"))
                }
                received[index] += count
                guard received[index] == bytes else { continue }
                latencies.append(Clock.now() &- sentAt[index])
                received[index] = 0
                completed[index] += 1
                if completed[index] == messages {
                    watched[index].events = 0
                    watched[index].fd = -1  // poll skips it
                    remaining -= 1
                } else if !sendMessage(index) {
                    return .failure(Problem(message: "send failed: \(Descriptors.lastError())"))
                }
            }
        }
        return .success(latencies)
    }
}
