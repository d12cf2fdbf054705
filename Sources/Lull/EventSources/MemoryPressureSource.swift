import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Levels of memory pressure, with Dispatch's DISPATCH_MEMORYPRESSURE_* values.
public struct MemoryPressureEvent: OptionSet, Sendable {
    /// The bits of the levels.
    public let rawValue: UInt
    /// The levels with these bits.
    public init(rawValue: UInt) { self.rawValue = rawValue }

    /// Pressure is low again: a whole window passed with little stall after a raised level.
    public static let normal = MemoryPressureEvent(rawValue: 0x1)
    /// Tasks waited for memory for at least 10% of a 2 s window.
    public static let warning = MemoryPressureEvent(rawValue: 0x2)
    /// Tasks waited for memory for at least 40% of a 2 s window.
    public static let critical = MemoryPressureEvent(rawValue: 0x4)
    /// Every level.
    public static let all: MemoryPressureEvent = [.normal, .warning, .critical]
}

/// Reports changes of the memory pressure on the process, from Linux's pressure-stall
/// information (PSI): the cgroup v2 `memory.pressure` of the process's cgroup when it has
/// the memory controller, otherwise `/proc/pressure/memory`.
///
/// The measure is the "some" stall: time in which at least one task waited for memory
/// (reclaim, refaults, throttling by `memory.high`). Per 2 s window:
/// - `.warning` when 10% of the window (200 ms) stalled;
/// - `.critical` when 40% (800 ms) did;
/// - `.normal` once a whole window after a raised level stalled less than 10%.
/// A level is reported when it changes and is in the mask (a critical level that falls to
/// warning reports `.warning`); `data` is the level seen. Kernel triggers announce a rise
/// without polling; while the level is raised, the source reads the file's stall total once
/// per window to see it fall.
///
/// Where PSI is missing (a kernel without it, or booted with `psi=0`) or the kernel refuses
/// the triggers (some refuse them to programs without CAP_SYS_RESOURCE), the source cancels
/// at activation with the reason in `registrationError`; its cancel handler runs.
public final class MemoryPressureSource: EventSourceBase, EventSourceProtocol, @unchecked Sendable {  // Sendable: see EventSourceBase
    init(eventMask: MemoryPressureEvent, queue: WorkQueue, services: SourceServices,
         path: String? = nil, thresholds: MemoryPressureThresholds = .standard) {
        super.init(core: DrivenSourceCore(kind: MemoryPressureSource.self, target: queue, merge: .or,
                                          handle: 0, mask: eventMask.rawValue,
                                          driver: MemoryPressureDriver(mask: eventMask, path: path,
                                                                       thresholds: thresholds,
                                                                       reactor: services.reactor)))
    }
}

/// The memory-pressure kind: one PSI trigger descriptor per raised level it must hear of
/// (warning always, since `.normal` follows a rise; critical when the mask has it), each
/// registered with the reactor, and a sampling timer while the level is raised.
///
/// State model (under `watch`): `nil` before registration and after `finished`; then the
/// descriptors, their registrations (taken out by `unregister`), the reading (moved only by
/// deliveries, which run one at a time), whether a sample is scheduled, and `stopped`
/// (set by `unregister`; a sample timer that fires after it merges nothing, and one that
/// fires while `unregister` runs merges into a cancelled core, which delivers nothing).
final class MemoryPressureDriver: SourceKind {
    let mask: MemoryPressureEvent
    let path: String?
    let thresholds: MemoryPressureThresholds
    private let reactor: Reactor

    private struct Trigger {
        let descriptor: Int32
        var registration: DescriptorRegistration?
    }

    private struct Watch {
        var warning: Trigger
        var critical: Trigger?
        var reading: MemoryPressureReading
        /// The sample timer, while one is scheduled and its sample not yet delivered.
        var sampler: CallbackEntry?
        var stopped = false
    }

    private let watch = Mutex<Watch?>(nil)

    init(mask: MemoryPressureEvent, path: String?, thresholds: MemoryPressureThresholds, reactor: Reactor) {
        self.mask = mask
        self.path = path
        self.thresholds = thresholds
        self.reactor = reactor
    }

