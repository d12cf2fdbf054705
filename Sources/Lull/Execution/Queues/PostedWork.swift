/// Work that a part above the queues posts as a job and performs itself: an event source's
/// next step, the drain of the cancel steps posted for a global queue. The job holds the
/// object, so posting one allocates nothing, and the queues need not know what it is.
protocol PostedWork: AnyObject, Sendable {
    /// On a worker, at the job's QoS and in its context.
    func performPostedWork()
}
