/// A Swift task's priority as a QoS class. Task priorities carry Darwin's QoS class
/// numbers (user-interactive 0x21, user-initiated 0x19, default 0x15, utility 0x11,
/// background 0x09), so `high` and `userInitiated` are user-initiated, `medium` is
/// default, `low` and `utility` are utility; a value between two classes counts as the
/// lower one, and 0 (no priority) is the default class.
extension QoS {
    init(taskPriorityRawValue raw: UInt8) {
        switch raw {
        case 0: self = .default
        case 0x21...: self = .userInteractive
        case 0x19..<0x21: self = .userInitiated
        case 0x15..<0x19: self = .default
        case 0x11..<0x15: self = .utility
        default: self = .background
        }
    }
}
