/// Whose wake-ups a kernel trace reports.
public enum KernelTraceScope: Equatable, Sendable {
    /// One process: its thread group `pid`, with the threads known when tracing started
    /// (threads that start later are recognized by the thread group each line records).
    case process(pid: Int32, threads: Set<Int32>)
    /// Every process but `excluding` (the tracer itself).
    case system(excluding: Int32?)
}

/// A timer of the traced process that fired.
public struct KernelTimerFire: Sendable {
    /// The callback: `hrtimer_wakeup` for a sleep or a wait with a timeout, `timerfd_tmrproc`,
    /// `posix_timer_fn`, `it_real_fn`...
    public var function: String
    /// The system call in which its thread armed it (nil: armed in another call, or before
    /// the trace started).
    public var syscall: String?
    /// The thread that armed it (nil: armed by the kernel, or before the trace started).
    public var owner: Int32?
    /// Whether the trace saw it armed (false: armed before the trace started).
    public var armingSeen: Bool
    /// The timer's address (hashed by tracefs), for counting distinct timers.
    public var timer: String
    /// A timer-wheel timer (jiffies: no window, no lateness).
    public var isWheel: Bool
    public var cpu: Int
    /// When it fired, on the trace clock (nanoseconds).
    public var time: UInt64
    /// The window [deadline, end] it could fire in (soft and hard expiry), on the trace
    /// clock; nil for a wheel timer or one armed before the trace started.
    public var deadline: UInt64?
    public var end: UInt64?
    /// Fires with the same batch expired in one run of the CPU's timer interrupt.
    public var batch: Int64
    /// Threads in scope it woke.
    public var woke: Int
    /// The first thread in scope it woke.
    public var firstWoken: Int32?
}

/// What woke a thread.
public enum KernelWakeupCause: Equatable, Sendable {
    /// A timer expired: the index of its fire in `KernelWakeupTrace.fires`.
    case timer(fire: Int)
    /// A device interrupt (its handler's name) or a soft interrupt ("softirq NET_RX").
    case interrupt(String)
    /// Another thread woke it (a futex wake, a write to a pipe, a signal...).
    case thread(tid: Int32, task: String)
    /// The waker is unknown (the idle task outside any traced interrupt).
    case other
}

/// A thread in scope woken from sleep.
public struct KernelWakeup: Sendable {
    public var tid: Int32
    public var time: UInt64
    public var cause: KernelWakeupCause
}

/// The wake-ups of a process (or of every process) read from the kernel's trace text, each
/// attributed to its cause.
///
/// Attribution follows each CPU's contexts: `sched_waking` fires in the waker's context, so
/// a waking inside `hrtimer_expire_entry`/`_exit` was that timer's doing, one inside
/// `irq_handler_entry`/`_exit` (or a soft interrupt) the interrupt's, and any other the
/// current task's. Each timer is tied to its arming (`hrtimer_start` in the arming thread's
/// context, inside a traced system call) by its address. A waking counts as a wake-up only
/// if the thread was asleep (switched out in a sleeping state, or not seen yet): a thread
/// woken before it managed to switch out did not wake up.
///
/// Feed it lines in trace order (`consume`); it keeps the fires and wake-ups in scope, not
/// the lines.
public struct KernelWakeupTrace: Sendable {
    public private(set) var scope: KernelTraceScope
    public private(set) var fires: [KernelTimerFire] = []
    public private(set) var wakeups: [KernelWakeup] = []
    /// Events the ring buffer dropped (the attribution around them may be wrong).
    public private(set) var lostEvents = 0
    /// Voluntary context switches (switched out asleep) per thread in scope.
    public private(set) var voluntarySwitches: [Int32: Int] = [:]
    public private(set) var firstTime: UInt64?
    public private(set) var lastTime: UInt64?
    /// Thread group of each thread seen.
    public private(set) var threadGroups: [Int32: Int32] = [:]
    /// Name of each thread seen.
    public private(set) var taskNames: [Int32: String] = [:]

    private struct Arming: Sendable {
        var function: String
        var owner: Int32?
        var syscall: String?
        var expires: Int64?
        var softExpires: Int64?
    }

    private enum Context: Sendable {
        case timer(key: String, fire: KernelTimerFire, index: Int?)
        case interrupt(irq: Int, name: String)
        case softInterrupt(action: String)
    }

    private var armings: [String: Arming] = [:]
    private var contexts: [Int: [Context]] = [:]
    private var syscalls: [Int32: Int] = [:]
    /// true: running or runnable; false: asleep; absent: not seen yet.
    private var running: [Int32: Bool] = [:]
    private var sawWaking = false

    public init(scope: KernelTraceScope) {
        self.scope = scope
    }

