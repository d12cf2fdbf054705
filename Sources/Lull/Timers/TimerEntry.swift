/// One pending fire in the timer engine: a window [deadline, deadline + leeway] on the
/// monotonic clock. What firing does is the conforming class's: a delayed block
/// (`DelayedEntry`), a callback on the polling thread (`CallbackEntry`), or a timer source,
/// whose core is its own entry (`TimerCore`: one object per timer beside the program's
/// handle, rescheduled in place from fire to fire).
///
/// Only timers are entries: each keeps the engine's fields (`TimerHeapFields`, 20 bytes)
/// inline, so that scheduling allocates nothing and no other object carries them.
///
/// The engine reads and writes `heapFields` under its lock while the entry is scheduled;
/// the owner may write them (under a lock of its own) only while the entry is not in the
/// engine. Conforming classes are `@unchecked Sendable` on that rule, and store the fields
/// `@exclusivity(unchecked)`: the rule keeps the accesses apart, and the run-time check
/// would cost every heap operation a look at a thread-local access set.
protocol TimerEntry: AnyObject, Sendable {
    /// Where the entry stands in the engine (see the protocol's rule for who writes it).
    var heapFields: TimerHeapFields { get set }
    /// The runtime's own (the stall check): not counted among the program's timers.
    var isHousekeeping: Bool { get }
    /// The engine fired the scheduling `sequence` of this entry, whose window opened at
    /// `deadline` (outside the engine's lock: the entry may have been rescheduled since).
    func fired(sequence: UInt32, deadline: UInt64, now: UInt64)
}

/// The heap fields by name, as the engine and the heap use them.
extension TimerEntry {
    var isHousekeeping: Bool { false }
    var deadline: UInt64 { get { heapFields.deadline } set { heapFields.deadline = newValue } }
    var sequence: UInt32 { get { heapFields.sequence } set { heapFields.sequence = newValue } }
    var leeway: UInt64 { get { heapFields.leeway } set { heapFields.leeway = newValue } }
    var slot: Int32 { get { heapFields.slot } set { heapFields.slot = newValue } }
    var isScheduled: Bool { heapFields.slot >= 0 }
    var latest: UInt64 { heapFields.latest }
}

/// A timer entry's fields in the engine, as small as the engine allows (a million idle
/// timers are mostly the objects that hold them).
struct TimerHeapFields {
    var deadline: UInt64 = 0
    /// Numbers the schedulings (never 0, which means none): orders equal deadlines, and
    /// tells a fire of an earlier scheduling of the same entry from the current one. 32 bits
    /// wrap (see `TimerSequence`): a fire is compared with its own entry's current
    /// scheduling microseconds later, never 2^32 schedulings apart.
    var sequence: UInt32 = 0
    /// The leeway in 32 bits (see `LeewayCode`).
    private var leewayCode = LeewayCode(nanoseconds: 0)
    /// Where the entry is in the engine's heap; -1: not scheduled.
    var slot: Int32 = -1

    /// The leeway: exact up to about 2.1 s, rounded down to whole milliseconds above (up to
    /// about 24.8 days), `UInt64.max` for a window that never closes. Rounding down narrows
    /// a window: a timer may fire a little sooner within it, never later than asked.
    var leeway: UInt64 {
        get { leewayCode.nanoseconds }
        set { leewayCode = LeewayCode(nanoseconds: newValue) }
    }

    /// The end of the window: the deadline plus the leeway, at most the end of the clock.
    var latest: UInt64 {
        let (sum, overflow) = deadline.addingReportingOverflow(leeway)
        return overflow ? .max : sum
    }
}

/// Scheduling numbers in 32 bits that wrap: "earlier" is a wrapping difference, right while
/// the entries compared were scheduled fewer than 2^31 schedulings apart (two entries with
/// the very same deadline nanosecond, scheduled billions of schedulings apart, may fire in
/// either order within their one wake-up).
enum TimerSequence {
    static func isEarlier(_ lhs: UInt32, than rhs: UInt32) -> Bool {
        Int32(bitPattern: lhs &- rhs) < 0
    }

    /// The number after `sequence`, skipping 0.
    static func next(after sequence: UInt32) -> UInt32 {
        let next = sequence &+ 1
        return next == 0 ? 1 : next
    }
}

/// A leeway in 32 bits: nanoseconds below 2^31, whole milliseconds above (the top bit set),
/// all ones for "no end".
struct LeewayCode {
    private let bits: UInt32

    private static let millisecondsFlag: UInt32 = 0x8000_0000
    private static let unbounded: UInt32 = .max

    init(nanoseconds: UInt64) {
        if nanoseconds < UInt64(LeewayCode.millisecondsFlag) {
            bits = UInt32(nanoseconds)
        } else if nanoseconds == .max {
            bits = LeewayCode.unbounded
        } else {
            let milliseconds = min(nanoseconds / 1_000_000, UInt64(LeewayCode.unbounded - 1 - LeewayCode.millisecondsFlag))
            bits = LeewayCode.millisecondsFlag | UInt32(milliseconds)
        }
    }

    var nanoseconds: UInt64 {
        if bits < LeewayCode.millisecondsFlag { return UInt64(bits) }
        if bits == LeewayCode.unbounded { return .max }
        return UInt64(bits & ~LeewayCode.millisecondsFlag) * 1_000_000
    }
}

/// A callback that runs on the polling thread itself, which must not block: runtime
/// housekeeping (and tests of the engine).
final class CallbackEntry: TimerEntry, @unchecked Sendable {  // Sendable: `heapFields` follows `TimerEntry`'s rule
    @exclusivity(unchecked) var heapFields = TimerHeapFields()  // the engine's lock keeps accesses apart
    let action: @Sendable () -> Void
    private let housekeeping: Bool

    init(isHousekeeping: Bool = false, _ action: @escaping @Sendable () -> Void) {
        self.action = action
        housekeeping = isHousekeeping
    }

    var isHousekeeping: Bool { housekeeping }

    func fired(sequence: UInt32, deadline: UInt64, now: UInt64) {
        action()
    }
}
