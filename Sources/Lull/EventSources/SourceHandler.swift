/// A handler set on a source: a block with its QoS and flags, or a work item.
///
/// Source handlers are detached by default: they run with the empty execution context,
/// unless the block was set with `.assignCurrentContext` (the context current when it was
/// set) or is a work item that captured one.
///
/// Kept small (32 bytes: a closure, a reference to an assigned context — boxed, as it is
/// rare — and two bytes of QoS) because every source stores three of them.
struct SourceHandler: Sendable {
    /// The block to run, stored as given (no wrapper to allocate); a work item is wrapped so
    /// that it completes (notify, wait) as such.
    private let body: @Sendable () -> Void
    private let assigned: AssignedContext?
    private let qosClass: QoS.QoSClass
    private let relativePriority: Int8

    init(qos: QoS, flags: WorkItemFlags, block: @escaping @Sendable () -> Void) {
        var requested = qos
        if flags.contains(.assignCurrentContext) {
            // As a work item created with the flag: the setter's context, and its QoS
            // unless the block has one.
            assigned = AssignedContext(ExecutionContext.current)
            if qos.isUnspecified { requested = QoSResolution.inferred(from: ThreadState.current.ownQoS) }
        } else {
            assigned = nil
        }
        let propagated = QoSResolution.propagated(itemQoS: requested, flags: flags, submitter: nil)
        qosClass = propagated.qosClass
        relativePriority = Int8(propagated.relativePriority)
        body = block
    }

    init(item: WorkItem) {
        let propagated = QoSResolution.propagated(itemQoS: item.requestedQoS, flags: item.flags, submitter: nil)
        qosClass = propagated.qosClass
        relativePriority = Int8(propagated.relativePriority)
        let context = item.assignedContext ?? .empty
        assigned = nil
        body = {
            let thread = ThreadState.current
            item.run(context: context, qos: thread.ownQoS, thread: thread)
        }
    }

    /// The QoS the handler brings to its queue (never the setting thread's).
    var propagatedQoS: QoS {
        QoS(qosClass: qosClass, relativePriority: Int(relativePriority))
    }

    /// Runs the handler on the calling thread, which already runs at the handler's QoS.
    func run(thread: ThreadState) {
        thread.withJobContext(assigned?.context ?? .empty, body)
    }
}

/// A context captured with `.assignCurrentContext` for a handler block.
final class AssignedContext: Sendable {
    let context: ExecutionContext

    init(_ context: ExecutionContext) {
        self.context = context
    }
}
