import LullDiagnosticsFormat

/// A quality-of-service class and a relative priority inside it: one abstract parameter that
/// Lull turns into a thread's nice value, its I/O class and its timer coalescing.
public struct QoS: Hashable, Sendable {
    /// The QoS classes, from background work nobody waits for to the user's interaction.
    public enum QoSClass: Comparable, Hashable, Sendable, CaseIterable {
        /// Work the user does not see (see ``QoS/background``).
        case background
        /// Long work the user knows about (see ``QoS/utility``).
        case utility
        /// The default class (see ``QoS/default``).
        case `default`
        /// Work the user started and waits for (see ``QoS/userInitiated``).
        case userInitiated
        /// The user's interaction itself (see ``QoS/userInteractive``).
        case userInteractive
        /// No class: inherited from the submitter or the queue (see ``QoS/unspecified``).
        case unspecified

        /// `unspecified < background < utility < default < userInitiated < userInteractive`.
        var rank: Int {
            switch self {
            case .unspecified: 0
            case .background: 1
            case .utility: 2
            case .default: 3
            case .userInitiated: 4
            case .userInteractive: 5
            }
        }

        /// Orders classes: `unspecified` lowest, then background up to user-interactive.
        public static func < (lhs: QoSClass, rhs: QoSClass) -> Bool {
            lhs.rank < rhs.rank
        }

        /// The classes by `rank`.
        static let byRank: [QoSClass] = [.unspecified, .background, .utility, .default, .userInitiated, .userInteractive]

        /// The classes that have worker threads, lowest first (`unspecified` has none).
        static let schedulable: [QoSClass] = [.background, .utility, .default, .userInitiated, .userInteractive]

        /// Index into per-class tables (0 = background ... 4 = userInteractive);
        /// `unspecified` shares the default class's slot.
        var poolIndex: Int {
            self == .unspecified ? 2 : rank - 1
        }

        /// The class as powermetrics names it ("background", ..., "user-interactive"): the
        /// name wake-up reports use too (`TraceQoS`, whose raw values are the ranks).
        var name: String {
            // Every rank (0...5) is a raw value of `TraceQoS`.
            TraceQoS(rawValue: UInt8(rank))!.name
        }
    }

    /// The class: which worker threads run the work, at which nice value.
    public let qosClass: QoSClass
    /// Orders work inside one class: -15 (lowest) ... 0.
    public let relativePriority: Int

    /// - Precondition: `relativePriority` is in -15...0, as in Dispatch.
    public init(qosClass: QoSClass, relativePriority: Int) {
        guard (-15...0).contains(relativePriority) else {
            lullFatal("QoS relativePriority \(relativePriority) is out of range -15...0")
        }
        self.qosClass = qosClass
        self.relativePriority = relativePriority
    }

    init(_ qosClass: QoSClass) {
        self.qosClass = qosClass
        self.relativePriority = 0
    }

    /// Work the user does not see (backups, indexing): nice +15 under `SCHED_IDLE` (opt out
    /// with `LULL_BACKGROUND_SCHED_IDLE=0`), idle I/O class, the widest default timer leeway
    /// and a 100 ms timer slack, util_max 256 where the kernel clamps utilization.
    public static let background = QoS(.background)
    /// Long work the user knows about (downloads, imports): nice +5, a wider default timer
    /// leeway and a 10 ms timer slack, util_max 512 where the kernel clamps utilization.
    public static let utility = QoS(.utility)
    /// The default class, between utility and user-initiated: nice 0.
    public static let `default` = QoS(.default)
    /// Work the user started and waits for (opening a document): nice -5 where allowed.
    public static let userInitiated = QoS(.userInitiated)
    /// Work on the user's interaction itself (the main thread's class): nice -10 where allowed,
    /// util_min 512 where the kernel clamps utilization.
    public static let userInteractive = QoS(.userInteractive)
    /// No QoS: the work takes the QoS it inherits (submitter, queue), as in Dispatch.
    public static let unspecified = QoS(.unspecified)

    var isUnspecified: Bool { qosClass == .unspecified }

    /// The larger of two QoS values: class first, then relative priority.
    static func maximum(_ lhs: QoS, _ rhs: QoS) -> QoS {
        if lhs.qosClass != rhs.qosClass { return lhs.qosClass > rhs.qosClass ? lhs : rhs }
        return lhs.relativePriority >= rhs.relativePriority ? lhs : rhs
    }
}

extension QoS: CustomStringConvertible {
    /// "utility", or with a relative priority "utility-4".
    public var description: String {
        relativePriority == 0 ? qosClass.name : "\(qosClass.name)\(relativePriority)"
    }
}
