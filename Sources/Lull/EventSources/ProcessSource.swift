import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Events of a process, with kqueue's EVFILT_PROC values.
public struct ProcessEvent: OptionSet, Sendable {
    /// The bits of the process events.
    public let rawValue: UInt
    /// The process events with these bits.
    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// The process exited.
    public static let exit = ProcessEvent(rawValue: 0x8000_0000)
    /// The process forked (not reported on Linux: see `ProcessSource`).
    public static let fork = ProcessEvent(rawValue: 0x4000_0000)
    /// The process exec'd (not reported on Linux: see `ProcessSource`).
    public static let exec = ProcessEvent(rawValue: 0x2000_0000)
    /// The process received a signal (not reported on Linux: see `ProcessSource`).
    public static let signal = ProcessEvent(rawValue: 0x0800_0000)
    /// Every process event (on Linux only `.exit` is ever reported).
    public static let all: ProcessEvent = [.exit, .fork, .exec, .signal]
}

/// Watches a process through a pidfd: `.exit` is reported when it exits (its parent can
/// still `waitpid` it: the source never reaps). Linux tells an unprivileged process nothing
/// about another's forks, execs or signals (that needs the netlink process connector and
/// CAP_NET_ADMIN), so `.fork`, `.exec` and `.signal` are accepted in the mask but never
/// reported — documented best effort, said once in the log. A mask without `.exit` therefore
/// never fires.
public final class ProcessSource: EventSourceBase, EventSourceProtocol, @unchecked Sendable {  // Sendable: see EventSourceBase
    init(pid: Int32, eventMask: ProcessEvent, queue: WorkQueue, services: SourceServices) {
        super.init(core: DrivenSourceCore(kind: ProcessSource.self, target: queue, merge: .or,
                                          handle: UInt(truncatingIfNeeded: pid), mask: eventMask.rawValue,
                                          driver: ProcessDriver(pid: pid, mask: eventMask, reactor: services.reactor)))
    }

    /// The events seen since the handler last ran (the typed `data`).
    public var events: ProcessEvent { ProcessEvent(rawValue: data) }
}

final class ProcessDriver: SourceKind {
    let pid: Int32
    let mask: ProcessEvent
    private let reactor: Reactor
    /// The pidfd and its registration; the pidfd is closed exactly once, in `finished`.
    private let watch = Mutex<(descriptor: Int32, registration: DescriptorRegistration?)?>(nil)

    init(pid: Int32, mask: ProcessEvent, reactor: Reactor) {
        self.pid = pid
        self.mask = mask
        self.reactor = reactor
    }

    func register(_ core: SourceCore) -> (any Error)? {
        let subject = "\(core.name): process \(pid)"
        guard pid > 0 else {
            return EventSourceError(subject: subject, code: EINVAL, reason: "not a process id")
        }
        if !mask.intersection([.fork, .exec, .signal]).isEmpty {
            RuntimeLog.once("process-events") {
                "ProcessSource: Linux does not report fork, exec or signal events of another process to an unprivileged program; only .exit is delivered"
            }
        }
        let descriptor: Int32
        do throws(SystemError) {
            descriptor = try Syscall.shim("pidfd_open") { lull_pidfd_open(pid) }
        } catch {
            let reason = error.code == ESRCH ? "no such process" : String(cString: strerror(error.code))
            return EventSourceError(subject: subject, code: error.code, reason: reason)
        }
        guard mask.contains(.exit) else {
            watch.locked { $0 = (descriptor, nil) }
            return nil
        }
        do throws(ReactorError) {
            let registration = try reactor.register(descriptor: descriptor, forWriting: false, oneShot: true,
                                                           handler: ExitForwarder(core: core))
            watch.locked { $0 = (descriptor, registration) }
            return nil
        } catch {
            close(descriptor)
            return EventSourceError(subject: subject, code: error.errno)
        }
    }

    func unregister(_ core: SourceCore) {
        let registration = watch.locked { current -> DescriptorRegistration? in
            defer { current?.registration = nil }
            return current?.registration
        }
        registration?.remove()
    }

    func finished(_ core: SourceCore) {
        let descriptor = watch.locked { current -> Int32? in
            defer { current = nil }
            return current?.descriptor
        }
        if let descriptor { close(descriptor) }
    }
}

/// The pidfd became readable: the process exited.
final class ExitForwarder: ReactorEventHandler {
    let core: SourceCore

    init(core: SourceCore) {
        self.core = core
    }

    func reactorEvent(readable: Bool, writable: Bool) {
        core.merge(ProcessEvent.exit.rawValue)
    }
}
