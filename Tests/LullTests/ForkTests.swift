import Glibc
import Testing
@testable import Lull

extension LullSuite {
    /// Lull in the child of fork(): a clear stop on first use, as libdispatch does; fork
    /// followed by exec keeps working. Each test runs in an exit test's child process (a
    /// process of its own, few threads), which forks the child under test.
    @Suite struct ForkTests {
        @Test func aTimerInAForkedChildStopsTheChildWithAMessage() async {
            await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                // The queue comes from the parent, so that the child does little before Lull.
                let queue = WorkQueue(label: "lull.test.fork.child-timer")
                ForkProbe.expectChildStops(saying: "used in the child of fork()") {
                    let timer = EventSource.makeTimerSource(queue: queue)
                    timer.setEventHandler { _exit(0) }
                    timer.schedule(deadline: .now() + .milliseconds(10))
                    timer.activate()
                    // Unreached with the guard; without it the timer never fires.
                    sleep(10)
                    _exit(3)
                }
            }
        }

        @Test func asyncInAForkedChildStopsTheChildWithAMessage() async {
            await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                let queue = WorkQueue(label: "lull.test.fork.child-async")
                ForkProbe.expectChildStops(saying: "BUG IN CLIENT OF LULL") {
                    queue.async { _exit(0) }
                    sleep(10)
                    _exit(3)
                }
            }
        }

        @Test func forkFollowedByExecKeepsWorking() async {
            await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                ForkProbe.startLull()
                let path = strdup("/bin/sh")
                let arguments: [UnsafeMutablePointer<CChar>?] = [strdup("sh"), strdup("-c"), strdup("exit 7"), nil]
                let outcome = ForkProbe.runChild {
                    _ = arguments.withUnsafeBufferPointer { execv(path!, $0.baseAddress!) }
                    _exit(127)
                }
                ForkProbe.require(outcome?.signalled == false && outcome?.status == 7, "child: \(String(describing: outcome))")
                // And the parent carries on.
                ForkProbe.startLull()
                exit(0)
            }
        }
    }
}

/// Runs a forked child of the calling process and reports how it ended.
///
/// The child of a multithreaded process inherits every lock that another thread held at
/// the fork, the Swift runtime's metadata locks included. Code in the child that reaches
/// such a lock waits forever (the runtime's futex lock then spins on its dead owner), before
/// it ever reaches Lull. So the parent waits a bounded time, kills a child that neither
/// exits nor closes its pipe, and the probes fork again: a child that hangs in every
/// attempt is reported as a failure, never as a hung test run.
enum ForkProbe {
    struct Outcome: CustomStringConvertible {
        var signalled: Bool
        var status: Int32
        /// What the child wrote to the captured descriptor.
        var output: String
        /// The child did not end within the wait and was killed.
        var hung = false
        var description: String {
            hung ? "hung, killed after \(ForkProbe.childWait), output: \(output)"
                : "\(signalled ? "killed by signal" : "exit status") \(status), output: \(output)"
        }
    }

    /// How long a child may take. It needs milliseconds; this is generous for sanitizers.
    static let childWait: Duration = .seconds(30)
    /// Forks per probe before a hang counts as the result.
    static let attempts = 3

    /// Uses the pool, the reactor and a timer, so that all of them exist when the process forks.
    static func startLull() {
        let fired = Flag()
        let timer = EventSource.makeTimerSource(queue: WorkQueue(label: "lull.test.fork.parent"))
        timer.setEventHandler { fired.set() }
        timer.schedule(deadline: .now() + .milliseconds(1))
        timer.activate()
        require(fired.await(), "the parent's timer never fired")
        timer.cancel()
    }

    /// Forks (again, up to `attempts` times, while the child hangs); the child runs `child`
    /// with `captured` (stderr unless told) on a pipe; it must not return. nil when the pipe
    /// or the fork failed.
    static func runChild(capturing captured: Int32 = 2, _ child: () -> Never) -> Outcome? {
        var outcome: Outcome?
        for _ in 0..<attempts {
            outcome = runChildOnce(capturing: captured, child)
            if outcome?.hung != true { break }
        }
        return outcome
    }

    private static func runChildOnce(capturing captured: Int32, _ child: () -> Never) -> Outcome? {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return nil }
        for descriptor in fds { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        let pid = fork()
        if pid == 0 {
            dup2(fds[1], captured)
            child()
        }
        close(fds[1])
        defer { close(fds[0]) }
        guard pid > 0 else { return nil }
        let (output, ended) = readUntilClosed(fds[0], deadline: ContinuousClock.now + childWait)
        if !ended { kill(pid, SIGKILL) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let signalled = status & 0x7f != 0
        return Outcome(signalled: signalled, status: signalled ? status & 0x7f : (status >> 8) & 0xff,
                       output: String(decoding: output, as: UTF8.self), hung: !ended)
    }

    /// Reads `descriptor` until its writers close it (true) or `deadline` passes (false).
    private static func readUntilClosed(_ descriptor: Int32, deadline: ContinuousClock.Instant) -> ([UInt8], Bool) {
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return (output, false) }
            var request = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let milliseconds = Int32(clamping: left.components.seconds * 1000 + 1)
            let ready = poll(&request, 1, milliseconds)
            if ready < 0 && errno != EINTR { return (output, false) }
            guard ready > 0 else { continue }
            let count = read(descriptor, &buffer, buffer.count)
            if count > 0 { output += buffer[0..<count]; continue }
            if count < 0 && errno == EINTR { continue }
            return (output, true)
        }
    }

    /// In an exit test's child: with Lull running, forks a child that runs `child` and
    /// exits with success if the child was stopped with `message` on its stderr.
    static func expectChildStops(saying message: String, _ child: () -> Never) -> Never {
        startLull()
        let outcome = runChild(child)
        require(outcome?.signalled == true && outcome?.output.contains(message) == true,
                "child: \(String(describing: outcome))")
        exit(0)
    }

    /// In the exit test's child: reports a failed condition on stderr and exits with failure.
    static func require(_ condition: Bool, _ message: @autoclosure () -> String) {
        if !condition {
            printToStandardError("ForkProbe: \(message())")
            exit(1)
        }
    }
}
