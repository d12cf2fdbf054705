// memory-pressure-cache: a service that keeps a cache and drops it under memory pressure.
//
// The "service" renders a page per request (a simulated request every 20 ms) and keeps the
// rendered pages in a cache that only grows. A memory-pressure source drops the cache on
// `.warning` (and `.critical`) and says when pressure is back to `.normal`. It runs until
// SIGINT or SIGTERM, then prints what it did.
//
//   memory-pressure-cache              serve until interrupted
//   memory-pressure-cache --seconds N  serve for N seconds, then exit
//   memory-pressure-cache --help       this text
//
// Where the kernel has no pressure-stall information (PSI) or refuses its triggers, it says
// so (the source's registrationError) and keeps serving without the source.
import Lull
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

let usage = """
    usage: memory-pressure-cache [--seconds N]

    A service that caches what it renders and drops the cache when the kernel reports
    memory pressure (Linux PSI: .warning at 10% of a 2 s window stalled, .critical at 40%).

    options:
      --seconds N   serve for N seconds, then exit (default: until SIGINT or SIGTERM)
      --help        show this text
    """

var seconds: Int?
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--help", "-h":
        print(usage)
        exit(0)
    case "--seconds":
        guard let value = arguments.popFirst().flatMap({ Int($0) }), value > 0 else {
            Usage.fail("--seconds needs a positive number")
        }
        seconds = value
    default:
        Usage.fail("unknown argument \(argument)")
    }
}

enum Usage {
    static func fail(_ message: String) -> Never {
        let text = "memory-pressure-cache: \(message)\n\(usage)\n"
        _ = text.withCString { write(2, $0, strlen($0)) }
        exit(2)
    }
}

/// The pages rendered so far, by request number; shared by the request handler and the
/// pressure handler (both on `service`, so the lock is never contended; it makes the
/// sharing checkable).
final class PageCache: Sendable {
    private let pages = Mutex<[Int: [UInt8]]>([:])
    private let dropped = Atomic<Int>(0)

    func store(_ page: [UInt8], for request: Int) {
        pages.withLock { $0[request] = page }
    }

    /// Empties the cache; how many bytes it held.
    func drop() -> Int {
        dropped.add(1, ordering: .relaxed)
        return pages.withLock { pages in
            defer { pages.removeAll() }
            return pages.values.reduce(0) { $0 + $1.count }
        }
    }

    var bytes: Int { pages.withLock { $0.values.reduce(0) { $0 + $1.count } } }
    var drops: Int { dropped.load(ordering: .relaxed) }
}

/// Prints a line at once (the output is often a pipe).
func say(_ line: String) {
    print(line)
    fflush(nil)
}

let service = WorkQueue(label: "example.service")
let cache = PageCache()
let served = Atomic<Int>(0)

// The requests: a page of 64 KiB each, every 20 ms.
let requests = EventSource.makeTimerSource(queue: service)
requests.schedule(deadline: .now(), repeating: .milliseconds(20))
requests.setEventHandler {
    let request = served.add(1, ordering: .relaxed).newValue
    cache.store([UInt8](repeating: UInt8(truncatingIfNeeded: request), count: 65_536), for: request)
}
requests.activate()

// The pressure: drop the cache when memory gets short.
let pressure = EventSource.makeMemoryPressureSource(eventMask: .all, queue: service)
pressure.setEventHandler {
    let level = MemoryPressureEvent(rawValue: pressure.data)
    if level == .normal {
        say("memory pressure back to normal; cache holds \(cache.bytes / 1024) KiB")
    } else {
        let freed = cache.drop()
        say("memory pressure \(level == .critical ? "critical" : "warning"): dropped \(freed / 1024) KiB of cache")
    }
}
pressure.setCancelHandler {
    if let error = pressure.registrationError {
        say("no memory-pressure source (\(error)); serving without it")
    }
}
pressure.activate()

func finish() -> Never {
    say("served \(served.load(ordering: .relaxed)) requests; dropped the cache \(cache.drops) times")
    exit(0)
}

signal(SIGINT, SIG_IGN)
signal(SIGTERM, SIG_IGN)
let stopSources = [SIGINT, SIGTERM].map { number in
    let source = EventSource.makeSignalSource(signal: number, queue: service)
    source.setEventHandler { finish() }
    source.activate()
    return source
}
if let seconds {
    service.asyncAfter(deadline: .now() + .seconds(seconds)) { finish() }
}
say("serving; the cache is dropped on memory pressure (Ctrl-C to stop)")
withExtendedLifetime(stopSources) { WorkQueue.runMain() }