    /// Adds threads of the traced process found after the start (/proc/PID/task), so that
    /// their wake-ups count before any line shows their thread group.
    public mutating func add(threads more: Set<Int32>) {
        if case .process(let pid, let threads) = scope { scope = .process(pid: pid, threads: threads.union(more)) }
    }

    /// Names threads the lines may not show (a process that sleeps through the trace).
    public mutating func learn(taskNames more: [Int32: String]) {
        taskNames.merge(more) { known, _ in known }
    }

    /// Adds thread groups learned outside the lines (tracefs `saved_tgids`).
    public mutating func learn(threadGroups more: [Int32: Int32]) {
        threadGroups.merge(more) { known, _ in known }
    }

    /// Whether `tid` belongs to the scope, as far as the trace knows.
    public func inScope(_ tid: Int32) -> Bool {
        guard tid != 0 else { return false }
        switch scope {
        case .process(let pid, let threads):
            return threads.contains(tid) || threadGroups[tid] == pid
        case .system(let excluding):
            return excluding == nil || (threadGroups[tid] ?? tid) != excluding
        }
    }

    /// Parses and consumes one line of trace text.
    public mutating func consume(_ text: Substring) {
        if let line = KernelTraceLine(text) { consume(line) }
    }

    /// Consumes one parsed line.
    public mutating func consume(_ line: KernelTraceLine) {
        if case .lost(let count) = line.event {
            lostEvents += count
            contexts[line.cpu] = nil
            return
        }
        if firstTime == nil { firstTime = line.time }
        lastTime = max(lastTime ?? 0, line.time)
        if line.tid != 0 {
            if let tgid = line.tgid { threadGroups[line.tid] = tgid }
            taskNames[line.tid] = line.task
        }
        let inInterrupt = line.inHardInterrupt || line.inSoftInterrupt || line.tid == 0
        // A timer-wheel callback that wakes a thread does so at once: its context ends at
        // the CPU's next event other than a waking (`timerfires` does not trace its exit).
        if case .waking = line.event {} else if case .timer(let key, _, _)? = contexts[line.cpu]?.last, key.hasPrefix("w") {
            contexts[line.cpu]?.removeLast()
        }
        switch line.event {
        case .lost:
            break
        case .syscallEnter(let number):
            syscalls[line.tid] = number
        case .syscallExit:
            syscalls[line.tid] = nil
        case .hrtimerStart(let timer, let function, let expires, let softExpires):
            arm("h" + timer, function: function, expires: expires, softExpires: softExpires, line: line, inInterrupt: inInterrupt)
        case .timerStart(let timer, let function):
            arm("w" + timer, function: function, expires: nil, softExpires: nil, line: line, inInterrupt: inInterrupt)
        case .hrtimerExpireEntry(let timer, let function, let now):
            expire("h" + timer, function: function, now: now, line: line)
        case .timerExpireEntry(let timer, let function):
            expire("w" + timer, function: function, now: nil, line: line)
        case .hrtimerExpireExit(let timer):
            leave(line.cpu) { if case .timer(let key, _, _) = $0 { key == "h" + timer } else { false } }
        case .timerExpireExit(let timer):
            leave(line.cpu) { if case .timer(let key, _, _) = $0 { key == "w" + timer } else { false } }
        case .irqHandlerEntry(let irq, let name):
            contexts[line.cpu, default: []].append(.interrupt(irq: irq, name: name))
        case .irqHandlerExit(let irq):
            leave(line.cpu) { if case .interrupt(let entered, _) = $0 { entered == irq } else { false } }
        case .softirqEntry(let action):
            contexts[line.cpu, default: []].append(.softInterrupt(action: action))
        case .softirqExit(let action):
            leave(line.cpu) { if case .softInterrupt(let entered) = $0 { entered == action } else { false } }
        case .waking(let task, let tid, let isWakeup):
            if isWakeup && sawWaking { break }
            if !isWakeup { sawWaking = true }
            if tid != 0 { taskNames[tid] = task }
            wake(tid, line: line)
        case .contextSwitch(let previousTask, let previousTid, let previousState, let nextTask, let nextTid):
            // No switch happens inside an interrupt: whatever is still open on this CPU lost its exit.
            contexts[line.cpu] = nil
            let preempted = previousState.hasPrefix("R")
            // A thread's last switch, as it exits, leaves it dead (X) or a zombie (Z).
            if previousTid != 0 && (previousState.hasPrefix("X") || previousState.hasPrefix("Z")) {
                forgetArmings(of: previousTid)
            }
            if previousTid != 0 {
                taskNames[previousTid] = previousTask
                running[previousTid] = preempted
                if !preempted && inScope(previousTid) { voluntarySwitches[previousTid, default: 0] += 1 }
            }
            if nextTid != 0 {
                taskNames[nextTid] = nextTask
                running[nextTid] = true
            }
        }
    }

