import Glibc
import Synchronization
import Testing
@testable import Lull

/// The levels' rules, exactly: totals and times given, no kernel.
@Suite struct MemoryPressureReadingTests {
    let second: UInt64 = 1_000_000_000
    let thresholds = MemoryPressureThresholds.standard

    @Test func theTriggersAreTheDocumentedShareOfATwoSecondWindow() {
        #expect(thresholds.trigger(stall: thresholds.warningStall) == "some 200000 2000000")
        #expect(thresholds.trigger(stall: thresholds.criticalStall) == "some 800000 2000000")
        #expect(thresholds.level(stall: 199_999, elapsed: 2_000_000) == .normal)
        #expect(thresholds.level(stall: 200_000, elapsed: 2_000_000) == .warning)
        #expect(thresholds.level(stall: 800_000, elapsed: 2_000_000) == .critical)
        // A longer span (a suspended source's late sample) is scaled to one window.
        #expect(thresholds.level(stall: 300_000, elapsed: 4_000_000) == .normal)
    }

    @Test func theReportOfANewRegistrationIsNotARise() {
        var reading = MemoryPressureReading(thresholds: thresholds, total: 5_000_000, now: 10 * second)
        #expect(reading.decide([.warningTrigger, .criticalTrigger], total: 5_000_100, now: 10 * second + 1_000) == nil)
        #expect(reading.level == .normal)
    }

    @Test func aWarningFallsToNormalAfterAQuietWindow() {
        var reading = MemoryPressureReading(thresholds: thresholds, total: 0, now: 0)
        #expect(reading.decide(.warningTrigger, total: 250_000, now: 3 * second) == .warning)
        // Still stalling over the next window: stays.
        #expect(reading.decide(.sample, total: 650_000, now: 5 * second) == nil)
        #expect(reading.level == .warning)
        // A trigger that fires again changes nothing.
        #expect(reading.decide(.warningTrigger, total: 700_000, now: 5 * second + 1_000) == nil)
        // A quiet window: normal.
        #expect(reading.decide(.sample, total: 710_000, now: 7 * second) == .normal)
        #expect(reading.decide(.sample, total: 710_000, now: 9 * second) == nil)
    }

    @Test func criticalStepsDownThroughWarning() {
        var reading = MemoryPressureReading(thresholds: thresholds, total: 0, now: 0)
        #expect(reading.decide([.warningTrigger, .criticalTrigger], total: 900_000, now: 2 * second) == .critical)
        #expect(reading.decide(.sample, total: 1_300_000, now: 4 * second) == .warning)
        #expect(reading.decide(.criticalTrigger, total: 2_200_000, now: 5 * second) == .critical)
        #expect(reading.decide(.sample, total: 2_200_000, now: 7 * second) == .normal)
    }

    @Test func aSampleThatMeasuresMoreRaisesTheLevel() {
        var reading = MemoryPressureReading(thresholds: thresholds, total: 0, now: 0)
        #expect(reading.decide(.warningTrigger, total: 200_000, now: second) == .warning)
        #expect(reading.decide(.sample, total: 1_200_000, now: 3 * second) == .critical)
    }

    @Test func theStallTotalIsParsedFromTheSomeLine() {
        let text = "some avg10=1.50 avg60=0.20 avg300=0.04 total=2672234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=286\n"
        #expect(PressureStallFile.someTotal(in: text) == 2_672_234)
        #expect(PressureStallFile.someTotal(in: "full avg10=0.00 total=3\n") == nil)
    }
}

extension LullSuite {
    /// Memory-pressure sources on the kernel's PSI files: what a program sees where they are
    /// missing or refuse triggers, and a quiet registration.
    @Suite struct MemoryPressureSourceTests {
        func source(path: String? = nil, thresholds: MemoryPressureThresholds = .standard,
                    mask: MemoryPressureEvent = .all, label: String) -> MemoryPressureSource {
            MemoryPressureSource(eventMask: mask, queue: WorkQueue(label: label), services: Runtime.shared.sources,
                                 path: path, thresholds: thresholds)
        }

