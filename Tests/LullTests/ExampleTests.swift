import Glibc
import Testing

/// Each example program runs briefly, as a user would run it, so that an example cannot rot.
extension IndependentSuite {
    @Suite(.serialized) struct ExampleTests {
        // MARK: echo-server

        @Test func echoServerEchoesOverARealSocketAndShutsDownOnSIGTERM() throws {
            let server = try ExampleProcess("echo-server", ["--port", "0", "--idle-timeout", "30"])
            let port = try #require(Self.port(from: server.waitForLine(containing: "listening on 127.0.0.1:")),
                                    "no port in: \(server.text)")
            let client = try LoopbackClient.connect(port: port)
            defer { close(client) }

            let greeting = Array("hello, lull\n".utf8)
            #expect(try Self.exchange(client, greeting) == greeting)
            // A megabyte, written while the answer is read: more than the server's buffer, so
            // its read source is suspended and resumed on the way (backpressure).
            let bulk = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 11) }
            #expect(try Self.exchange(client, bulk) == bulk)

            server.send(SIGTERM)
            #expect(server.waitForExit() == 0, "output: \(server.text)")
            #expect(server.text.contains("SIGTERM: shutting down (1 connections open)"))
            #expect(server.text.contains("#1 closed (server shutting down; \(greeting.count + bulk.count) bytes echoed)"))
            #expect(server.text.contains("all connections closed, bye"))
        }

        @Test func echoServerClosesIdleConnections() throws {
            let server = try ExampleProcess("echo-server", ["--port", "0", "--idle-timeout", "1"])
            let port = try #require(Self.port(from: server.waitForLine(containing: "listening on 127.0.0.1:")))
            let client = try LoopbackClient.connect(port: port)
            defer { close(client) }
            #expect(try Self.exchange(client, Array("ping".utf8)) == Array("ping".utf8))

            #expect(server.waitForLine(containing: "#1 closed (idle for") != nil, "output: \(server.text)")
            var byte: UInt8 = 0
            #expect(read(client, &byte, 1) == 0, "the server closed its end: end of file")
            server.send(SIGINT)
            #expect(server.waitForExit() == 0, "output: \(server.text)")
        }

        @Test func echoServerReportsABusyPort() throws {
            let first = try ExampleProcess("echo-server", ["--port", "0"])
            let port = try #require(Self.port(from: first.waitForLine(containing: "listening on 127.0.0.1:")))
            let second = try ExampleProcess("echo-server", ["--port", "\(port)"])
            #expect(second.waitForExit() != 0)
            #expect(second.text.contains("cannot listen: bind 127.0.0.1:\(port): Address already in use"),
                    "output: \(second.text)")
            first.send(SIGTERM)
            #expect(first.waitForExit() == 0)
        }

        // MARK: watch-run

        @Test func watchRunRunsTheCommandAndRestartsItOnAChange() throws {
            let tree = try FileSystemTestKit.TemporaryDirectory("watch-run")
            defer { tree.remove() }
            try FileSystemTestKit.write(tree.at(".gitignore"), "*.log\n")
            let watcher = try ExampleProcess("watch-run", [
                "--watch", tree.path, "--ignore", "build/", "--latency", "50", "--grace", "5",
                "--", "sh", "-c", "echo command-started; exec sleep 60",
            ])
            let started: (Substring) -> Bool = { $0 == "command-started" }  // the command's own line
            #expect(watcher.waitForLine(where: started) != nil, "output: \(watcher.text)")

            // Ignored (by .gitignore and by --ignore), then a change that counts.
            try FileSystemTestKit.write(tree.at("debug.log"), "noise")
            #expect(mkdir(tree.at("build"), 0o755) == 0)
            try FileSystemTestKit.write(tree.at("build/out.o"), "noise")
            try FileSystemTestKit.write(tree.at("main.c"), "int main(void) { return 0; }\n")

            #expect(watcher.waitForLine(count: 2, where: started) != nil, "output: \(watcher.text)")
            let output = watcher.text
            #expect(output.contains("created main.c"))
            #expect(output.contains("run 1 killed by signal 15 (SIGTERM)"))
            #expect(output.contains("run 2: sh -c"))
            #expect(!output.contains("debug.log") && !output.contains("out.o"), "ignored paths were reported: \(output)")

            watcher.send(SIGTERM)
            #expect(watcher.waitForExit() == 0, "output: \(watcher.text)")
            #expect(watcher.text.contains("run 2 killed by signal 15 (SIGTERM)"))
        }

        @Test func watchRunExplainsABadPath() throws {
            let watcher = try ExampleProcess("watch-run", ["--watch", "/nonexistent/lull-test", "--", "true"])
            #expect(watcher.waitForExit() == 1)
            #expect(watcher.text.contains("watch-run: cannot watch /nonexistent/lull-test: No such file or directory"),
                    "output: \(watcher.text)")
        }

        // MARK: activities

        @Test func activitiesShowsTheContextEachBlockSees() throws {
            let example = try ExampleProcess("activities", [])
            #expect(example.waitForExit() == 0, "output: \(example.text)")
            let lines = example.text.split(separator: "\n")
            func line(_ start: String) -> Substring? {
                lines.first { $0.drop { $0 == " " }.hasPrefix(start) }
            }
            #expect(line("audit (background): record the access")?.contains("activity #1 \"GET /users/42\"") == true)
            #expect(line("storage: nested withActivity")?.contains("\"db query\" in #1") == true)
            #expect(line("janitor (utility): cleanup, .detached")?.contains("no activity") == true)
            #expect(line("storage: timer handler (a closure)")?.contains("no activity") == true)
            #expect(line("reports: timer handler (WorkItem, .assignCurrentContext)")?.contains("GET /users/42") == true)
            #expect(!example.text.contains("MISMATCH"))
            #expect(example.text.contains("Every block saw what the rules say."))
        }

        // MARK: qos-demo

        /// Every class runs at its own QoS (the main thread's `group.wait()` raises nothing),
        /// so the kernel shares the CPU by the classes' nice values and the higher classes
        /// finish first. The order is checked as a rank statistic with a margin (at most two
        /// of the ten pairs of classes out of order, and user-interactive ahead of
        /// background): on a busy machine two neighbouring classes may swap. The chunks are
        /// large enough (about 0.1 s of a class's work per CPU) that the classes compete for
        /// longer than their threads take to start. Background runs at its nice value without
        /// `SCHED_IDLE` here: under a CPU hog from elsewhere `SCHED_IDLE` would hold it back
        /// for tens of seconds, and what this test checks is the order by nice value
        /// (`QoSEnergyTests` check the policy).
        @Test func qosDemoShowsHigherClassesFinishingFirst() throws {
            let demo = try ExampleProcess("qos-demo", [], environment: ["QOS_DEMO_CHUNK_SIZE": "100000",
                                                                        "LULL_BACKGROUND_SCHED_IDLE": "0"])
            #expect(demo.waitForExit() == 0, "output: \(demo.text)")
            let classes = ["user-interactive", "user-initiated", "default", "utility", "background"]
            let rows = demo.text.split(separator: "\n")
                .map { $0.split(separator: " ").map(String.init) }
                .filter { $0.count >= 5 && classes.contains($0[0]) && $0[2] == "s" }
            try #require(rows.count == classes.count, "output: \(demo.text)")
            for row in rows {
                #expect(row[4] == row[0], "a block of \(row[0]) ran at \(row[4]): \(demo.text)")
            }
            let nices = classes.map { name in rows.first { $0[0] == name }.flatMap { Int($0[3]) } ?? 0 }
            #expect(nices == nices.sorted(), "nice values by class: \(nices)")
            // Without the privilege to raise priorities, the top classes share one nice value
            // and finish in any order among themselves.
            guard geteuid() == 0 else { return }
            #expect(nices == [-10, -5, 0, 5, 15].map { $0 + nices[2] }, "nice values by class: \(nices)")
            let finishRank = classes.map { name in rows.firstIndex { $0[0] == name }! }
            var inversions = 0
            for earlier in 0..<classes.count {
                for later in (earlier + 1)..<classes.count where finishRank[earlier] > finishRank[later] {
                    inversions += 1
                }
            }
            #expect(inversions <= 2, "finish order \(rows.map { $0[0] }): \(demo.text)")
            #expect(finishRank[0] < finishRank[4], "finish order \(rows.map { $0[0] })")
        }

        // MARK: Helpers

        static func port(from line: String?) -> UInt16? {
            guard let line, let range = line.firstRange(of: "127.0.0.1:") else { return nil }
            return UInt16(line[range.upperBound...].prefix { $0.isNumber })
        }

        /// Writes `bytes` to a connected socket while reading the answer, until as many bytes
        /// came back; fails after the generous timeout.
        static func exchange(_ socket: Int32, _ bytes: [UInt8]) throws -> [UInt8] {
            var sent = 0
            var answer: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            let deadline = monotonicNanoseconds() + 10_000_000_000
            while answer.count < bytes.count {
                guard monotonicNanoseconds() < deadline else {
                    throw ExampleProcess.LaunchError(description: "echo: \(answer.count) of \(bytes.count) bytes back")
                }
                var watched = pollfd(fd: socket, events: Int16(POLLIN) | (sent < bytes.count ? Int16(POLLOUT) : 0), revents: 0)
                guard poll(&watched, 1, 100) >= 0 || errno == EINTR else {
                    throw ExampleProcess.LaunchError(description: "poll: \(String(cString: strerror(errno)))")
                }
                if watched.revents & Int16(POLLOUT) != 0 {
                    let count = bytes[sent...].withUnsafeBytes {
                        send(socket, $0.baseAddress, min($0.count, 16 * 1024), Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
                    }
                    if count > 0 { sent += count }
                }
                if watched.revents & Int16(POLLIN | POLLHUP) != 0 {
                    let count = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
                    if count == 0 { throw ExampleProcess.LaunchError(description: "echo: the server closed the connection") }
                    if count > 0 { answer += chunk[0..<count] }
                }
            }
            return answer
        }
    }
}
