#if canImport(Glibc)
import Glibc
#endif

enum Spawn {
    /// Starts `arguments` (looked up in PATH) as the leader of a new process group, so that
    /// stopping it also stops what it started (`sh -c`, `make`...). The child gets the
    /// default disposition of the signals watch-run ignores for its signal sources, and an
    /// empty signal mask.
    static func processGroupLeader(_ arguments: [String]) throws(SystemError) -> pid_t {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE] { sigaddset(&defaults, signal) }
        var mask = sigset_t()
        sigemptyset(&mask)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setsigmask(&attributes, &mask)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) }
        argv.append(nil)
        defer { for argument in argv { free(argument) } }
        var pid: pid_t = 0
        let result = posix_spawnp(&pid, arguments[0], nil, &attributes, argv, environ)
        guard result == 0 else { throw SystemError(code: result) }
        return pid
    }
}
