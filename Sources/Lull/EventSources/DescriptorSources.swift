import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Fires when its descriptor has data to read; `data` is an estimate of the bytes readable
/// (0 at end of file or when the peer hung up), taken when the handler first reads it.
/// Level-triggered from the program's view: if data remains unread when the handler
/// returns, the handler runs again. The end of file is delivered once, as `data` 0; after
/// it the source fires only when bytes are readable again (a FIFO's next writer) — a socket
/// at its end never is, so cancel the source there.
///
/// On a regular file (which epoll cannot watch) it fires while the file offset is before
/// the end, with `data` = bytes from the offset to the end, as kqueue does; it does not
/// notice that the file grows (watch it with a file-system source for that).
public final class ReadSource: EventSourceBase, EventSourceProtocol, @unchecked Sendable {  // Sendable: see EventSourceBase
    init(descriptor: Int32, queue: WorkQueue, services: SourceServices) {
        super.init(core: DrivenSourceCore(kind: ReadSource.self, target: queue, merge: .readiness,
                                          handle: UInt(truncatingIfNeeded: descriptor), mask: 0,
                                          driver: DescriptorDriver(descriptor: descriptor, forWriting: false,
                                                                   table: services.descriptors)))
    }
}

/// Fires when its descriptor can be written to; `data` estimates the free buffer space
/// (> 0). Level-triggered: while writable, the handler keeps running — suspend the source
/// when there is nothing to write.
public final class WriteSource: EventSourceBase, EventSourceProtocol, @unchecked Sendable {  // Sendable: see EventSourceBase
    init(descriptor: Int32, queue: WorkQueue, services: SourceServices) {
        super.init(core: DrivenSourceCore(kind: WriteSource.self, target: queue, merge: .readiness,
                                          handle: UInt(truncatingIfNeeded: descriptor), mask: 0,
                                          driver: DescriptorDriver(descriptor: descriptor, forWriting: true,
                                                                   table: services.descriptors)))
    }
}

/// Watches one descriptor for a read or write source; receives its reactor events itself.
final class DescriptorDriver: SourceKind {
    // Swift lays the fields out in declaration order: the four one-byte flags share the
    // word after the descriptor, and the driver is 56 bytes, a 64-byte malloc chunk
    // (`SourceFootprintTests`).
    let descriptor: Int32
    let forWriting: Bool
    /// Regular files are always "ready" for epoll's purposes and cannot be registered:
    /// their readiness is computed from the file offset instead.
    private let isRegularFile = Atomic<Bool>(false)
    /// The end of file (or hang-up) was delivered (a delivery whose `data` is 0). Set and
    /// cleared only by the source's deliveries, which run one at a time: set by the one that
    /// finds the end (checked at delivery, or when the handler asks `data`), cleared by a
    /// checked delivery that finds bytes again. While set, every delivery is checked, and one
    /// that finds no bytes runs no handler: a reactor report of the end of file, however late,
    /// never delivers it twice (docs/EventSources.md, "Read sources: the end of file").
    private let endOfFileDelivered = Atomic<Bool>(false)
    /// The source's `events` loop reads outside the handler: every delivery checks.
    private let checksEveryDelivery = Atomic<Bool>(false)
    private let table: DescriptorTable
    /// The descriptor's mux while registered (shared with other sources on the descriptor).
    /// The mux, not the driver, holds the core (see `DescriptorMux`): the driver keeps no
    /// reference to it that could outlive the source's registration.
    private let mux = Mutex<DescriptorMux?>(nil)
    /// The reactor iteration in which the read handler last returned (0: it never ran). A
    /// readiness reported by a later iteration was checked by the kernel after that handler
    /// read, and no handler of this source has run since: the bytes are there (see
    /// `dataForDelivery`).
    private let lastHandlerIteration = Atomic<UInt>(0)

    init(descriptor: Int32, forWriting: Bool, table: DescriptorTable) {
        self.descriptor = descriptor
        self.forWriting = forWriting
        self.table = table
    }

    func register(_ core: SourceCore) -> (any Error)? {
        var subject: String { "\(core.name): descriptor \(descriptor)" }
        guard descriptor >= 0 else {
            return EventSourceError(subject: subject, code: EBADF, reason: "negative descriptor")
        }
        let found: DescriptorIdentity
        do throws(SystemError) {
            found = try DescriptorIdentity(descriptor)
        } catch {
            return EventSourceError(subject: subject, code: error.code)
        }
        if found.isRegularFile {
            isRegularFile.store(true, ordering: .releasing)
            core.merge(1)
            return nil
        }
        do throws(ReactorError) {
            let joined = try table.attach(self, core: core, identity: found)
            mux.locked { $0 = joined }
            return nil
        } catch {
            return EventSourceError(subject: subject, code: error.errno,
                                    reason: "the reactor refused it: \(String(cString: strerror(error.errno)))")
        }
    }

