/// What every source type shares: handlers, lifecycle and the values the protocol reads.
/// Not meant to be used directly; the concrete sources come from ``EventSource``.
///
/// `@unchecked Sendable` because the class is not final (each source kind is a final
/// subclass); its only stored property is a `let` of a `Sendable` type, and subclasses add
/// only `let`s of `Sendable` types.
public class EventSourceBase: @unchecked Sendable {
    let core: SourceCore

    init(core: SourceCore) {
        self.core = core
    }

    deinit {
        core.releasedByProgram()
    }

    public func setEventHandler(qos: QoS = .unspecified, flags: WorkItemFlags = [], handler: (@Sendable () -> Void)?) {
        core.setHandler(.event, handler.map { SourceHandler(qos: qos, flags: flags, block: $0) })
    }

    public func setEventHandler(handler: WorkItem) {
        core.setHandler(.event, SourceHandler(item: handler))
    }

    public func setCancelHandler(qos: QoS = .unspecified, flags: WorkItemFlags = [], handler: (@Sendable () -> Void)?) {
        core.setHandler(.cancel, handler.map { SourceHandler(qos: qos, flags: flags, block: $0) })
    }

    public func setCancelHandler(handler: WorkItem) {
        core.setHandler(.cancel, SourceHandler(item: handler))
    }

    public func setRegistrationHandler(qos: QoS = .unspecified, flags: WorkItemFlags = [],
                                       handler: (@Sendable () -> Void)?) {
        core.setHandler(.registration, handler.map { SourceHandler(qos: qos, flags: flags, block: $0) })
    }

    public func setRegistrationHandler(handler: WorkItem) {
        core.setHandler(.registration, SourceHandler(item: handler))
    }

    /// Starts monitoring (once); the registration handler runs first.
    public func activate() { core.activate() }
    /// Stops delivering events until `resume()`; events keep merging meanwhile.
    public func suspend() { core.suspend() }
    /// Undoes a `suspend()`; on a never-activated source, activates it.
    public func resume() { core.resume() }
    /// Cancels asynchronously; the cancel handler runs once, last.
    public func cancel() { core.cancel() }

    public var isCancelled: Bool { core.isCancelled }
    /// What the source watches: a descriptor, a signal number, a process id (0 for user data).
    public var handle: UInt { core.handle }
    /// The events the source was created to watch.
    public var mask: UInt { core.mask }
    /// Inside the event handler: the merged value for this invocation.
    public var data: UInt { core.data }
    public var registrationError: (any Error)? { core.registrationError }
}
