import Glibc
import Synchronization

/// One of the package's example programs, started by a test as a child process with its
/// standard output and error on a pipe, so that the test can wait for what it prints.
///
/// The examples are executables of the examples package (Examples/): `ExecutableLocator` says
/// where they are looked for.
final class ExampleProcess {
    struct LaunchError: Error, CustomStringConvertible {
        let description: String
    }

    let name: String
    let pid: pid_t
    /// The read end of the output pipe (non-blocking).
    private let output: Int32
    private var received: [UInt8] = []
    private var exitStatus: Int32?

    /// Starts the example `name` with `arguments`, in the test's environment plus `environment`.
    init(_ name: String, _ arguments: [String], environment: [String: String] = [:]) throws {
        self.name = name
        let path = try ExecutableLocator.path(of: name)
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw LaunchError(description: "pipe: \(String(cString: strerror(errno)))") }
        _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO)
        posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO)
        // A clean slate of signals: the test process may ignore or block some (signal tests).
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigfillset(&defaults)
        sigdelset(&defaults, SIGKILL)
        sigdelset(&defaults, SIGSTOP)
        var mask = sigset_t()
        sigemptyset(&mask)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setsigmask(&attributes, &mask)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        var argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) }
        argv.append(nil)
        defer { for argument in argv { free(argument) } }
        var envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") }
        var inherited = environ
        while let entry = inherited.pointee {
            envp.append(strdup(entry))
            inherited += 1
        }
        envp.append(nil)
        defer { for entry in envp { free(entry) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, path, &actions, &attributes, argv, envp)
        close(fds[1])
        guard result == 0 else {
            close(fds[0])
            throw LaunchError(description: "posix_spawn \(path): \(String(cString: strerror(result)))")
        }
        self.pid = pid
        output = fds[0]
    }

    deinit {
        if exitStatus == nil {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        }
        close(output)
    }

    /// Everything printed so far.
    var text: String {
        readAvailable()
        return String(decoding: received, as: UTF8.self)
    }

    /// Waits until the output has a line that contains `fragment`, `count` times; returns
    /// the last such line, or nil after `timeout`.
    @discardableResult
    func waitForLine(containing fragment: String, count: Int = 1, timeout: Duration = generousTimeout) -> String? {
        waitForLine(count: count, timeout: timeout) { $0.contains(fragment) }
    }

    /// Waits until the output has `count` lines for which `matches` holds; returns the last
    /// one, or nil after `timeout`.
    @discardableResult
    func waitForLine(count: Int = 1, timeout: Duration = generousTimeout,
                     where matches: (Substring) -> Bool) -> String? {
        var found: String?
        _ = waitUntil(timeout: timeout) {
            let matches = text.split(separator: "\n").filter(matches)
            if matches.count >= count { found = String(matches[count - 1]) }
            return found != nil
        }
        return found
    }

    /// Sends `signal` to the process, aimed at its thread that waits in epoll (Lull's reactor
    /// leader) when there is one.
    ///
    /// Why aimed: under ThreadSanitizer a signal handler runs only when the thread the kernel
    /// chose passes through one of the sanitizer's interceptors. The kernel prefers the main
    /// thread, which an idle Lull program parks on a raw futex (no interceptor), so the
    /// handler — Lull's forwarder — would wait until something else woke that thread. `kill`
    /// with a thread's id still sends a process-wide signal, but the kernel gives it to that
    /// thread if it can take it; epoll_wait is intercepted, so the forwarder runs at once.
    /// The leader leaves epoll_wait to run what a wake-up produced: the target is looked for
    /// again for up to a second before the signal goes to the process as a whole.
    func send(_ signal: Int32) {
        var target = Self.epollWaitingThread(of: pid)
        let end = monotonicNanoseconds() + 1_000_000_000
        while target == nil && monotonicNanoseconds() < end {
            usleep(1_000)
            target = Self.epollWaitingThread(of: pid)
        }
        kill(target ?? pid, signal)
    }

    /// A thread of `pid` blocked in epoll_wait, epoll_pwait or epoll_pwait2 (x86_64 and
    /// arm64 numbers), from /proc/<pid>/task/<tid>/syscall.
    private static func epollWaitingThread(of pid: pid_t) -> pid_t? {
        #if arch(x86_64)
        let epollCalls: Set<Substring> = ["232", "281", "441"]
        #else
        let epollCalls: Set<Substring> = ["22", "441"]
        #endif
        guard let directory = opendir("/proc/\(pid)/task") else { return nil }
        defer { closedir(directory) }
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let tid = pid_t(name) else { continue }
            let descriptor = open("/proc/\(pid)/task/\(tid)/syscall", O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else { continue }
            var buffer = [UInt8](repeating: 0, count: 64)
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            close(descriptor)
            guard count > 0 else { continue }
            let number = String(decoding: buffer[0..<count], as: UTF8.self).split(separator: " ").first ?? ""
            if epollCalls.contains(number) { return tid }
        }
        return nil
    }

    /// Waits for the process to end: its exit status, or nil if it was killed by a signal or
    /// is still running after `timeout`.
    func waitForExit(timeout: Duration = generousTimeout) -> Int32? {
        _ = waitUntil(timeout: timeout) {
            if exitStatus != nil { return true }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid { exitStatus = status }
            return exitStatus != nil
        }
        readAvailable()
        guard let status = exitStatus, status & 0x7F == 0 else { return nil }
        return (status >> 8) & 0xFF
    }

    private func readAvailable() {
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(output, $0.baseAddress, $0.count) }
            guard count > 0 else { return }
            received += chunk[0..<count]
        }
    }
}
