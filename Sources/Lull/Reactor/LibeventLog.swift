import CLibevent
import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// libevent's own diagnostics, through swift-log, and its fatal errors, through
/// `lullFatal`: libevent never writes to stderr itself, and never calls `exit(1)`.
///
/// libevent reports a failed system call by a warning or error whose text ends with
/// `strerror(errno)`; the messages of the reactor's start-up are kept, so that a start-up
/// that fails names its cause (no free descriptor, `EMFILE`, is the usual one: a server
/// that opened its sockets before it first used Lull).
enum LibeventLog {
    /// The messages libevent logged while the reactor starts (nil: not starting).
    private static let startupMessages = Mutex<[String]?>(nil)
    /// libevent's last warning or error, for the message of a fatal error after start-up.
    private static let lastProblem = Mutex<String?>(nil)

    /// Installs the callbacks, once, before the reactor's first libevent call.
    static let installed: Void = {
        event_set_log_callback { severity, message in
            let saved = errno
            LibeventLog.log(severity: severity, message.map { String(cString: $0) } ?? "")
            errno = saved
        }
        event_set_fatal_callback { code in
            LibeventLog.fatal(code: code)
        }
    }()

    private static func log(severity: Int32, _ message: String) {
        startupMessages.locked { $0?.append(message) }
        if severity >= EVENT_LOG_WARN { lastProblem.locked { $0 = message } }
        switch severity {
        case EVENT_LOG_DEBUG: RuntimeLog.logger.debug("libevent: \(message)")
        case EVENT_LOG_MSG: RuntimeLog.logger.info("libevent: \(message)")
        case EVENT_LOG_WARN: RuntimeLog.logger.warning("libevent: \(message)")
        default: RuntimeLog.logger.error("libevent: \(message)")
        }
    }

    /// libevent hit an error it cannot continue from (its `event_err`/`event_errx`).
    private static func fatal(code: Int32) -> Never {
        let starting = startupMessages.locked { $0 != nil }
        if starting { startupFailed("libevent stopped on a fatal error (code \(code))") }
        let said = lastProblem.locked { $0 }.map { ": \($0)" } ?? ""
        lullFatal("libevent stopped on a fatal error (code \(code))\(said)")
    }

    /// The messages of a start-up in progress, or none.
    private static func recentMessages() -> [String] {
        startupMessages.locked { $0 ?? [] }
    }

    // MARK: Start-up

    /// The reactor's start-up begins: installs the callbacks (once) and keeps libevent's
    /// messages for `startupFailed` until `startupEnded`.
    static func startupBegins() {
        _ = installed
        startupMessages.locked { $0 = [] }
    }

    static func startupEnded() {
        startupMessages.locked { $0 = nil }
    }

    /// Stops the program: the reactor could not start. The message names the cause when it
    /// is a shortage of descriptors, and what to do about it.
    static func startupFailed(_ what: String) -> Never {
        let messages = recentMessages()
        let said = messages.isEmpty ? "" : " (libevent: \(messages.joined(separator: "; ")))"
        lullFatal("cannot start its reactor: \(what)\(said)", remedy: startupCause(messages))
    }

    /// The cause of a failed start-up, from libevent's messages and from a look at the
    /// descriptor table now.
    static func startupCause(_ messages: [String]) -> String {
        var probe: SystemError?
        do throws(SystemError) {
            close(try Syscall.shim("eventfd") { lull_eventfd() })
        } catch {
            probe = error
        }
        func said(_ code: Int32) -> Bool {
            probe?.code == code || messages.contains { $0.hasSuffix(String(cString: strerror(code))) }
        }
        // ENFILE's text contains EMFILE's ("Too many open files in system"): tested first.
        if said(ENFILE) {
            return "The system's file table is full (ENFILE: \(String(cString: strerror(ENFILE)))): "
                + "close descriptors elsewhere or raise fs.file-max."
        }
        if said(EMFILE) {
            var limit = rlimit()
            let soft = getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 ? " (RLIMIT_NOFILE soft limit \(limit.rlim_cur))" : ""
            return "The process has no free file descriptor (EMFILE: \(String(cString: strerror(EMFILE))))\(soft). "
                + "Lull opens \(descriptorsAtStart) descriptors when it is first used (epoll, libevent's signal pipe, "
                + "its wake-up eventfd, a timerfd): raise the limit (setrlimit(RLIMIT_NOFILE), ulimit -n), or use Lull "
                + "once before opening most descriptors, for example `WorkQueue.global().async {}` at start-up."
        }
        if let probe {
            return "A descriptor cannot be opened (\(probe))."
        }
        return "libevent found no usable epoll backend."
    }

    /// Descriptors the reactor opens at start-up: epoll, libevent's signal pipe (two), its
    /// notification eventfd, and the precise timerfd.
    static let descriptorsAtStart = 5
}
