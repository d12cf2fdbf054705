// timer-coalescing: the same timers with leeway 0 and with leeway, and the wake-ups saved.
//
// Four repeating timers (50, 70, 110 and 130 ms) and a chain of delayed blocks (every
// 150 ms) run for about two seconds. With leeway 0 every deadline is its own wake-up; with
// leeway the timer engine fires every timer whose window is open in one wake-up.
//
//   timer-coalescing                 both runs, compared through RuntimeDiagnostics
//   timer-coalescing --leeway-ms N   one run with leeway N ms (for `timerfires -- ...`)
//   timer-coalescing --burn-ms N     also burn N ms of CPU on a utility queue
//   timer-coalescing --rounds N      with --leeway-ms: run N times over (for `timerfires --pid`)
//   timer-coalescing --runtime dispatch  with --leeway-ms: the same timers on Apple's Dispatch
//                                    (for `timerfires --kernel --pid`, side by side with Lull)
//   timer-coalescing --task-sleep    the same plans as tasks looping on
//                                    `CoalescingClock.sleep(until:tolerance:)`, the leeway as
//                                    their tolerance (no delayed blocks, no burn)
//
// At the end a run prints what it did ("fired heartbeat=40 ..."): the tests compare the
// timerfires report with it.
import ExampleSupport
import Lull
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

checkCommandLine(usage: """
    usage: timer-coalescing [--leeway-ms N [--rounds N]] [--burn-ms N]

    Four repeating timers and a chain of delayed blocks for about two seconds, with leeway 0
    and with leeway, and the wake-ups coalescing saved.

      (no options)     both runs, compared through RuntimeDiagnostics
      --leeway-ms N    one run with leeway N ms (for `timerfires -- ...`)
      --rounds N       with --leeway-ms: run N times over (for `timerfires --pid`)
      --burn-ms N      also burn N ms of CPU on a utility queue
      --runtime R      with --leeway-ms: lull (the default) or dispatch (Apple's Dispatch,
                       the same timers, for `timerfires --kernel --pid` side by side)
      --help           show this text
    """, valueOptions: ["--leeway-ms", "--burn-ms", "--rounds", "--runtime"])

struct TimerPlan {
    let label: String
    let intervalMilliseconds: Int
    let fires: Int
}

let plans = [
    TimerPlan(label: "heartbeat", intervalMilliseconds: 50, fires: 40),
    TimerPlan(label: "metrics", intervalMilliseconds: 70, fires: 28),
    TimerPlan(label: "cache-sweep", intervalMilliseconds: 110, fires: 18),
    TimerPlan(label: "status-poll", intervalMilliseconds: 130, fires: 15),
]
let retryDelayMilliseconds = 150
let retryCount = 12

/// Counts what one run did, for the closing line.
final class Tally: Sendable {
    private let counts = Mutex<[String: Int]>([:])

    func add(_ label: String, _ count: Int) -> Int {
        counts.withLock { counts in
            counts[label, default: 0] += count
            return counts[label]!
        }
    }

    var line: String {
        counts.withLock { counts in counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ") }
    }
}

/// Runs every timer once to completion with `leeway` and returns what fired.
func runTimers(leewayMilliseconds: Int, burnMilliseconds: Int) -> String {
    let queue = WorkQueue(label: "example.timers")
    let group = WorkGroup()
    let tally = Tally()
    var sources: [TimerSource] = []
    for plan in plans {
        // .strict: the leeway is exactly the one asked for, so the two runs differ only by it.
        let timer = EventSource.makeTimerSource(flags: .strict, queue: queue)
        timer.label = plan.label
        let interval = Duration.milliseconds(plan.intervalMilliseconds)
        timer.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(leewayMilliseconds))
        timer.setEventHandler {
            if tally.add(plan.label, Int(timer.data)) >= plan.fires { timer.cancel() }
        }
        group.enter()
        timer.setCancelHandler { group.leave() }
        timer.activate()
        sources.append(timer)
    }
    group.enter()
    scheduleRetry(on: queue, remaining: retryCount, tally: tally, group: group)
    if burnMilliseconds > 0 {
        WorkQueue(label: "example.burn", qos: .utility).async(group: group) { burnCPU(milliseconds: burnMilliseconds) }
    }
    group.wait()
    withExtendedLifetime(sources) {}
    return tally.line
}

