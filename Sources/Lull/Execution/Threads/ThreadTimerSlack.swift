import CLullShims

/// A thread's timer slack (see `TimerSlack` for the values and why).
extension ThreadState {
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
