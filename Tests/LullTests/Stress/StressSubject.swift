import Glibc
import Synchronization
import Lull

/// What the subjects of one run share: the run's violation log, its directory for watched
/// files, and every probe and child made, for the runner's final checks.
final class StressContext: Sendable {
    let violations = Recorder<String>()
    let probes = Recorder<StressProbe>()
    let children = Recorder<pid_t>()
    let directory: String
    private let nextIdentity = Atomic<Int>(0)

    init(directory: String) {
        self.directory = directory
    }

    func makeIdentity() -> Int {
        nextIdentity.add(1, ordering: .relaxed).newValue
    }
}

/// One live source of the stress harness, its resources, and its instrumented handlers.
/// The slot table holds the subject; the handlers hold its probe and resources and reach
/// the source only weakly, so that dropping the slot's reference can release the source.
final class StressSubject: Sendable {
    let identity: Int
    let kind: StressKind
    let probe: StressProbe
    let source: any EventSourceProtocol
    private let resources: StressResources
    private let weakSource: WeakSource

    /// The real-time signal the signal sources watch and the stimuli raise: the harness's
    /// own (SIGRTMIN + 6), set to SIG_IGN once, before any source on it exists (a source
    /// does not change its signal's disposition).
    static let signalNumber: Int32 = {
        let number = __libc_current_sigrtmin() + 6
        signal(number, SIG_IGN)
        return number
    }()

