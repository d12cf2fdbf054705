/// Sums what `add(data:)` merges; `data` is the sum since the handler last ran.
public final class UserDataAddSource: EventSourceBase, EventSourceProtocol, @unchecked Sendable {  // Sendable: see EventSourceBase
    init(queue: WorkQueue) {
        super.init(core: DrivenSourceCore(kind: UserDataAddSource.self, target: queue, merge: .add,
                                          handle: 0, mask: 0, driver: UserDataDriver()))
    }

    /// Adds `data` (0 does not fire). Lock-free; no system call when already pending.
    public func add(data: UInt) { core.merge(data) }
}

/// ORs what `or(data:)` merges; `data` is the OR since the handler last ran.
public final class UserDataOrSource: EventSourceBase, EventSourceProtocol, @unchecked Sendable {  // Sendable: see EventSourceBase
    init(queue: WorkQueue) {
        super.init(core: DrivenSourceCore(kind: UserDataOrSource.self, target: queue, merge: .or,
                                          handle: 0, mask: 0, driver: UserDataDriver()))
    }

    /// ORs `data` in (0 does not fire).
    public func or(data: UInt) { core.merge(data) }
}

/// Keeps the last value `replace(data:)` merged; `replace(data: 0)` clears what is pending.
public final class UserDataReplaceSource: EventSourceBase, EventSourceProtocol, @unchecked Sendable {  // Sendable: see EventSourceBase
    init(queue: WorkQueue) {
        super.init(core: DrivenSourceCore(kind: UserDataReplaceSource.self, target: queue, merge: .replace,
                                          handle: 0, mask: 0, driver: UserDataDriver()))
    }

    /// Replaces the pending value (0 clears it and does not fire).
    public func replace(data: UInt) { core.merge(data) }
}

/// User-data sources register nothing: merging is all there is.
final class UserDataDriver: SourceKind {}
