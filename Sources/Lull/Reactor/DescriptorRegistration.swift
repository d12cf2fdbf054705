import CLibevent
import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Receives the reactor's events for one descriptor, on the polling thread. Implementations
/// must only merge state and return: no user code, no blocking.
protocol ReactorEventHandler: AnyObject, Sendable {
    func reactorEvent(readable: Bool, writable: Bool)
}

/// Why the reactor refused a descriptor.
struct ReactorError: Error, CustomStringConvertible {
    let descriptor: Int32
    let errno: Int32

    var description: String {
        "the reactor (epoll) refused descriptor \(descriptor): \(SystemError.describe(errno))"
    }
}

/// One descriptor registered with the reactor, edge-triggered and persistent: the kernel
/// reports each change of readiness once, so a source whose handler is busy elsewhere does
/// not make the poller spin, and re-arming costs no system call. Sources restore level
/// semantics themselves by checking readiness after their handler returns.
///
/// The registration is the callback's context: it stays alive while registered because its
/// owner keeps it until `remove()`, which waits for a callback running on another thread.
final class DescriptorRegistration: Sendable {
    /// The libevent event. Set once in `Reactor.register`, freed exactly once in `remove()`
    /// (guarded by `removed`); libevent serialises all calls on it with the base's lock.
    fileprivate nonisolated(unsafe) var event: OpaquePointer?
    let handler: any ReactorEventHandler
    let oneShot: Bool
    private let reactor: Reactor
    private let removed = Atomic<Bool>(false)
    /// Whether this registration counts in the reactor's interest: 0 not yet, 1 counted,
    /// 2 done (a one-shot that fired — perhaps before it was even counted — or removed), so
    /// that nobody polls for it any more and nothing is counted twice.
    private let interest = Atomic<UInt8>(0)

    fileprivate init(reactor: Reactor, handler: any ReactorEventHandler, oneShot: Bool) {
        self.reactor = reactor
        self.handler = handler
        self.oneShot = oneShot
    }

    fileprivate func takeInterest() {
        if interest.compareExchange(expected: 0, desired: 1, ordering: .acquiringAndReleasing).exchanged {
            reactor.addInterest()
        }
    }

    fileprivate func releaseInterest() {
        if interest.exchange(2, ordering: .acquiringAndReleasing) == 1 {
            reactor.removeInterest()
        }
    }

    /// Removes the descriptor from the reactor. When this returns, no callback for it runs
    /// or will run (libevent waits for one running on another thread). Idempotent.
    func remove() {
        guard !removed.exchange(true, ordering: .acquiringAndReleasing), let event else { return }
        // Uncounted first: the interest never counts an event libevent no longer has.
        releaseInterest()
        reactor.removeEvent(event)
    }

    fileprivate func fired(_ what: Int16) {
        if oneShot { releaseInterest() }
        handler.reactorEvent(readable: what & Int16(EV_READ) != 0, writable: what & Int16(EV_WRITE) != 0)
    }
}

extension Reactor {
    /// Registers `descriptor` for readability or writability. A `oneShot` registration
    /// reports the first readiness only (libevent then drops it from the poll set; `remove()`
    /// is still owed).
    func register(descriptor: Int32, forWriting: Bool, oneShot: Bool = false,
                  handler: any ReactorEventHandler) throws(ReactorError) -> DescriptorRegistration {
        let registration = DescriptorRegistration(reactor: self, handler: handler, oneShot: oneShot)
        registration.event = try addEvent(descriptor: descriptor, forWriting: forWriting, oneShot: oneShot,
                                          callback: descriptorEventCallback,
                                          context: Unmanaged.passUnretained(registration).toOpaque())
        // Counted after the add, so that a poller woken by the count finds the event.
        registration.takeInterest()
        return registration
    }

    /// Creates and adds a libevent event for `descriptor` (edge-triggered and persistent, or
    /// one-shot) whose callback gets `context`. The caller owns it until `removeEvent`.
    func addEvent(descriptor: Int32, forWriting: Bool, oneShot: Bool, callback: event_callback_fn,
                  context: UnsafeMutableRawPointer) throws(ReactorError) -> OpaquePointer {
        let what = Int16((forWriting ? EV_WRITE : EV_READ) | (oneShot ? 0 : EV_PERSIST | EV_ET))
        guard let event = makeEvent(descriptor: descriptor, what: what, callback: callback, context: context) else {
            throw ReactorError(descriptor: descriptor, errno: ENOMEM)
        }
        Diagnostics.reactorWillChange()
        if let failure = Syscall.failure("event_add", { lull_event_add(LULL_CALL_EVENT_ADD, event, nil) }) {
            event_free(event)
            throw ReactorError(descriptor: descriptor, errno: failure.code)
        }
        return event
    }

    /// Removes and frees an event from `addEvent`; waits for its callback if one runs on
    /// another thread.
    func removeEvent(_ event: OpaquePointer) {
        Diagnostics.reactorWillChange()
        event_del(event)
        event_free(event)
    }
}

/// The C callback for descriptor events: forwards to the registration's handler.
let descriptorEventCallback: event_callback_fn = { _, what, context in
    Diagnostics.descriptorEventArrived()
    Unmanaged<DescriptorRegistration>.fromOpaque(context!).takeUnretainedValue().fired(what)
}
