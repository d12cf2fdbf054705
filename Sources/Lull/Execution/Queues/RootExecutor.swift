/// Where a root queue hands its jobs: the worker pool for the global queues, the main
/// thread's runner for the main queue's root.
protocol RootExecutor: AnyObject, Sendable {
    /// Queues a job already resolved to its QoS.
    func submit(_ job: consuming Job)
}

extension WorkerPool: RootExecutor {}
extension MainThreadRunner: RootExecutor {}
