// lull-executor-probe: a test helper (Tests/LullTests/GlobalExecutorTests.swift).
//
// Usage: lull-executor-probe <mode>
//
// `GlobalExecutor.install()` is process-wide and must come before the first task, so each
// of its checks runs in a fresh process. Each mode prints lines "<key> <value>..." and
// exits 0 once done:
//   priority  install, then one task per priority prints its QoS.current and its thread
//   sleep     install, record wake-ups, 40 tasks sleep with overlapping tolerance windows
//   main      install, MainActor jobs run on WorkQueue.main inside runMain()
//   errors    install from a task (too late), then twice (already installed)
//   cancel    install, 1,000 one-hour sleeps (pool, main actor, a queue) cancelled: no
//             timer is left and none stays armed for them (debug builds: it reads the engine)
//   storm     install, then child tasks spawned from tasks of three priorities and detached
//             tasks from plain threads, all at once: each ran once, at its priority's QoS
#if DEBUG
@testable import Lull
#else
import Lull
#endif
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

func say(_ line: String) {
    print(line)
    fflush(nil)
}

func finish() -> Never {
    say("done")
    exit(0)
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

/// Whether the calling thread is the process's main thread (/proc/thread-self names
/// "<pid>/task/<tid>", and the main thread's tid is the pid).
func isMainThread() -> Bool {
    var buffer = [CChar](repeating: 0, count: 64)
    let count = readlink("/proc/thread-self", &buffer, buffer.count - 1)
    guard count > 0 else { return false }
    let path = String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return path == "\(getpid())/task/\(getpid())"
}

/// A counter tasks share.
final class SharedCount: Sendable {
    let value: Atomic<Int>
    init(_ initial: Int) { value = Atomic(initial) }
    /// Lowers the count; true for the call that reaches zero.
    func countDown() -> Bool { value.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 }
}

func install() {
    do {
        try GlobalExecutor.install()
    } catch {
        say("install-error \(error)")
        exit(1)
    }
    say("installed \(GlobalExecutor.isInstalled)")
}

func priorityMode() -> Never {
    install()
    let priorities: [(String, TaskPriority)] = [("high", .high), ("medium", .medium), ("low", .low),
                                                ("background", .background), ("userInitiated", .userInitiated),
                                                ("utility", .utility)]
    let left = SharedCount(priorities.count + 1)
    for (name, priority) in priorities {
        Task(priority: priority) {
            say("priority \(name) \(QoS.current.qosClass) \(threadName())")
            if left.countDown() { finish() }
        }
    }
    Task.detached {
        // No priority of its own (a detached task from a thread outside any task).
        say("priority none \(QoS.current.qosClass) \(threadName())")
        if left.countDown() { finish() }
    }
    WorkQueue.runMain()
}

func sleepMode() -> Never {
    install()
    do { try RuntimeDiagnostics.start() } catch {
        say("diagnostics-error \(error)")
        exit(1)
    }
    let count = 40
    let left = SharedCount(count)
    let early = SharedCount(0)
    let clock = ContinuousClock()
    for index in 0..<count {
        // Windows [200 + 2i, 350 + 2i] ms: all share [278, 350], one wake-up is optimal.
        let delay = Duration.milliseconds(200 + 2 * index)
        Task {
            let start = clock.now
            try? await Task.sleep(for: delay, tolerance: .milliseconds(150))
            if start.duration(to: clock.now) < delay { early.value.add(1, ordering: .relaxed) }
            if left.countDown() {
                guard let report = RuntimeDiagnostics.stop() else {
                    say("no-report")
                    exit(1)
                }
                say("sleep timer-wakeups \(report.wakeups.timer.count) optimal \(report.coalescing.optimalWakeups) "
                    + "early \(early.value.load(ordering: .relaxed))")
                await cancelledSleep()
                finish()
            }
        }
    }
    WorkQueue.runMain()
}

/// A 10 s sleep cancelled after 20 ms ends at once with CancellationError.
func cancelledSleep() async {
    let clock = ContinuousClock()
    let start = clock.now
    let sleeper = Task { () -> Bool in
        do {
            try await Task.sleep(for: .seconds(10), tolerance: .seconds(1))
            return false
        } catch {
            return error is CancellationError
        }
    }
    try? await Task.sleep(for: .milliseconds(20))
    sleeper.cancel()
    let cancelled = await sleeper.value
    let milliseconds = start.duration(to: clock.now) / .milliseconds(1)
    say("cancelled-sleep threw-cancellation \(cancelled) within-2s \(milliseconds < 2_000)")
}

@MainActor func onMainActor(_ label: String) {
    say("\(label) main-thread \(isMainThread()) main-queue \(WorkQueue.main.isIsolatingCurrentContext() == true)")
}

func mainMode() -> Never {
    install()
    Task { @MainActor in
        onMainActor("mainactor")
        await Task.detached { say("detached main-thread \(isMainThread())") }.value
        onMainActor("resumed")
        try? await Task.sleep(for: .milliseconds(10), tolerance: .milliseconds(5))
        onMainActor("slept")
        WorkQueue.main.async {
            MainActor.assumeIsolated { onMainActor("assumed") }
            finish()
        }
    }
    WorkQueue.runMain()
}

func errorsMode() -> Never {
    let fromTask = Mutex<String?>(nil)
    let done = Atomic<Bool>(false)
    Task.detached {
        do {
            try GlobalExecutor.install()
            fromTask.locked { $0 = "installed" }
        } catch {
            fromTask.locked { $0 = "\(error)" }
        }
        done.store(true, ordering: .releasing)
    }
    while !done.load(ordering: .acquiring) { usleep(1_000) }
    say("from-task \(fromTask.locked { $0 ?? "" })")
    say("installed-after-task \(GlobalExecutor.isInstalled)")
    install()
    do {
        try GlobalExecutor.install()
        say("second installed")
    } catch {
        say("second \(error)")
    }
    finish()
}

/// 1,000 tasks sleep for an hour, on the pool (800), on the main actor (100) and on a queue
/// as their executor preference (100); once every sleep is a timer, all are cancelled. Each
/// must throw CancellationError, and the engine must hold no timer of theirs and not stay
/// armed for their windows: the cancelled sleeps cost no wake-up.
func cancelMode() -> Never {
    install()
    #if DEBUG
    let count = 1_000
    let timers = Runtime.shared.timers
    let before = timers.count
    let threw = SharedCount(0)
    let finished = SharedCount(0)
    let queue = WorkQueue(label: "probe.sleepers")
    let sleepers = Mutex<[Task<Void, Never>]>([])
    /// On the caller's actor (the main actor's sleeps must be made there).
    @Sendable func sleepAnHour(_ isolation: isolated (any Actor)? = #isolation) async {
        do {
            try await Task.sleep(for: .seconds(3_600), tolerance: .seconds(1))
        } catch {
            if error is CancellationError { threw.value.add(1, ordering: .relaxed) }
        }
        finished.value.add(1, ordering: .releasing)
    }
    Task.detached {
        let startedAt = ContinuousClock.now
        for index in 0..<count {
            let task: Task<Void, Never>
            switch index % 10 {
            case 0: task = Task { @MainActor in await sleepAnHour() }
            case 1: task = Task(executorPreference: queue) { await sleepAnHour() }
            default: task = Task { await sleepAnHour() }
            }
            sleepers.locked { $0.append(task) }
        }
        // Every sleep a timer (10 s at most on a loaded machine).
        while timers.count < before + count {
            if ContinuousClock.now - startedAt > .seconds(10) {
                say("cancel not-scheduled \(timers.count - before)")
                exit(1)
            }
            usleep(1_000)
        }
        let sleepsFrom = SystemClock.monotonicNanoseconds() + 3_000_000_000_000
        say("cancel scheduled \(timers.count - before) mapped \(PendingTaskSleeps.shared.count)")
        for task in sleepers.locked({ $0 }) { task.cancel() }
        while finished.value.load(ordering: .acquiring) < count {
            if ContinuousClock.now - startedAt > .seconds(20) {
                say("cancel unfinished \(finished.value.load(ordering: .acquiring))")
                exit(1)
            }
            usleep(1_000)
        }
        let armed = timers.armedWindowEnd.map { $0 >= sleepsFrom } ?? false
        say("cancel threw \(threw.value.load(ordering: .relaxed)) timers \(timers.count - before) "
            + "mapped \(PendingTaskSleeps.shared.count) armed-for-sleeps \(armed)")
        finish()
    }
    WorkQueue.runMain()
    #else
    say("cancel needs a debug build")
    exit(1)
    #endif
}

/// Starts a detached plain thread (not one of Lull's) running `body`.
func startPlainThread(_ body: @escaping @Sendable () -> Void) {
    final class Box: Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    var thread = pthread_t()
    let context = Unmanaged.passRetained(Box(body)).toOpaque()
    let result = pthread_create(&thread, nil, { context in
        Unmanaged<Box>.fromOpaque(context!).takeRetainedValue().body()
        return nil
    }, context)
    guard result == 0 else {
        say("pthread_create-error \(result)")
        exit(1)
    }
    pthread_detach(thread)
}

/// A spawn storm: three parents (high, medium, low) each spawn children in a discarding task
/// group while four plain threads start detached tasks of those priorities. Each child
/// checks that it runs at the QoS of its priority (children inherit their parent's).
func stormMode() -> Never {
    install()
    let childrenPerParent = 6_000
    let detachedPerThread = 1_500
    let priorities: [(TaskPriority, QoS.QoSClass)] = [(.high, .userInitiated), (.medium, .default), (.low, .utility)]
    let threads = 4
    let expected = priorities.count * childrenPerParent + threads * detachedPerThread
    let ran = SharedCount(0)
    let mismatches = SharedCount(0)
    // The parents, and the detached tasks of the plain threads as one.
    let left = SharedCount(priorities.count + 1)
    @Sendable func report() {
        say("storm ran \(ran.value.load(ordering: .acquiring)) of \(expected) qos-mismatches \(mismatches.value.load(ordering: .acquiring))")
        finish()
    }
    @Sendable func child(_ qosClass: QoS.QoSClass) {
        if QoS.current.qosClass != qosClass { mismatches.value.add(1, ordering: .relaxed) }
        ran.value.add(1, ordering: .relaxed)
    }
    for (priority, qosClass) in priorities {
        Task.detached(priority: priority) {
            await withDiscardingTaskGroup { group in
                for _ in 0..<childrenPerParent {
                    group.addTask { child(qosClass) }
                }
            }
            if left.countDown() { report() }
        }
    }
    let detachedLeft = SharedCount(threads * detachedPerThread)
    for index in 0..<threads {
        let (priority, qosClass) = priorities[index % priorities.count]
        startPlainThread {
            for _ in 0..<detachedPerThread {
                Task.detached(priority: priority) {
                    child(qosClass)
                    if detachedLeft.countDown(), left.countDown() { report() }
                }
            }
        }
    }
    WorkQueue.runMain()
}

switch CommandLine.arguments.dropFirst().first {
case "priority": priorityMode()
case "sleep": sleepMode()
case "main": mainMode()
case "errors": errorsMode()
case "cancel": cancelMode()
case "storm": stormMode()
default:
    say("usage: lull-executor-probe priority|sleep|main|errors|cancel|storm")
    exit(2)
}
