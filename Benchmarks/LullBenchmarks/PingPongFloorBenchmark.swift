// The read-source ping-pong against its floor: the same two pipes and the same handler work
// as raw libevent on one thread (CLibeventFloor), which Lull's reactor is built on. Both run
// in one process, taking turns in chunks, so that the host's speed moves both alike.

import CLibeventFloor
import Glibc

enum PingPongFloorBenchmark {
    static let all: [Benchmark] = [floor]

    /// Turns per run: Lull, the floor, Lull, ... each with a quarter of the round trips.
    static let chunks = 4

    static let floor = Benchmark(
        name: "ping-pong-floor",
        title: "read-source ping-pong (as ping-pong) against raw libevent on one thread (one event_base, two persistent "
            + "read events doing the handlers' read and write): the floor of a reactor built on libevent; both in one "
            + "process, in alternating chunks; figure = round trips / time",
        unit: "round trips/s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 100_000, quick: 20_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n)) in \(chunks) chunks each" },
        run: run,
        peerInSameProcess: true,
        peerName: "libevent"
    )

    @Sendable
    static func run(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        guard runtime == .lull else { return .failed("ping-pong-floor runs its peer in the Lull child") }
        let chunk = max(1, parameters.n / chunks)
        var lullSeconds = 0.0
        var floorSeconds = 0.0
        for _ in 0..<chunks {
            let lullRun = SourceBenchmarks.runPingPong(.lull, Parameters(n: chunk, seconds: 0, runTimeout: parameters.runTimeout))
            guard case .ok(_, let seconds, _, _) = lullRun else { return lullRun }
            lullSeconds += seconds
            let floorRun = lull_bench_libevent_ping_pong(chunk)
            guard floorRun > 0 else { return .failed("the libevent floor failed: \(String(cString: strerror(Int32(-floorRun))))") }
            floorSeconds += floorRun
        }
        let trips = Double(chunk * chunks)
        return .ok(value: trips / lullSeconds, seconds: lullSeconds,
                   extras: [("peer round trips/s", trips / floorSeconds),
                            ("Lull / floor", floorSeconds / lullSeconds)],
                   notes: [])
    }
}
