import LullWakeupReport
#if canImport(Glibc)
import Glibc
#endif

/// A tracefs instance of the tool's own (`instances/timerfires-<pid>`): a ring buffer and
/// event switches apart from the global ones, so that tracing never disturbs another tracer.
/// Created and configured by `create`, read through its `trace_pipe`, removed by `remove`
/// (the tool calls it on every way out it controls: the end of the duration, Ctrl-C,
/// SIGTERM, the process's exit, an error). An instance left by a tool that was killed is
/// removed by the next run (`removeAbandoned`).
final class TracefsInstance {
    /// The events read. `sched_waking` fires in the waker's context (which is what the
    /// attribution needs); `sched_wakeup` replaces it on kernels without it.
    static let events = [
        "timer/hrtimer_start", "timer/hrtimer_expire_entry", "timer/hrtimer_expire_exit",
        "timer/timer_start", "timer/timer_expire_entry",
        "irq/irq_handler_entry", "irq/irq_handler_exit", "irq/softirq_entry", "irq/softirq_exit",
        "sched/sched_waking", "sched/sched_switch", "raw_syscalls/sys_enter", "raw_syscalls/sys_exit",
    ]
    static let namePrefix = "timerfires-"
    /// Per CPU: the reader drains the pipe every 100 ms, far below what fills it.
    static let bufferKilobytes = 4096
    /// A filter with more threads than fit in a page is not set (the id filter stays).
    static let maximumFilterLength = 3500
    /// The most one read returns.
    static let maximumRead = 1 << 20

    let root: String
    let path: String
    private var pipe: Int32 = -1
    private var removed = false
    /// Events left off because their filter could not be set.
    private var skipped: Set<String> = []

    private init(root: String, path: String) {
        self.root = root
        self.path = path
    }

    deinit {
        remove()
    }

    /// Creates and configures the instance; the events start when `start` is called.
    static func create(mounting: Bool) throws -> TracefsInstance {
        let root = try TracefsInstance.root(mounting: mounting)
        removeAbandoned(root: root)
        let path = "\(root)/instances/\(namePrefix)\(getpid())"
        if mkdir(path, 0o700) != 0 {
            let code = errno
            if code == EACCES || code == EPERM { throw TracefsInstance.permissionError(root) }
            throw ToolError("cannot create the tracefs instance \(path): \(String(cString: strerror(code)))")
        }
        let instance = TracefsInstance(root: root, path: path)
        do {
            try instance.write("mono", to: "trace_clock")
            try instance.write("\(bufferKilobytes)", to: "buffer_size_kb")
            try instance.write("1", to: "options/record-tgid")
            // The network's, the timer wheel's, the scheduler's and RCU's soft interrupts can
            // run tens of thousands of times a second on a busy machine: they are left out
            // (a waking inside one still shows as a soft interrupt, by its line's flags). The
            // block, tasklet and high-priority ones stay, named.
            for event in ["softirq_entry", "softirq_exit"] where instance.exists("events/irq/\(event)") {
                try instance.write("vec == 0 || vec == 4 || vec == 5 || vec == 6", to: "events/irq/\(event)/filter")
            }
            // Of the timer wheel's expiries, only schedule_timeout's wakes a thread itself (a
            // socket wait with a timeout, a kernel thread's sleep); the others (network
            // protocol timers, delayed work) are the bulk. Its exit is not traced: the
            // attribution ends a wheel timer's context at its CPU's next event.
            // A kernel without `.function` filters refuses it: the wheel's
            // expiries are then left out, and its rare wake-ups show as a soft interrupt.
            do {
                try instance.write("function.function == process_timeout", to: "events/timer/timer_expire_entry/filter")
            } catch {
                instance.skipped.insert("timer/timer_expire_entry")
            }
            if let filter = KernelTimerSyscalls.filter {
                try instance.write(filter, to: "events/raw_syscalls/sys_enter/filter")
                try instance.write(filter, to: "events/raw_syscalls/sys_exit/filter")
            }
        } catch {
            instance.remove()
            throw error
        }
        return instance
    }

