/// A quality-of-service class and a relative priority inside it: one abstract parameter that
/// Lull turns into a thread's nice value, its I/O class and its timer coalescing.
public struct QoS: Hashable, Sendable {
    public enum QoSClass: Comparable, Hashable, Sendable, CaseIterable {
        case background, utility, `default`, userInitiated, userInteractive, unspecified

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

        var name: String {
            switch self {
            case .unspecified: "unspecified"
            case .background: "background"
            case .utility: "utility"
            case .default: "default"
            case .userInitiated: "user-initiated"
            case .userInteractive: "user-interactive"
            }
        }
    }

    public let qosClass: QoSClass
    /// Orders work inside one class: -15 (lowest) ... 0.
    public let relativePriority: Int

    /// - Precondition: `relativePriority` is in -15...0, as in Dispatch.
    public init(qosClass: QoSClass, relativePriority: Int) {
        precondition((-15...0).contains(relativePriority),
                     "Lull: QoS relativePriority \(relativePriority) is out of range -15...0")
        self.qosClass = qosClass
        self.relativePriority = relativePriority
    }

    init(_ qosClass: QoSClass) {
        self.qosClass = qosClass
        self.relativePriority = 0
    }

    public static let background = QoS(.background)
    public static let utility = QoS(.utility)
    public static let `default` = QoS(.default)
    public static let userInitiated = QoS(.userInitiated)
    public static let userInteractive = QoS(.userInteractive)
    public static let unspecified = QoS(.unspecified)

    /// The QoS the calling thread runs at now, overrides included. Lull's workers run at
    /// the class of the work they run, raised while more important work waits on it (a
    /// block queued behind it on a serial queue, a `sync` caller, a `wait`); the process's
    /// main thread is user-interactive and any other thread Lull did not create is `default`.
    public static var current: QoS {
        ThreadState.current.currentQoS
    }

    var isUnspecified: Bool { qosClass == .unspecified }

    /// The larger of two QoS values: class first, then relative priority.
    static func maximum(_ lhs: QoS, _ rhs: QoS) -> QoS {
        if lhs.qosClass != rhs.qosClass { return lhs.qosClass > rhs.qosClass ? lhs : rhs }
        return lhs.relativePriority >= rhs.relativePriority ? lhs : rhs
    }
}

extension QoS: CustomStringConvertible {
    public var description: String {
        relativePriority == 0 ? qosClass.name : "\(qosClass.name)\(relativePriority)"
    }
}
