// Runtime-neutral pieces of the harness: the clock, a one-shot latch with a timed wait,
// the description of a benchmark and of one measured run, and number formatting.
//
// Everything here is used the same way for Lull and for Dispatch, so that neither
// runtime pays for the harness more than the other.

import Glibc
import Synchronization

// MARK: - Runtimes and benchmarks

/// The two runtimes compared.
enum Runtime: String, CaseIterable, Sendable {
    case lull
    case dispatch

    var displayName: String {
        switch self {
        case .lull: "Lull"
        case .dispatch: "Dispatch"
        }
    }
}

/// What a benchmark needs to know for one run.
struct Parameters: Sendable {
    /// Number of blocks (or calls) per run.
    var n: Int
    /// A window length in seconds (used by the idle benchmark).
    var seconds: Double
    /// How long one run may wait for its work before it reports a timeout.
    var runTimeout: Double
}

/// The result of one run of one benchmark on one runtime.
enum RunOutcome: Sendable {
    /// `value` is the figure reported (a rate, or a count); `seconds` the wall time measured;
    /// `extras` further named figures shown in the details; `notes` free text.
    case ok(value: Double, seconds: Double, extras: [(String, Double)], notes: [String])
    /// The runtime misbehaved: timeout, wrong count, failed warm-up...
    case failed(String)
    /// Not measured, for the reason given (a peer program that is not installed).
    case skipped(String)

    static func ok(value: Double, seconds: Double) -> RunOutcome {
        .ok(value: value, seconds: seconds, extras: [], notes: [])
    }
}

/// One benchmark of the suite.
struct Benchmark: Sendable {
    /// The name used on the command line.
    let name: String
    /// A one-line description.
    let title: String
    /// The unit of the figure, e.g. "blocks/s".
    let unit: String
    /// Rates: higher is better. Counts such as idle wake-ups: lower is better.
    let lowerIsBetter: Bool
    /// Runs the benchmark in a child of its own, once without warm-up and measured runs.
    let singleShot: Bool
    /// The size of one run for the given options.
    let parameters: @Sendable (Options) -> Parameters
    /// Describes the size of one run, for the report ("N=1,000,000").
    let sizeDescription: @Sendable (Parameters) -> String
    /// Performs one run; called in a child process, on its main thread.
    let run: @Sendable (Runtime, Parameters) -> RunOutcome
    /// With `singleShot`: take `Options.runs` measurements, each in a fresh child process
    /// (for figures a process cannot measure twice, such as the memory a first use costs),
    /// and report their median.
    var freshProcessPerRun = false
    /// The Lull child measures the peer too, in the same process (its `run` reports the
    /// peer's figures as extras prefixed "peer "): no peer child is started, and the peer's
    /// column comes from those extras — the fairest comparison on a host whose speed moves
    /// from one second to the next.
    var peerInSameProcess = false
    /// At most this many measured runs (fresh processes with `freshProcessPerRun`), whatever
    /// `--runs` says: for the long benchmarks, to keep the suite's time in bounds.
    var maxRuns: Int?
    /// Further rows of the report's table for this benchmark, each from a named extra.
    var extraRows: [ExtraRow] = []
    /// What runs in the `.dispatch` child: Dispatch, or for the file-system benchmarks
    /// (Dispatch has none on Linux) the peer program named here.
    var peerName = Runtime.dispatch.displayName
    /// Runs in the parent once before this benchmark's children (which inherit its
    /// environment), for a fixture too slow to make in each of them; returns what undoes it
    /// after them.
    var prepare: (@Sendable (Parameters) -> (@Sendable () -> Void))?
    /// With `peerInSameProcess`: stop starting processes after this long instead of
    /// `Options.budgetSeconds` (for a benchmark whose one process measures for longer).
    var budgetSeconds: Double?

    /// The name shown for one runtime of this benchmark.
    func displayName(of runtime: Runtime) -> String {
        runtime == .dispatch ? peerName : runtime.displayName
    }
}

