import Lull

#if canImport(Glibc)
import Glibc
#endif

/// Runs the command, and restarts it on request: a running command is asked to stop
/// (SIGTERM to its process group), killed if it has not exited after the grace period, and
/// started again once it has exited. A loop over a process source's `events` tells when it
/// exits; a loop over a timer source's `events` kills it after the grace period.
actor CommandRunner {
    private enum State {
        case idle
        case running(Child)
        /// Asked to stop; `then` happens once it has exited.
        case stopping(Child, then: Next)
    }

    private enum Next {
        case restart
        case finish([CheckedContinuation<Void, Never>])
    }

    private struct Child {
        let pid: pid_t
        let startedAt: Deadline
    }

    private let command: [String]
    private let grace: Duration
    private let say: @Sendable (String) -> Void
    private var state = State.idle
    /// The timer of the kill after the grace period, while a command is stopping.
    private var killTimer: TimerSource?
    private var runs = 0

    init(command: [String], grace: Duration, say: @escaping @Sendable (String) -> Void) {
        self.command = command
        self.grace = grace
        self.say = say
    }

    /// Starts the command, or restarts it if it runs.
    func restart() {
        switch state {
        case .idle:
            start()
        case .running(let child):
            stop(child, then: .restart)
        case .stopping(_, .finish):
            break  // shutting down: no restart
        case .stopping:
            break  // the restart is already planned
        }
    }

    /// Stops the command if it runs; returns once it has exited.
    func finish() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            switch state {
            case .idle:
                done.resume()
            case .running(let child):
                stop(child, then: .finish([done]))
            case .stopping(let child, .finish(let waiting)):
                state = .stopping(child, then: .finish(waiting + [done]))
            case .stopping(let child, .restart):
                state = .stopping(child, then: .finish([done]))
            }
        }
    }

    // MARK: Isolated

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
        state = .running(Child(pid: pid, startedAt: .now()))
        // The process source never reaps: `exited` does, with waitpid.
        let exits: SourceEvents<ProcessEvent> = EventSource.makeProcessSource(identifier: pid, eventMask: .exit).events
        Task {
            for await _ in exits {
                exited(pid)
                break  // leaving the loop cancels the source
            }
        }
    }

    private func stop(_ child: Child, then next: Next) {
        say("stopping run \(runs) (SIGTERM to process group \(child.pid))")
        state = .stopping(child, then: next)
        _ = kill(-child.pid, SIGTERM)
        // Killed for good if it is still there after the grace period.
        let timer = EventSource.makeTimerSource()
        timer.schedule(deadline: .now() + grace, leeway: grace / 10)
        killTimer = timer
        let fires = timer.events
        Task {
            for await _ in fires {
                killAfterGrace(child.pid)
                break
            }
        }
    }

    private func killAfterGrace(_ pid: pid_t) {
        guard case .stopping(let stopping, _) = state, stopping.pid == pid else { return }
        say("run \(runs) still running \(grace) after SIGTERM: SIGKILL")
        _ = kill(-pid, SIGKILL)
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
        killTimer?.cancel()  // ends the kill loop
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
        case .finish(let waiting):
            for done in waiting { done.resume() }
        }
    }

    private static func describe(_ status: Int32) -> String {
        let signal = status & 0x7F
        if signal == 0 { return "exited with status \((status >> 8) & 0xFF)" }
        return "killed by signal \(signal)\(signal == SIGTERM ? " (SIGTERM)" : signal == SIGKILL ? " (SIGKILL)" : "")"
    }
}
