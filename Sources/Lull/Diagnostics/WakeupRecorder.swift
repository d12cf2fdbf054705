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
        var sawTimer = false
        var sawDescriptor = false
    }

    /// A spinning lock: workers charge CPU time after every block, often at once.
    private let state = SpinFutexLock<State>(State())

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

    func pollWillStart() {
        state.locked { state in
            state.wakeup &+= 1
            state.sawTimer = false
            state.sawDescriptor = false
        }
    }

    func pollDidEnd() {
        state.locked { state in
            guard let buffer = state.buffer else { return }
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

    func crossThreadNotification() {
        state.locked { $0.buffer?.countWakeup(.crossThread) }
    }

    func timerFired(_ origin: TimerFireOrigin, deadline: UInt64, leeway: UInt64, fires: UInt64, now: UInt64) {
        state.locked { state in
            guard let buffer = state.buffer else { return }
            buffer.append(.timerFire, detail: UInt8(TraceLayout.qosIndex(origin.qos)), wakeup: state.wakeup, time: now,
                          deadline: deadline, leeway: leeway, fireCount: UInt16(clamping: fires),
                          identity: buffer.intern(origin.identity), queue: buffer.intern(origin.queue),
                          instance: origin.instance)
        }
    }

    func addCPU(_ nanoseconds: UInt64, qos: QoS.QoSClass) {
        state.locked { $0.buffer?.addCPU(nanoseconds, qosIndex: TraceLayout.qosIndex(qos)) }
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
