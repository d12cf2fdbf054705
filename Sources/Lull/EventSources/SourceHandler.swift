/// A handler set on a source: a block with its QoS and flags, or a work item.
///
/// Source handlers are detached by default: they run with the empty execution context,
/// unless the block was set with `.assignCurrentContext` (the context current when it was
/// set) or is a work item that captured one.
///
/// Kept small (18 bytes: a closure and two bytes of QoS) because every source stores two
/// of them inline: a context assigned to a handler, which is rare, lives in a wrapping
/// closure instead of a field.
struct SourceHandler: Sendable {
    private let body: @Sendable () -> Void
    private let qosClass: QoS.QoSClass
    private let relativePriority: Int8

    init(qos: QoS, flags: WorkItemFlags, block: @escaping @Sendable () -> Void) {
        var requested = qos
        if flags.contains(.assignCurrentContext) {
            // As a work item created with the flag: the setter's context, and its QoS
            // unless the block has one.
            let context = ExecutionContext.current
            if qos.isUnspecified { requested = QoSResolution.inferred(from: ThreadState.current.ownQoS) }
            body = { ThreadState.current.withJobContext(context, block) }
        } else {
            body = block  // stored as given: no wrapper to allocate
        }
        let propagated = QoSResolution.propagated(itemQoS: requested, flags: flags, submitter: nil)
        qosClass = propagated.qosClass
        relativePriority = Int8(propagated.relativePriority)
    }

    /// The handler for an optional block (`Optional.map` would retain the block twice).
    static func wrapping(_ block: consuming (@Sendable () -> Void)?, qos: QoS, flags: WorkItemFlags) -> SourceHandler? {
        guard let block else { return nil }
        return SourceHandler(qos: qos, flags: flags, block: block)
    }

    init(item: WorkItem) {
        let propagated = QoSResolution.propagated(itemQoS: item.requestedQoS, flags: item.flags, submitter: nil)
        qosClass = propagated.qosClass
        relativePriority = Int8(propagated.relativePriority)
        // Wrapped so that the item completes (notify, wait) as such, in its own context.
        let context = item.assignedContext ?? .empty
        body = {
            let thread = ThreadState.current
            item.run(context: context, qos: thread.ownQoS, thread: thread)
        }
    }

    /// The QoS the handler brings to its queue (never the setting thread's).
    var propagatedQoS: QoS {
        QoS(qosClass: qosClass, relativePriority: Int(relativePriority))
    }

    /// Runs the handler on the calling thread, which already runs at the handler's QoS,
    /// detached (an assigned context is installed by the body itself).
    func run(thread: ThreadState) {
        thread.withJobContext(.empty, body)
    }
}
