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

    /// Sets (or with nil removes) the block run on the target queue each time the source
    /// fires; `data` and the typed accessors are valid inside it. `qos` and `flags` apply to
    /// each run as to a submitted block.
    public func setEventHandler(qos: QoS = .unspecified, flags: WorkItemFlags = [], handler: (@Sendable () -> Void)?) {
        core.setHandler(.event, SourceHandler.wrapping(handler, qos: qos, flags: flags))
    }

    /// Sets the work item performed each time the source fires (its QoS and flags apply).
    public func setEventHandler(handler: WorkItem) {
        core.setHandler(.event, SourceHandler(item: handler))
    }

    /// Sets (or with nil removes) the block run once, last, after `cancel()`: after it, no
    /// event handler runs and what the source watched (a descriptor) may be closed.
    public func setCancelHandler(qos: QoS = .unspecified, flags: WorkItemFlags = [], handler: (@Sendable () -> Void)?) {
        core.setHandler(.cancel, SourceHandler.wrapping(handler, qos: qos, flags: flags))
    }

    /// Sets the work item performed once, last, after `cancel()`.
    public func setCancelHandler(handler: WorkItem) {
        core.setHandler(.cancel, SourceHandler(item: handler))
    }

    /// Sets (or with nil removes) the block run once when the source is registered at
    /// activation, before any event handler.
    public func setRegistrationHandler(qos: QoS = .unspecified, flags: WorkItemFlags = [],
                                       handler: (@Sendable () -> Void)?) {
        core.setHandler(.registration, SourceHandler.wrapping(handler, qos: qos, flags: flags))
    }

    /// Sets the work item performed once at registration, before any event handler.
    public func setRegistrationHandler(handler: WorkItem) {
        core.setHandler(.registration, SourceHandler(item: handler))
    }

    /// Starts monitoring (once); the registration handler runs first.
    public func activate() { core.activate() }
    /// Stops delivering events until `resume()`; events keep merging meanwhile.
    public func suspend() { core.suspend() }
    /// Undoes a `suspend()`; on a never-activated source, activates it.
    public func resume() { core.resume() }
    /// Stops the source asynchronously and without preemption: a running event handler
    /// finishes, and no event handler starts once the cancellation is processed. The cancel
    /// handler runs exactly once, last, on the target queue, after the descriptor has left
    /// the reactor (closing it there is safe). A suspended source runs its cancel handler
    /// only once it is resumed.
    public func cancel() { core.cancel() }

    /// Whether `cancel()` was called (or the source was cancelled because it could not be
    /// registered; see `registrationError`).
    public var isCancelled: Bool { core.isCancelled }
    /// What the source watches: a descriptor, a signal number, a process id (0 for user data).
    public var handle: UInt { core.handle }
    /// The events the source was created to watch.
    public var mask: UInt { core.mask }
    /// Inside the event handler: the merged value for this invocation.
    public var data: UInt { core.data }
    /// Why the source could not be registered (an ``EventSourceError``: a closed descriptor,
    /// an inotify limit...), or nil. Such a source is cancelled: its cancel handler runs.
    public var registrationError: (any Error)? { core.registrationError }
}