/// The timers' plans as tasks that sleep on a `CoalescingClock` with `leeway` as their
/// tolerance, each on the grid of its interval like the repeating timers.
func runSleepingTasks(leewayMilliseconds: Int) -> String {
    let clock = CoalescingClock()
    let tally = Tally()
    let group = WorkGroup()
    for plan in plans {
        group.enter()
        Task {
            let interval = Duration.milliseconds(plan.intervalMilliseconds)
            var next = clock.now + interval
            for _ in 0..<plan.fires {
                try? await clock.sleep(until: next, tolerance: .milliseconds(leewayMilliseconds))
                _ = tally.add(plan.label, 1)
                next = next + interval
            }
            group.leave()
        }
    }
    group.wait()
    return tally.line
}

/// One run of whichever kind the command line asked for.
func runOnce(leewayMilliseconds: Int, burnMilliseconds: Int) -> String {
    if runtime == "dispatch" { return runDispatchTimers(leewayMilliseconds: leewayMilliseconds) }
    if CommandLine.arguments.contains("--task-sleep") { return runSleepingTasks(leewayMilliseconds: leewayMilliseconds) }
    return runTimers(leewayMilliseconds: leewayMilliseconds, burnMilliseconds: burnMilliseconds)
}

/// A chain of delayed blocks, each scheduling the next: an `asyncAfter` call site is one
/// timer identity in the report.
func scheduleRetry(on queue: WorkQueue, remaining: Int, tally: Tally, group: WorkGroup) {
    queue.asyncAfter(deadline: .now() + .milliseconds(retryDelayMilliseconds)) {
        _ = tally.add("retry", 1)
        if remaining > 1 {
            scheduleRetry(on: queue, remaining: remaining - 1, tally: tally, group: group)
        } else {
            group.leave()
        }
    }
}

/// Spins until this thread has used `milliseconds` of CPU time.
func burnCPU(milliseconds: Int) {
    func threadCPU() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }
    let end = threadCPU() + UInt64(milliseconds) * 1_000_000
    var spins = 0
    while threadCPU() < end { spins &+= 1 }
    withExtendedLifetime(spins) {}
}

func option(_ name: String) -> Int? {
    let arguments = CommandLine.arguments
    guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
    guard let value = Int(arguments[index + 1]), value >= 0 else {
        printError("timer-coalescing: \(name) needs a number of milliseconds, not '\(arguments[index + 1])'")
        exit(2)
    }
    return value
}

func printError(_ text: String) {
    var line = text + "\n"
    line.withUTF8 { bytes in _ = write(2, bytes.baseAddress, bytes.count) }
}

let runtime: String = {
    let arguments = CommandLine.arguments
    guard let index = arguments.firstIndex(of: "--runtime"), index + 1 < arguments.count else { return "lull" }
    guard ["lull", "dispatch"].contains(arguments[index + 1]) else {
        printError("timer-coalescing: --runtime is lull or dispatch, not '\(arguments[index + 1])'")
        exit(2)
    }
    return arguments[index + 1]
}()
let burn = option("--burn-ms") ?? 0
if let leeway = option("--leeway-ms") {
    for _ in 0..<max(1, option("--rounds") ?? 1) {
        print("fired \(runOnce(leewayMilliseconds: leeway, burnMilliseconds: burn))")
    }
    exit(0)
}

if RuntimeDiagnostics.isRecording {
    // Under timerfires: its report covers both runs.
    print("leeway 0 ms: fired \(runOnce(leewayMilliseconds: 0, burnMilliseconds: burn))")
    print("leeway 20 ms: fired \(runOnce(leewayMilliseconds: 20, burnMilliseconds: burn))")
    exit(0)
}

var timerWakeups: [Int] = []
for leeway in [0, 20] {
    do {
        try RuntimeDiagnostics.start()
    } catch {
        printError("timer-coalescing: cannot record: \(error)")
        exit(1)
    }
    let fired = runOnce(leewayMilliseconds: leeway, burnMilliseconds: burn)
    guard let report = RuntimeDiagnostics.stop(groupingByIdentity: true) else { exit(1) }
    print("== leeway \(leeway) ms: fired \(fired)")
    print(report.formatted())
    print("")
    timerWakeups.append(report.wakeups.timer.count)
}
let saved = timerWakeups[0] > 0 ? 100 * (timerWakeups[0] - timerWakeups[1]) / timerWakeups[0] : 0
print("Timer wake-ups: \(timerWakeups[0]) with leeway 0, \(timerWakeups[1]) with 20 ms of leeway: \(saved)% saved.")
