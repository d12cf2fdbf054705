// File-system sources and the directory watcher. Apple's Dispatch has no file-system
// sources on Linux, so the peer of each benchmark is named in its `peerName` and runs in
// the child process the other benchmarks give Dispatch:
//   fs-latency      write(2) → handler of a file-system source; peer: a raw inotify loop
//   fs-tree-watch   start watching 10,000 directories; peer: inotifywait -r (inotify-tools)
//   fs-storm        100,000 file creations reported, nothing lost; peer: a raw inotify loop
// The raw loop (a thread blocked in poll(2), reading the inotify descriptor) is the floor:
// the kernel's own wake-up and nothing else.

import Glibc
import Lull
import Synchronization

enum FileSystemBenchmarks {
    static let all: [Benchmark] = [latency, treeWatch, storm]

    /// `fs` selects them all.
    static let groups: [String: [String]] = ["fs": all.map(\.name)]

    static let rawPeer = "inotify+poll"

    // MARK: - write → handler latency

    static let latency = Benchmark(
        name: "fs-latency",
        title: "write(2) → handler: a FileSystemObjectSource (.write) on a file, serial target queue; the main thread "
            + "appends one byte, waits for the handler, again, N times; figure = median latency (µs) from before write() "
            + "to the handler's start. Peer: a thread blocked in poll(2) on a raw inotify descriptor (IN_MODIFY), the floor",
        unit: "µs p50",
        lowerIsBetter: true,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 5_000, quick: 1_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n)) writes" },
        run: runLatency,
        extraRows: [ExtraRow(label: "  fs-latency p99", extra: "p99 µs", unit: "µs p99", lowerIsBetter: true, style: .count)],
        peerName: rawPeer
    )

    /// Handler start times, one per write, written by the handler (or the raw reader's
    /// thread) and read by the main thread once the handler's `arrived` post says so.
    ///
    /// `@unchecked Sendable`: slot i is written by one thread (the handler, one call at a
    /// time on a serial queue, or the reader thread) before `arrived.post()`, and read by
    /// the main thread after the matching `arrived.wait`, which orders the two.
    final class Arrivals: @unchecked Sendable {
        let stamps: UnsafeMutablePointer<UInt64>
        let capacity: Int
        var count = 0
        let arrived = CountingSignal()

        init(capacity: Int) {
            self.capacity = capacity
            stamps = .allocate(capacity: capacity)
        }

        deinit { stamps.deallocate() }

        /// One handler call.
        func record() {
            if count < capacity { stamps[count] = Clock.now() }
            count += 1
            arrived.post()
        }
    }

    /// How many untimed writes go first (the source's registration, the caches).
    static let warmUpWrites = 20

    @Sendable
    static func runLatency(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let n = parameters.n
        guard let directory = ScratchTree.makeDirectory("fs-latency") else {
            return .failed("mkdtemp failed: \(Descriptors.lastError())")
        }
        defer { ScratchTree.remove(directory) }
        let path = "\(directory)/target"
        let file = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard file >= 0 else { return .failed("open \(path): \(Descriptors.lastError())") }
        defer { _ = close(file) }
        let arrivals = Arrivals(capacity: warmUpWrites + n)

        let stop: () -> Void
        switch runtime {
        case .lull:
            let source: FileSystemObjectSource
            do {
                source = try EventSource.makeFileSystemObjectSource(path: path, eventMask: .write,
                                                                    queue: WorkQueue(label: "bench.fs-latency"))
            } catch {
                return .failed("makeFileSystemObjectSource: \(error)")
            }
            let registered = Countdown(1)
            let cancelled = Countdown(1)
            source.setEventHandler { arrivals.record() }
            source.setRegistrationHandler { registered.countDown() }
            source.setCancelHandler { cancelled.countDown() }
            source.activate()
            guard registered.wait(seconds: parameters.runTimeout) else {
                source.cancel()
                return .failed("TIMEOUT: the source's registration handler had not run")
            }
            stop = {
                source.cancel()
                _ = cancelled.wait(seconds: SourceBenchmarks.cancelTimeout)
            }
        case .dispatch:
            guard let reader = RawInotifyReader() else { return .failed("inotify_init1: \(Descriptors.lastError())") }
            guard reader.watch(path, mask: UInt32(IN_MODIFY)) else {
                reader.stop()
                return .failed("inotify_add_watch \(path): \(Descriptors.lastError())")
            }
            guard reader.start({ mask, _ in if mask & UInt32(IN_MODIFY) != 0 { arrivals.record() } }) else {
                reader.stop()
                return .failed("pthread_create failed for the reader thread")
            }
            stop = { reader.stop() }
        }
        defer { stop() }

        var writtenAt = [UInt64](repeating: 0, count: warmUpWrites + n)
        var byte: UInt8 = 0x4C
        for index in 0..<(warmUpWrites + n) {
            writtenAt[index] = Clock.now()
            guard write(file, &byte, 1) == 1 else { return .failed("write: \(Descriptors.lastError())") }
            guard arrivals.arrived.wait(until: index + 1, seconds: parameters.runTimeout) else {
                return .failed("TIMEOUT: write \(index + 1) of \(warmUpWrites + n) never reached the handler "
                    + "(\(arrivals.arrived.value) handler calls)")
            }
        }
        // One handler call per write: the next write waited for it.
        guard arrivals.arrived.value == warmUpWrites + n else {
            return .failed("WRONG COUNT: \(arrivals.arrived.value) handler calls for \(warmUpWrites + n) writes")
        }
        var latencies = (warmUpWrites..<(warmUpWrites + n)).map { Double(arrivals.stamps[$0] &- writtenAt[$0]) / 1000 }
        latencies.sort()
        let p50 = latencies[latencies.count / 2]
        let p99 = latencies[min(latencies.count - 1, latencies.count * 99 / 100)]
        let mean = latencies.reduce(0, +) / Double(latencies.count)
        return .ok(value: p50, seconds: latencies.reduce(0, +) / 1e6,
                   extras: [("p99 µs", p99), ("mean µs", mean)], notes: [])
    }

    // MARK: - start watching a tree

    /// 100 directories of 99 subdirectories each: 10,000 directories below the root.
    static let treeTop = 100
    static let treeBelow = 99

    static let treeWatch = Benchmark(
        name: "fs-tree-watch",
        title: "start watching a tree of 10,000 directories (100 × 99 below the root): Lull's DirectoryTreeWatcher "
            + "(init + activate, which returns once every directory is watched) against inotifywait -m -r (spawn → "
            + "\"Watches established.\" on its stderr); figure = set-up time; memory: RSS increase over watching an "
            + "empty directory (inotifywait: its own RSS on the tree minus on an empty directory) and the kernel's "
            + "watch count from /proc/PID/fdinfo. Fresh process per run",
        unit: "ms set-up",
        lowerIsBetter: true,
        singleShot: true,
        parameters: { options in Parameters(n: treeTop * (1 + treeBelow), seconds: 0, runTimeout: options.runTimeout) },
        sizeDescription: { "D=\(Format.grouped($0.n)) dirs" },
        run: runTreeWatch,
        freshProcessPerRun: true,
        extraRows: [
            ExtraRow(label: "  fs-tree-watch RSS increase", extra: "RSS increase KiB", unit: "KiB", lowerIsBetter: true, style: .count),
            ExtraRow(label: "  fs-tree-watch kernel watches", extra: "kernel watches", unit: "watches", lowerIsBetter: true, style: .count),
        ],
        peerName: "inotifywait -r",
        prepare: prepareTree
    )

    /// The environment variable that gives the children the tree the parent made.
    static let treeVariable = "LULL_BENCH_FS_TREE"

    /// A scratch directory with `empty/` and `tree/` (10,000 directories) in it, or nil.
    static func makeTreeScratch() -> String? {
        guard let scratch = ScratchTree.makeDirectory("fs-tree") else { return nil }
        guard mkdir("\(scratch)/empty", 0o755) == 0, mkdir("\(scratch)/tree", 0o755) == 0,
              ScratchTree.makeDirectories(under: "\(scratch)/tree", top: treeTop, below: treeBelow) else {
            let saved = errno
            ScratchTree.remove(scratch)
            errno = saved
            return nil
        }
        return scratch
    }

    /// 10,000 mkdir(2) take seconds on a slow disk: the parent makes the tree once for
    /// every child of the benchmark (both contenders then find it equally warm in the
    /// kernel's caches).
    @Sendable
    static func prepareTree(_ parameters: Parameters) -> (@Sendable () -> Void) {
        guard let scratch = makeTreeScratch() else { return {} }  // each child tries, and reports the error
        setenv(treeVariable, scratch, 1)
        return {
            unsetenv(treeVariable)
            ScratchTree.remove(scratch)
        }
    }

    @Sendable
    static func runTreeWatch(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let inotifyWait: String?
        if runtime == .dispatch {
            inotifyWait = InotifyWait.executable()
            guard inotifyWait != nil else { return .skipped(InotifyWait.missingMessage) }
        } else {
            inotifyWait = nil
        }
        let scratch: String
        if let prepared = getenv(treeVariable) {
            scratch = String(cString: prepared)
        } else {
            guard let made = makeTreeScratch() else { return .failed("making the tree failed: \(Descriptors.lastError())") }
            scratch = made
        }
        defer { if getenv(treeVariable) == nil { ScratchTree.remove(scratch) } }
        let empty = "\(scratch)/empty"
        let root = "\(scratch)/tree"
        let setUpSeconds: Double
        let emptySeconds: Double
        let residentIncrease: Int
        let resident: Int
        let watches: Int
        switch runtime {
        case .lull:
            let queue = WorkQueue(label: "bench.fs-tree-watch")
            // The empty directory first: the runtime's threads, reactor and inotify instance.
            var start = Clock.now()
            guard let warm = try? DirectoryTreeWatcher(path: empty, queue: queue) else {
                return .failed("DirectoryTreeWatcher on an empty directory failed")
            }
            warm.activate()
            emptySeconds = Clock.seconds(from: start, to: Clock.now())
            Clock.sleep(seconds: 0.05)
            guard let before = Memory.residentBytes() else { return .failed("cannot read VmRSS") }
            // The empty directory's watch and the sentinel on its parent (which the tree's
            // root shares): what the tree adds is its root and its directories.
            let watchesBefore = ProcessFacts.inotifyWatches()
            let watcher: DirectoryTreeWatcher
            start = Clock.now()
            do {
                watcher = try DirectoryTreeWatcher(path: root, queue: queue)
            } catch {
                return .failed("DirectoryTreeWatcher: \(error)")
            }
            watcher.activate()
            setUpSeconds = Clock.seconds(from: start, to: Clock.now())
            guard let after = Memory.residentBytes() else { return .failed("cannot read VmRSS") }
            resident = after
            residentIncrease = after - before
            watches = ProcessFacts.inotifyWatches() - watchesBefore
            if let error = watcher.error { return .failed("the watcher reported: \(error)") }
            watcher.cancel()
            warm.cancel()
        case .dispatch:
            guard let executable = inotifyWait else { return .skipped(InotifyWait.missingMessage) }
            let emptyRun: InotifyWait.Ready
            switch InotifyWait.start(executable, watching: empty, timeout: parameters.runTimeout) {
            case .success(let ready): emptyRun = ready
            case .failure(let failure): return .failed(failure.message)
            }
            let emptyResident = Memory.residentBytes(of: emptyRun.pid)
            InotifyWait.stop(emptyRun.pid)
            emptySeconds = emptyRun.seconds
            let treeRun: InotifyWait.Ready
            switch InotifyWait.start(executable, watching: root, timeout: parameters.runTimeout) {
            case .success(let ready): treeRun = ready
            case .failure(let failure): return .failed(failure.message)
            }
            defer { InotifyWait.stop(treeRun.pid) }
            guard let emptyResident, let after = Memory.residentBytes(of: treeRun.pid) else {
                return .failed("cannot read inotifywait's VmRSS from /proc")
            }
            setUpSeconds = treeRun.seconds
            resident = after
            residentIncrease = after - emptyResident
            watches = ProcessFacts.inotifyWatches(of: treeRun.pid)
        }
        guard watches >= parameters.n + 1 else {
            return .failed("WRONG COUNT: \(Format.grouped(watches)) kernel watches for \(Format.grouped(parameters.n + 1)) "
                + "directories (the root and the tree)")
        }
        return .ok(value: setUpSeconds * 1000, seconds: setUpSeconds,
                   extras: [("RSS increase KiB", Double(residentIncrease) / 1024),
                            ("kernel watches", Double(watches)),
                            ("process RSS KiB", Double(resident) / 1024),
                            ("empty directory ms", emptySeconds * 1000)],
                   notes: [])
    }

    // MARK: - a storm of creations

    static let storm = Benchmark(
        name: "fs-storm",
        title: "a storm of N file creations (open O_CREAT|O_WRONLY + close, as fast as one thread can) in one watched "
            + "directory on /dev/shm (a tmpfs, where creating is fast enough to press the watcher): Lull's DirectoryTreeWatcher (latency 10 ms) against a raw inotify loop with the same kernel "
            + "mask; figure = distinct created paths reported / (first creation → the last one reported); every path "
            + "checked; overflows (IN_Q_OVERFLOW, the watcher's .mustRescan) and paths lost are counted",
        unit: "paths/s",
        lowerIsBetter: false,
        singleShot: false,
        parameters: { options in
            Parameters(n: options.size(full: 100_000, quick: 20_000), seconds: 0, runTimeout: options.runTimeout)
        },
        sizeDescription: { "N=\(Format.grouped($0.n)) files" },
        run: runStorm,
        maxRuns: 3,
        extraRows: [
            ExtraRow(label: "  fs-storm paths lost", extra: "lost", unit: "paths", lowerIsBetter: true, style: .count),
            ExtraRow(label: "  fs-storm overflows", extra: "overflows", unit: "overflows", lowerIsBetter: true, style: .count),
        ],
        peerName: rawPeer
    )

    /// The kernel mask of Lull's tree watcher, for the raw peer: the same events in the queue.
    static let treeWatcherMask = UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_MODIFY
        | IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)

    /// The files created are "f<index>"; which ones were reported.
    ///
    /// `@unchecked Sendable`: `seen` is touched only by the thread that reports paths — the
    /// watcher's handler (one call at a time) or the raw reader's thread; the main thread
    /// reads only the atomics.
    final class Tally: @unchecked Sendable {
        private var seen: [Bool]
        let distinct = Atomic<Int>(0)
        let overflows = Atomic<Int>(0)
        let lastReportAt = Atomic<UInt64>(0)
        let complete = Completion()
        let n: Int

        init(n: Int) {
            self.n = n
            seen = [Bool](repeating: false, count: n)
        }

        /// A created file's name, "f<index>".
        func sawName(_ name: UnsafeRawBufferPointer) {
            guard name.count >= 2, name[0] == UInt8(ascii: "f") else { return }
            var index = 0
            for byte in name.dropFirst() {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return }
                index = index * 10 + Int(byte - UInt8(ascii: "0"))
            }
            saw(index)
        }

        func saw(_ index: Int) {
            guard index < n, !seen[index] else { return }
            seen[index] = true
            lastReportAt.store(Clock.now(), ordering: .relaxed)
            let count = distinct.wrappingAdd(1, ordering: .relaxed).newValue
            if count == n { complete.finish(count: count) }
        }
    }

    /// After the last creation, a run that saw overflows ends when nothing new was reported
    /// for this long.
    static let quietSeconds = 1.0

    @Sendable
    static func runStorm(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        let n = parameters.n
        // In memory: on a disk, creating the files is so slow that the watcher idles.
        guard let root = ScratchTree.makeDirectory("fs-storm", inMemory: true) else {
            return .failed("mkdtemp failed: \(Descriptors.lastError())")
        }
        defer { ScratchTree.remove(root) }
        let tally = Tally(n: n)
        let names: [[CChar]] = (0..<n).map { Array("f\($0)".utf8CString) }
        let directory = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { return .failed("open \(root): \(Descriptors.lastError())") }
        defer { _ = close(directory) }

        let stop: () -> Void
        switch runtime {
        case .lull:
            let watcher: DirectoryTreeWatcher
            do {
                watcher = try DirectoryTreeWatcher(path: root, latency: .milliseconds(10),
                                                   queue: WorkQueue(label: "bench.fs-storm"))
            } catch {
                return .failed("DirectoryTreeWatcher: \(error)")
            }
            let prefix = root + "/f"
            watcher.setEventHandler { batch in
                for change in batch {
                    switch change.kind {
                    case .created, .modified:
                        guard change.path.hasPrefix(prefix), let index = Int(change.path.dropFirst(prefix.count)) else { continue }
                        tally.saw(index)
                    case .mustRescan:
                        tally.overflows.add(1, ordering: .relaxed)
                    default:
                        continue
                    }
                }
            }
            watcher.activate()
            stop = { watcher.cancel() }
        case .dispatch:
            guard let reader = RawInotifyReader() else { return .failed("inotify_init1: \(Descriptors.lastError())") }
            guard reader.watch(root, mask: treeWatcherMask) else {
                reader.stop()
                return .failed("inotify_add_watch \(root): \(Descriptors.lastError())")
            }
            let started = reader.start { mask, name in
                if mask & UInt32(IN_Q_OVERFLOW) != 0 { tally.overflows.add(1, ordering: .relaxed) }
                if mask & UInt32(IN_CREATE) != 0 { tally.sawName(name) }
            }
            guard started else {
                reader.stop()
                return .failed("pthread_create failed for the reader thread")
            }
            stop = { reader.stop() }
        }

        let start = Clock.now()
        for name in names {
            let file = openat(directory, name, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
            guard file >= 0 else {
                stop()
                return .failed("creating a file failed: \(Descriptors.lastError())")
            }
            _ = close(file)
        }
        let created = Clock.now()
        var finished = false
        let deadline = created &+ UInt64(parameters.runTimeout * 1e9)
        while Clock.now() < deadline {
            if tally.complete.wait(seconds: 0.1) {
                finished = true
                break
            }
            // Lost paths with an overflow: stop once nothing new came for a while.
            if tally.overflows.load(ordering: .relaxed) > 0 {
                let last = max(tally.lastReportAt.load(ordering: .relaxed), created)
                if Clock.seconds(from: last, to: Clock.now()) > quietSeconds { break }
            }
        }
        stop()
        let reported = tally.distinct.load(ordering: .relaxed)
        let overflows = tally.overflows.load(ordering: .relaxed)
        let lost = n - reported
        if lost > 0 && overflows == 0 {
            return .failed((finished ? "" : "TIMEOUT: ") + "\(Format.grouped(lost)) of \(Format.grouped(n)) created paths "
                + "never reported, without an overflow being reported (silent loss)")
        }
        let end = finished ? tally.complete.finishedAt.load(ordering: .acquiring) : tally.lastReportAt.load(ordering: .relaxed)
        let seconds = Clock.seconds(from: start, to: max(end, start &+ 1))
        return .ok(value: Double(reported) / seconds, seconds: seconds,
                   extras: [("create ms", Clock.seconds(from: start, to: created) * 1000),
                            ("last path after the last creation ms", Clock.seconds(from: created, to: max(end, created)) * 1000),
                            ("lost", Double(lost)),
                            ("overflows", Double(overflows))],
                   notes: overflows > 0 ? ["the inotify queue overflowed: \(Format.grouped(lost)) paths lost, reported as such"] : [])
    }
}

