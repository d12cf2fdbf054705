/// An event source: watches one low-level thing and runs its event handler on its target
/// queue when it fires. Created inactive; `activate()` (or a first `resume()`) starts it.
public protocol EventSourceProtocol: AnyObject, Sendable {
    func setEventHandler(qos: QoS, flags: WorkItemFlags, handler: (@Sendable () -> Void)?)
    func setEventHandler(handler: WorkItem)
    func setCancelHandler(qos: QoS, flags: WorkItemFlags, handler: (@Sendable () -> Void)?)
    func setCancelHandler(handler: WorkItem)
    func setRegistrationHandler(qos: QoS, flags: WorkItemFlags, handler: (@Sendable () -> Void)?)
    func setRegistrationHandler(handler: WorkItem)
    func activate()
    func suspend()
    func resume()
    func cancel()
    var isCancelled: Bool { get }
    var handle: UInt { get }
    var mask: UInt { get }
    var data: UInt { get }
    /// Why the source could not be registered, or nil.
    var registrationError: (any Error)? { get }
}

extension EventSourceProtocol {
    public func setEventHandler(handler: (@Sendable () -> Void)?) {
        setEventHandler(qos: .unspecified, flags: [], handler: handler)
    }

    public func setCancelHandler(handler: (@Sendable () -> Void)?) {
        setCancelHandler(qos: .unspecified, flags: [], handler: handler)
    }

    public func setRegistrationHandler(handler: (@Sendable () -> Void)?) {
        setRegistrationHandler(qos: .unspecified, flags: [], handler: handler)
    }
}
