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

    /// Throws when the descriptor is not open (EBADF) or cannot be examined.
    init(_ descriptor: Int32) throws(SystemError) {
        var device: UInt64 = 0
        var inode: UInt64 = 0
        var regular: Int32 = 0
        _ = try Syscall.shim("fstat") { lull_fd_identity(descriptor, &device, &inode, &regular) }
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
/// (deleting waits for a callback in progress, which may be waiting for the lock) — except
/// a predecessor's, deleted under this mux's lock, which its callbacks never take.
///
/// The mux holds a strong reference to the core of each attached source, taken in `attach`
/// and dropped in `detach` or `retire`, all under the mux's lock: a callback, which runs
/// under it, only reaches attached cores, and `retire` hands its caller strong references,
/// so cancelling a retired source never touches a core that its own cancellation freed
/// meanwhile. The cycle this makes (core → driver → mux → core) lasts while the source is
/// registered: the source lifecycle unregisters (`detach`) every registered source once,
/// before its cancel handler, and a retired mux lets go in `retire`.
final class DescriptorMux: Sendable {
    let descriptor: Int32
    /// The open file behind the number (device and inode folded) when the mux was made.
    let file: UInt64
    /// `OpenFileWitness` enrolled the open file behind the number when the mux was made:
    /// the witness can tell when that open file is gone.
    let witnessed: Bool

    /// A source on the descriptor: its driver and its core.
    struct Attached {
        let driver: DescriptorDriver
        let core: SourceCore
    }

    private struct Direction {
        var first: Attached?
        var others: [Attached] = []
        var event: EventHandle?

        var isEmpty: Bool { first == nil }

        mutating func add(_ source: Attached) {
            if first == nil { first = source } else { others.append(source) }
        }

        mutating func remove(_ driver: DescriptorDriver) -> Bool {
            if first?.driver === driver {
                first = others.isEmpty ? nil : others.removeFirst()
                return true
            }
            guard let index = others.firstIndex(where: { $0.driver === driver }) else { return false }
            others.remove(at: index)
            return true
        }

        func forEach(_ body: (Attached) -> Void) {
            guard let first else { return }
            body(first)
            for source in others { body(source) }
        }
    }

    private struct State {
        var readers = Direction()
        var writers = Direction()
        /// Retired, or emptied and dropped from the table: nothing attaches any more.
        var closed = false
        /// The mux this one replaced in the table, until the first attach retires it.
        var predecessor: DescriptorMux?

        /// The sources of one direction (attach and detach only: not a hot path).
        subscript(writing writing: Bool) -> Direction {
            get { writing ? writers : readers }
            set { if writing { writers = newValue } else { readers = newValue } }
        }
    }

    private let state: Mutex<State>
    /// The reactor the mux's events are in.
    private let reactor: Reactor

    init(descriptor: Int32, file: UInt64, witnessed: Bool, predecessor: DescriptorMux?, reactor: Reactor) {
        self.reactor = reactor
        self.descriptor = descriptor
        self.file = file
        self.witnessed = witnessed
        state = Mutex(State(predecessor: predecessor))
    }

    /// Retires the mux this one replaced, once, under this mux's lock: its events leave the
    /// reactor before any of this mux's are added (libevent would otherwise take the new
    /// event for one it registered already). Returns its sources, for the caller to cancel.
    func retirePredecessor() -> [Attached] {
        state.locked(ranked: .descriptorMux) { state -> [Attached] in
            guard let predecessor = state.predecessor else { return [] }
            state.predecessor = nil
            return predecessor.retire()
        }
    }

    /// Adds a source; registers the direction's event if it is the first. False when the
    /// mux is closed (the caller looks the descriptor up again).
    func attach(_ driver: DescriptorDriver, core: SourceCore) throws(ReactorError) -> Bool {
        let context = Unmanaged.passUnretained(self).toOpaque()
        let writing = driver.forWriting
        return try state.locked(ranked: .descriptorMux) { state throws(ReactorError) -> Bool in
            guard !state.closed else { return false }
            assert(state.predecessor == nil, "descriptor \(descriptor): attached before its predecessor was retired")
            if state[writing: writing].event == nil {
                state[writing: writing].event = EventHandle(pointer: try reactor.addEvent(
                    descriptor: descriptor, forWriting: writing, oneShot: false,
                    callback: muxEventCallback, context: context))
                reactor.addInterest()
            }
            state[writing: writing].add(Attached(driver: driver, core: core))
            return true
        }
    }

    /// Removes a driver. When this returns no callback reaches it. Returns true when the mux
    /// has no source left (its events are gone).
    func detach(_ driver: DescriptorDriver) -> Bool {
        let writing = driver.forWriting
        var unused: EventHandle?
        let empty = state.locked(ranked: .descriptorMux) { state -> Bool in
            if state[writing: writing].remove(driver), state[writing: writing].isEmpty {
                unused = state[writing: writing].event
                state[writing: writing].event = nil
            }
            return state.readers.isEmpty && state.writers.isEmpty
        }
        if let unused {
            // Uncounted first: the interest never counts an event libevent no longer has.
            reactor.removeInterest()
            reactor.removeEvent(unused.pointer)
        }
        return empty
    }

    /// Closes the mux if it has no source (under the table's lock, which drops it then).
    func closeIfEmpty() -> Bool {
        state.locked(ranked: .descriptorMux) { state -> Bool in
            guard state.readers.isEmpty && state.writers.isEmpty else { return false }
            state.closed = true
            return true
        }
    }

    /// The descriptor number now names another open file: close the mux, drop both events
    /// and return the sources still attached (the caller cancels them).
    private func retire() -> [Attached] {
        var events: [EventHandle] = []
        let sources = state.locked(ranked: .descriptorMux) { state -> [Attached] in
            var sources: [Attached] = []
            state.readers.forEach { sources.append($0) }
            state.writers.forEach { sources.append($0) }
            if let event = state.readers.event { events.append(event) }
            if let event = state.writers.event { events.append(event) }
            state = State(closed: true)
            return sources
        }
        for event in events {
            reactor.removeInterest()
            reactor.removeEvent(event.pointer)
        }
        return sources
    }

    /// On the polling thread: readiness of one direction.
    fileprivate func fired(readable: Bool) {
        // The iteration that reported it; for a direction that several sources share, 1 (one
        // source's handler may read what the event announced to the others: each checks).
        let iteration = reactor.pollIteration
        state.locked(ranked: .descriptorMux) { state in
            if readable {
                let reported = state.readers.others.isEmpty ? iteration : 1
                state.readers.forEach { $0.driver.readinessReported(to: $0.core, iteration: reported) }
            } else {
                let reported = state.writers.others.isEmpty ? iteration : 1
                state.writers.forEach { $0.driver.readinessReported(to: $0.core, iteration: reported) }
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
/// epoll forgets a descriptor silently when the program closes its open file, while
/// libevent still believes it is registered and would not register the number again. So
/// when a number comes back for another open file — of a different file (device and inode
/// differ), or of the same one (`OpenFileWitness` says so: a FIFO opened again, a new
/// eventfd) — the sources still registered on the old one are cancelled first, with the
/// reason in `registrationError`, and a new mux registers the number again.
///
/// Indexed by descriptor number (descriptors are small, dense integers): 8 bytes per number.
/// The witness's entry for a number belongs to the mux held here for it: enrolled when a
/// mux is made or verified, withdrawn when it is dropped, all under the table's lock.
final class DescriptorTable: Sendable {
    private let reactor: Reactor
    private let witness: OpenFileWitness

    init(reactor: Reactor, witness: OpenFileWitness) {
        self.reactor = reactor
        self.witness = witness
    }

    private let muxes = Mutex<[DescriptorMux?]>([])

    /// The reactor's poller iteration (see `Reactor.pollIteration`).
    var pollIteration: UInt { reactor.pollIteration }

    /// Attaches a source to the mux of its descriptor (making it, or replacing a stale one).
    func attach(_ driver: DescriptorDriver, core: SourceCore, identity: DescriptorIdentity) throws(ReactorError) -> DescriptorMux {
        let descriptor = driver.descriptor
        let index = Int(descriptor)
        let file = identity.folded
        while true {
            let mux = muxes.locked(ranked: .descriptorTable) { muxes -> DescriptorMux in
                if index >= muxes.count {
                    muxes.append(contentsOf: repeatElement(nil, count: max(index + 1 - muxes.count, muxes.count)))
                }
                let current = muxes[index]
                let verdict: OpenFileWitness.Verdict
                if let current, current.file == file {
                    guard current.witnessed else { return current }
                    verdict = witness.enroll(descriptor)
                    // Enrolled now: the open file that registered was closed, and the number
                    // names another open of the same file.
                    if verdict != .enrolled { return current }
                } else {
                    verdict = witness.enroll(descriptor)
                }
                let fresh = DescriptorMux(descriptor: descriptor, file: file, witnessed: verdict != .unverifiable,
                                          predecessor: current, reactor: reactor)
                muxes[index] = fresh
                return fresh
            }
            // The old file's events leave the reactor before the number is registered again.
            for stale in mux.retirePredecessor() {
                stale.driver.staleDescriptor(stale.core)
            }
            do {
                if try mux.attach(driver, core: core) { return mux }
            } catch {
                release(mux, ifEmptyAfter: driver)
                throw error
            }
            // Closed meanwhile (emptied and dropped, or retired): look again.
        }
    }

    /// Detaches `driver`; forgets the mux when it has no source left.
    func release(_ mux: DescriptorMux, ifEmptyAfter driver: DescriptorDriver) {
        guard mux.detach(driver) else { return }
        let index = Int(mux.descriptor)
        muxes.locked(ranked: .descriptorTable) { muxes in
            guard index < muxes.count, muxes[index] === mux, mux.closeIfEmpty() else { return }
            muxes[index] = nil
            witness.withdraw(mux.descriptor)
        }
    }
}
