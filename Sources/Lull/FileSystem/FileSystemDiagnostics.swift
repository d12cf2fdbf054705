import Synchronization

/// What the file-system machinery counts, for tests and for the runtime's diagnostics.
/// Process-wide (every `InotifyHub` adds to the same counters).
enum FileSystemDiagnostics {
    private static let overflows = Atomic<Int>(0)
    private static let events = Atomic<Int>(0)
    private static let reads = Atomic<Int>(0)
    private static let continuations = Atomic<Int>(0)

    /// How many times an inotify queue overflowed (IN_Q_OVERFLOW) and events were lost.
    static var overflowCount: Int { overflows.load(ordering: .relaxed) }
    /// Events read from inotify descriptors.
    static var eventsRead: Int { events.load(ordering: .relaxed) }
    /// read(2) calls that returned events.
    static var readCalls: Int { reads.load(ordering: .relaxed) }
    /// Drains that stopped at their budget and went on from a queued job (storms).
    static var drainContinuations: Int { continuations.load(ordering: .relaxed) }

    static func recordOverflow() { overflows.add(1, ordering: .relaxed) }

    static func recordRead(events count: Int) {
        reads.add(1, ordering: .relaxed)
        events.add(count, ordering: .relaxed)
    }

    static func recordContinuation() { continuations.add(1, ordering: .relaxed) }
}
