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
///
/// What the forwarder changes while it is installed (Linux sees a signal only through a
/// handler; Darwin's kqueue sees it whatever the disposition):
/// - It is installed with `SA_RESTART`: reads, writes and waits that the kernel restarts
///   carry on across a delivery. The calls that never restart (`nanosleep`, `usleep`,
///   `clock_nanosleep`, `poll`, `epoll_wait`, `select`, see signal(7)) return `EINTR`
///   on the thread the signal interrupts, as with any handler — even when the program
///   ignores the signal. Restart them with the time left.
/// - A child that execs keeps `SIG_IGN` when it is forked (Lull's fork handler puts the
///   program's dispositions back in the child), but starts with the default disposition
///   when started by `posix_spawn` (Foundation's `Process`): exec resets handled signals to
///   their default. Give such a child `SIG_IGN` itself, or spawn it while no source
///   watches the signal.
/// - When the last source on the signal is cancelled, the disposition the forwarder found
///   is back (`SIG_IGN`, `SIG_DFL`, or the program's handler), unless the program changed
///   the disposition meanwhile, which then stays.
///
/// Valid numbers are 1...31 and SIGRTMIN...SIGRTMAX (34...64 with glibc), except SIGKILL
/// and SIGSTOP; glibc keeps 32 and 33 for its threads (NPTL). Any other number cancels the
/// source with a `registrationError` (`EINVAL`) that says so.
public final class SignalSource: EventSourceBase, EventSourceProtocol, @unchecked Sendable {  // Sendable: see EventSourceBase
    init(signal: Int32, queue: WorkQueue, services: SourceServices) {
        super.init(core: DrivenSourceCore(kind: SignalSource.self, target: queue, merge: .add,
                                          handle: UInt(truncatingIfNeeded: signal), mask: 0,
                                          driver: SignalDriver(signal: signal, hub: services.signals)))
    }
}

final class SignalDriver: SourceKind {
    let signal: Int32
    private let hub: SignalHub

    init(signal: Int32, hub: SignalHub) {
        self.signal = signal
        self.hub = hub
    }

    func register(_ core: SourceCore) -> (any Error)? {
        hub.add(core, signal: signal)
    }

    func unregister(_ core: SourceCore) {
        hub.remove(core, signal: signal)
    }
}

/// Counts signals for every signal source: the forwarder (C, async-signal-safe) counts per
/// signal and writes to one eventfd registered with the reactor; the reactor callback takes
/// the counts and merges them into each source of that signal.
///
/// State model, per signal, under the hub's lock: *unwatched* (no source) and *watched*
/// (one or more sources in `sources[signal]`; the forwarder installed, or a default action
/// Lull leaves alone). The first `add` watches (`lull_signal_watch`), the `remove` of the
/// last source unwatches (`lull_signal_unwatch`), both under the lock; why, and the
/// invariant asserted in debug builds, are in docs/EventSources.md ("Signals").
final class SignalHub: ReactorEventHandler {
    private let reactor: Reactor

    init(reactor: Reactor) {
        self.reactor = reactor
    }

    private struct State {
        var notifyDescriptor: Int32 = -1
        var registration: DescriptorRegistration?
        var sources: [Int32: [SourceCore]] = [:]
    }

    private let state = Mutex<State>(State())

    /// Why a number is no signal a source can observe, or nil when it is one.
    static func invalidReason(_ signal: Int32) -> String? {
        let realtime = lull_signal_realtime_min()...lull_signal_realtime_max()
        let classic: ClosedRange<Int32> = 1...31
        if (classic.contains(signal) || realtime.contains(signal)) && signal != SIGKILL && signal != SIGSTOP {
            return nil
        }
        let reserved = "\(classic.upperBound + 1)...\(realtime.lowerBound - 1)"
        let valid = "valid: \(classic.lowerBound)...\(classic.upperBound) and SIGRTMIN...SIGRTMAX (\(realtime.lowerBound)...\(realtime.upperBound)), except SIGKILL and SIGSTOP; \(reserved) are reserved by glibc for its threads (NPTL)"
        if signal == SIGKILL || signal == SIGSTOP {
            return "SIGKILL and SIGSTOP cannot be caught or observed (\(valid))"
        }
        if signal > classic.upperBound && signal < realtime.lowerBound {
            return "signal \(signal) is reserved by glibc for its threads (NPTL) (\(valid))"
        }
        return "not a signal that can be observed (\(valid))"
    }

    func add(_ core: SourceCore, signal: Int32) -> (any Error)? {
        let subject = "\(core.name): signal \(signal)"
        if let reason = SignalHub.invalidReason(signal) {
            return EventSourceError(subject: subject, code: EINVAL, reason: reason)
        }
        return state.locked(ranked: .signalHub) { state -> (any Error)? in
            if state.notifyDescriptor < 0 {
                let descriptor: Int32
                do throws(SystemError) {
                    descriptor = try Syscall.shim("eventfd") { lull_eventfd() }
                } catch {
                    return EventSourceError(subject: subject, code: error.code)
                }
                do throws(ReactorError) {
                    state.registration = try reactor.register(descriptor: descriptor, forWriting: false, handler: self)
                } catch {
                    close(descriptor)
                    return EventSourceError(subject: subject, code: error.errno)
                }
                state.notifyDescriptor = descriptor
            }
            let mode = lull_signal_watch(signal, state.notifyDescriptor)
            guard mode >= 0 else {
                // An unwatched signal stays unwatched (no entry); a watched one keeps its forwarder.
                return EventSourceError(subject: subject, code: -mode)
            }
            if mode == Int32(LULL_SIGNAL_DEFAULT_ACTION) {
                RuntimeLog.once("signal-default-\(signal)") {
                    "\(subject): the signal's disposition is its default action, which ends or stops the process; set it to SIG_IGN before activating the source, as with Dispatch"
                }
            }
            // Deliveries counted while no source watched this signal belong to nobody.
            if state.sources[signal] == nil { _ = lull_signal_take(signal) }
            state.sources[signal, default: []].append(core)
            return nil
        }
    }

    func remove(_ core: SourceCore, signal: Int32) {
        state.locked(ranked: .signalHub) { state in
            guard var cores = state.sources[signal] else { return }
            assert(!cores.isEmpty, "SignalHub: signal \(signal) has an empty source list")
            cores.removeAll { $0 === core }
            guard cores.isEmpty else {
                state.sources[signal] = cores
                return
            }
            // The last source: watched → unwatched, the program's disposition back.
            state.sources[signal] = nil
            if let failure = Syscall.failure("sigaction", { lull_signal_unwatch(signal) }) {
                RuntimeLog.once("signal-unwatch-\(signal)") {
                    "signal \(signal): putting back the program's disposition failed (\(failure)); the forwarder stays and ignores it"
                }
            }
        }
    }

    /// On the polling thread: the eventfd was written by the forwarder.
    func reactorEvent(readable: Bool, writable: Bool) {
        let (descriptor, watched) = state.locked(ranked: .signalHub) { ($0.notifyDescriptor, $0.sources) }
        lull_eventfd_drain(descriptor)
        for (signal, cores) in watched {
            assert(!cores.isEmpty, "SignalHub: signal \(signal) has an empty source list")
            let count = lull_signal_take(signal)
            guard count > 0 else { continue }
            for core in cores { core.merge(UInt(count)) }
        }
    }
}