        @Test func aMissingPressureFileCancelsTheSourceWithTheReason() throws {
            let source = source(path: "/proc/pressure/no-such-resource", label: "lull.test.psi.missing")
            let cancelled = Flag()
            let events = Recorder<UInt>()
            source.setEventHandler { events.append(source.data) }
            source.setCancelHandler { cancelled.set() }
            source.activate()
            #expect(waitFor(seconds: 10) { cancelled.isSet })
            #expect(source.isCancelled)
            let error = try #require(source.registrationError as? EventSourceError)
            #expect(error.code == ENOENT)
            #expect(error.description.contains("/proc/pressure/no-such-resource"))
            #expect(error.description.contains("pressure-stall information"))
            #expect(events.count == 0)
        }

        @Test func itsEventsLoopEndsAfterTheCancelHandlerWhenPSIIsMissing() async throws {
            let source = source(path: "/proc/pressure/no-such-resource", label: "lull.test.psi.events")
            let cancelled = Flag()
            source.setCancelHandler { cancelled.set() }
            var levels: [MemoryPressureEvent] = []
            for await level in source.events { levels.append(level) }
            #expect(cancelled.isSet)
            #expect(levels.isEmpty)
            let error = try #require(source.registrationError as? EventSourceError)
            #expect(error.code == ENOENT)
        }

        @Test func aRefusedTriggerCancelsTheSourceWithTheReason() throws {
            try #require(access(PressureStallFile.systemPath, F_OK) == 0, "this kernel has no PSI")
            // A stall longer than its window: every kernel refuses it with EINVAL.
            var refused = MemoryPressureThresholds.standard
            refused.criticalStall = refused.window + 1
            let source = source(path: PressureStallFile.systemPath, thresholds: refused, label: "lull.test.psi.refused")
            let cancelled = Flag()
            source.setCancelHandler { cancelled.set() }
            source.activate()
            #expect(waitFor(seconds: 10) { cancelled.isSet })
            let error = try #require(source.registrationError as? EventSourceError)
            #expect(error.code == EINVAL)
            #expect(error.description.contains("refused the PSI trigger \"some 2000001 2000000\""))
        }

        @Test func aRegisteredSourceReportsNothingWithoutPressure() throws {
            try #require(access(PressureStallFile.systemPath, F_OK) == 0, "this kernel has no PSI")
            let path = PressureStallFile.memoryPressurePath()
            #expect(path == PressureStallFile.systemPath || path.hasSuffix("/memory.pressure"))
            let source = EventSource.makeMemoryPressureSource(eventMask: .all,
                                                              queue: WorkQueue(label: "lull.test.psi.quiet"))
            #expect(source.handle == 0)
            #expect(source.mask == MemoryPressureEvent.all.rawValue)
            let registered = Flag()
            let cancelled = Flag()
            let events = Recorder<UInt>()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { events.append(source.data) }
            source.setCancelHandler { cancelled.set() }
            func stallTotal() -> UInt64 { PressureStallFile.readSmallFile(path).flatMap(PressureStallFile.someTotal(in:)) ?? 0 }
            let stallBefore = stallTotal()
            source.activate()
            #expect(waitFor(seconds: 10) { registered.isSet })
            #expect(source.registrationError == nil)
            // The reactor's report of the new registration is not a level. (Unless there is
            // real pressure meanwhile: the thrashing test may run alongside.)
            let quiet = keepsHolding(for: .milliseconds(200)) { events.count == 0 }
            let stallAfter = stallTotal()
            if stallAfter < stallBefore + MemoryPressureThresholds.standard.warningStall {
                #expect(quiet, "a level without pressure: \(events.values)")
            }
            // One descriptor per trigger (warning and critical), on the file; closed once the
            // source is done. (Other tests may hold descriptors on the same file meanwhile.)
            let driver = try #require((source.core as? DrivenSourceCore)?.driver as? MemoryPressureDriver)
            let descriptors = driver.openDescriptors
            #expect(descriptors.count == 2)
            #expect(descriptors.allSatisfy { Self.target(of: $0) == path })
            source.cancel()
            #expect(waitFor(seconds: 10) { cancelled.isSet })
            #expect(waitFor(seconds: 10) { driver.openDescriptors.isEmpty })
        }

