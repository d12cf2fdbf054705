import Synchronization

/// One `CoalescingClock` sleep: a timer entry that resumes a suspended task once its window
/// [deadline, deadline + leeway] is open, or throws `CancellationError` into it when the task
/// is cancelled first.
///
/// Its state model (docs/Timers.md, "Sleeps"):
///
///     created ──start──▶ armed ──fire──▶ fired
///        │                 │
///        └────cancel──────▶└──cancel──▶ cancelled
///
/// - `start` installs the continuation (created → armed) and only then puts the entry in the
///   engine; if the task was cancelled before (created → cancelled), it resumes at once with
///   `CancellationError` and schedules nothing.
/// - `fire` (the engine, on the polling thread) and `cancel` (the task's cancellation
///   handler, on any thread) race for the armed continuation: the one that moves the phase
///   out of `armed` under the lock takes it and resumes it, after the lock; the other finds
///   a final phase and does nothing. So the continuation is resumed exactly once.
/// - No entry is left in the engine: `cancel` takes the entry out after its phase change;
///   `start`, after scheduling, looks again and takes it out if a cancel came meanwhile (the
///   cancel's own removal may have come before the scheduling). Whichever of the two runs
///   last finds the entry scheduled, if it still is. A fire that slips in between finds the
///   phase `cancelled` and does nothing.
final class SleepTimer: TimerEntry, @unchecked Sendable {  // Sendable: `heapFields` follows `TimerEntry`'s rule; the rest is under `phase`'s lock
    @exclusivity(unchecked) var heapFields = TimerHeapFields()  // the engine's lock keeps accesses apart
    /// The QoS class whose default leeway the sleep got, or that asked for it (diagnostics).
    let qosClass: QoS.QoSClass

    private enum Phase {
        case created
        case armed(CheckedContinuation<Void, any Error>)
        case fired
        case cancelled
    }

    /// A checked continuation: the phases already resume it once, and the check (a trap on a
    /// second resume) costs little beside a sleep.
    private let phase = Mutex<Phase>(.created)

    init(qosClass: QoS.QoSClass) {
        self.qosClass = qosClass
    }

    /// Suspends until the window [deadline, deadline + leeway] (monotonic ns) is open on
    /// `engine`; throws `CancellationError` if the task is cancelled first (or was already).
    static func sleep(until deadline: UInt64, leeway: UInt64, qosClass: QoS.QoSClass,
                      on engine: TimerEngine) async throws {
        try Task.checkCancellation()
        let sleeper = SleepTimer(qosClass: qosClass)
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                sleeper.start(continuation, deadline: deadline, leeway: leeway, on: engine)
            }
        } onCancel: {
            sleeper.cancel(on: engine)
        }
    }

    /// created → armed, then scheduled; or, after an early cancel, resumed with the error.
    private func start(_ continuation: CheckedContinuation<Void, any Error>, deadline: UInt64, leeway: UInt64,
                       on engine: TimerEngine) {
        let cancelledEarly = phase.locked { phase -> Bool in
            switch phase {
            case .created:
                phase = .armed(continuation)
                return false
            case .cancelled:
                return true
            case .armed, .fired:
                assertionFailure("a sleep started twice")
                return true
            }
        }
        if cancelledEarly {
            continuation.resume(throwing: CancellationError())
            return
        }
        // A sleep until the end of the clock is never due: it waits for its cancel alone.
        guard deadline != .max else { return }
        engine.schedule(self, deadline: deadline, leeway: leeway)
        let cancelledMeanwhile = phase.locked { phase -> Bool in
            if case .cancelled = phase { return true }
            return false
        }
        if cancelledMeanwhile { engine.cancel(self) }
    }

    /// The task was cancelled: armed → cancelled (the continuation throws), created →
    /// cancelled (`start` will throw); nothing after a fire.
    private func cancel(on engine: TimerEngine) {
        let continuation = phase.locked { phase -> CheckedContinuation<Void, any Error>? in
            switch phase {
            case .created:
                phase = .cancelled
                return nil
            case .armed(let continuation):
                phase = .cancelled
                return continuation
            case .fired, .cancelled:
                return nil
            }
        }
        guard let continuation else { return }
        engine.cancel(self)
        continuation.resume(throwing: CancellationError())
    }

    /// The engine fired the window: armed → fired (the task resumes); nothing after a cancel.
    func fired(sequence: UInt32, deadline: UInt64, now: UInt64) {
        let continuation = phase.locked { phase -> CheckedContinuation<Void, any Error>? in
            switch phase {
            case .armed(let continuation):
                phase = .fired
                return continuation
            case .cancelled:
                return nil
            case .created, .fired:
                assertionFailure("a sleep fired before it started, or twice")
                return nil
            }
        }
        continuation?.resume()
    }

    /// The leeway of a sleep: the tolerance when one is given (negative counts as none),
    /// else the default leeway of `qosClass` for the delay (as for a timer without `.strict`).
    static func leeway(tolerance: Duration?, delay: UInt64, qosClass: QoS.QoSClass) -> UInt64 {
        guard let tolerance else { return DefaultLeeway.nanoseconds(for: qosClass, delay: delay) }
        let nanoseconds = tolerance.nanoseconds128
        if nanoseconds <= 0 { return 0 }
        return nanoseconds >= Int128(UInt64.max) ? .max : UInt64(nanoseconds)
    }
}

extension SleepTimer: DiagnosedTimer {
    /// All sleeps are one timer in wake-up reports, per QoS class.
    func diagnosticsOrigin() -> (TimerFireOrigin, interval: UInt64?) {
        (TimerFireOrigin(identity: "CoalescingClock.sleep", queue: "(task)",
                         qos: qosClass == .unspecified ? .default : qosClass, instance: 0), nil)
    }
}