    private mutating func arm(_ key: String, function: String, expires: Int64?, softExpires: Int64?,
                              line: KernelTraceLine, inInterrupt: Bool) {
        var arming = Arming(function: function, owner: nil, syscall: nil, expires: expires, softExpires: softExpires)
        if !inInterrupt {
            arming.owner = line.tid
            arming.syscall = syscalls[line.tid].map(KernelTimerSyscalls.name)
        }
        // A re-arming from an interrupt (a periodic timer) or outside a traced call (a
        // periodic timerfd re-armed by its read) keeps the owner and call of the arming before.
        if let previous = armings[key], previous.function == function {
            if arming.owner == nil {
                arming.owner = previous.owner
                arming.syscall = previous.syscall
            } else if arming.syscall == nil && previous.owner == arming.owner {
                arming.syscall = previous.syscall
            }
        }
        armings[key] = arming
    }

    private mutating func expire(_ key: String, function: String, now: Int64?, line: KernelTraceLine) {
        let arming = armings[key].flatMap { $0.function == function ? $0 : nil }
        // The fire's window on the trace clock: a timer of another clock base (realtime)
        // is shifted by the difference between its base's `now` and the trace's time.
        var time = line.time
        var deadline: UInt64?
        var end: UInt64?
        if let now {
            let difference = Int64(bitPattern: line.time) &- now
            let offset = abs(difference) < 5_000_000 ? 0 : difference
            time = UInt64(clamping: now &+ offset)
            if let soft = arming?.softExpires, let hard = arming?.expires {
                deadline = UInt64(clamping: soft &+ offset)
                end = UInt64(clamping: max(hard, soft) &+ offset)
            }
        }
        let fire = KernelTimerFire(
            function: function, syscall: arming?.syscall, owner: arming?.owner, armingSeen: arming != nil,
            timer: String(key.dropFirst()),
            isWheel: now == nil, cpu: line.cpu, time: time, deadline: deadline, end: end,
            batch: now ?? Int64(bitPattern: line.time), woke: 0, firstWoken: nil)
        var index: Int?
        if let owner = fire.owner, inScope(owner) {
            index = fires.count
            fires.append(fire)
        }
        contexts[line.cpu, default: []].append(.timer(key: key, fire: fire, index: index))
        // A sleeper's timer (`hrtimer_wakeup`: nanosleep, poll, futex and epoll timeouts)
        // fires once per arming, and lives on its thread's kernel stack: once that thread has
        // exited, a new thread given the same stack arms a timer at the same address. Traced
        // for one process, the new thread's arming is not seen, so a kept arming would make
        // its fire the process's.
        if function == "hrtimer_wakeup" { armings[key] = nil }
    }

    /// Forgets the timers a thread armed, once it has exited: their addresses may come back
    /// as another thread's.
    private mutating func forgetArmings(of tid: Int32) {
        armings = armings.filter { $0.value.owner != tid }
    }

    /// Pops the innermost context that `matches`, and any left open above it.
    private mutating func leave(_ cpu: Int, matches: (Context) -> Bool) {
        guard var stack = contexts[cpu], let position = stack.lastIndex(where: matches) else { return }
        stack.removeSubrange(position...)
        contexts[cpu] = stack
    }

    private mutating func wake(_ tid: Int32, line: KernelTraceLine) {
        guard tid != 0, inScope(tid), running[tid] != true else { return }
        running[tid] = true
        let cause: KernelWakeupCause
        if var stack = contexts[line.cpu], let innermost = stack.last {
            switch innermost {
            case .timer(let key, var fire, let index):
                let stored: Int
                if let index {
                    stored = index
                } else {
                    // A timer that is not the process's own (the kernel's, or armed before
                    // the trace) woke it: it is reported with the process's timers.
                    stored = fires.count
                    fire.woke = 0
                    fires.append(fire)
                    stack[stack.count - 1] = .timer(key: key, fire: fire, index: stored)
                    contexts[line.cpu] = stack
                }
                fires[stored].woke += 1
                if fires[stored].firstWoken == nil { fires[stored].firstWoken = tid }
                cause = .timer(fire: stored)
            case .interrupt(_, let name):
                cause = .interrupt(name)
            case .softInterrupt(let action):
                cause = .interrupt("softirq " + action)
            }
        } else if line.inHardInterrupt {
            cause = .interrupt("hardirq")
        } else if line.inSoftInterrupt {
            cause = .interrupt("softirq")
        } else if line.tid == 0 {
            cause = .other
        } else {
            cause = .thread(tid: line.tid, task: line.task)
        }
        wakeups.append(KernelWakeup(tid: tid, time: line.time, cause: cause))
    }
}
