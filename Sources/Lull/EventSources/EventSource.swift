/// Makes event sources. Every source starts inactive: set its handlers, then `activate()`.
/// `queue: nil` means the default-QoS global queue; every handler runs on `queue`.
public enum EventSource {
    public static func makeReadSource(fileDescriptor: Int32, queue: WorkQueue? = nil) -> ReadSource {
        ReadSource(descriptor: fileDescriptor, queue: queue)
    }

    public static func makeWriteSource(fileDescriptor: Int32, queue: WorkQueue? = nil) -> WriteSource {
        WriteSource(descriptor: fileDescriptor, queue: queue)
    }

    public static func makeUserDataAddSource(queue: WorkQueue? = nil) -> UserDataAddSource {
        UserDataAddSource(queue: queue)
    }

    public static func makeUserDataOrSource(queue: WorkQueue? = nil) -> UserDataOrSource {
        UserDataOrSource(queue: queue)
    }

    public static func makeUserDataReplaceSource(queue: WorkQueue? = nil) -> UserDataReplaceSource {
        UserDataReplaceSource(queue: queue)
    }

    public static func makeSignalSource(signal: Int32, queue: WorkQueue? = nil) -> SignalSource {
        SignalSource(signal: signal, queue: queue)
    }

    public static func makeProcessSource(identifier: Int32, eventMask: ProcessEvent,
                                         queue: WorkQueue? = nil) -> ProcessSource {
        ProcessSource(pid: identifier, eventMask: eventMask, queue: queue)
    }
}
