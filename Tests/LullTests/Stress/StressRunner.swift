import Glibc
import Synchronization
import Lull

/// Runs a `StressPlan` and checks the contract's invariants; returns the violations found
/// (none: the case passed).
///
/// The plan's threads start together and run their steps. A thread resumes only what it
/// suspended itself (so suspensions balance: an over-resume would stop the program).
/// Then the runner resumes every suspension still held on a source in a slot (a suspended
/// source runs its cancel handler only once resumed), ends each slot's source as the plan
/// says (cancel, or only release), and checks:
///
/// - each source's cancel handler ran (exactly once: `StressProbe`), within the timeout;
/// - nothing ran after it, and no two handlers of a source overlapped (`StressProbe`);
/// - once every child was reaped, the process holds no more descriptors of any kind, and
///   no more inotify watches, than before the run (`ResourceCensus`).
enum StressRunner {
    static func run(_ plan: StressPlan) -> [String] {
        _ = warmedUp
        let directory = makeDirectory()
        defer { removeDirectory(directory) }
        let context = StressContext(directory: directory)
        let baseline = ResourceCensus.take()
        let slots = StressSlots(count: plan.slots.count)
        let held = Mutex<[Int: Int]>([:])  // subject identity → suspensions not yet resumed
        let arrived = Atomic<Int>(0)
        let threads = plan.threads
        let stepsByThread = (0..<threads).map { plan.steps(of: $0) }
        SourceTestKit.runThreads(threads) { thread in
            arrived.add(1, ordering: .acquiringAndReleasing)
            while arrived.load(ordering: .acquiring) < threads {}
            var suspensions: [Int: Int] = [:]
            for step in stepsByThread[thread] {
                perform(step, kind: plan.slots[step.slot], slots: slots, context: context, suspensions: &suspensions)
            }
            held.locked { held in
                for (identity, count) in suspensions { held[identity, default: 0] += count }
            }
        }
        let outstanding = held.locked { $0 }
        for slot in plan.slots.indices {
            guard let subject = slots.replace(slot, with: nil) else { continue }
            for _ in 0..<outstanding[subject.identity, default: 0] { subject.source.resume() }
            if plan.endings[slot] == .cancel { subject.source.cancel() }
        }
        return finish(context, baseline: baseline)
    }

    /// How long the runner waits for what must happen (the cancel handlers, the census):
    /// generous, and more so in sanitizer builds.
    static let patience: Duration = StressConfiguration.underSanitizer ? .seconds(60) : .seconds(15)

    private static func perform(_ step: StressStep, kind: StressKind, slots: StressSlots,
                                context: StressContext, suspensions: inout [Int: Int]) {
        switch step.operation {
        case .create(let parameter), .createActive(let parameter):
            guard let subject = StressSubject.make(kind, parameter: parameter, context: context) else { return }
            if case .createActive = step.operation { subject.source.activate() }
            _ = slots.replace(step.slot, with: subject)
            return
        case .pause(let parameter):
            usleep(UInt32(parameter % 50))
            return
        default:
            break
        }
        guard let subject = slots[step.slot] else { return }
        switch step.operation {
        case .activate:
            subject.source.activate()
        case .suspend:
            subject.source.suspend()
            suspensions[subject.identity, default: 0] += 1
        case .resume:
            guard let count = suspensions[subject.identity], count > 0 else { return }
            subject.source.resume()
            suspensions[subject.identity] = count - 1
        case .cancel:
            subject.source.cancel()
        case .drop:
            // Only this subject's reference: a newer one another thread created stays.
            slots.remove(step.slot, ifHolding: subject)
        case .setEventHandler(let variant):
            subject.setEventHandler(variant: variant)
        case .setCancelHandler(let variant):
            subject.setCancelHandler(variant: variant)
        case .setRegistrationHandler(let variant):
            subject.setRegistrationHandler(variant: variant)
        case .stimulate(let parameter):
            subject.stimulate(parameter)
        case .closePeer:
            subject.closePeer()
        case .create, .createActive, .pause:
            break
        }
    }

    /// Waits for every cancel handler, then reaps the children and takes the census.
    private static func finish(_ context: StressContext, baseline: ResourceCensus) -> [String] {
        awaitCancelHandlers(context)
        var census = ResourceCensus.take()
        if !waitUntil(timeout: patience, {
            census = ResourceCensus.take()
            return census.excess(over: baseline).isEmpty
        }) {
            context.violations.append("leaked: \(census.excess(over: baseline).joined(separator: ", ")) (before: \(baseline); after: \(census))")
        }
        return context.violations.values
    }

    /// Waits for every cancel handler, then ends and reaps the children.
    private static func awaitCancelHandlers(_ context: StressContext) {
        let probes = context.probes.values
        if !waitUntil(timeout: patience, { probes.allSatisfy(\.isFinished) }) {
            for probe in probes where !probe.isFinished {
                context.violations.append("\(probe.summary): its cancel handler did not run within \(patience)")
            }
        }
        // A window for a handler that starts after its cancel handler: its probe records it.
        sleep(milliseconds: 20)
        for child in context.children.values {
            kill(child, SIGKILL)
            _ = SourceTestKit.reap(child)
        }
    }

    /// The runtime opens some descriptors once, at first use of a feature (the reactor, the
    /// signal hub's eventfd, the inotify instance, the timerfds of strict and of wall-clock
    /// timers): sources of every kind and variant, made, fired and cancelled, open them
    /// before any census.
    private static let warmedUp: Void = {
        let directory = makeDirectory()
        defer { removeDirectory(directory) }
        let context = StressContext(directory: directory)
        var subjects: [StressSubject] = []
        for kind in StressKind.allCases {
            for parameter: UInt8 in [0, 1, 32, 33] {
                guard let subject = StressSubject.make(kind, parameter: parameter, context: context) else { continue }
                subject.source.activate()
                subject.stimulate(parameter)
                subjects.append(subject)
            }
        }
        usleep(20_000)
        for subject in subjects { subject.source.cancel() }
        subjects.removeAll()
        awaitCancelHandlers(context)
    }()

    private static func makeDirectory() -> String {
        var template = Array("/tmp/lull-stress-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { return "/tmp" }
        return String(cString: made)
    }

    /// Removes the run's directory and the files the subjects made in it.
    private static func removeDirectory(_ directory: String) {
        guard directory != "/tmp", let stream = opendir(directory) else { return }
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != "." && name != ".." { unlink("\(directory)/\(name)") }
        }
        closedir(stream)
        rmdir(directory)
    }
}
