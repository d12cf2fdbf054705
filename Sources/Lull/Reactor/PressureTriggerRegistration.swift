extension Reactor {
    /// Registers a descriptor that carries a pressure-stall (PSI) trigger: `handler` hears of
    /// each firing of the trigger, and once more right after registration.
    ///
    /// The kernel signals a PSI trigger with EPOLLPRI, which libevent 2.1 cannot ask for:
    /// its epoll back end subscribes EV_READ as EPOLLIN, EV_WRITE as EPOLLOUT and EV_CLOSED
    /// as EPOLLRDHUP, and drops EPOLLPRI from what epoll returns. What makes the trigger
    /// visible anyway is how a PSI file polls: it reports EPOLLIN always (with EPOLLPRI and
    /// consuming the event when the trigger fired), and wakes its waiters only when the
    /// trigger fires. An edge-triggered EV_READ registration (`register`'s kind) is reported
    /// once when it is added (the file is readable) and then once per wake-up, that is once
    /// per firing. So a report means "the trigger may have fired": the holder checks the
    /// stall it reads from the file (`MemoryPressureReading.decide`), which tells the first
    /// report from a firing. A second epoll instance watching EPOLLPRI, itself watched for
    /// readability, would not help: probing the inner instance's readiness polls the PSI
    /// file and consumes the event before the inner `epoll_wait` sees it.
    func registerPressureTrigger(descriptor: Int32, handler: any ReactorEventHandler) throws(ReactorError)
        -> DescriptorRegistration {
        try register(descriptor: descriptor, forWriting: false, handler: handler)
    }
}
