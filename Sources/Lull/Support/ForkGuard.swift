import CLullShims

/// Use of Lull in the child of a `fork()` stops the program with a message, as libdispatch
/// does ("trying to use dispatch after fork").
///
/// A forked child has one thread: the parent's workers, its poller and the reactor's
/// loop are not there, and their locks may be held forever. Re-creating them in the child
/// would mean resetting every lock, queue and source the parent had, mid-operation; instead
/// the child gets a clear stop on first use. Once the pool or the reactor exists, a
/// `pthread_atfork` child handler (`lull_fork_guard_install`) marks every forked child, and
/// puts back the program's disposition of each signal Lull forwards (so an exec'd child
/// inherits `SIG_IGN`). A child that only calls async-signal-safe functions and then execs
/// — `fork` + `exec`, `posix_spawn`, Foundation's `Process` — is unaffected, and so is the
/// child of a process that never used Lull's threads or reactor.
///
/// Checked where work enters the pool (`WorkerPool.submit`) and where the reactor is asked
/// to watch something (`Reactor.addInterest`, `Reactor.setTimer`): `async`, `asyncAfter`,
/// timers and every source pass there. The check is one load of a C flag.
enum ForkGuard {
    @inline(__always)
    static func check() {
        if lull_in_forked_child() != 0 { refuse() }
    }

    private static func refuse() -> Never {
        lullFatal("BUG IN CLIENT OF LULL: used in the child of fork(). The parent's worker threads and reactor "
                  + "do not exist in the child, so its work, timers and sources would never run. After fork, "
                  + "call only async-signal-safe functions and exec, or start the child with posix_spawn or "
                  + "Foundation's Process.")
    }
}
