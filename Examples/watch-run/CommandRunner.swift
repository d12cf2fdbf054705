import Lull

#if canImport(Glibc)
import Glibc
#endif

/// Runs the command, and restarts it on request: a running command is asked to stop
/// (SIGTERM to its process group), killed if it has not exited after the grace period, and
/// started again once it has exited. A process source on its pid tells when it exits.
///
/// The mutable state lives in a `QueueBound` owned by `queue` (the public methods hop onto
/// it; the process source and the kill timer deliver to it): every access checks that it
/// runs there, so the runner is `Sendable` without a lock and without `@unchecked`.
final class CommandRunner: Sendable {
    private enum State {
        case idle
        case running(Child)
        /// Asked to stop; `then` runs once it has exited.
        case stopping(Child, then: Next)
    }

    private enum Next {
        case restart
        case finish(@Sendable () -> Void)
    }

    private struct Child {
        let pid: pid_t
        let exitSource: ProcessSource
        let startedAt: Deadline
    }

    private let command: [String]
    private let grace: Duration
    private let queue: WorkQueue
    private let say: @Sendable (String) -> Void
    /// What changes while the runner works, reachable only on `queue`.
    private struct Owned {
        var state = State.idle
        var killTimer: TimerSource?
        var runs = 0
    }

    private let owned: QueueBound<Owned>

    // The owned fields, read and written on `queue` (checked).
    private var state: State {
        get { owned.value.state }
        set { owned.value.state = newValue }
    }
    private var killTimer: TimerSource? {
        get { owned.value.killTimer }
        set { owned.value.killTimer = newValue }
    }
    private var runs: Int {
        get { owned.value.runs }
        set { owned.value.runs = newValue }
    }

    init(command: [String], grace: Duration, queue: WorkQueue, say: @escaping @Sendable (String) -> Void) {
        self.command = command
        self.grace = grace
        self.queue = queue
        self.say = say
        owned = QueueBound(Owned(), on: queue)
    }

    /// Starts the command, or restarts it if it runs.
    func restart() {
        queue.async { [self] in
            switch state {
            case .idle:
                start()
            case .running(let child):
                stop(child, then: .restart)
            case .stopping(let child, .finish(let done)):
                state = .stopping(child, then: .finish(done))  // shutting down: no restart
            case .stopping:
                break  // the restart is already planned
            }
        }
    }

    /// Stops the command if it runs, then calls `done` (on the runner's queue).
    func finish(then done: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            switch state {
            case .idle:
                done()
            case .running(let child):
                stop(child, then: .finish(done))
            case .stopping(let child, _):
                state = .stopping(child, then: .finish(done))
            }
        }
    }

    // MARK: On `queue`

    private func start() {
        runs += 1
        say("run \(runs): \(command.joined(separator: " "))")
        let pid: pid_t
        do {
            pid = try Spawn.processGroupLeader(command)
        } catch {
            say("cannot run \(command[0]): \(error); waiting for the next change")
            state = .idle
            return
        }
        let exitSource = EventSource.makeProcessSource(identifier: pid, eventMask: .exit, queue: queue)
        exitSource.setEventHandler { [self] in exited(pid) }
        exitSource.activate()
        state = .running(Child(pid: pid, exitSource: exitSource, startedAt: .now()))
    }

    private func stop(_ child: Child, then next: Next) {
        say("stopping run \(runs) (SIGTERM to process group \(child.pid))")
        state = .stopping(child, then: next)
        _ = kill(-child.pid, SIGTERM)
        // Killed for good if it is still there after the grace period.
        let timer = EventSource.makeTimerSource(queue: queue)
        timer.setEventHandler { [self] in
            guard case .stopping(let stopping, _) = state, stopping.pid == child.pid else { return }
            say("run \(runs) still running \(grace) after SIGTERM: SIGKILL")
            _ = kill(-child.pid, SIGKILL)
        }
        timer.schedule(deadline: .now() + grace, leeway: grace / 10)
        timer.activate()
        killTimer = timer
    }

    private func exited(_ pid: pid_t) {
        var status: Int32 = 0
        var reaped: pid_t
        repeat { reaped = waitpid(pid, &status, 0) } while reaped < 0 && errno == EINTR
        let child: Child
        let next: Next?
        switch state {
        case .running(let running) where running.pid == pid:
            child = running
            next = nil
        case .stopping(let stopping, let then) where stopping.pid == pid:
            child = stopping
            next = then
        default:
            return
        }
        child.exitSource.cancel()
        killTimer?.cancel()
        killTimer = nil
        state = .idle
        let seconds = Double((Deadline.now().uptimeNanoseconds - child.startedAt.uptimeNanoseconds) / 1_000_000) / 1000
        say("run \(runs) \(reaped == pid ? Self.describe(status) : "ended (waitpid: \(String(cString: strerror(errno))))") "
            + "after \(seconds) s")
        switch next {
        case nil:
            say("waiting for changes")
        case .restart:
            start()
        case .finish(let done):
            done()
        }
    }

    private static func describe(_ status: Int32) -> String {
        let signal = status & 0x7F
        if signal == 0 { return "exited with status \((status >> 8) & 0xFF)" }
        return "killed by signal \(signal)\(signal == SIGTERM ? " (SIGTERM)" : signal == SIGKILL ? " (SIGKILL)" : "")"
    }
}