    func unregister(_ core: SourceCore) {
        let joined = mux.locked { current -> DescriptorMux? in
            defer { current = nil }
            return current
        }
        if let joined {
            table.release(joined, ifEmptyAfter: self)
        }
    }

    func dataForDelivery(_ core: SourceCore, merged: UInt) -> UInt? {
        if isRegularFile.load(ordering: .acquiring) {
            if forWriting { return 1 }
            let remaining = lull_file_bytes_after_offset(descriptor)
            return remaining > 0 ? UInt(remaining) : nil
        }
        if forWriting {
            let revents = lull_poll_now(descriptor, Int16(POLLOUT))
            guard revents > 0 else { return stale(core, revents) }
            if revents & Int32(POLLOUT) == 0 { return 1 }  // error or hang-up: let the handler see it
            let space = lull_write_space(descriptor)
            return space > 0 ? UInt(space) : 1
        }
        assert(merged <= table.pollIteration &+ 1, "descriptor \(descriptor): readiness merged from iteration \(merged), ahead of the reactor")
        let atEnd = endOfFileDelivered.load(ordering: .acquiring)
        // Reported after this source's last handler returned: the kernel saw the descriptor
        // readable with nothing of this source reading it since, so the delivery is not
        // stale, and `data` waits until the handler asks for it (`dataRequested`). Not at the
        // end of file already delivered: a report of it must find bytes to deliver anything.
        if !atEnd && merged > lastHandlerIteration.load(ordering: .acquiring) && !checksEveryDelivery.load(ordering: .acquiring) {
            return SourceCore.dataOnRequest
        }
        // Else a previous handler may have read what was reported: check.
        let readable = lull_bytes_readable(descriptor)
        if readable > 0 {
            // Bytes after the end of file (a FIFO's new writer): the next end is news again.
            if atEnd { endOfFileDelivered.store(false, ordering: .releasing) }
            return UInt(readable)
        }
        // Nothing buffered: end of file, a hang-up, an error or a listening socket with a
        // connection to accept all make the descriptor readable; otherwise the readiness
        // went away (the handler already read it) and there is nothing to deliver.
        let revents = lull_poll_now(descriptor, Int16(POLLIN) | pollReadHangUp)
        guard revents > 0 else { return stale(core, revents) }
        if readable < 0 { return 1 }
        // The end of file, delivered once: a later report of it delivers nothing.
        guard !atEnd else { return nil }
        let wasDelivered = endOfFileDelivered.exchange(true, ordering: .acquiringAndReleasing)
        assert(!wasDelivered, "descriptor \(descriptor): the end of file was marked delivered during a delivery")
        return 0
    }

    /// `data` of a delivery that was not checked (`dataForDelivery`): the bytes readable now;
    /// with none, 0 when the descriptor is at its end, hung up or failed; 1 when it has no
    /// byte count (a listening socket), or when something other than this source's handler
    /// read the bytes meanwhile (the reported readiness is all there is to go on).
    func dataRequested(_ core: SourceCore) -> UInt {
        assert(!endOfFileDelivered.load(ordering: .acquiring),
               "descriptor \(descriptor): a delivery after the end of file was delivered went unchecked")
        let readable = lull_bytes_readable(descriptor)
        if readable > 0 { return UInt(readable) }
        if readable == -EBADF {
            _ = stale(core, Int32(readable))
            return 0
        }
        if readable < 0 { return 1 }
        let revents = lull_poll_now(descriptor, Int16(POLLIN) | pollReadHangUp)
        guard revents > 0, revents & Int32(POLLNVAL) == 0 else { return 1 }
        let wasDelivered = endOfFileDelivered.exchange(true, ordering: .acquiringAndReleasing)
        assert(!wasDelivered, "descriptor \(descriptor): the end of file was marked delivered during a delivery")
        return 0
    }

    /// The state of the end of file (`endOfFileDelivered`), for tests and diagnostics.
    var endOfFileWasDelivered: Bool { endOfFileDelivered.load(ordering: .acquiring) }

    func eventsIterationClaimed() {
        checksEveryDelivery.store(true, ordering: .releasing)
    }

    /// Level semantics: re-signal when the condition still holds after the handler.
    func handlerReturned(_ core: SourceCore) {
        if isRegularFile.load(ordering: .acquiring) {
            if forWriting || lull_file_bytes_after_offset(descriptor) > 0 { core.merge(1) }
            return
        }
        if forWriting {
            if lull_poll_now(descriptor, Int16(POLLOUT)) & Int32(POLLOUT) != 0 { core.merge(1) }
        } else {
            recordHandlerReturn()
            levelChecked(core, revents: lull_poll_now(descriptor, readCheckEvents))
        }
    }

