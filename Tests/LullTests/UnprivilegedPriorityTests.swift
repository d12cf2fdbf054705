import Glibc
import Testing

/// Worker nice values in a process without the right to raise priority (an ordinary user,
/// RLIMIT_NICE 0): the classes from default up keep the process's nice value, the lower
/// classes get higher ones. Run in a child (`lull-priority-probe`), which drops to user
/// nobody when started as root.
extension IndependentSuite {
    @Suite(.serialized) struct UnprivilegedPriorityTests {
        /// The nice value each worker class must have in the probe started at `processNice`.
        static func expectedNice(_ threadName: String, processNice: Int32) -> Int32? {
            switch threadName {
            case "lull.user-inter", "lull.user-init", "lull.default": processNice
            case "lull.utility": min(19, processNice + 5)
            case "lull.background": min(19, processNice + 15)
            default: nil
            }
        }

        /// (thread name, nice value) of each thread of `pid`, from /proc/<pid>/task/*/stat.
        static func threadNiceValues(of pid: pid_t) -> [(name: String, nice: Int32)] {
            guard let directory = opendir("/proc/\(pid)/task") else { return [] }
            defer { closedir(directory) }
            var threads: [(String, Int32)] = []
            while let entry = readdir(directory) {
                let tid = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                guard Int32(tid) != nil else { continue }
                let descriptor = open("/proc/\(pid)/task/\(tid)/stat", O_RDONLY | O_CLOEXEC)
                guard descriptor >= 0 else { continue }
                var buffer = [UInt8](repeating: 0, count: 1024)
                let count = read(descriptor, &buffer, buffer.count)
                close(descriptor)
                guard count > 0 else { continue }
                let stat = buffer[0..<count]
                // "tid (comm) state ppid ... priority nice ...": nice is the 17th field after comm.
                guard let open = stat.firstIndex(of: UInt8(ascii: "(")),
                      let close = stat.lastIndex(of: UInt8(ascii: ")")) else { continue }
                let name = String(decoding: stat[(open + 1)..<close], as: UTF8.self)
                let fields = stat[(close + 1)...].split(separator: UInt8(ascii: " "))
                guard fields.count > 16, let nice = Int32(String(decoding: fields[16], as: UTF8.self)) else { continue }
                threads.append((name, nice))
            }
            return threads
        }

        /// `chained`: each class's worker is created by a worker of the class below, whose
        /// nice value it would inherit without the thread starter.
        @Test(arguments: [Int32(0), 3], [false, true])
        func workersOfAnUnprivilegedProcessKeepItsNiceValueFromDefaultUp(processNice: Int32, chained: Bool) throws {
            let probe = try ExampleProcess("lull-priority-probe", ["\(processNice)"] + (chained ? ["chained"] : []))
            try #require(probe.waitForLine(containing: "ready") != nil, "the probe did not get ready: \(probe.text)")
            let workers = Self.threadNiceValues(of: probe.pid).filter { $0.name.hasPrefix("lull.") }
            for name in ["lull.background", "lull.utility", "lull.default", "lull.user-init", "lull.user-inter"] {
                #expect(workers.contains { $0.name == name }, "no \(name) worker: \(workers)")
            }
            for worker in workers {
                guard let expected = Self.expectedNice(worker.name, processNice: processNice) else { continue }
                #expect(worker.nice == expected, "\(worker.name) runs at nice \(worker.nice), not \(expected)")
            }
        }
    }
}
