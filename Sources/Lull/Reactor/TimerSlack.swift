import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// How the reactor arms one window.
///
/// Every window is armed on the reactor's precise timerfd at its `latest` instant: a
/// timerfd gets no timer slack and no rounding, so that is where narrow windows (leeway 0)
/// wake, and it bounds the wake-up of every other window. When slack is on (`TimerSlack.isEnabled`), a window wide enough also arms
/// libevent's timeout — the timeout of `epoll_wait`, the only sleep the kernel's timer slack
/// applies to — at `earliest`, with the polling thread's slack set to how late after that the
/// kernel may wake it: the kernel then wakes the thread anywhere in [earliest, latest], at the
/// end when nothing else happens, or earlier together with a wake-up of another process on
/// the same CPU (hrtimers whose soft expiry has passed run at the next timer interrupt).
struct WakePlan: Equatable, Sendable {
    /// The timerfd's absolute instant: the window's end.
    let precise: UInt64
    /// For a wide window, libevent's timeout (µs after libevent's clock reading at
    /// `event_add`) and the timer slack (ns) the sleeping thread asks for.
    let coarse: Coarse?

    struct Coarse: Equatable, Sendable {
        let delayMicroseconds: UInt64
        let slack: UInt64
    }
}

/// The placement of wake-ups inside their windows, and the polling thread's timer slack.
///
/// The libevent 2.1 facts this rests on (from libevent 2.1.12's epoll.c and evutil_time.c):
/// without EVENT_BASE_FLAG_PRECISE_TIMER its clock is
/// CLOCK_MONOTONIC_COARSE (tick resolution: 4 ms at HZ=250, truncated to µs), and
/// `epoll_wait`'s timeout is the time to the earliest timeout rounded *up* to whole
/// milliseconds; with the flag, libevent sleeps in `epoll_wait(-1)` on a relative timerfd of
/// its own, which timer slack does not reach. The kernel wakes an `epoll_wait` timeout within
/// [timeout, timeout + max(thread slack, timeout / 1000 — / 200 for a niced thread, capped at
/// 100 ms)] (select_estimate_accuracy), and a timerfd exactly at its time.
///
/// So for a wide window, with c the coarse clock's resolution:
/// - libevent's timeout is computed from our own coarse reading (at or before libevent's),
///   so its expiry is never before `earliest`, on either clock: the thread never wakes, and
///   libevent never reports the timeout, before the window is due;
/// - the `epoll_wait` expiry E then falls in [earliest, earliest + c + 1 ms), and the slack
///   is the rest of the window less that and a guard, so that E + slack <= latest;
/// - the slack is at least c: woken at the hard expiry (E + slack), libevent's coarse clock has
///   passed its timeout, and it reports it rather than sleeping once more for a millisecond.
///   Woken earlier (with another process), it may still sleep once more; the timerfd at
///   `latest` bounds that case.
/// Windows too narrow for this (about 9.5 ms at HZ=250) use the timerfd alone.
enum TimerSlack {
    /// CLOCK_MONOTONIC_COARSE's resolution (the kernel tick), or 10 ms if it cannot be read.
    static let coarseResolution: UInt64 = {
        var resolution = timespec()
        guard clock_getres(CLOCK_MONOTONIC_COARSE, &resolution) == 0 else { return 10_000_000 }
        let nanoseconds = UInt64(resolution.tv_sec) * 1_000_000_000 + UInt64(resolution.tv_nsec)
        return nanoseconds > 0 ? nanoseconds : 10_000_000
    }()

    /// Kept between the latest wake-up the plan allows and the window's end, for the
    /// conversions in between (ns to µs to ms).
    static let guardNanoseconds: UInt64 = 500_000

