/// The queues at the bottom of every hierarchy of one runtime: a concurrent global queue
/// per QoS class, whose jobs go to the worker pool, and the main queue, a serial queue whose
/// root is drained by the thread inside `WorkQueue.runMain()`.
final class RootQueues: Sendable {
    private let globals: [WorkQueue]
    let mainThreadRoot: WorkQueue
    let main: WorkQueue
    let mainThread: MainThreadRunner

    init(services: QueueServices, mainThread: MainThreadRunner) {
        globals = QoS.QoSClass.schedulable.map { qosClass in
            WorkQueue(rootLabel: "lull.global.\(qosClass.name)", kind: .root(qosClass), qos: QoS(qosClass),
                      executor: services.pool, services: services)
        }
        self.mainThread = mainThread
        mainThreadRoot = WorkQueue(rootLabel: "lull.main-thread", kind: .mainThread, qos: .userInteractive,
                                   executor: mainThread, services: services)
        main = WorkQueue(label: "lull.main", qos: .unspecified, attributes: [], resolvedTarget: mainThreadRoot)
    }

    /// The concurrent global queue of a QoS class (`unspecified` gives the default one).
    func global(_ qosClass: QoS.QoSClass) -> WorkQueue {
        globals[qosClass.poolIndex]
    }

    /// A plain queue targets the default global queue; a queue with a QoS targets the
    /// global queue of its class.
    func defaultTarget(for qos: QoS) -> WorkQueue {
        global(qos.qosClass)
    }
}