    /// Makes a source of `kind` with what it watches; nil if that could not be made (out of
    /// descriptors, a failed spawn, a failed throwing factory): the step is then skipped.
    static func make(_ kind: StressKind, parameter: UInt8, context: StressContext) -> StressSubject? {
        let identity = context.makeIdentity()
        let queue = makeQueue(parameter, identity: identity)
        let source: any EventSourceProtocol
        let resources: StressResources
        switch kind {
        case .read:
            guard let (reader, writer) = try? SourceTestKit.makePipe() else { return nil }
            SourceTestKit.setNonBlocking(reader)
            SourceTestKit.setNonBlocking(writer)
            resources = StressResources(watched: reader, peer: writer)
            source = EventSource.makeReadSource(fileDescriptor: reader, queue: queue)
        case .write:
            guard let (writer, reader) = try? SourceTestKit.makeSocketPair() else { return nil }
            SourceTestKit.setNonBlocking(writer)
            SourceTestKit.setNonBlocking(reader)
            // A small send buffer fills after a few events: the handler stops until drained.
            var size: Int32 = 4_096
            setsockopt(writer, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            resources = StressResources(watched: writer, peer: reader)
            source = EventSource.makeWriteSource(fileDescriptor: writer, queue: queue)
        case .timer:
            resources = StressResources()
            source = EventSource.makeTimerSource(flags: parameter & 1 == 0 ? [] : .strict, queue: queue)
        case .add:
            resources = StressResources()
            source = EventSource.makeUserDataAddSource(queue: queue)
        case .or:
            resources = StressResources()
            source = EventSource.makeUserDataOrSource(queue: queue)
        case .replace:
            resources = StressResources()
            source = EventSource.makeUserDataReplaceSource(queue: queue)
        case .signal:
            resources = StressResources()
            source = EventSource.makeSignalSource(signal: signalNumber, queue: queue)
        case .process:
            guard let child = try? SourceTestKit.spawnShell("exec sleep 30") else { return nil }
            context.children.append(child)
            resources = StressResources(child: child)
            source = EventSource.makeProcessSource(identifier: child, eventMask: .exit, queue: queue)
        case .fileSystem:
            let path = "\(context.directory)/s\(identity)"
            let created = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            guard created >= 0 else { return nil }
            close(created)
            if parameter & 1 == 0 {
                let watched = open(path, O_RDONLY | O_CLOEXEC)
                guard watched >= 0 else { return nil }
                resources = StressResources(watched: watched, path: path)
                source = EventSource.makeFileSystemObjectSource(fileDescriptor: watched, eventMask: .all, queue: queue)
            } else {
                resources = StressResources(path: path)
                guard let made = try? EventSource.makeFileSystemObjectSource(path: path, eventMask: .all, queue: queue) else { return nil }
                source = made
            }
        }
        let probe = StressProbe(name: "source #\(identity) (\(kind.rawValue))", violations: context.violations)
        context.probes.append(probe)
        let subject = StressSubject(identity: identity, kind: kind, probe: probe, source: source, resources: resources)
        // Installed before the source can be activated: every source has a cancel handler
        // (the runner waits for it) and a registration handler (its order is checked).
        subject.setEventHandler(variant: 0)
        subject.setCancelHandler(variant: 0)
        subject.setRegistrationHandler(variant: 0)
        return subject
    }

    private init(identity: Int, kind: StressKind, probe: StressProbe, source: any EventSourceProtocol, resources: StressResources) {
        self.identity = identity
        self.kind = kind
        self.probe = probe
        self.source = source
        self.resources = resources
        weakSource = WeakSource(source)
    }

    /// The default global queue, a serial or a concurrent queue of the source's own, or the
    /// utility global queue.
    private static func makeQueue(_ parameter: UInt8, identity: Int) -> WorkQueue? {
        switch (parameter >> 1) & 3 {
        case 0: nil
        case 1: WorkQueue(label: "lull.test.stress.serial.\(identity)")
        case 2: WorkQueue(label: "lull.test.stress.concurrent.\(identity)", attributes: .concurrent)
        default: WorkQueue.global(qos: .utility)
        }
    }

    // MARK: Handlers

    /// 0 a closure, 1 a work item, 2 none, 3 a slow closure, 4 a closure that cancels its
    /// own source, 5 a closure at utility QoS.
    func setEventHandler(variant: UInt8) {
        let probe = probe
        let resources = resources
        let kind = kind
        let weakSource = weakSource
        let body: @Sendable () -> Void = {
            probe.enter(.event)
            let ended = StressSubject.consumeEvent(kind: kind, resources: resources, probe: probe)
            if variant % 6 == 3 { spin(microseconds: 100) }
            if ended || variant % 6 == 4 { weakSource.source?.cancel() }
            probe.leave(.event)
        }
        switch variant % 6 {
        case 1: source.setEventHandler(handler: WorkItem(block: body))
        case 2: source.setEventHandler(handler: nil)
        case 5: source.setEventHandler(qos: .utility, flags: [], handler: body)
        default: source.setEventHandler(handler: body)
        }
    }

    /// 0 a closure, 1 a work item, 2 a closure at background QoS.
    func setCancelHandler(variant: UInt8) {
        let probe = probe
        let resources = resources
        let body: @Sendable () -> Void = {
            probe.enter(.cancel)
            resources.closeAll()
            probe.leave(.cancel)
        }
        switch variant % 3 {
        case 1: source.setCancelHandler(handler: WorkItem(block: body))
        case 2: source.setCancelHandler(qos: .background, flags: [], handler: body)
        default: source.setCancelHandler(handler: body)
        }
    }

    /// 0 a closure, 1 a work item.
    func setRegistrationHandler(variant: UInt8) {
        let probe = probe
        let body: @Sendable () -> Void = {
            probe.enter(.registration)
            probe.leave(.registration)
        }
        if variant % 2 == 1 {
            source.setRegistrationHandler(handler: WorkItem(block: body))
        } else {
            source.setRegistrationHandler(handler: body)
        }
    }

    /// What an event handler of `kind` does with the event, as a program would: read what
    /// is readable, write while there is room. True when the watched channel ended (end of
    /// file, a broken pipe): the handler then cancels its source.
    private static func consumeEvent(kind: StressKind, resources: StressResources, probe: StressProbe) -> Bool {
        // Only while the cancel handler has not closed it (the probe reports a handler that
        // runs after the cancel handler; it must not touch a number reused since).
        guard !probe.isFinished else { return false }
        let descriptor = resources.watchedDescriptor
        guard descriptor >= 0 else { return false }
        switch kind {
        case .read:
            var buffer = [UInt8](repeating: 0, count: 4_096)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                if count > 0 { continue }
                if count < 0 && errno == EINTR { continue }
                return count == 0
            }
        case .write:
            let bytes = [UInt8](repeating: 0x5a, count: 2_048)
            let result = bytes.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL)) }
            return result < 0 && (errno == EPIPE || errno == ECONNRESET)
        default:
            return false
        }
    }

    // MARK: Stimuli

    /// Makes events for the source: see `StressOperation.stimulate`.
    func stimulate(_ parameter: UInt8) {
        switch kind {
        case .read:
            resources.withPeer { writer in
                let bytes = [UInt8](repeating: parameter, count: Int(parameter % 64) + 1)
                _ = bytes.withUnsafeBytes { write(writer, $0.baseAddress, $0.count) }
            }
        case .write:
            resources.withPeer { reader in SourceTestKit.drain(reader) }
        case .timer:
            guard let timer = source as? TimerSource else { return }
            let delay = Duration.microseconds(Int(parameter % 8) * 500)
            let repeating: Duration? = parameter & 8 == 0 ? nil : .milliseconds(2 + Int(parameter % 4))
            let leeway: Duration = parameter & 16 == 0 ? .zero : .milliseconds(1)
            if parameter & 32 == 0 {
                timer.schedule(deadline: .now() + delay, repeating: repeating, leeway: leeway)
            } else {
                timer.schedule(wallDeadline: .now() + delay, repeating: repeating, leeway: leeway)
            }
        case .add:
            (source as? UserDataAddSource)?.add(data: UInt(parameter % 4))
        case .or:
            (source as? UserDataOrSource)?.or(data: parameter % 9 == 0 ? 0 : 1 << UInt(parameter % 8))
        case .replace:
            (source as? UserDataReplaceSource)?.replace(data: UInt(parameter % 3))
        case .signal:
            var unblocked = sigset_t()
            sigemptyset(&unblocked)
            sigaddset(&unblocked, StressSubject.signalNumber)
            pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
            raise(StressSubject.signalNumber)
        case .process:
            if parameter % 4 == 0 { kill(resources.child, SIGTERM) }
        case .fileSystem:
            touchFile(parameter)
        }
    }

    /// Ends what the source watches: closes the peer (end of file, a broken pipe), kills
    /// the child, or replaces the watched file with a new one of the same name.
    func closePeer() {
        switch kind {
        case .read, .write:
            resources.closePeer()
        case .process:
            kill(resources.child, SIGKILL)
        case .fileSystem:
            unlink(resources.path)
            let created = open(resources.path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
            if created >= 0 { close(created) }
        case .timer, .add, .or, .replace, .signal:
            break
        }
    }

    /// Writes, changes the mode, adds and removes a hard link, or truncates.
    private func touchFile(_ parameter: UInt8) {
        let path = resources.path
        switch parameter % 4 {
        case 0:
            let descriptor = open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
            guard descriptor >= 0 else { return }
            let bytes = [UInt8](repeating: parameter, count: 16)
            _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            close(descriptor)
        case 1:
            chmod(path, parameter & 4 == 0 ? 0o644 : 0o600)
        case 2:
            if link(path, path + ".link") == 0 { unlink(path + ".link") }
        default:
            truncate(path, 0)
        }
    }
}

/// The source, reached weakly from its own handlers (a strong capture would keep a dropped
/// source alive until it is cancelled).
final class WeakSource: Sendable {
    private struct Reference {
        weak var source: (any EventSourceProtocol)?
    }

    private let storage: Mutex<Reference>

    init(_ source: any EventSourceProtocol) {
        storage = Mutex(Reference(source: source))
    }

    var source: (any EventSourceProtocol)? { storage.locked { $0.source } }
}