    /// Turns the events on and opens the pipe.
    func start() throws {
        for event in TracefsInstance.events where !skipped.contains(event) {
            var name = event
            if name == "sched/sched_waking" && !exists("events/\(name)") { name = "sched/sched_wakeup" }
            guard exists("events/\(name)") else {
                // Without these the attribution is blind; the others only refine it.
                if TracefsInstance.essential.contains(name) {
                    throw ToolError("this kernel has no \(name) tracepoint (\(path)/events/\(name)): timerfires needs it")
                }
                continue
            }
            try write("1", to: "events/\(name)/enable")
        }
        pipe = open("\(path)/trace_pipe", O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard pipe >= 0 else {
            throw ToolError("cannot open \(path)/trace_pipe: \(String(cString: strerror(errno)))")
        }
    }

    private static let essential: Set = ["timer/hrtimer_start", "timer/hrtimer_expire_entry", "timer/hrtimer_expire_exit",
                                         "sched/sched_wakeup", "sched/sched_switch"]

    func exists(_ file: String) -> Bool {
        access("\(path)/\(file)", F_OK) == 0
    }

    /// Restricts the events to these threads (the process's, as /proc lists them), or to
    /// every thread but the tool's. The timer expiries and interrupts stay system-wide (a
    /// timer expires, and a thread is woken, in whatever context the CPU is in), and so do
    /// timers armed in an interrupt (a periodic timer re-armed by its callback). A filter
    /// the kernel refuses (too many threads for a page) leaves the previous one in place,
    /// which traces more, never less.
    func restrict(to threads: Set<Int32>? = nil, excluding: Int32? = nil) {
        let ids = KernelTimerSyscalls.filter
        if let threads {
            let sorted = threads.sorted()
            let current = sorted.map { "common_pid == \($0)" }.joined(separator: " || ")
            guard current.count <= TracefsInstance.maximumFilterLength else { return }
            // TRACE_FLAG_HARDIRQ | TRACE_FLAG_SOFTIRQ | TRACE_FLAG_NMI
            let inInterrupt = "(common_flags & 88)"
            if let ids {
                try? write("(\(ids)) && (\(current))", to: "events/raw_syscalls/sys_enter/filter")
                try? write("(\(ids)) && (\(current))", to: "events/raw_syscalls/sys_exit/filter")
            }
            try? write("\(current) || \(inInterrupt)", to: "events/timer/hrtimer_start/filter")
            // A wheel timer re-armed in an interrupt is the network's, never the process's.
            try? write(current, to: "events/timer/timer_start/filter")
            let woken = sorted.map { "pid == \($0)" }.joined(separator: " || ")
            try? write(woken, to: "events/sched/sched_waking/filter")
            try? write(woken, to: "events/sched/sched_wakeup/filter")
            let switched = sorted.map { "prev_pid == \($0) || next_pid == \($0)" }.joined(separator: " || ")
            try? write(switched, to: "events/sched/sched_switch/filter")
        } else if let excluding, let ids {
            try? write("(\(ids)) && common_pid != \(excluding)", to: "events/raw_syscalls/sys_enter/filter")
            try? write("(\(ids)) && common_pid != \(excluding)", to: "events/raw_syscalls/sys_exit/filter")
        }
    }

    /// Waits up to `milliseconds` for text and returns what the pipe holds, at most
    /// `maximumRead` bytes (empty if nothing): a reader that falls behind a busy system
    /// still comes back to its clock and its signals (the kernel drops the oldest events and
    /// says so in the text).
    func read(waitingMilliseconds milliseconds: Int32) throws -> [UInt8] {
        var descriptor = pollfd(fd: pipe, events: Int16(POLLIN), revents: 0)
        let ready = poll(&descriptor, 1, milliseconds)
        if ready < 0 && errno != EINTR {
            throw ToolError("cannot poll \(path)/trace_pipe: \(String(cString: strerror(errno)))")
        }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while bytes.count < TracefsInstance.maximumRead {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(pipe, $0.baseAddress, $0.count) }
            if count > 0 {
                bytes += chunk[0..<count]
                continue
            }
            if count < 0 && errno == EINTR { continue }
            if count < 0 && errno != EAGAIN {
                throw ToolError("cannot read \(path)/trace_pipe: \(String(cString: strerror(errno)))")
            }
            break
        }
        return bytes
    }