        /// What descriptor `descriptor` of this process is open on (/proc/self/fd).
        static func target(of descriptor: Int32) -> String? {
            var target = [CChar](repeating: 0, count: 4096)
            let length = readlink("/proc/self/fd/\(descriptor)", &target, target.count - 1)
            guard length > 0 else { return nil }
            return String(decoding: target[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
    }
}

extension IndependentSuite {
    /// Real memory pressure: a child process thrashes the page cache inside a memory cgroup
    /// with a 16 MiB limit, and the source reports `.warning`, then `.normal` once the child
    /// stops. Runs as root where a memory cgroup can be made (cgroup v1's memory hierarchy,
    /// or cgroup v2 with the memory controller at the root); elsewhere it says so and passes.
    /// It waits for the kernel's 2 s windows, alongside the serialized suite, parking no worker.
    @Suite(.serialized) struct MemoryPressureRealStallTests {
        @Test func aThrashingChildRaisesWarningThenNormal() throws {
            guard getuid() == 0, access(PressureStallFile.systemPath, F_OK) == 0,
                  let cgroup = MemoryHog.makeCgroup() else {
                print("MemoryPressureRealStallTests: needs root, PSI and a memory cgroup; skipped")
                return
            }
            defer { rmdir(cgroup.directory) }
            // Without `.critical`: the thrashing may pass 40%, and the first report must be
            // `.warning` whatever it reaches.
            let mask: MemoryPressureEvent = [.warning, .normal]
            let source = cgroup.pressurePath.map {
                MemoryPressureSource(eventMask: mask, queue: WorkQueue(label: "lull.test.psi.real"),
                                     services: Runtime.shared.sources, path: $0)
            } ?? EventSource.makeMemoryPressureSource(eventMask: mask, queue: WorkQueue(label: "lull.test.psi.real"))
            let events = Recorder<MemoryPressureEvent>()
            let registered = Flag()
            let cancelled = Flag()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { events.append(MemoryPressureEvent(rawValue: source.data)) }
            source.setCancelHandler { cancelled.set() }
            source.activate()
            try #require(waitFor(seconds: 10) { registered.isSet }, "\(String(describing: source.registrationError))")

            // A second source, cancelled as soon as it reports: while its level is raised,
            // its sample timer is scheduled, and the cancel must take it out.
            let second = EventSource.makeMemoryPressureSource(eventMask: .warning, queue: WorkQueue(label: "lull.test.psi.second"))
            let secondEvents = Recorder<UInt>()
            let secondCancelled = Flag()
            second.setEventHandler {
                secondEvents.append(second.data)
                second.cancel()
            }
            second.setCancelHandler { secondCancelled.set() }
            if cgroup.pressurePath == nil { second.activate() }

            // The example service, which watches the same (system) file: it drops its cache.
            let example = cgroup.pressurePath == nil ? try ExampleProcess("memory-pressure-cache", ["--seconds", "60"]) : nil
            #expect(example?.waitForLine(containing: "serving;") != nil || example == nil)

            let hog = try MemoryHog(cgroup: cgroup)
            let warned = waitFor(seconds: 60) { events.values.contains(.warning) }
            if cgroup.pressurePath == nil {
                #expect(waitFor(seconds: 60) { secondCancelled.isSet })
                #expect(secondEvents.values == [MemoryPressureEvent.warning.rawValue])
            }
            if let example {
                // Its mask is .all: the first level it sees may be either.
                #expect(example.waitForLine(containing: " KiB of cache", timeout: .seconds(60)) != nil, "\(example.text)")
                #expect(example.text.contains("memory pressure warning: dropped")
                        || example.text.contains("memory pressure critical: dropped"), "\(example.text)")
                example.send(SIGTERM)
                #expect(example.waitForExit() == 0)
                #expect(example.text.contains("requests; dropped the cache"), "\(example.text)")
            }
            hog.stop()
            #expect(warned, "no .warning while the child thrashed: \(events.values)")
            #expect(events.values.first == .warning)
            #expect(!events.values.contains(.critical))
            if warned {
                #expect(waitFor(seconds: 60) { events.values.last == .normal }, "no .normal after the child stopped: \(events.values)")
            }
            source.cancel()
            #expect(waitFor(seconds: 10) { cancelled.isSet })
        }
    }
}

/// A shell that reads a file three times the size of its cgroup's memory limit over and over,
/// three times at once: its page cache is reclaimed and refaulted constantly, which the
/// kernel counts as memory stall.
struct MemoryHog {
    struct Cgroup {
        let directory: String
        /// The cgroup's own PSI file (cgroup v2), or nil: the system's file sees the stall.
        let pressurePath: String?
    }

