// echo-server: a TCP echo server on 127.0.0.1, on Lull's read, write, timer and signal
// sources. The server itself is EchoServerKit's `EchoServer` (the load test in
// Benchmarks/ drives the same code); this file is the program around it.

import ArgumentParser
import EchoServerKit
import Lull
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

@main
struct EchoServerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "echo-server",
        abstract: "A TCP echo server on 127.0.0.1, built on Lull's event sources.",
        discussion: """
            Every connection gets a serial queue of its own with a read source, a write source \
            and an idle timer. SIGINT or SIGTERM stops accepting, lets each connection write \
            back what it has read, and exits.
            """
    )

    @Option(help: "The port on 127.0.0.1; 0 picks a free one (printed at start).")
    var port: UInt16 = 7007

    @Option(name: .customLong("idle-timeout"),
            help: ArgumentHelp("Close a connection after this many seconds without data.", valueName: "seconds"))
    var idleTimeout: Double = 30

    @Flag(help: "Do not print connections as they open and close.")
    var quiet = false

    func validate() throws {
        guard idleTimeout > 0, idleTimeout.isFinite else {
            throw ValidationError("--idle-timeout must be a number of seconds > 0")
        }
    }

    func run() throws {
        let log: EchoServer.Log? = if quiet { nil } else { { message in say(message) } }
        let server: EchoServer
        do {
            server = try EchoServer(configuration: .init(
                port: port, idleTimeout: .milliseconds(Int64(idleTimeout * 1000)), log: log))
        } catch {
            // Not a usage error: say why, without the usage text.
            say("cannot listen: \(error)")
            throw ExitCode(1)
        }

        // Signal sources see SIGINT and SIGTERM only when their disposition does not end
        // the process: ignore them first, as on Darwin.
        let stopping = Atomic(false)
        let stopSources = [SIGINT, SIGTERM].map { (signalNumber: Int32) -> SignalSource in
            signal(signalNumber, SIG_IGN)
            let source = EventSource.makeSignalSource(signal: signalNumber, queue: .main)
            source.setEventHandler {
                guard !stopping.exchange(true, ordering: .relaxed) else {
                    say("second signal: exiting without waiting for the connections")
                    Glibc.exit(1)
                }
                say("\(signalNumber == SIGINT ? "SIGINT" : "SIGTERM"): shutting down "
                    + "(\(server.connectionCount) connections open)")
                server.shutdown {
                    say("all connections closed, bye")
                    Glibc.exit(0)
                }
            }
            source.activate()
            return source
        }

        server.start()
        say("listening on 127.0.0.1:\(server.port) (idle timeout \(idleTimeout) s; "
            + "SIGINT or SIGTERM to stop)")
        withExtendedLifetime(stopSources) {
            WorkQueue.runMain()
        }
    }
}

/// Prints a line of the server's at once: its output often goes to a pipe (the demo, the tests).
func say(_ message: String) {
    print("echo-server: \(message)")
    fflush(nil)
}
