import LullDiagnosticsFormat
import LullWakeupReport
#if canImport(Glibc)
import Glibc
#endif

/// Writes what wakes the runtime into the current `TraceBuffer`, when there is one.
///
/// Every hook is called only after `Diagnostics.isOn` said yes (one relaxed load), so the
/// runtime pays nothing else while diagnostics are off. While on, hooks take this lock: the
/// poller writes wake-ups and fires, any worker adds CPU time.
final class WakeupRecorder: Sendable {
    private struct State {
        var buffer: TraceBuffer?
        /// The sequence number of the reactor poll in progress (or last finished).
        var wakeup: UInt64 = 0
        /// The thread inside libevent's loop, while a poll this recording saw start is in
        /// progress: a change from any other thread makes libevent wake it.
        var pollingThread: pthread_t?
        var sawTimer = false
        var sawDescriptor = false
    }

    /// A spinning lock: workers charge CPU time after every block, often at once.
    private let state = SpinFutexLock<State>(State(), rank: .wakeupRecorder)

    var isRecording: Bool { state.locked { $0.buffer != nil } }

    /// Starts writing to `buffer`; false if a recording is already running.
    func start(_ buffer: TraceBuffer) -> Bool {
        let started = state.locked { state -> Bool in
            guard state.buffer == nil else { return false }
            state.buffer = buffer
            return true
        }
        if started { Diagnostics.switchedOn.store(true, ordering: .relaxed) }
        return started
    }

    /// Stops recording and returns the buffer (its stop time set).
    @discardableResult
    func stop() -> TraceBuffer? {
        Diagnostics.switchedOn.store(false, ordering: .relaxed)
        return state.locked { state -> TraceBuffer? in
            let buffer = state.buffer
            buffer?.markStopped()
            state.buffer = nil
            return buffer
        }
    }

    /// Runs `body` on the current trace under the lock (nil if none).
    func withBuffer<T>(_ body: (TraceBuffer?) throws(TraceError) -> T) throws(TraceError) -> T {
        let result = state.locked { state -> Result<T, TraceError> in
            do throws(TraceError) {
                return .success(try body(state.buffer))
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    /// On the poller, before it enters libevent's loop.
    func pollWillStart() {
        let thread = pthread_self()
        state.locked { state in
            state.wakeup &+= 1
            state.pollingThread = thread
            state.sawTimer = false
            state.sawDescriptor = false
        }
    }

    /// On the poller, after libevent's loop returned; `waited`: it waited for events (its
    /// result was 0), which makes it a wake-up.
    func pollDidEnd(waited: Bool) {
        state.locked { state in
            state.pollingThread = nil
            guard waited, let buffer = state.buffer else { return }
            let cause: WakeupCause = state.sawTimer ? .timer : state.sawDescriptor ? .descriptor : .other
            buffer.countWakeup(cause)
            buffer.append(.wakeup, detail: cause.rawValue, wakeup: state.wakeup,
                          time: SystemClock.monotonicNanoseconds())
        }
    }

    func reactorTimerExpired() {
        state.locked { $0.sawTimer = true }
    }

    func descriptorEventArrived() {
        state.locked { $0.sawDescriptor = true }
    }

    /// Before the reactor's events change on `thread`: counts libevent's notification when
    /// another thread is in the loop (a poll that started before the recording is not
    /// known, and its notifications are not counted).
    func reactorWillChange(on thread: pthread_t) {
        state.locked { state in
            guard let polling = state.pollingThread, polling != thread else { return }
            state.buffer?.countWakeup(.crossThread)
        }
    }

    func timerFired(_ origin: TimerFireOrigin, deadline: UInt64, leeway: UInt64, fires: UInt64, now: UInt64) {
        state.locked { state in
            guard let buffer = state.buffer else { return }
            buffer.append(.timerFire, detail: TraceQoS(origin.qos).rawValue, wakeup: state.wakeup, time: now,
                          deadline: deadline, leeway: leeway, fireCount: UInt16(clamping: fires),
                          identity: buffer.intern(origin.identity), queue: buffer.intern(origin.queue),
                          instance: origin.instance)
        }
    }

    func addCPU(_ nanoseconds: UInt64, qos: QoS.QoSClass) {
        state.locked { $0.buffer?.addCPU(nanoseconds, qos: TraceQoS(qos)) }
    }
}

extension TraceQoS {
    /// How a trace stores `qosClass`.
    init(_ qosClass: QoS.QoSClass) {
        switch qosClass {
        case .unspecified: self = .unspecified
        case .background: self = .background
        case .utility: self = .utility
        case .default: self = .default
        case .userInitiated: self = .userInitiated
        case .userInteractive: self = .userInteractive
        }
    }
}

/// Who a timer fire belongs to, as the report names it.
struct TimerFireOrigin {
    /// The timer's label, or where it was created ("File.swift:42").
    var identity: String
    var queue: String
    var qos: QoS.QoSClass
    /// Tells timers of one identity apart (0: every block of one `asyncAfter` call site).
    var instance: UInt64
}

/// Where a timer was created, captured by default arguments (`#fileID`, `#line`).
///
/// `@unchecked Sendable`: `file` points at a string literal in the program's read-only
/// data, which no thread writes and which is never freed.
struct TimerSite: @unchecked Sendable {
    /// The NUL-terminated text of a `#fileID` literal, which lives as long as the program:
    /// one word where a `StaticString` takes three (every timer source keeps its site).
    let file: UnsafePointer<UInt8>
    let line: UInt32

    init(file: StaticString, line: UInt) {
        // `#fileID` is always a literal, stored as text with a NUL after it.
        guard file.hasPointerRepresentation else { lullFatal("TimerSite needs a string literal") }
        self.file = file.utf8Start
        self.line = UInt32(truncatingIfNeeded: line)
    }

    init(file: UnsafePointer<UInt8>, line: UInt32) {
        self.file = file
        self.line = line
    }

    var description: String { "\(String(cString: file)):\(line)" }
}
