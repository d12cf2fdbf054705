import CLullShims

/// A thread's timer slack (see `TimerSlack` for the poller's values and why).
///
/// Outside polling, a thread's slack follows the class of the work it runs (its own QoS:
/// `prctl` reaches only the calling thread, so overrides, which other threads put on, do not
/// move it): utility and background work get their class's default-leeway cap, so that the
/// blocks' own sleeps, polls and futex timeouts coalesce as Lull's timers do; default and
/// above keep `TimerSlack.threadDefault`.
extension ThreadState {
    /// The slack a thread runs `qosClass` work with (0: `TimerSlack.threadDefault`).
    static func classTimerSlack(_ qosClass: QoS.QoSClass) -> UInt64 {
        switch qosClass {
        case .utility, .background: DefaultLeeway.cap(for: qosClass)
        case .unspecified, .default, .userInitiated, .userInteractive: 0
        }
    }

    /// Puts the calling thread's timer slack at `nanoseconds` (0: `TimerSlack.threadDefault`),
    /// with a system call only when that changes. Called on the thread itself.
    func applyTimerSlack(_ nanoseconds: UInt64) {
        guard nanoseconds != timerSlack else { return }
        setTimerSlack(nanoseconds)
    }

    /// Puts a new worker at `TimerSlack.threadDefault`, whatever slack it inherited from the
    /// thread that created it (a poller's, when that thread was polling). Called on the
    /// thread itself before it runs anything.
    func takeDefaultTimerSlack() {
        let inherited = lull_get_timer_slack()
        guard inherited < 0 || UInt64(inherited) != TimerSlack.threadDefault else { return }
        setTimerSlack(0)
    }

    private func setTimerSlack(_ nanoseconds: UInt64) {
        let value = nanoseconds == 0 ? TimerSlack.threadDefault : nanoseconds
        if let failure = Syscall.failure("prctl", { lull_set_timer_slack(UInt(value)) }) {
            TimerSlack.prctlFailed(failure, nanoseconds: value)
        } else {
            timerSlack = nanoseconds
        }
    }
}
