/// `Deadline` as the instant of a Swift `Clock` (``CoalescingClock``): the arithmetic of
/// `InstantProtocol` on the monotonic clock, saturating like the rest of `Deadline`.
extension Deadline: InstantProtocol {
    public typealias Duration = Swift.Duration

    /// The instant `duration` later (earlier, if negative), saturating at zero and at
    /// ``distantFuture``.
    public func advanced(by duration: Duration) -> Deadline {
        self + duration
    }

    /// The signed duration from this instant to `other`.
    public func duration(to other: Deadline) -> Duration {
        other - self
    }

    /// The signed duration from `rhs` to `lhs`.
    public static func - (lhs: Deadline, rhs: Deadline) -> Duration {
        let nanoseconds = Int128(lhs.uptimeNanoseconds) - Int128(rhs.uptimeNanoseconds)
        return Duration(secondsComponent: Int64(nanoseconds / 1_000_000_000),
                        attosecondsComponent: Int64(nanoseconds % 1_000_000_000) * 1_000_000_000)
    }
}
