/// Makes event sources. Every source starts inactive: set its handlers, then `activate()`.
/// `queue: nil` means the default-QoS global queue; every handler runs on `queue`.
public enum EventSource {
    /// A source that fires when `fileDescriptor` has data to read (see ``ReadSource``).
    /// The descriptor stays the program's: close it only after the cancel handler ran.
    public static func makeReadSource(fileDescriptor: Int32, queue: WorkQueue? = nil) -> ReadSource {
        ReadSource(descriptor: fileDescriptor, queue: queue)
    }

    /// A source that fires when `fileDescriptor` can be written to (see ``WriteSource``).
    /// The descriptor stays the program's: close it only after the cancel handler ran.
    public static func makeWriteSource(fileDescriptor: Int32, queue: WorkQueue? = nil) -> WriteSource {
        WriteSource(descriptor: fileDescriptor, queue: queue)
    }

    /// A source whose `add(data:)` calls are summed into `data` (see ``UserDataAddSource``).
    public static func makeUserDataAddSource(queue: WorkQueue? = nil) -> UserDataAddSource {
        UserDataAddSource(queue: queue)
    }

    /// A source whose `or(data:)` calls are OR-ed into `data` (see ``UserDataOrSource``).
    public static func makeUserDataOrSource(queue: WorkQueue? = nil) -> UserDataOrSource {
        UserDataOrSource(queue: queue)
    }

    /// A source that keeps the last value given to `replace(data:)` (see ``UserDataReplaceSource``).
    public static func makeUserDataReplaceSource(queue: WorkQueue? = nil) -> UserDataReplaceSource {
        UserDataReplaceSource(queue: queue)
    }

    /// A source that counts deliveries of `signal` to the process (see ``SignalSource`` for
    /// how the signal's disposition is kept).
    public static func makeSignalSource(signal: Int32, queue: WorkQueue? = nil) -> SignalSource {
        SignalSource(signal: signal, queue: queue)
    }

    /// A source for the process `identifier` (a pid): `.exit` is reported when it exits
    /// (see ``ProcessSource`` for the events Linux cannot report).
    public static func makeProcessSource(identifier: Int32, eventMask: ProcessEvent,
                                         queue: WorkQueue? = nil) -> ProcessSource {
        ProcessSource(pid: identifier, eventMask: eventMask, queue: queue)
    }
}
