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
                ForkProbe.expectChildStops(saying: "used in the child of fork()") {
                    let timer = EventSource.makeTimerSource(queue: WorkQueue(label: "lull.test.fork.child-timer"))
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
                ForkProbe.expectChildStops(saying: "BUG IN CLIENT OF LULL") {
                    WorkQueue(label: "lull.test.fork.child-async").async { _exit(0) }
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
enum ForkProbe {
    struct Outcome: CustomStringConvertible {
        var signalled: Bool
        var status: Int32
        /// What the child wrote to the captured descriptor.
        var output: String
        var description: String {
            "\(signalled ? "killed by signal" : "exit status") \(status), output: \(output)"
        }
    }

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

    /// Forks; the child runs `child` with `captured` (stderr unless told) on a pipe; it
    /// must not return. nil when the pipe or the fork failed.
    static func runChild(capturing captured: Int32 = 2, _ child: () -> Never) -> Outcome? {
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
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(fds[0], &buffer, buffer.count)
            if count > 0 { output += buffer[0..<count]; continue }
            if count < 0 && errno == EINTR { continue }
            break
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let signalled = status & 0x7f != 0
        return Outcome(signalled: signalled, status: signalled ? status & 0x7f : (status >> 8) & 0xff,
                       output: String(decoding: output, as: UTF8.self))
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
