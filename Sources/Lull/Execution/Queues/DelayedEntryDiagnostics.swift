extension DelayedEntry: DiagnosedTimer {
    /// An `asyncAfter` block is named by its call site, on its queue at the QoS it runs at;
    /// all blocks of one call site are one timer.
    func diagnosticsOrigin() -> (TimerFireOrigin, interval: UInt64?) {
        let qos = job.qos.qosClass != .unspecified ? job.qos.qosClass : queue.qos.qosClass
        let origin = TimerFireOrigin(identity: self.origin?.site.description ?? "asyncAfter (scheduled before recording)",
                                     queue: queue.label, qos: qos == .unspecified ? .default : qos, instance: 0)
        return (origin, nil)
    }
}
