/// A handler set on a source: a block with its QoS and flags, or a work item.
///
/// Source handlers are detached by default: they run with the empty execution context,
/// unless the block was set with `.assignCurrentContext` (the context current when it was
/// set) or is a work item that captured one.
struct SourceHandler: Sendable {
    enum Body: Sendable {
        case block(@Sendable () -> Void)
        case item(WorkItem)
    }

    let body: Body
    /// The QoS the handler brings to its queue (never the setting thread's).
    let propagatedQoS: QoS
    let context: ExecutionContext

    init(qos: QoS, flags: WorkItemFlags, block: @escaping @Sendable () -> Void) {
        body = .block(block)
        propagatedQoS = QoSResolution.propagated(itemQoS: qos, flags: flags, submitter: nil)
        context = flags.contains(.assignCurrentContext) ? ExecutionContext.current : .empty
    }

    init(item: WorkItem) {
        body = .item(item)
        propagatedQoS = QoSResolution.propagated(itemQoS: item.requestedQoS, flags: item.flags, submitter: nil)
        context = item.assignedContext ?? .empty
    }

    /// Runs the handler on the calling thread, which already runs at the handler's QoS.
    func run(thread: ThreadState) {
        switch body {
        case .block(let block):
            let saved = thread.context
            thread.context = context
            block()
            thread.context = saved
        case .item(let item):
            item.run(context: context, qos: thread.effectiveQoS, thread: thread)
        }
    }
}