/// A count of posts that a thread can wait to reach (a counting semaphore that also tells
/// how many posts there were).
///
/// `@unchecked Sendable`: `semaphore` is set in `init` and freed in `deinit`; in between
/// only sem_post and sem_timedwait touch it, which are thread-safe.
final class CountingSignal: @unchecked Sendable {
    private let posts = Atomic<Int>(0)
    private let semaphore: UnsafeMutablePointer<sem_t>

    init() {
        semaphore = .allocate(capacity: 1)
        sem_init(semaphore, 0, 0)
    }

    deinit {
        sem_destroy(semaphore)
        semaphore.deallocate()
    }

    var value: Int { posts.load(ordering: .acquiring) }

    func post() {
        posts.add(1, ordering: .releasing)
        sem_post(semaphore)
    }

    /// Waits until `target` posts were made, at most `seconds`; true if they were.
    func wait(until target: Int, seconds: Double) -> Bool {
        var realtime = timespec()
        clock_gettime(CLOCK_REALTIME, &realtime)
        let deadlineNanoseconds = (realtime.tv_sec * 1_000_000_000 + realtime.tv_nsec) + Int(seconds * 1e9)
        var deadline = timespec(tv_sec: deadlineNanoseconds / 1_000_000_000, tv_nsec: deadlineNanoseconds % 1_000_000_000)
        while posts.load(ordering: .acquiring) < target {
            if sem_timedwait(semaphore, &deadline) != 0 && errno == ETIMEDOUT { return posts.load(ordering: .acquiring) >= target }
        }
        return true
    }
}
