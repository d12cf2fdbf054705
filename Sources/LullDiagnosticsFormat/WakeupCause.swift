/// Why the reactor's poll returned.
public enum WakeupCause: UInt8, Sendable {
    /// The reactor's next-timer expired.
    case timer = 0
    /// A descriptor (socket, pipe, signal, inotify, process...) became ready.
    case descriptor = 1
    /// Another thread changed the reactor's events while it slept: libevent's notification.
    case crossThread = 2
    /// The poll returned without any of the above (libevent's own events).
    case other = 3
}