    /// A read handler returned: its iteration, for `dataForDelivery`.
    private func recordHandlerReturn() {
        // The handler's reads are done before the iteration is read: an iteration that
        // starts later reports only what the kernel saw after them. Sequentially
        // consistent, with the reactor's bump before each wait.
        let ended = table.pollIteration
        let previous = lastHandlerIteration.exchange(ended, ordering: .sequentiallyConsistent)
        assert(previous <= ended, "descriptor \(descriptor): the last handler's iteration went back from \(previous) to \(ended)")
    }

    /// The level check after a read handler, from the zero-timeout poll's `revents` (or
    /// its -errno). One poll answers the common case, a handler that read everything:
    /// nothing is readable and no hang-up is pending, and no FIONREAD is needed.
    private func levelChecked(_ core: SourceCore, revents: Int32) {
        guard revents > 0 else { return }
        // Checked after the handler, with no handler of this source before the delivery it
        // signals (the token is held from the handler to here): that delivery need not
        // check again.
        let checked = lastHandlerIteration.load(ordering: .acquiring) &+ 1
        // Readable with no hang-up and no error: bytes (or, on a descriptor without a byte
        // count, what makes it readable) are there, and no FIONREAD is needed to say so.
        if revents & Int32(POLLIN) != 0 && revents & (Int32(pollReadHangUp) | Int32(POLLHUP) | Int32(POLLERR) | Int32(POLLNVAL)) == 0 {
            core.merge(checked)
            return
        }
        let readable = lull_bytes_readable(descriptor)
        if readable > 0 {
            core.merge(checked)
        } else if readable < 0 {
            if revents & Int32(POLLIN) != 0 { core.merge(checked) }
        } else if !endOfFileDelivered.load(ordering: .acquiring) {
            // The hang-up came with the data just read (one edge for both): deliver it,
            // checked at delivery, which marks it delivered (a handler that never asks
            // `data` would otherwise be called again and again at the end of file).
            core.merge(1)
        }
    }

    /// A read source's check after its handler may wait for its thread's batch
    /// (`DeferredLevelChecks`); a write source's and a regular file's are made at once.
    func deferLevelCheck(_ core: SourceCore) -> Bool {
        guard !forWriting, !isRegularFile.load(ordering: .acquiring) else { return false }
        recordHandlerReturn()
        return true
    }

    var deferredCheckPoll: (descriptor: Int32, events: Int16) { (descriptor, readCheckEvents) }

    func completeLevelCheck(_ core: SourceCore, revents: Int16?) {
        guard let revents else {
            levelChecked(core, revents: lull_poll_now(descriptor, readCheckEvents))
            return
        }
        levelChecked(core, revents: Int32(revents))
    }

    /// Nothing to deliver; if the descriptor turned out to be closed, cancel with the reason.
    private func stale(_ core: SourceCore, _ revents: Int32) -> UInt? {
        if revents == -EBADF || (revents > 0 && revents & Int32(POLLNVAL) != 0) {
            core.fail(EventSourceError(subject: "\(core.name): descriptor \(descriptor)", code: EBADF,
                                       reason: "the descriptor was closed while its source was registered"))
        }
        return nil
    }
}

extension DescriptorDriver {
    /// On the polling thread, under the mux's lock (which holds `core`): new readiness.
    /// `iteration` is the reactor iteration whose callback reports it (1: unchecked, see
    /// `DescriptorMux.fired`). It leaves `endOfFileDelivered` alone: the report may be of the
    /// end of file a delivery already gave, and only the delivery, which checks while that
    /// mark is set, tells new bytes from it.
    func readinessReported(to core: SourceCore, iteration: UInt) {
        core.merge(iteration)
    }

    /// The descriptor was closed and its number reused for another open file: this source
    /// can only be cancelled, with the reason. `core` is a strong reference the retired mux
    /// handed over: the source may be cancelled (and its core let go) meanwhile.
    func staleDescriptor(_ core: SourceCore) {
        mux.locked { $0 = nil }
        core.fail(EventSourceError(subject: "\(core.name): descriptor \(descriptor)", code: EBADF,
                                   reason: "the descriptor was closed while its source was registered, and its number reused"))
    }
}

/// POLLRDHUP (the peer shut down its writing side), which Glibc's Swift module lacks.
private let pollReadHangUp: Int16 = 0x2000

/// What the level check after a read handler polls for: bytes, or a hang-up.
private let readCheckEvents = Int16(POLLIN) | pollReadHangUp

/// A libevent event pointer that a lock hands around. `@unchecked Sendable`: the pointer is
/// only used by the reactor's calls, which libevent serialises with its base lock.
struct EventHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}
