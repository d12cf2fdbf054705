// lull-async-main-probe: a test helper (Tests/LullTests/GlobalExecutorTests.swift).
//
// An async main (top-level code with `await`) that calls `GlobalExecutor.install()` first:
// MainActor work and WorkQueue.main blocks are mutually exclusive, tasks run on Lull's
// workers at their priority's QoS, sleeps go through Lull's timers, and the program ends by
// returning from its main (or, with the argument `run-main`, inside `WorkQueue.runMain()`,
// which takes the main queue over). Prints lines "<key> <value>..." and "done" last.
import Lull
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

func say(_ line: String) {
    print(line)
    fflush(nil)
}

/// The calling thread's name ("lull.default", ...), from /proc/thread-self/comm.
func threadName() -> String {
    let descriptor = open("/proc/thread-self/comm", O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else { return "?" }
    defer { close(descriptor) }
    var buffer = [UInt8](repeating: 0, count: 32)
    let count = read(descriptor, &buffer, buffer.count)
    guard count > 0 else { return "?" }
    return String(decoding: buffer[0..<count].prefix { $0 != UInt8(ascii: "\n") }, as: UTF8.self)
}

/// Counts the main queue's blocks and MainActor turns that run at once (must stay at 1).
final class Overlap: Sendable {
    private let inside = Atomic<Int>(0)
    let worst = Atomic<Int>(0)
    func run(_ body: () -> Void) {
        let now = inside.add(1, ordering: .acquiringAndReleasing).newValue
        worst.max(now, ordering: .relaxed)
        body()
        inside.subtract(1, ordering: .acquiringAndReleasing)
    }
}

/// Whether the calling thread is the process's main thread (/proc/thread-self names
/// "<pid>/task/<tid>", and the main thread's tid is the pid).
func isMainThread() -> Bool {
    var buffer = [CChar](repeating: 0, count: 64)
    let count = readlink("/proc/thread-self", &buffer, buffer.count - 1)
    guard count > 0 else { return false }
    let path = String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return path == "\(getpid())/task/\(getpid())"
}

let arguments = Set(CommandLine.arguments.dropFirst())

// Before the install and without suspending (so that a first-slice install stays in the
// first slice): an install from another task throws and changes nothing.
let fromTask = Mutex<String?>(nil)
Task.detached {
    let outcome: String
    do {
        try GlobalExecutor.install()
        outcome = "installed"
    } catch {
        outcome = "\(error)"
    }
    fromTask.locked { $0 = outcome }
}
while fromTask.locked({ $0 }) == nil { usleep(1_000) }
say("from-task \(fromTask.locked { $0 ?? "" })")
say("installed-after-task \(GlobalExecutor.isInstalled)")

if arguments.contains("after-await") {
    // Task.sleep always suspends: the install then runs inside the async main's run loop.
    try? await Task.sleep(for: .milliseconds(1))
}
say("installing main-thread \(isMainThread())")
do {
    try GlobalExecutor.install()
    say("installed \(GlobalExecutor.isInstalled)")
} catch {
    say("install-error \(error)")
    exit(1)
}
do {
    try GlobalExecutor.install()
    say("second installed")
} catch {
    say("second \(error)")
}
/// Whether a synchronous caller runs isolated to the main actor (MainActor.assumeIsolated
/// stops the program otherwise).
func mainActorHolds() -> Bool { MainActor.assumeIsolated { true } }
/// What holds after the install: the main actor and the main queue, priorities, exclusion,
/// sleeps.
@MainActor func checks() async {
    let mainKey = SpecificKey<Int>()
    WorkQueue.main.setSpecific(key: mainKey, value: 1)
    say("body main-actor \(mainActorHolds()) main-queue \(WorkQueue.getSpecific(key: mainKey) == 1) main-thread \(isMainThread())")

    for (name, priority) in [("high", TaskPriority.high), ("utility", .utility), ("background", .background)] {
        let seen = await Task.detached(priority: priority) { "\(QoS.current.qosClass) \(threadName())" }.value
        say("priority \(name) \(seen)")
    }

    let overlap = Overlap()
    let rounds = 200
    await withTaskGroup(of: Void.self) { group in
        for _ in 0..<rounds {
            group.addTask { @MainActor in overlap.run { usleep(20) } }
            group.addTask {
                await withCheckedContinuation { continuation in
                    WorkQueue.main.async {
                        overlap.run { usleep(20) }
                        continuation.resume()
                    }
                }
            }
        }
    }
    say("overlap worst \(overlap.worst.load(ordering: .relaxed))")
    say("resumed main-actor \(mainActorHolds()) main-queue \(WorkQueue.getSpecific(key: mainKey) == 1) main-thread \(isMainThread())")
    await MainActor.run {
        say("main-actor-job main-queue \(WorkQueue.main.isIsolatingCurrentContext() == true) main-thread \(isMainThread())")
    }

    do { try RuntimeDiagnostics.start() } catch {
        say("diagnostics-error \(error)")
        exit(1)
    }
    let clock = ContinuousClock()
    let early = Overlap()  // its `worst` counts the early wake-ups
    await withTaskGroup(of: Void.self) { group in
        for index in 0..<20 {
            // Windows [100 + 2i, 180 + 2i] ms: all share [138, 180], one wake-up is optimal.
            let delay = Duration.milliseconds(100 + 2 * index)
            group.addTask {
                let start = clock.now
                try? await Task.sleep(for: delay, tolerance: .milliseconds(80))
                if start.duration(to: clock.now) < delay { early.worst.add(1, ordering: .relaxed) }
            }
        }
    }
    guard let report = RuntimeDiagnostics.stop() else {
        say("no-report")
        exit(1)
    }
    // Windows of Lull's timers, and the wake-ups in which one fired (timer or descriptor
    // wake-ups: the main thread's Dispatch bridge is a read source).
    say("sleep windows \(report.coalescing.windows) wakeups \(report.coalescing.wakeupsWithTimerFires) "
        + "optimal \(report.coalescing.optimalWakeups) early \(early.worst.load(ordering: .relaxed))")

    let start = clock.now
    try? await Task.sleep(for: .milliseconds(30), tolerance: .milliseconds(10))
    let slept = start.duration(to: clock.now)
    say("slept at-least-30ms \(slept >= .milliseconds(30)) main-actor \(mainActorHolds()) main-thread \(isMainThread())")
}

if arguments.contains("run-main") {
    // Still the first slice: the main thread becomes the main queue's thread here.
    Task { @MainActor in
        await checks()
        say("done")
        exit(0)
    }
    WorkQueue.runMain()
}
await checks()
say("done")
