/// The leeway a timer gets when it asks for less, unless it is `.strict`: the larger of the
/// requested leeway and this default, which grows as QoS falls — the way Darwin widens
/// coalescing for low QoS (its kernel allows normal threads up to 1/8 of the delay, capped at
/// 1 ms, and background threads up to 32× the delay, capped at 100 ms). Utility gets 1/4 of
/// the delay, at most 10 ms; the table for users is in the DocC article "Timers and leeway".
///
/// "The delay" is the interval of a repeating timer, or the time until the deadline of a
/// one-shot, when it is scheduled.
enum DefaultLeeway {
    /// A delay past which every class's default is at its cap (utility's, the last to get
    /// there, reaches it at 40 ms), with room for the coarse clock's tick.
    static let saturatingDelay: UInt64 = 100_000_000

    /// The largest default leeway of `qosClass`, whatever the delay: 1 ms from default up,
    /// 10 ms for utility, 100 ms for background.
    static func cap(for qosClass: QoS.QoSClass) -> UInt64 {
        nanoseconds(for: qosClass, delay: saturatingDelay)
    }

    static func nanoseconds(for qosClass: QoS.QoSClass, delay: UInt64) -> UInt64 {
        switch qosClass {
        case .userInteractive, .userInitiated, .default, .unspecified:
            return min(delay / 8, 1_000_000)
        case .utility:
            return min(delay / 4, 10_000_000)
        case .background:
            let (scaled, overflow) = delay.multipliedReportingOverflow(by: 32)
            return overflow ? 100_000_000 : min(scaled, 100_000_000)
        }
    }
}