    func register(_ core: SourceCore) -> (any Error)? {
        let path = path ?? PressureStallFile.memoryPressurePath()
        let subject = "\(core.name): memory pressure (\(path))"
        let warning: Int32
        var critical: Int32?
        do throws(EventSourceError) {
            warning = try PressureStallFile.openTrigger(path: path, trigger: thresholds.trigger(stall: thresholds.warningStall),
                                                        subject: subject)
            if mask.contains(.critical) {
                do throws(EventSourceError) {
                    critical = try PressureStallFile.openTrigger(path: path,
                                                                 trigger: thresholds.trigger(stall: thresholds.criticalStall),
                                                                 subject: subject)
                } catch {
                    close(warning)
                    throw error
                }
            }
        } catch {
            return error
        }
        let descriptors = [warning] + (critical.map { [$0] } ?? [])
        guard let total = PressureStallFile.someTotal(descriptor: warning) else {
            descriptors.forEach { close($0) }
            return EventSourceError(subject: subject, code: 0, reason: "cannot read the stall total of \(path)")
        }
        let reading = MemoryPressureReading(thresholds: thresholds, total: total, now: SystemClock.monotonicNanoseconds())
        watch.locked { $0 = Watch(warning: Trigger(descriptor: warning), critical: critical.map { Trigger(descriptor: $0) },
                                  reading: reading) }
        do throws(ReactorError) {
            let warningRegistration = try reactor.registerPressureTrigger(
                descriptor: warning, handler: PressureTriggerForwarder(core: core, wake: .warningTrigger))
            watch.locked { $0?.warning.registration = warningRegistration }
            if let critical {
                let criticalRegistration = try reactor.registerPressureTrigger(
                    descriptor: critical, handler: PressureTriggerForwarder(core: core, wake: .criticalTrigger))
                watch.locked { $0?.critical?.registration = criticalRegistration }
            }
            return nil
        } catch {
            unregister(core)
            finished(core)
            return EventSourceError(subject: subject, code: error.errno)
        }
    }

    func unregister(_ core: SourceCore) {
        let (registrations, sampler) = watch.locked { watch -> ([DescriptorRegistration], CallbackEntry?) in
            guard watch != nil else { return ([], nil) }
            watch!.stopped = true
            defer {
                watch!.warning.registration = nil
                watch!.critical?.registration = nil
                watch!.sampler = nil
            }
            return ([watch!.warning.registration, watch!.critical?.registration].compactMap { $0 }, watch!.sampler)
        }
        registrations.forEach { $0.remove() }
        if let sampler { core.target.services.timers.cancel(sampler) }
    }

    func finished(_ core: SourceCore) {
        let descriptors = openDescriptors
        watch.locked { watch in
            if let watch {
                assert(watch.stopped && watch.warning.registration == nil && watch.critical?.registration == nil
                       && watch.sampler == nil, "memory pressure: finished before unregister")
            }
            watch = nil
        }
        descriptors.forEach { close($0) }
    }

    /// The trigger descriptors open now (for tests: none before registration and after
    /// `finished`).
    var openDescriptors: [Int32] {
        watch.locked { watch in
            guard let watch else { return [] }
            return [watch.warning.descriptor] + (watch.critical.map { [$0.descriptor] } ?? [])
        }
    }

    /// At a delivery (on the target queue, one at a time): reads the stall total, moves the
    /// reading, schedules the next sample while the level is raised, and delivers the new
    /// level when it changed and is in the mask.
    func dataForDelivery(_ core: SourceCore, merged: UInt) -> UInt? {
        let wake = MemoryPressureWake(rawValue: merged)
        guard let descriptor = watch.locked({ $0.map { $0.warning.descriptor } }) else { return nil }
        // A total that cannot be read decides nothing; the sampling goes on.
        let total = PressureStallFile.someTotal(descriptor: descriptor)
        let now = SystemClock.monotonicNanoseconds()
        let (changed, sampler) = watch.locked { watch -> (MemoryPressureLevel?, CallbackEntry?) in
            guard watch != nil, !watch!.stopped else { return (nil, nil) }
            if wake.contains(.sample) { watch!.sampler = nil }
            let changed = total.flatMap { watch!.reading.decide(wake, total: $0, now: now) }
            guard watch!.reading.level != .normal, watch!.sampler == nil else { return (changed, nil) }
            let sampler = CallbackEntry { [weak self] in self?.sampleDue(core) }
            watch!.sampler = sampler
            return (changed, sampler)
        }
        if let sampler {
            // Scheduled after the lock; an `unregister` in between cancels it (the engine's
            // lock orders the two) or, if it is not scheduled yet, its fire finds `stopped`.
            core.target.services.timers.schedule(sampler, deadline: now + thresholds.window * 1_000,
                                                 leeway: thresholds.window * 100)
        }
        guard let changed, mask.contains(changed.event) else { return nil }
        return changed.event.rawValue
    }

    /// The sample timer fired (on the polling thread).
    private func sampleDue(_ core: SourceCore) {
        guard watch.locked({ $0.map { !$0.stopped } ?? false }) else { return }
        core.merge(MemoryPressureWake.sample.rawValue)
    }
}

/// A trigger's descriptor reported: merge which one.
final class PressureTriggerForwarder: ReactorEventHandler {
    let core: SourceCore
    let wake: MemoryPressureWake

    init(core: SourceCore, wake: MemoryPressureWake) {
        self.core = core
        self.wake = wake
    }

    func reactorEvent(readable: Bool, writable: Bool) {
        core.merge(wake.rawValue)
    }
}
