import CLullShims
#if canImport(Glibc)
import Glibc
#endif

/// The errors of file-system sources and watchers: `EventSourceError`s whose reason is the
/// system's, with what to do about the limits Linux puts on inotify.
enum FileSystemErrors {
    /// What failed, to word the limits right.
    enum Step {
        /// Opening the object (open with O_PATH).
        case open
        /// Creating the inotify instance (inotify_init1).
        case instance
        /// Adding the watch (inotify_add_watch).
        case watch
        /// Checking a descriptor the program gave.
        case descriptor
    }

    /// "FileSystemObjectSource on '<queue>': path '<path>'".
    static func subject(kind: String, queueLabel: String, path: String) -> String {
        "\(kind) on '\(queueLabel)': path '\(path)'"
    }

    static func subject(kind: String, queueLabel: String, descriptor: Int32) -> String {
        "\(kind) on '\(queueLabel)': descriptor \(descriptor)"
    }

    static func error(_ subject: String, code: Int32, step: Step) -> EventSourceError {
        EventSourceError(subject: subject, code: code, reason: reason(code: code, step: step))
    }

    /// The system's reason (strerror), then what it means here.
    static func reason(code: Int32, step: Step) -> String {
        let system = String(cString: strerror(code))
        switch (code, step) {
        case (ENOSPC, .watch):
            let limit = limitText("/proc/sys/fs/inotify/max_user_watches")
            return "\(system): the inotify watch limit of this user is reached (fs.inotify.max_user_watches = \(limit)); raise it, for example with `sysctl -w fs.inotify.max_user_watches=\(suggestion(limit, floor: 524_288))`"
        case (EMFILE, .instance):
            let limit = limitText("/proc/sys/fs/inotify/max_user_instances")
            return "\(system): the inotify instance limit of this user is reached (fs.inotify.max_user_instances = \(limit)), or this process is out of descriptors (ulimit -n); raise the first, for example with `sysctl -w fs.inotify.max_user_instances=\(suggestion(limit, floor: 1_024))`"
        case (EMFILE, _):
            return "\(system): this process is out of file descriptors (RLIMIT_NOFILE, ulimit -n); each watched object holds one"
        case (ENFILE, _):
            return "\(system): the system-wide limit on open files is reached (fs.file-max)"
        case (ENOMEM, .watch), (ENOMEM, .instance):
            return "\(system): the kernel could not allocate the inotify watch"
        case (EACCES, .watch):
            return "\(system): inotify needs read permission on the object"
        case (EACCES, _):
            return "\(system): every directory of the path must be searchable"
        case (ENOENT, .watch), (ENOENT, .descriptor):
            return "\(system): Lull reaches open descriptors through /proc/self/fd; is /proc mounted?"
        case (EBADF, .descriptor):
            return "\(system): the descriptor is not open"
        default:
            return system
        }
    }

    private static func limitText(_ path: String) -> String {
        let value = lull_read_proc_integer(path)
        return value >= 0 ? "\(value)" : "unknown"
    }

    private static func suggestion(_ limit: String, floor: Int) -> Int {
        guard let current = Int(limit) else { return floor }
        return max(floor, current * 2)
    }
}