/// A further row of the report's table: the medians of one extra for both runtimes, and
/// their ratio Lull/Dispatch.
struct ExtraRow: Sendable {
    enum Style: Sendable {
        /// A whole number: 1,234.
        case count
        /// A rate with an SI suffix: 12.3 M.
        case rate
        /// A multiple: 2.31x.
        case ratio
        /// A number with a fraction, three significant digits: 87.4, 1.23.
        case decimal
    }

    /// The name in the table's first column.
    let label: String
    /// The name of the extra (as the benchmark reports it).
    let extra: String
    let unit: String
    let lowerIsBetter: Bool
    let style: Style
}

/// Command-line options that shape the suite.
struct Options: Sendable {
    var quick = false
    /// Measured runs per benchmark and runtime (after one warm-up run).
    var runs = 5
    /// The idle window of the idle wake-up benchmark.
    var idleSeconds = 3.0
    /// Per-run timeout.
    var runTimeout = 10.0
    /// Stop taking further runs of one benchmark on one runtime after this long.
    var budgetSeconds = 12.0
    /// Overrides N for the benchmarks that have one.
    var n: Int?

    /// N for a benchmark whose default sizes are `full` and `quick`.
    func size(full: Int, quick: Int) -> Int {
        n ?? (self.quick ? quick : full)
    }
}

// MARK: - Clock

enum Clock {
    /// CLOCK_MONOTONIC, in nanoseconds.
    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }

    /// CPU time used so far by the calling thread and by the whole process, in nanoseconds.
    static func cpuNanoseconds() -> (thread: UInt64, process: UInt64) {
        func read(_ clock: clockid_t) -> UInt64 {
            var ts = timespec()
            guard clock_gettime(clock, &ts) == 0 else { return 0 }
            return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
        }
        return (read(CLOCK_THREAD_CPUTIME_ID), read(CLOCK_PROCESS_CPUTIME_ID))
    }

    static func seconds(from start: UInt64, to end: UInt64) -> Double {
        Double(end &- start) / 1e9
    }

    /// Sleeps the calling thread (restarting after signals).
    static func sleep(seconds: Double) {
        let nanoseconds = Int(seconds * 1e9)
        var request = timespec(tv_sec: nanoseconds / 1_000_000_000, tv_nsec: nanoseconds % 1_000_000_000)
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR {
            request = remaining
        }
    }
}

// MARK: - Completion

/// A one-shot event with a timed wait, on a pthread condition variable that uses
/// CLOCK_MONOTONIC. The benchmarks signal it once per run, from the last block.
///
/// `@unchecked Sendable`: `isSet` is only touched with `mutex` held.
final class Latch: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var isSet = false

    init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func signal() {
        pthread_mutex_lock(mutex)
        isSet = true
        pthread_cond_broadcast(condition)
        pthread_mutex_unlock(mutex)
    }

    /// Waits until `signal()` or until `seconds` have passed; true if signalled.
    func wait(seconds: Double) -> Bool {
        let deadline = Clock.now() &+ UInt64(max(seconds, 0) * 1e9)
        var timeout = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        pthread_mutex_lock(mutex)
        while !isSet {
            if pthread_cond_timedwait(condition, mutex, &timeout) == ETIMEDOUT { break }
        }
        let signalled = isSet
        pthread_mutex_unlock(mutex)
        return signalled
    }
}

/// What the last block of a run reports: when it ran and what it saw.
final class Completion: Sendable {
    let latch = Latch()
    let finishedAt = Atomic<UInt64>(0)
    let observedCount = Atomic<Int>(0)

    /// Called once, by the block that ends the run.
    func finish(count: Int) {
        observedCount.store(count, ordering: .relaxed)
        finishedAt.store(Clock.now(), ordering: .releasing)
        latch.signal()
    }

    func wait(seconds: Double) -> Bool { latch.wait(seconds: seconds) }
}

/// A counter shared by blocks that may run at the same time.
final class SharedCounter: Sendable {
    let value = Atomic<Int>(0)

    /// Adds one and returns the new value.
    @inline(__always)
    func increment() -> Int {
        value.wrappingAdd(1, ordering: .relaxed).newValue
    }
}

