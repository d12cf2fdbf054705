import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The open file behind a descriptor number, to tell a reused number from the original.
struct DescriptorIdentity: Equatable, Sendable {
    let device: UInt64
    let inode: UInt64
    let isRegularFile: Bool

    /// nil (with errno set) when the descriptor is not open.
    init?(_ descriptor: Int32) {
        var device: UInt64 = 0
        var inode: UInt64 = 0
        var regular: Int32 = 0
        let result = lull_fd_identity(descriptor, &device, &inode, &regular)
        guard result == 0 else {
            errno = result
            return nil
        }
        self.device = device
        self.inode = inode
        self.isRegularFile = regular != 0
    }

    /// Device and inode in one word (a collision would only skip a stale-source check).
    var folded: UInt64 {
        device &* 0x9E37_79B9_7F4A_7C15 ^ inode
    }
}

/// The read and write sources on one descriptor number share one libevent event per
/// direction, as Dispatch's "muxnote" does: a descriptor with several sources costs one
/// registration, and the reactor callback hands each event to every source on it.
///
/// Reactor callbacks deliver under the mux's lock, and `detach` takes that lock: once a
/// source is detached, no callback can reach it. Events are deleted outside the lock
/// (deleting waits for a callback in progress, which may be waiting for the lock).
final class DescriptorMux: Sendable {
    let descriptor: Int32
    /// The open file behind the number (device and inode folded) when the mux was made.
    let file: UInt64

    private struct Direction {
        var first: DescriptorDriver?
        var others: [DescriptorDriver] = []
        var event: EventHandle?

        var isEmpty: Bool { first == nil }

        mutating func add(_ driver: DescriptorDriver) {
            if first == nil { first = driver } else { others.append(driver) }
        }

        mutating func remove(_ driver: DescriptorDriver) -> Bool {
            if first === driver {
                first = others.isEmpty ? nil : others.removeFirst()
                return true
            }
            guard let index = others.firstIndex(where: { $0 === driver }) else { return false }
            others.remove(at: index)
            return true
        }

        func forEach(_ body: (DescriptorDriver) -> Void) {
            guard let first else { return }
            body(first)
            for driver in others { body(driver) }
        }
    }

    private struct State {
        var readers = Direction()
        var writers = Direction()

        /// The sources of one direction (attach and detach only: not a hot path).
        subscript(writing writing: Bool) -> Direction {
            get { writing ? writers : readers }
            set { if writing { writers = newValue } else { readers = newValue } }
        }
    }

    private let state = Mutex<State>(State())

    init(descriptor: Int32, file: UInt64) {
        self.descriptor = descriptor
        self.file = file
    }

    /// Adds a source's driver; registers the direction's event if it is the first.
    func attach(_ driver: DescriptorDriver) throws(ReactorError) {
        let context = Unmanaged.passUnretained(self).toOpaque()
        let writing = driver.forWriting
        try state.locked { state throws(ReactorError) in
            if state[writing: writing].event == nil {
                state[writing: writing].event = EventHandle(pointer: try Reactor.shared.addEvent(
                    descriptor: descriptor, forWriting: writing, oneShot: false,
                    callback: muxEventCallback, context: context))
                Reactor.shared.addInterest()
            }
            state[writing: writing].add(driver)
        }
    }

    /// Removes a driver. When this returns no callback reaches it. Returns true when the mux
    /// has no source left (its events are gone).
    func detach(_ driver: DescriptorDriver) -> Bool {
        let writing = driver.forWriting
        var unused: EventHandle?
        let empty = state.locked { state -> Bool in
            if state[writing: writing].remove(driver), state[writing: writing].isEmpty {
                unused = state[writing: writing].event
                state[writing: writing].event = nil
            }
            return state.readers.isEmpty && state.writers.isEmpty
        }
        if let unused {
            // Uncounted first: the interest never counts an event libevent no longer has.
            Reactor.shared.removeInterest()
            Reactor.shared.removeEvent(unused.pointer)
        }
        return empty
    }

    /// The descriptor number now names another file: drop both events and return the
    /// drivers still attached (their sources are cancelled by the caller).
    func retire() -> [DescriptorDriver] {
        var events: [EventHandle] = []
        let drivers = state.locked { state -> [DescriptorDriver] in
            var drivers: [DescriptorDriver] = []
            state.readers.forEach { drivers.append($0) }
            state.writers.forEach { drivers.append($0) }
            if let event = state.readers.event { events.append(event) }
            if let event = state.writers.event { events.append(event) }
            state = State()
            return drivers
        }
        for event in events {
            Reactor.shared.removeInterest()
            Reactor.shared.removeEvent(event.pointer)
        }
        return drivers
    }

    /// On the polling thread: readiness of one direction.
    fileprivate func fired(readable: Bool) {
        state.locked { state in
            if readable {
                state.readers.forEach { $0.readinessReported() }
            } else {
                state.writers.forEach { $0.readinessReported() }
            }
        }
    }
}

/// The C callback of a mux's events: the context is the mux, `what` the direction.
let muxEventCallback: ReactorCallback = { _, what, context in
    Diagnostics.descriptorEventArrived()
    Unmanaged<DescriptorMux>.fromOpaque(context!).takeUnretainedValue().fired(readable: what & 0x02 != 0)
}

/// The descriptor numbers watched by read and write sources, each with its mux.
///
/// epoll forgets a descriptor silently when the program closes it, while libevent still
/// believes it is registered and would not register the number again for a new file. So
/// when a number comes back for a different file, the sources still registered on the old
/// one are cancelled first, with the reason in `registrationError`.
///
/// Indexed by descriptor number (descriptors are small, dense integers): 8 bytes per number.
final class DescriptorTable: Sendable {
    static let shared = DescriptorTable()

    private let muxes = Mutex<[DescriptorMux?]>([])

    /// Attaches `driver` to the mux of its descriptor (making it, or replacing a stale one).
    func attach(_ driver: DescriptorDriver, identity: DescriptorIdentity) throws(ReactorError) -> DescriptorMux {
        let descriptor = driver.descriptor
        let index = Int(descriptor)
        let file = identity.folded
        let (mux, stale) = muxes.locked { muxes -> (DescriptorMux, DescriptorMux?) in
            if index >= muxes.count {
                muxes.append(contentsOf: repeatElement(nil, count: max(index + 1 - muxes.count, muxes.count)))
            }
            if let current = muxes[index], current.file == file { return (current, nil) }
            let fresh = DescriptorMux(descriptor: descriptor, file: file)
            let stale = muxes[index]
            muxes[index] = fresh
            return (fresh, stale)
        }
        // The old file's events must leave the reactor before the number is registered again.
        if let stale {
            for old in stale.retire() {
                old.staleDescriptor()
            }
        }
        do {
            try mux.attach(driver)
        } catch {
            release(mux, ifEmptyAfter: driver)
            throw error
        }
        return mux
    }

    /// Detaches `driver`; forgets the mux when it has no source left.
    func release(_ mux: DescriptorMux, ifEmptyAfter driver: DescriptorDriver) {
        guard mux.detach(driver) else { return }
        let index = Int(mux.descriptor)
        muxes.locked { muxes in
            if index < muxes.count, muxes[index] === mux { muxes[index] = nil }
        }
    }
}
