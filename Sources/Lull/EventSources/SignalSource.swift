import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Fires when the process receives its signal; `data` counts the deliveries since the
/// handler last ran (signals merged by the kernel while pending count once).
///
/// The signal's disposition stays the program's business, as with Dispatch: a signal whose
/// disposition is to terminate, stop or dump the process still does so — set it to
/// `SIG_IGN` before activating the source, as on Darwin. When the disposition is `SIG_IGN`,
/// a program's handler, or a default that ignores the signal (SIGCHLD, SIGURG, SIGWINCH,
/// SIGCONT), Lull puts a forwarder in front of it that counts the signal for its sources and
/// then does what the disposition did (nothing, or call the program's handler). Change the
/// disposition before activating the source: a later `sigaction` replaces the forwarder.
/// Several sources on the same signal all see every delivery.
public final class SignalSource: EventSourceBase, EventSourceProtocol, @unchecked Sendable {  // Sendable: see EventSourceBase
    init(signal: Int32, queue: WorkQueue?) {
        super.init(core: DrivenSourceCore(kind: SignalSource.self, target: queue, merge: .add,
                                          handle: UInt(truncatingIfNeeded: signal), mask: 0,
                                          driver: SignalDriver(signal: signal)))
    }
}

final class SignalDriver: SourceDriver {
    let signal: Int32

    init(signal: Int32) {
        self.signal = signal
    }

    func register(_ core: SourceCore) -> (any Error)? {
        SignalHub.shared.add(core, signal: signal)
    }

    func unregister(_ core: SourceCore) {
        SignalHub.shared.remove(core, signal: signal)
    }
}

/// Counts signals for every signal source: the forwarder (C, async-signal-safe) counts per
/// signal and writes to one eventfd registered with the reactor; the reactor callback takes
/// the counts and merges them into each source of that signal.
final class SignalHub: ReactorEventHandler {
    static let shared = SignalHub()

    private struct State {
        var notifyDescriptor: Int32 = -1
        var registration: DescriptorRegistration?
        var sources: [Int32: [SourceCore]] = [:]
    }

    private let state = Mutex<State>(State())

    func add(_ core: SourceCore, signal: Int32) -> (any Error)? {
        let subject = "\(core.name): signal \(signal)"
        guard signal > 0, signal < lull_signal_count(), signal != SIGKILL, signal != SIGSTOP else {
            return EventSourceError(subject: subject, code: EINVAL,
                                    reason: "not a signal that can be observed (valid: 1...\(lull_signal_count() - 1), except SIGKILL and SIGSTOP)")
        }
        return state.locked { state -> (any Error)? in
            if state.notifyDescriptor < 0 {
                let descriptor = lull_eventfd()
                guard descriptor >= 0 else { return EventSourceError(subject: subject, code: -descriptor) }
                do throws(ReactorError) {
                    state.registration = try Reactor.shared.register(descriptor: descriptor, forWriting: false, handler: self)
                } catch {
                    close(descriptor)
                    return EventSourceError(subject: subject, code: error.errno)
                }
                state.notifyDescriptor = descriptor
            }
            let mode = lull_signal_watch(signal, state.notifyDescriptor)
            guard mode >= 0 else { return EventSourceError(subject: subject, code: -mode) }
            if mode == Int32(LULL_SIGNAL_DEFAULT_ACTION) {
                RuntimeLog.once("signal-default-\(signal)") {
                    "\(subject): the signal's disposition is its default action, which ends or stops the process; set it to SIG_IGN before activating the source, as with Dispatch"
                }
            }
            // Deliveries counted while no source watched this signal belong to nobody.
            if state.sources[signal, default: []].isEmpty { _ = lull_signal_take(signal) }
            state.sources[signal, default: []].append(core)
            return nil
        }
    }

    func remove(_ core: SourceCore, signal: Int32) {
        state.locked { state in
            state.sources[signal]?.removeAll { $0 === core }
        }
    }

    /// On the polling thread: the eventfd was written by the forwarder.
    func reactorEvent(readable: Bool, writable: Bool) {
        let (descriptor, watched) = state.locked { ($0.notifyDescriptor, $0.sources) }
        lull_eventfd_drain(descriptor)
        for (signal, cores) in watched where !cores.isEmpty {
            let count = lull_signal_take(signal)
            guard count > 0 else { continue }
            for core in cores { core.merge(UInt(count)) }
        }
    }
}