/// A counter owned by one serial queue: only blocks of that queue touch it, one at a time,
/// so the queue's mutual exclusion (what the benchmark exercises) is what makes it safe.
/// A count that comes out wrong at the end is reported as a Lull (or Dispatch) bug.
///
/// `@unchecked Sendable`: confined to one serial queue, as described above.
final class QueueOwnedCounter: @unchecked Sendable {
    var value = 0
}

// MARK: - Statistics

struct Series {
    var samples: [Double] = []
    /// Medians of the named extras.
    var extras: [String: [Double]] = [:]
    var extraOrder: [String] = []
    var notes: [String] = []
    /// Set when the runtime misbehaved; the figure is then not reported.
    var problem: String?
    /// Set when the run was skipped (the reason).
    var skipped: String?

    var median: Double? { Series.median(samples) }

    static func median(_ values: [Double]) -> Double? {
        guard !values.isEmpty else { return nil }
        let sorted = values.sorted()
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }

    func medianExtra(_ name: String) -> Double? {
        Series.median(extras[name] ?? [])
    }

    /// Adds the samples, extras, notes and problem of another series of the same benchmark.
    mutating func absorb(_ other: Series) {
        samples += other.samples
        for name in other.extraOrder {
            if extras[name] == nil { extraOrder.append(name) }
            extras[name, default: []] += other.extras[name] ?? []
        }
        for note in other.notes where !notes.contains(note) { notes.append(note) }
        if problem == nil { problem = other.problem }
        if skipped == nil { skipped = other.skipped }
    }
}

// MARK: - Formatting

enum Format {
    /// `value` with exactly `decimals` digits after the point.
    static func fixed(_ value: Double, _ decimals: Int) -> String {
        guard value.isFinite else { return value.isNaN ? "nan" : (value < 0 ? "-inf" : "inf") }
        var scale: Double = 1
        for _ in 0..<decimals { scale *= 10 }
        let scaled = (abs(value) * scale).rounded()
        guard scaled < 9e18 else { return "\(value)" }
        let whole = UInt64(scaled)
        let divisor = UInt64(scale)
        let integerPart = whole / divisor
        let fraction = whole % divisor
        var text = (value < 0 && whole != 0 ? "-" : "") + grouped(integerPart)
        if decimals > 0 {
            var digits = String(fraction)
            while digits.count < decimals { digits = "0" + digits }
            text += "." + digits
        }
        return text
    }

    /// An integer with thousands separators: 1,000,000.
    static func grouped(_ value: UInt64) -> String {
        let digits = Array(String(value))
        var text = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { text.append(",") }
            text.append(digit)
        }
        return text
    }

    static func grouped(_ value: Int) -> String {
        value < 0 ? "-" + grouped(UInt64(-value)) : grouped(UInt64(value))
    }

    /// A figure with an SI suffix and 3 significant digits: 12.3 M, 456 k, 7.89.
    static func si(_ value: Double) -> String {
        let magnitude = abs(value)
        let (scaled, suffix): (Double, String) =
            magnitude >= 1e9 ? (value / 1e9, " G") :
            magnitude >= 1e6 ? (value / 1e6, " M") :
            magnitude >= 1e3 ? (value / 1e3, " k") : (value, "")
        // Decide on the rounded value, so that 99.99 prints as "100", not "100.0".
        let scaledMagnitude = abs(scaled)
        let decimals = (scaledMagnitude * 10).rounded() >= 1000 ? 0 : (scaledMagnitude * 100).rounded() >= 1000 ? 1 : 2
        return fixed(scaled, decimals) + suffix
    }

    /// A duration in seconds: "12 s", "2.5 s", "0.01 s".
    static func seconds(_ seconds: Double) -> String {
        fixed(seconds, seconds >= 10 ? 0 : seconds >= 1 ? 1 : 2) + " s"
    }

    static func milliseconds(_ seconds: Double) -> String {
        fixed(seconds * 1000, seconds < 0.1 ? 2 : 1) + " ms"
    }

    static func padRight(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }

    static func padLeft(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : String(repeating: " ", count: width - text.count) + text
    }
}

/// Writes a line to standard output at once (standard output may be a pipe).
func emit(_ line: String) {
    print(line)
    fflush(nil)
}
