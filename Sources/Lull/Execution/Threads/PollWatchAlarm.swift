import CLullShims
import Synchronization

/// How the parked poll watch hears of an inline batch without a thread switch per batch
/// (docs/WorkerPool.md, "The poll watch"): a timerfd that the parked watch sleeps on.
///
/// A batch that starts while the watch is parked, in a process that polls now and then (a
/// timer's wake-up, say), arms the alarm `PollWatch.interval` ahead and disarms it when it
/// ends: a batch that ends in time costs two `timerfd_settime` and no wake-up of the watch;
/// a batch still running when the alarm expires (a handler stuck in a system call of its
/// own, or on the CPU) wakes the watch, which ticks from then on. `wakeNow` wakes the watch
/// at once (a batch that follows another within the interval: a busy process, where the
/// watch ticks instead).
///
/// State, under `state` (a futex mutex, not a spin lock: the system calls are made inside
/// it, so that an arm and a disarm from two threads reach the kernel in the order of their
/// decisions):
///
/// | field | meaning |
/// |---|---|
/// | `batches` | batches that armed the alarm and have not ended |
/// | `wakeRequested` | armed to expire at once; the watch has not woken since |
///
/// | event | change | the alarm |
/// |---|---|---|
/// | a batch starts (watch parked, process sparse) | `batches` + 1 | armed `interval` ahead when it becomes 1 and no wake is requested |
/// | that batch ends | `batches` − 1 | disarmed when it becomes 0 and no wake is requested |
/// | `wakeNow` | `wakeRequested` = true | armed to expire at once |
/// | the watch wakes | `wakeRequested` = false | — |
///
/// Invariants: a disarm never cancels a requested wake (asserted through the state's
/// reads), and while a batch that armed it runs, the alarm stays armed, for the first
/// batch's `interval` at most (a later batch does not push it back).
///
/// The descriptor lives as long as the watch's thread, which is as long as the process: like
/// the reactor's own timerfd it is never closed.
final class PollWatchAlarm: Sendable {
    private let descriptor: Int32
    private struct State {
        var batches = 0
        var wakeRequested = false
    }
    private let state = Mutex<State>(State())

    private init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    /// Opens the alarm's timerfd (CLOCK_MONOTONIC, close-on-exec).
    static func open() throws(SystemError) -> PollWatchAlarm {
        PollWatchAlarm(descriptor: try Syscall.shim("timerfd_create") { lull_watch_alarm_create() })
    }

    /// A batch starts while the watch sleeps: it is watched from now on.
    func batchStarted() {
        state.locked { state in
            state.batches += 1
            if state.batches == 1 && !state.wakeRequested { set(PollWatch.interval) }
        }
    }

    /// A batch that `batchStarted` ends.
    func batchEnded() {
        state.locked { state in
            assert(state.batches > 0, "Lull: the poll watch's alarm ends a batch it did not start")
            state.batches -= 1
            if state.batches == 0 && !state.wakeRequested { set(0) }
        }
    }

    /// Wakes the sleeping watch at once.
    func wakeNow() {
        state.locked { state in
            state.wakeRequested = true
            set(1)
        }
    }

    /// The watch's sleep: returns when the alarm expires (a requested wake, or a batch still
    /// running an interval after it started); an interrupted or failed read ends it too, and
    /// the watch then ticks once.
    func sleep() {
        _ = lull_watch_alarm_wait(descriptor)
        state.locked { $0.wakeRequested = false }
    }

    /// `timerfd_settime` on a descriptor this alarm owns, with a valid time, cannot fail;
    /// were it to, the batch it was for goes unwatched, and the failure is said once.
    private func set(_ delay: UInt64) {
        if let failure = Syscall.failure("timerfd_settime", { lull_watch_alarm_set(descriptor, delay) }) {
            RuntimeLog.once("poll-watch-alarm-failed") {
                "Lull's poll watch could not set its alarm (\(failure)); a handler that blocks in a system call of its own may keep the reactor waiting until it returns"
            }
        }
    }
}
