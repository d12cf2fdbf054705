// lull-priority-probe: a test helper (Tests/LullTests/UnprivilegedPriorityTests.swift).
//
// Usage: lull-priority-probe <nice> [chained]
//
// Started as root, it first becomes an ordinary user the way most services run: its nice
// value set to <nice>, RLIMIT_NICE 0 (no raising of priority), then user and group nobody.
// Then it runs one block on a queue of each QoS class, prints "<class> <nice>" as each
// block sees its thread's nice value, and "ready" once all have; the blocks stay on their
// workers (named lull.<class>) so that the test can read each one's nice value from
// /proc/<pid>/task/*/stat. It runs until killed. With `chained`, each class's block is
// submitted by the block of the class below it, so that every worker from utility up is
// created by a worker whose nice value is higher than its own class's.
import Lull
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

func fail(_ message: String) -> Never {
    print("error: \(message): \(String(cString: strerror(errno)))")
    fflush(nil)
    exit(1)
}

guard (2...3).contains(CommandLine.arguments.count), let processNice = Int32(CommandLine.arguments[1]),
      CommandLine.arguments.count == 2 || CommandLine.arguments[2] == "chained" else {
    print("usage: lull-priority-probe <nice> [chained]")
    exit(2)
}
let chained = CommandLine.arguments.count == 3
// Single-threaded here: the main thread's nice value is the process's.
if setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, processNice) != 0 { fail("setpriority") }
var noRaising = rlimit(rlim_cur: 0, rlim_max: 0)
if setrlimit(__rlimit_resource_t(__RLIMIT_NICE.rawValue), &noRaising) != 0 { fail("setrlimit(RLIMIT_NICE)") }
if geteuid() == 0 {
    let nobody: UInt32 = 65_534
    if setgroups(0, nil) != 0 { fail("setgroups") }
    if setgid(nobody) != 0 { fail("setgid") }
    if setuid(nobody) != 0 { fail("setuid") }
}

let classes: [QoS.QoSClass] = [.background, .utility, .default, .userInitiated, .userInteractive]
let reported = Atomic<Int>(0)
/// Writes `line` to standard output in one write(2): lines from several workers never mix,
/// and no Swift state is shared between them.
@Sendable func say(_ line: String) {
    let text = line + "\n"
    _ = text.withCString { write(STDOUT_FILENO, $0, strlen($0)) }
}
/// Runs the block of `classes[index]`, which starts the next class's first when chained.
@Sendable func report(_ index: Int) {
    let qosClass = classes[index]
    let queue = WorkQueue(label: "probe.\(qosClass)", qos: QoS(qosClass: qosClass, relativePriority: 0))
    queue.async {
        errno = 0
        let nice = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        say("\(qosClass) \(nice)")
        reported.add(1, ordering: .releasing)
        if chained && index + 1 < classes.count { report(index + 1) }
        // Stay on this worker until the process is killed.
        while true { pause() }
    }
}
if chained {
    report(0)
} else {
    for index in classes.indices { report(index) }
}
while reported.load(ordering: .acquiring) < classes.count { usleep(1_000) }
say("ready")
while true { pause() }
