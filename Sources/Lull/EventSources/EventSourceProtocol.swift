/// An event source: watches one low-level thing and runs its event handler on its target
/// queue when it fires. Created inactive; `activate()` (or a first `resume()`) starts it.
public protocol EventSourceProtocol: AnyObject, Sendable {
    /// Sets (or with nil removes) the block run on the target queue when the source fires.
    func setEventHandler(qos: QoS, flags: WorkItemFlags, handler: (@Sendable () -> Void)?)
    /// Sets the work item performed when the source fires.
    func setEventHandler(handler: WorkItem)
    /// Sets (or with nil removes) the block run once, last, after `cancel()`.
    func setCancelHandler(qos: QoS, flags: WorkItemFlags, handler: (@Sendable () -> Void)?)
    /// Sets the work item performed once, last, after `cancel()`.
    func setCancelHandler(handler: WorkItem)
    /// Sets (or with nil removes) the block run once at registration, before any event.
    func setRegistrationHandler(qos: QoS, flags: WorkItemFlags, handler: (@Sendable () -> Void)?)
    /// Sets the work item performed once at registration, before any event.
    func setRegistrationHandler(handler: WorkItem)
    /// Starts the source (once): registration, then events.
    func activate()
    /// Stops running the event handler until `resume()`; events keep merging meanwhile.
    func suspend()
    /// Undoes a `suspend()`; on a never-activated source, activates it.
    func resume()
    /// Stops the source asynchronously and without preemption: a running event handler
    /// finishes, and no event handler starts once the cancellation is processed. The cancel
    /// handler runs exactly once, last, on the target queue, after the descriptor has left
    /// the reactor (closing it there is safe). A suspended source runs its cancel handler
    /// only once it is resumed.
    func cancel()
    /// Whether the source was cancelled.
    var isCancelled: Bool { get }
    /// What the source watches: a descriptor, a signal number, a process id (0 for user data).
    var handle: UInt { get }
    /// The events the source was created to watch (0 when the kind has none).
    var mask: UInt { get }
    /// Inside the event handler: the value merged since the handler last ran.
    var data: UInt { get }
    /// Why the source could not be registered, or nil.
    var registrationError: (any Error)? { get }
}

extension EventSourceProtocol {
    /// Sets the event handler with no QoS and no flags of its own.
    public func setEventHandler(handler: (@Sendable () -> Void)?) {
        setEventHandler(qos: .unspecified, flags: [], handler: handler)
    }

    /// Sets the cancel handler with no QoS and no flags of its own.
    public func setCancelHandler(handler: (@Sendable () -> Void)?) {
        setCancelHandler(qos: .unspecified, flags: [], handler: handler)
    }

    /// Sets the registration handler with no QoS and no flags of its own.
    public func setRegistrationHandler(handler: (@Sendable () -> Void)?) {
        setRegistrationHandler(qos: .unspecified, flags: [], handler: handler)
    }
}