    /// Whether wide windows use slack: off unless `LULL_TIMER_SLACK=1` (or `on`) is in the
    /// environment. Off by default because the engine cannot yet tell whether a deadline
    /// falls in the part of a window it gives the kernel (a wake-up there splits timers the
    /// greedy optimum fires together), and because libevent's coarse clock sometimes costs a
    /// second wake-up (docs/Timers.md; the figures are in Benchmarks/README.md).
    /// Internal code (tests) may switch it.
    private static let enabled = Atomic<Bool>({
        guard let value = getenv("LULL_TIMER_SLACK").map({ String(cString: $0) }) else { return false }
        return value == "1" || value.lowercased() == "on"
    }())

    static var isEnabled: Bool {
        get { enabled.load(ordering: .relaxed) }
        set { enabled.store(newValue, ordering: .relaxed) }
    }

    /// Cleared when prctl refused a slack: wide windows then stop (without its slack, a wide
    /// window's thread would wake at the start of its window rather than in it).
    private static let prctlWorks = Atomic<Bool>(true)

    static var isUsable: Bool {
        isEnabled && prctlWorks.load(ordering: .relaxed)
    }

    /// How to arm `window` at precise time `now`, given `coarseNow`, a CLOCK_MONOTONIC_COARSE
    /// reading taken before libevent's own (in `event_add`).
    static func plan(_ window: WakeWindow, now: UInt64, coarseNow: UInt64,
                     resolution: UInt64 = coarseResolution, wideAllowed: Bool = isUsable) -> WakePlan {
        let precise = WakePlan(precise: window.latest, coarse: nil)
        guard wideAllowed, window.latest != .max else { return precise }
        let from = max(window.earliest, now, coarseNow)
        // The latest the epoll_wait expiry can fall: the coarse clock lags by up to one
        // resolution at dispatch, and the timeout is rounded up to a millisecond.
        let (expiryBound, overflow) = from.addingReportingOverflow(resolution + 1_000_000 + guardNanoseconds)
        guard !overflow, window.latest > expiryBound else { return precise }
        let slack = window.latest - expiryBound
        // The kernel's own estimate for this timeout (for a niced thread: 1/200) must fit too.
        let estimate = (expiryBound - now) / 200
        guard slack >= resolution, slack >= estimate else { return precise }
        return WakePlan(precise: window.latest,
                        coarse: .init(delayMicroseconds: coarseDelay(until: from, coarseNow: coarseNow), slack: slack))
    }

    /// The delay (µs) to give libevent so that its timeout expires no earlier than `instant`
    /// on either clock: libevent adds it to its own coarse reading truncated to µs, which is
    /// not before `coarseNow` (read first).
    static func coarseDelay(until instant: UInt64, coarseNow: UInt64) -> UInt64 {
        let base = coarseNow / 1000 * 1000
        return instant > base ? (instant - base + 999) / 1000 : 0
    }

    /// Turns wide windows off for good after prctl failed (logged once).
    static func prctlFailed(_ error: SystemError, nanoseconds: UInt64) {
        prctlWorks.store(false, ordering: .relaxed)
        RuntimeLog.once("timer-slack") {
            "\(error) (PR_SET_TIMERSLACK, \(nanoseconds)): timers wake at the end of their windows, without aligning with other processes"
        }
    }
}

extension TimerSlack {
    /// The slack every thread runs work with: the slack of the first thread that reads this,
    /// before any thread polled.
    ///
    /// A new thread takes its creator's current slack as its own and as its kernel default
    /// (the one `PR_SET_TIMERSLACK` 0 restores), so a worker started from a reactor callback,
    /// while its creator polls, would keep the poller's slack for good. So Lull never asks
    /// for "the thread's default": workers start at this value (`takeDefaultTimerSlack`) and
    /// the poller goes back to it by value. Only `applyTimerSlack` changes a slack, and it
    /// reads this first: whichever thread reads it first still has the process's slack.
    static let threadDefault: UInt64 = {
        let current = lull_get_timer_slack()
        return current > 0 ? UInt64(current) : 0
    }()
}
