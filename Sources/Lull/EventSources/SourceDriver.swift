/// The part of a source that depends on what it watches: how it registers, what `data` is
/// when the handler runs, and what it checks after the handler returns.
protocol SourceDriver: AnyObject, Sendable {
    /// Starts watching. Returns why it could not, or nil.
    func register(_ core: SourceCore) -> (any Error)?
    /// Stops watching: when this returns, nothing merges into the source any more.
    func unregister(_ core: SourceCore)
    /// The value of `data` for a delivery whose merged value is `merged`; nil when there is
    /// nothing to deliver after all (a readiness that went away).
    func dataForDelivery(_ core: SourceCore, merged: UInt) -> UInt?
    /// After the event handler returned: re-signal if the condition still holds.
    func handlerReturned(_ core: SourceCore)
    /// After the cancel handler ran: release what the driver owns (descriptors it opened).
    func finished(_ core: SourceCore)
}

extension SourceDriver {
    func register(_ core: SourceCore) -> (any Error)? { nil }
    func unregister(_ core: SourceCore) {}
    func dataForDelivery(_ core: SourceCore, merged: UInt) -> UInt? { merged }
    func handlerReturned(_ core: SourceCore) {}
    func finished(_ core: SourceCore) {}
}

/// How events merge into `data` while the handler is busy or the source suspended.
enum SourceMerge: Sendable {
    /// Sum (user data add, timer fires, signal deliveries).
    case add
    /// Bitwise OR (user data or, process and file-system events).
    case or
    /// Last value wins (user data replace).
    case replace
    /// Only "something happened"; the driver computes `data` at delivery (read, write).
    case readiness
}
