import Glibc
import Testing
@testable import Lull

/// The text of a small /proc file, or nil if it cannot be read (a thread that exited).
func readProcFile(_ path: String) -> String? {
    let descriptor = open(path, O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else { return nil }
    defer { close(descriptor) }
    var bytes: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4_096)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        if count < 0 { return nil }
        if count == 0 { break }
        bytes.append(contentsOf: buffer[0..<count])
    }
    return String(decoding: bytes, as: UTF8.self)
}

/// `voluntary_ctxt_switches` of one thread of this process, or nil if it is gone.
func voluntaryContextSwitches(tid: Int32) -> Int? {
    guard let status = readProcFile("/proc/self/task/\(tid)/status") else { return nil }
    for line in status.split(separator: "\n") where line.hasPrefix("voluntary_ctxt_switches:") {
        return Int(line.dropFirst("voluntary_ctxt_switches:".count).trimmingPrefix(while: { $0 == " " || $0 == "\t" }))
    }
    return nil
}

/// The scheduler state letter of one thread ("R", "S", "D", ...), or nil if it is gone.
func schedulerState(tid: Int32) -> Character? {
    guard let stat = readProcFile("/proc/self/task/\(tid)/stat"),
          let close = stat.lastIndex(of: ")") else { return nil }
    let rest = stat[stat.index(after: close)...].drop(while: { $0 == " " })
    return rest.first
}

extension IndependentSuite {
    @Suite(.serialized) struct IdleTests {
        /// An idle runtime sleeps: once its work is done, its workers make (almost) no
        /// context switches. Runs in a child process so that no other test's work counts
        /// (and so alongside `LullSuite`).
        @Test func idleWorkersDoNotWakeUp() async {
            let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                // Warm up: every kind of queue, every class, and timers.
                let group = WorkGroup()
                let serial = WorkQueue(label: "lull.test.idle.serial")
                let concurrent = WorkQueue(label: "lull.test.idle.concurrent", attributes: .concurrent)
                let utility = WorkQueue(label: "lull.test.idle.utility", qos: .utility)
                for index in 0..<2_000 {
                    serial.async(group: group) { }
                    concurrent.async(group: group) { }
                    utility.async(group: group) { }
                    WorkQueue.global(qos: schedulableClasses[index % schedulableClasses.count]).async(group: group) { }
                }
                let timersDone = Counter()
                for milliseconds in [1, 10, 50, 100] {
                    serial.asyncAfter(deadline: .now() + .milliseconds(milliseconds)) { timersDone.increment() }
                }
                WorkQueue.global().asyncAfter(wallDeadline: .now() + .milliseconds(20)) { timersDone.increment() }
                group.wait()
                guard timersDone.await(until: { $0 == 5 }) else {
                    printToStandardError("idle test: the warm-up timers did not run")
                    exit(3)
                }

                let workers = Runtime.shared.pool.workerThreadIDs().sorted()
                guard !workers.isEmpty else {
                    printToStandardError("idle test: no worker threads found")
                    exit(2)
                }
                // Let the workers that ran the last blocks get back to sleep.
                _ = waitUntil { workers.allSatisfy { tid in schedulerState(tid: tid).map { $0 != "R" } ?? true } }

                let before = workers.map { voluntaryContextSwitches(tid: $0) }
                sleep(2)
                let workersAfter = Runtime.shared.pool.workerThreadIDs()
                var total = 0
                var report: [String] = []
                for (tid, start) in zip(workers, before) {
                    guard let start else { continue }  // already gone before the window
                    // A worker that exited in the window retired: its one wake-up is the end
                    // of its idle timeout (`WorkerPool.idleTimeout`), by design, however many
                    // threads a slow warm-up started. It is reported, not counted.
                    guard let end = voluntaryContextSwitches(tid: tid) else {
                        report.append("tid \(tid): retired")
                        continue
                    }
                    total += end - start
                    report.append("tid \(tid): +\(end - start)")
                }
                // Workers started during the window count with everything they did.
                for tid in workersAfter.subtracting(workers) {
                    let switches = voluntaryContextSwitches(tid: tid) ?? 1
                    total += switches
                    report.append("tid \(tid) (new): +\(switches)")
                }
                // The parent process judges: report the measurement on standard error.
                printToStandardError("idle-switches=\(total) over \(workers.count) workers: \(report.joined(separator: ", "))")
            }
            let message = standardErrorText(result)
            let line = message.split(separator: "\n").first { $0.hasPrefix("idle-switches=") }
            let total = line.flatMap { Int($0.dropFirst("idle-switches=".count).prefix { $0.isNumber }) }
            #expect(total != nil, "no measurement: \(message)")
            if let total {
                #expect(total <= 5, "\(line ?? "")")
            }
        }
    }
}