    /// Stops recording; what is in the buffer can still be read.
    func stop() {
        try? write("0", to: "tracing_on")
    }

    /// The thread groups of the tasks the kernel saw (`saved_tgids`, shared by all instances).
    func savedThreadGroups() -> [Int32: Int32] {
        guard let text = KernelSwitches.readSmallFile("\(root)/saved_tgids") else { return [:] }
        var groups: [Int32: Int32] = [:]
        for line in text.split(separator: "\n") {
            let words = line.split(separator: " ")
            if words.count == 2, let tid = Int32(words[0]), let tgid = Int32(words[1]) { groups[tid] = tgid }
        }
        return groups
    }

    /// Closes the pipe and removes the instance (its buffer and switches go with it).
    func remove() {
        if pipe >= 0 {
            close(pipe)
            pipe = -1
        }
        guard !removed else { return }
        removed = true
        if rmdir(path) != 0 && errno != ENOENT {
            printToStandardError("timerfires: cannot remove the tracefs instance \(path) "
                + "(\(String(cString: strerror(errno)))): rmdir it by hand")
        }
    }

    private func write(_ value: String, to file: String) throws {
        let descriptor = open("\(path)/\(file)", O_WRONLY | O_TRUNC | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw ToolError("cannot open \(path)/\(file): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        let bytes = Array(value.utf8)
        let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
        guard written == bytes.count else {
            throw ToolError("cannot write \"\(value)\" to \(path)/\(file): \(String(cString: strerror(errno)))")
        }
    }

    /// Where tracefs is mounted; with `mounting` (and as root), mounts it where it belongs.
    private static func root(mounting: Bool) throws -> String {
        for candidate in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
            if access("\(candidate)/instances", F_OK) == 0 { return candidate }
            // tracefs (and debugfs) are root's: another user cannot even look inside.
            if errno == EACCES { throw permissionError(candidate) }
        }
        let home = "/sys/kernel/tracing"
        guard access(home, F_OK) == 0 else {
            throw ToolError("this kernel has no tracefs (\(home) does not exist): it was built without tracing")
        }
        let command = "mount -t tracefs nodev \(home)"
        guard mounting else {
            throw ToolError("tracefs is not mounted: mount it with `\(command)` as root, "
                + "or run timerfires with --mount-tracefs as root")
        }
        guard geteuid() == 0 else { throw ToolError("only root can mount tracefs (`\(command)`)") }
        guard mount("nodev", home, "tracefs", 0, nil) == 0 else {
            throw ToolError("`\(command)` failed: \(String(cString: strerror(errno)))")
        }
        printToStandardError("timerfires: mounted tracefs at \(home)")
        return home
    }

    private static func permissionError(_ root: String) -> ToolError {
        ToolError("reading the kernel's tracepoints needs root: \(root) is not open to this user "
            + "(CAP_PERFMON is not enough unless tracefs is mounted with a gid= of one of your groups); "
            + "run timerfires with sudo")
    }

    /// Removes instances left by a timerfires that is gone (killed before it could).
    private static func removeAbandoned(root: String) {
        guard let directory = opendir("\(root)/instances") else { return }
        var abandoned: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard name.hasPrefix(namePrefix), let owner = Int32(name.dropFirst(namePrefix.count)) else { continue }
            if kill(owner, 0) != 0 && errno == ESRCH { abandoned.append(name) }
        }
        closedir(directory)
        for name in abandoned { rmdir("\(root)/instances/\(name)") }
    }
}
