/// A QoS class as a trace stores it: the raw value is the index of the class's CPU counter
/// and the `detail` byte of a fire record (the runtime maps its `QoS.QoSClass` to these).
public enum TraceQoS: UInt8, CaseIterable, Hashable, Sendable {
    case unspecified = 0
    case background = 1
    case utility = 2
    case `default` = 3
    case userInitiated = 4
    case userInteractive = 5

    /// The class as powermetrics names it ("background", ..., "user-interactive").
    public var name: String {
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
