import CLibevent
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
        "the reactor (epoll) refused descriptor \(descriptor): \(String(cString: strerror(errno))) (errno \(errno))"
    }
}

/// One descriptor registered with the reactor, edge-triggered and persistent: the kernel
/// reports each change of readiness once, so a source whose handler is busy elsewhere does
/// not make the poller spin, and re-arming costs no system call. Sources restore level
/// semantics themselves by checking readiness after their handler returns.
final class DescriptorRegistration: Sendable {
    /// The libevent event. Created in `init`, freed exactly once in `remove()` (guarded
    /// by `removed`); libevent serialises all calls on it with the base's lock.
    private nonisolated(unsafe) let event: OpaquePointer
    private let handler: Unmanaged<HandlerBox>
    private let removed = Atomic<Bool>(false)
    let descriptor: Int32

    /// Boxes the handler so that the C callback gets a stable pointer.
    final class HandlerBox: Sendable {
        let handler: any ReactorEventHandler
        let oneShot: Bool
        /// Whether this registration still counts in the reactor's interest: a one-shot
        /// stops counting when it fires, so that nobody polls for it any more.
        let holdsInterest = Atomic<Bool>(true)

        init(_ handler: any ReactorEventHandler, oneShot: Bool) {
            self.handler = handler
            self.oneShot = oneShot
        }

        func releaseInterest() {
            if holdsInterest.exchange(false, ordering: .acquiringAndReleasing) {
                Reactor.shared.removeInterest()
            }
        }
    }

    fileprivate init(event: OpaquePointer, handler: Unmanaged<HandlerBox>, descriptor: Int32) {
        self.event = event
        self.handler = handler
        self.descriptor = descriptor
    }

    /// Removes the descriptor from the reactor. When this returns, no callback for it runs
    /// or will run (libevent waits for one running on another thread). Idempotent.
    func remove() {
        guard !removed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        event_del(event)
        event_free(event)
        handler.takeUnretainedValue().releaseInterest()
        handler.release()
    }
}

extension Reactor {
    /// Registers `descriptor` for readability or writability. A `oneShot` registration
    /// reports the first readiness only (libevent then drops it from the poll set; `remove()`
    /// is still owed).
    func register(descriptor: Int32, forWriting: Bool, oneShot: Bool = false,
                  handler: any ReactorEventHandler) throws(ReactorError) -> DescriptorRegistration {
        let box = Unmanaged.passRetained(DescriptorRegistration.HandlerBox(handler, oneShot: oneShot))
        let what = Int16((forWriting ? EV_WRITE : EV_READ) | (oneShot ? 0 : EV_PERSIST | EV_ET))
        guard let event = makeEvent(descriptor: descriptor, what: what, context: box.toOpaque()) else {
            box.release()
            throw ReactorError(descriptor: descriptor, errno: ENOMEM)
        }
        errno = 0
        if event_add(event, nil) != 0 {
            let failure = errno == 0 ? EINVAL : errno
            event_free(event)
            box.release()
            throw ReactorError(descriptor: descriptor, errno: failure)
        }
        // Counted after the add, so that a poller woken by the count finds the event.
        addInterest()
        return DescriptorRegistration(event: event, handler: box, descriptor: descriptor)
    }
}

/// The C callback for descriptor events: forwards to the registered handler.
let descriptorEventCallback: event_callback_fn = { _, what, context in
    let box = Unmanaged<DescriptorRegistration.HandlerBox>.fromOpaque(context!).takeUnretainedValue()
    if box.oneShot { box.releaseInterest() }
    box.handler.reactorEvent(readable: what & Int16(EV_READ) != 0, writable: what & Int16(EV_WRITE) != 0)
}
