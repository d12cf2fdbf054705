/// Work that a part above the queues posts as a job and performs itself: an event source's
/// next step, the drain of the cancel steps posted for a global queue. The job holds the
/// object, so posting one allocates nothing, and the queues need not know what it is.
///
/// A class rather than a protocol: a job then carries one plain reference, which copies
/// with a retain like its other payloads (an existential would make every copy of a `Job`
/// go through its value witness).
///
/// `@unchecked Sendable`: it has no stored properties; subclasses state their own case.
class PostedWork: @unchecked Sendable {
    /// On a worker, at the job's QoS and in its context.
    func performPostedWork() {
        lullFatal("PostedWork.performPostedWork() must be overridden")
    }

    /// Whether the work posted is an event source's delivery (see
    /// `Job.deferredChecksRule`).
    var isSourceDelivery: Bool { false }
}
