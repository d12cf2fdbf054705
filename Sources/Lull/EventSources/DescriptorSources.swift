import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Fires when its descriptor has data to read; `data` is the number of bytes readable now
/// (0 at end of file or when the peer hung up). Level-triggered from the program's view:
/// if data remains unread when the handler returns, the handler runs again.
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
    let descriptor: Int32
    let forWriting: Bool
    private let table: DescriptorTable
    /// The descriptor's mux while registered (shared with other sources on the descriptor).
    /// The mux, not the driver, holds the core (see `DescriptorMux`): the driver keeps no
    /// reference to it that could outlive the source's registration.
    private let mux = Mutex<DescriptorMux?>(nil)
    /// Regular files are always "ready" for epoll's purposes and cannot be registered:
    /// their readiness is computed from the file offset instead.
    private let isRegularFile = Atomic<Bool>(false)
    /// The end of file (or hang-up) was delivered (data 0): it is not delivered again until
    /// new readiness is reported, so that a source left open at EOF does not spin.
    private let endOfFileDelivered = Atomic<Bool>(false)

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
        let readable = lull_bytes_readable(descriptor)
        if readable > 0 { return UInt(readable) }
        // Nothing buffered: end of file, a hang-up, an error or a listening socket with a
        // connection to accept all make the descriptor readable; otherwise the readiness
        // went away (the handler already read it) and there is nothing to deliver.
        let revents = lull_poll_now(descriptor, Int16(POLLIN) | pollReadHangUp)
        guard revents > 0 else { return stale(core, revents) }
        if readable < 0 { return 1 }
        endOfFileDelivered.store(true, ordering: .releasing)
        return 0
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
            // One poll answers the common case, a handler that read everything: nothing is
            // readable and no hang-up is pending, and no FIONREAD is needed.
            let revents = lull_poll_now(descriptor, Int16(POLLIN) | pollReadHangUp)
            guard revents > 0 else { return }
            let readable = lull_bytes_readable(descriptor)
            if readable > 0 {
                core.merge(1)
            } else if readable < 0 {
                if revents & Int32(POLLIN) != 0 { core.merge(1) }
            } else if !endOfFileDelivered.load(ordering: .acquiring) {
                // The hang-up came with the data just read (one edge for both): deliver it.
                core.merge(1)
            }
        }
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
    /// On the polling thread, under the mux's lock (which holds `core`): new readiness (an
    /// end of file may be reported again after it).
    func readinessReported(to core: SourceCore) {
        endOfFileDelivered.store(false, ordering: .releasing)
        core.merge(1)
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

/// A libevent event pointer that a lock hands around. `@unchecked Sendable`: the pointer is
/// only used by the reactor's calls, which libevent serialises with its base lock.
struct EventHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}
