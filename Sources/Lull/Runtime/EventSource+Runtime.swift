/// The factories of event sources: each makes its source on the process's runtime (its
/// reactor, descriptor table, signal hub, inotify hub), on `queue` or, for nil, the
/// default-QoS global queue.
extension EventSource {
    /// A source that fires when `fileDescriptor` has data to read (see ``ReadSource``).
    /// The descriptor stays the program's: close it only after the cancel handler ran.
    public static func makeReadSource(fileDescriptor: Int32, queue: WorkQueue? = nil) -> ReadSource {
        ReadSource(descriptor: fileDescriptor, queue: Runtime.shared.queue(queue), services: Runtime.shared.sources)
    }

    /// A source that fires when `fileDescriptor` can be written to (see ``WriteSource``).
    /// The descriptor stays the program's: close it only after the cancel handler ran.
    public static func makeWriteSource(fileDescriptor: Int32, queue: WorkQueue? = nil) -> WriteSource {
        WriteSource(descriptor: fileDescriptor, queue: Runtime.shared.queue(queue), services: Runtime.shared.sources)
    }

    /// A source whose `add(data:)` calls are summed into `data` (see ``UserDataAddSource``).
    public static func makeUserDataAddSource(queue: WorkQueue? = nil) -> UserDataAddSource {
        UserDataAddSource(queue: Runtime.shared.queue(queue))
    }

    /// A source whose `or(data:)` calls are OR-ed into `data` (see ``UserDataOrSource``).
    public static func makeUserDataOrSource(queue: WorkQueue? = nil) -> UserDataOrSource {
        UserDataOrSource(queue: Runtime.shared.queue(queue))
    }

    /// A source that keeps the last value given to `replace(data:)` (see ``UserDataReplaceSource``).
    public static func makeUserDataReplaceSource(queue: WorkQueue? = nil) -> UserDataReplaceSource {
        UserDataReplaceSource(queue: Runtime.shared.queue(queue))
    }

    /// A source that counts deliveries of `signal` to the process (see ``SignalSource`` for
    /// how the signal's disposition is kept).
    public static func makeSignalSource(signal: Int32, queue: WorkQueue? = nil) -> SignalSource {
        SignalSource(signal: signal, queue: Runtime.shared.queue(queue), services: Runtime.shared.sources)
    }

    /// A source for the process `identifier` (a pid): `.exit` is reported when it exits
    /// (see ``ProcessSource`` for the events Linux cannot report).
    public static func makeProcessSource(identifier: Int32, eventMask: ProcessEvent,
                                         queue: WorkQueue? = nil) -> ProcessSource {
        ProcessSource(pid: identifier, eventMask: eventMask, queue: Runtime.shared.queue(queue),
                      services: Runtime.shared.sources)
    }

    /// A timer source; `file` and `line` name it in wake-up diagnostics unless it gets a
    /// `label`.
    public static func makeTimerSource(flags: TimerFlags = [], queue: WorkQueue? = nil,
                                       file: StaticString = #fileID, line: UInt = #line) -> TimerSource {
        TimerSource(flags: flags, queue: Runtime.shared.queue(queue), site: TimerSite(file: file, line: line))
    }

    /// A source for the file or directory open as `fileDescriptor` (any open mode, O_PATH
    /// too). The descriptor must stay open until the cancel handler ran. A descriptor that
    /// is not open (or an object that cannot be watched) cancels the source at activation,
    /// with the reason in `registrationError`.
    public static func makeFileSystemObjectSource(fileDescriptor: Int32, eventMask: FileSystemEvent,
                                                  queue: WorkQueue? = nil) -> FileSystemObjectSource {
        FileSystemObjectSource(descriptor: fileDescriptor, eventMask: eventMask, queue: Runtime.shared.queue(queue),
                               hub: Runtime.shared.inotify)
    }

    /// A source for the file or directory at `path` (symbolic links followed), opened and
    /// watched at once: throws an `EventSourceError` naming the path and the system's
    /// reason when it cannot be (no such file, no permission, the inotify limits — with the
    /// sysctl to raise).
    public static func makeFileSystemObjectSource(path: String, eventMask: FileSystemEvent,
                                                  queue: WorkQueue? = nil) throws -> FileSystemObjectSource {
        try FileSystemObjectSource(path: path, eventMask: eventMask, queue: Runtime.shared.queue(queue),
                                   hub: Runtime.shared.inotify)
    }
}