    /// Makes a memory cgroup with a 16 MiB limit, or nil where this process cannot.
    static func makeCgroup() -> Cgroup? {
        let name = "lull-psi-test-\(getpid())"
        let version1 = "/sys/fs/cgroup/memory"
        if access("\(version1)/memory.limit_in_bytes", W_OK) == 0 {
            let directory = "\(version1)/\(name)"
            guard mkdir(directory, 0o755) == 0 || errno == EEXIST else { return nil }
            guard write("16777216", to: "\(directory)/memory.limit_in_bytes") else {
                rmdir(directory)
                return nil
            }
            return Cgroup(directory: directory, pressurePath: nil)
        }
        guard let root = unifiedRoot(),
              let controllers = PressureStallFile.readSmallFile("\(root)/cgroup.subtree_control"),
              controllers.contains("memory")
        else { return nil }
        let directory = "\(root)/\(name)"
        guard mkdir(directory, 0o755) == 0 || errno == EEXIST else { return nil }
        guard write("16777216", to: "\(directory)/memory.high"), write("67108864", to: "\(directory)/memory.max") else {
            rmdir(directory)
            return nil
        }
        return Cgroup(directory: directory, pressurePath: "\(directory)/memory.pressure")
    }

    /// The cgroup v2 mount point.
    static func unifiedRoot() -> String? {
        guard let mounts = PressureStallFile.readSmallFile("/proc/self/mountinfo") else { return nil }
        for mount in mounts.split(separator: "\n") {
            let halves = mount.split(separator: " - ", maxSplits: 1)
            guard halves.count == 2, halves[1].hasPrefix("cgroup2 ") else { continue }
            let fields = halves[0].split(separator: " ")
            if fields.count >= 5 { return String(fields[4]) }
        }
        return nil
    }

    static func write(_ text: String, to path: String) -> Bool {
        let descriptor = open(path, O_WRONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        return text.withCString { Glibc.write(descriptor, $0, strlen($0)) } == text.utf8.count
    }

    let pid: pid_t
    let workDirectory: String

    /// Starts the child in `cgroup`. Its file lives in the build directory (on disk: a
    /// tmpfs page cannot be reclaimed without swap); it stops when `stop` file appears, or
    /// after 90 s.
    init(cgroup: Cgroup) throws {
        workDirectory = "\(ExecutableLocator.testBundleDirectory)/lull-psi-hog-\(getpid())"
        mkdir(workDirectory, 0o755)
        let file = "\(workDirectory)/pages", stop = "\(workDirectory)/stop"
        unlink(stop)
        pid = try SourceTestKit.spawnShell("""
            echo $$ > \(cgroup.directory)/cgroup.procs || exit 1
            dd if=/dev/zero of=\(file) bs=1M count=48 status=none
            end=$(( $(date +%s) + 90 ))
            for i in 1 2 3; do
                (while [ ! -e \(stop) ] && [ $(date +%s) -lt $end ]; do cat \(file) > /dev/null; done) &
            done
            wait
            """)
    }

    func stop() {
        let stop = "\(workDirectory)/stop"
        close(open(stop, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644))
        _ = SourceTestKit.reap(pid)
        unlink("\(workDirectory)/pages")
        unlink(stop)
        rmdir(workDirectory)
    }
}
