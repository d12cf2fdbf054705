// Idle wake-ups: in a process of its own, warm a runtime up, let it go idle, and count the
// context switches of all its threads over an idle window. A runtime that does nothing
// while it has nothing to do scores 0.

import Dispatch
import Glibc
import Lull

enum IdleBenchmark {
    static let all: [Benchmark] = [idleWakeUps]

    /// Pause between the end of the warm-up and the start of the window, so that threads
    /// finishing the warm-up have parked.
    static let settleSeconds = 0.5

    static let idleWakeUps = Benchmark(
        name: "idle",
        title: "idle wake-ups: after a warm-up (async on 5 QoS classes, a serial queue, one asyncAfter), "
            + "voluntary + involuntary context switches of all threads but the measuring one over the idle window",
        unit: "switches",
        lowerIsBetter: true,
        singleShot: true,
        parameters: { options in
            Parameters(n: 0, seconds: options.idleSeconds, runTimeout: options.runTimeout)
        },
        sizeDescription: { "window \(Format.fixed($0.seconds, 1)) s" },
        run: runIdle
    )

    @Sendable
    static func runIdle(_ runtime: Runtime, _ parameters: Parameters) -> RunOutcome {
        if let problem = warmUp(runtime, timeout: parameters.runTimeout) {
            return .failed(problem)
        }
        Clock.sleep(seconds: settleSeconds)
        // This runs on the child's main thread, whose thread id is the process id.
        let me = getpid()
        let before = ThreadSwitches.snapshot(excluding: me)
        let usageBefore = ProcessUsage.now()
        let start = Clock.now()
        Clock.sleep(seconds: parameters.seconds)
        let usageAfter = ProcessUsage.now()
        let after = ThreadSwitches.snapshot(excluding: me)
        let seconds = Clock.seconds(from: start, to: Clock.now())
        // getrusage, so that a thread that exits during the window counts too.
        guard let usageBefore, let usageAfter else { return .failed("getrusage failed around the window") }
        let total = ProcessUsage.othersSwitches(from: usageBefore, to: usageAfter).all

        var perThread: [(name: String, tid: Int32, switches: Int)] = []
        for (tid, end) in after {
            let delta = end.switches - (before[tid]?.switches ?? 0)
            perThread.append((end.name, tid, delta))
        }
        let gone = before.keys.filter { after[$0] == nil }.count
        let busiest = perThread.filter { $0.switches > 0 }.sorted { $0.switches > $1.switches }
        var notes = ["\(after.count) runtime threads at the end of the window"
            + (gone > 0 ? ", \(gone) exited during it (their switches are counted)" : "")]
        if !busiest.isEmpty {
            notes.append("switches by thread: " + busiest.prefix(6).map { "\($0.name)[\($0.tid)] \($0.switches)" }
                .joined(separator: ", "))
        }
        return .ok(value: Double(total), seconds: seconds, extras: [], notes: notes)
    }

    /// Runs work on several QoS classes, on a serial queue, and one asyncAfter, and waits
    /// for all of it. Returns a description of the problem, if any.
    static func warmUp(_ runtime: Runtime, timeout: Double) -> String? {
        let sink = SharedCounter()
        let blocksPerClass = 16
        switch runtime {
        case .lull:
            let group = WorkGroup()
            let classes: [QoS.QoSClass] = [.background, .utility, .default, .userInitiated, .userInteractive]
            for qosClass in classes {
                let queue = WorkQueue.global(qos: qosClass)
                for _ in 0..<blocksPerClass {
                    queue.async(group: group) { busyWork(sink) }
                }
            }
            let serial = WorkQueue(label: "bench.idle.serial", qos: .utility)
            for _ in 0..<blocksPerClass {
                serial.async(group: group) { busyWork(sink) }
            }
            group.enter()
            WorkQueue.global().asyncAfter(deadline: .now() + .milliseconds(50)) {
                busyWork(sink)
                group.leave()
            }
            if group.wait(timeout: .now() + .seconds(timeout)) == .timedOut {
                return "TIMEOUT: the warm-up work had not finished after \(Format.seconds(timeout)) "
                    + "(\(sink.value.load(ordering: .relaxed)) of \(6 * blocksPerClass + 1) blocks ran)"
            }
        case .dispatch:
            let group = DispatchGroup()
            let classes: [DispatchQoS.QoSClass] = [.background, .utility, .default, .userInitiated, .userInteractive]
            for qosClass in classes {
                let queue = DispatchQueue.global(qos: qosClass)
                for _ in 0..<blocksPerClass {
                    queue.async(group: group) { busyWork(sink) }
                }
            }
            let serial = DispatchQueue(label: "bench.idle.serial", qos: .utility)
            for _ in 0..<blocksPerClass {
                serial.async(group: group) { busyWork(sink) }
            }
            group.enter()
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(50)) {
                busyWork(sink)
                group.leave()
            }
            if group.wait(timeout: .now() + .milliseconds(Int(timeout * 1000))) == .timedOut {
                return "TIMEOUT: the warm-up work had not finished after \(Format.seconds(timeout))"
            }
        }
        return nil
    }

    /// About 100 µs of work, so that the warm-up wakes several workers.
    static func busyWork(_ sink: SharedCounter) {
        let until = Clock.now() &+ 100_000
        while Clock.now() < until {}
        _ = sink.increment()
    }
}

/// Context-switch counters of the threads of this process, from /proc/self/task/*/status.
enum ThreadSwitches {
    struct Entry {
        var name: String
        /// Voluntary + involuntary.
        var switches: Int
        /// Voluntary only: the thread blocked (waited for something), then was woken.
        var voluntary = 0
    }

    static func snapshot(excluding excluded: pid_t) -> [Int32: Entry] {
        var result: [Int32: Entry] = [:]
        guard let directory = opendir("/proc/self/task") else { return result }
        defer { closedir(directory) }
        while let entry = readdir(directory) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) { pointer in
                pointer.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            guard let tid = Int32(name), tid != excluded else { continue }
            guard let status = readFile("/proc/self/task/\(tid)/status") else { continue }
            var switches = 0
            var voluntary = 0
            var threadName = "?"
            for line in status.split(separator: "\n") {
                if line.hasPrefix("voluntary_ctxt_switches:") || line.hasPrefix("nonvoluntary_ctxt_switches:") {
                    if let value = line.split(separator: ":").last.flatMap({ Int($0.trimmingSpaces()) }) {
                        switches += value
                        if line.hasPrefix("voluntary") { voluntary = value }
                    }
                } else if line.hasPrefix("Name:") {
                    threadName = String(line.dropFirst("Name:".count).trimmingSpaces())
                }
            }
            result[tid] = Entry(name: threadName, switches: switches, voluntary: voluntary)
        }
        return result
    }

    static func readFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count > 0 {
                bytes.append(contentsOf: chunk[0..<count])
            } else if count < 0 && errno == EINTR {
                continue
            } else {
                break
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension Substring {
    func trimmingSpaces() -> Substring {
        var text = self
        while let first = text.first, first == " " || first == "\t" { text = text.dropFirst() }
        while let last = text.last, last == " " || last == "\t" { text = text.dropLast() }
        return text
    }
}
