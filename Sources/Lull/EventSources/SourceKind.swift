/// The table of operations that defines a kind of source, as libdispatch's
/// `dispatch_source_type_s` does: how it registers with what it watches, what `data` is
/// when the handler runs, and what it checks after the handler returns. `SourceCore` calls
/// it at fixed points of its one lifecycle (docs/SourceLifecycle.md); no kind changes that
/// path. The conforming object is the kind's per-source state (a descriptor's mux, a
/// signal number, an inotify lease; a timer's core is its own).
protocol SourceKind: AnyObject, Sendable {
    /// `register` and `unregister` run while the core's lock is held, in the registering
    /// and unregistering phases entered and left under that same lock: for a kind that
    /// only puts an entry of its own somewhere and takes it out (a timer). Otherwise
    /// (the default) they run outside the lock, on the thread that moved the phase.
    var registersUnderLock: Bool { get }
    /// Starts watching. Returns why it could not, or nil; a kind that fails leaves nothing
    /// registered.
    func register(_ core: SourceCore) -> (any Error)?
    /// Stops watching, once after every `register` that succeeded: when this returns,
    /// nothing merges into the source any more.
    func unregister(_ core: SourceCore)
    /// The value of `data` for a delivery whose merged value is `merged`; nil when there is
    /// nothing to deliver after all (a readiness that went away).
    func dataForDelivery(_ core: SourceCore, merged: UInt) -> UInt?
    /// `data` for a delivery whose `dataForDelivery` returned `SourceCore.dataOnRequest`:
    /// computed when the handler first reads it, on the handler's thread.
    func dataRequested(_ core: SourceCore) -> UInt
    /// After the event handler returned: re-signal if the condition still holds.
    func handlerReturned(_ core: SourceCore)
    /// After the event handler returned, on a thread that may defer the level check (see
    /// `DeferredLevelChecks`): does the part of `handlerReturned` that needs no system call
    /// and returns true when the rest waits for `completeLevelCheck`; false: the caller
    /// calls `handlerReturned` now.
    func deferLevelCheck(_ core: SourceCore) -> Bool
    /// The descriptor and events a deferred level check polls.
    var deferredCheckPoll: (descriptor: Int32, events: Int16) { get }
    /// The rest of a deferred level check, with what the poll reported (nil: poll alone).
    func completeLevelCheck(_ core: SourceCore, revents: Int16?)
    /// The source's `events` loop was claimed: its deliveries' values are taken by the loop
    /// and its consumer reads outside the handler (a kind that relies on the handler being
    /// the reader stops relying on it).
    func eventsIterationClaimed()
    /// After the cancel handler ran: release what the kind owns (descriptors it opened).
    func finished(_ core: SourceCore)
}

extension SourceKind {
    var registersUnderLock: Bool { false }
    func register(_ core: SourceCore) -> (any Error)? { nil }
    func unregister(_ core: SourceCore) {}
    func dataForDelivery(_ core: SourceCore, merged: UInt) -> UInt? { merged }
    func dataRequested(_ core: SourceCore) -> UInt { 0 }
    func handlerReturned(_ core: SourceCore) {}
    func deferLevelCheck(_ core: SourceCore) -> Bool { false }
    var deferredCheckPoll: (descriptor: Int32, events: Int16) { (-1, 0) }
    func completeLevelCheck(_ core: SourceCore, revents: Int16?) {}
    func eventsIterationClaimed() {}
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
    /// Only "something happened"; the kind computes `data` at delivery (read, write). The
    /// value merged is the reactor iteration that reported the readiness (1: a readiness
    /// nobody checked); the pending value is the latest one merged.
    case readiness
}
