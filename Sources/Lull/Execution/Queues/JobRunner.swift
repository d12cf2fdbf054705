/// Runs one job on the calling thread with the context and QoS it resolved to.
enum JobRunner {
    /// - Parameters:
    ///   - floor: the QoS the job's queue imposes (unspecified for a global queue, whose
    ///     jobs were resolved when submitted).
    ///   - drainQoS: the least QoS the drain running the job runs it at, nil on a global
    ///     queue: a serial queue raised because a more important block waits behind this one
    ///     (asynchronous inversion), or the level of the drain of a parent queue. Blocks
    ///     never run below it: that is how an override shows in `QoS.current`.
    ///
    /// The job is consumed (each caller hands over a job it took from a queue): its work
    /// moves out of it to run.
    static func run(_ job: consuming Job, floor: QoS, drainQoS: QoS?, thread: ThreadState) {
        guard let global = job.globalClass else {
            runOnQueue(job, floor: floor, drainQoS: drainQoS, thread: thread)
            return
        }
        let outer = thread.runningGlobal
        thread.runningGlobal = global
        runOnQueue(job, floor: floor, drainQoS: drainQoS, thread: thread)
        thread.runningGlobal = outer
    }

    /// Runs the job, forwarding a block a concurrent queue let through to that queue.
    private static func runOnQueue(_ job: consuming Job, floor: QoS, drainQoS: QoS?, thread: ThreadState) {
        if let owner = job.owner {
            owner.runForwarded(job, thread: thread)
            return
        }
        runIgnoringOwner(job, floor: floor, drainQoS: drainQoS, thread: thread)
    }

    /// Runs the job itself (for a forwarded block, once its queue has accepted it).
    static func runIgnoringOwner(_ job: consuming Job, floor: QoS, drainQoS: QoS?, thread: ThreadState) {
        if let checks = thread.deferredChecks, checks.mayHoldChecks {
            switch job.deferredChecksRule {
            case .keep: break
            case .keepAndWatch: thread.workerPool?.watchDeferredChecks()
            case .complete: checks.completeAll()
            }
        }
        switch job.takeWork() {
        case .block(let block):
            let qos = runQoS(job, floor: floor, drainQoS: drainQoS)
            let cpu = Diagnostics.cpuClock()
            thread.withJobContext(job.context) {
                thread.withQoS(qos, block)
            }
            Diagnostics.chargeCPU(since: cpu, to: qos)
        case .posted(let work):
            let qos = runQoS(job, floor: floor, drainQoS: drainQoS)
            let cpu = Diagnostics.cpuClock()
            thread.withJobContext(job.context) {
                thread.withQoS(qos) { work.performPostedWork() }
            }
            Diagnostics.chargeCPU(since: cpu, to: qos)
        case .swiftJob(let swiftJob, let queue):
            let qos = runQoS(job, floor: floor, drainQoS: drainQoS)
            let cpu = Diagnostics.cpuClock()
            thread.withJobContext(job.context) {
                thread.withQoS(qos) { queue.runSwiftJob(swiftJob) }
            }
            Diagnostics.chargeCPU(since: cpu, to: qos)
        case .preferringTaskJob(let swiftJob, let queue):
            let qos = runQoS(job, floor: floor, drainQoS: drainQoS)
            let cpu = Diagnostics.cpuClock()
            thread.withJobContext(job.context) {
                thread.withQoS(qos) { queue.runPreferringTaskJob(swiftJob) }
            }
            Diagnostics.chargeCPU(since: cpu, to: qos)
        case .hostedSwiftJob(let swiftJob, let host):
            let qos = runQoS(job, floor: floor, drainQoS: drainQoS)
            let cpu = Diagnostics.cpuClock()
            thread.withJobContext(job.context) {
                thread.withQoS(qos) { host.runSwiftJob(swiftJob) }
            }
            Diagnostics.chargeCPU(since: cpu, to: qos)
        case .item(let item):
            let qos = runQoS(job, floor: floor, drainQoS: drainQoS)
            let cpu = Diagnostics.cpuClock()
            item.run(context: job.context, qos: qos, thread: thread)
            Diagnostics.chargeCPU(since: cpu, to: qos)
        case .drain(let queue):
            // A child queue's blocks run at least at the level this queue runs its drain at.
            thread.withQoS(runQoS(job, floor: floor, drainQoS: drainQoS)) { queue.drain() }
        case .syncWaiter(let waiter):
            // Only reachable on a global queue, which has no owner to hand over.
            waiter.grant(drainerWaits: false)
        case .taken:
            lullFatal("a job whose work was already taken was run")
        }
        job.group?.leave()
    }

    /// The block's own QoS, unless the drain runs at a higher class (an override).
    /// Inside its class a block keeps its relative priority.
    private static func runQoS(_ job: Job, floor: QoS, drainQoS: QoS?) -> QoS {
        let qos = QoSResolution.effective(job.qos, flags: job.flags, floor: floor)
        guard let drainQoS, drainQoS.qosClass > qos.qosClass else { return qos }
        return drainQoS
    }
}
