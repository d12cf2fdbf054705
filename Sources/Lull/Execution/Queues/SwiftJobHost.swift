/// An executor of Lull's that is not a queue (the process-wide default and main executors)
/// and runs the Swift jobs it put on a queue as itself: the job runs with the executor's
/// own reference as its current executor, so that the runtime sees the executor it expects
/// and hops no further.
///
/// A class rather than a protocol, as `PostedWork`: a `Job` then carries one plain
/// reference beside the `UnownedJob`, two words like a block.
///
/// `@unchecked Sendable`: it has no stored properties; subclasses state their own case.
class SwiftJobHost: @unchecked Sendable {
    /// On a worker (or the main queue's thread), at the job's QoS, inside its queue's drain.
    func runSwiftJob(_ job: UnownedJob) {
        lullFatal("SwiftJobHost.runSwiftJob(_:) must be overridden")
    }
}
