/// Flags that change how a block is run: its QoS, its execution context, barrier semantics.
public struct WorkItemFlags: OptionSet, Sendable {
    /// The bits of the work item flags.
    public let rawValue: UInt32
    /// The work item flags with these bits.
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// On a concurrent queue: wait for running blocks, then run alone.
    public static let barrier = WorkItemFlags(rawValue: 1 << 0)
    /// Run with the empty execution context and no QoS inferred from the submitter.
    public static let detached = WorkItemFlags(rawValue: 1 << 1)
    /// Capture the context and QoS current at creation (for a `WorkItem`) and run with them.
    public static let assignCurrentContext = WorkItemFlags(rawValue: 1 << 2)
    /// Ignore the item's own QoS.
    public static let noQoS = WorkItemFlags(rawValue: 1 << 3)
    /// Prefer the queue's (or the submitting thread's) QoS over the item's.
    public static let inheritQoS = WorkItemFlags(rawValue: 1 << 4)
    /// Let the item's QoS win over the queue's when it is higher.
    public static let enforceQoS = WorkItemFlags(rawValue: 1 << 5)
}
