import LullDiagnosticsFormat
import LullWakeupReport
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Records what wakes the runtime and where its CPU time goes, for the program itself or
/// for `timerfires`.
///
/// While recording, the runtime notes every reactor wake-up with its cause, every timer
/// fire (the timer's label or creation site, queue, QoS, deadline, leeway, when it fired
/// and in which wake-up) and the CPU time of every block by the QoS it ran at. Records go
/// to a ring of fixed capacity: memory stays bounded, and when the ring is full the oldest
/// records give way (the report says how many). While not recording, the runtime pays one
/// relaxed atomic load per hook.
///
/// ```swift
/// try RuntimeDiagnostics.start()
/// // ... run the program for a while ...
/// if let report = RuntimeDiagnostics.snapshot() { print(report.formatted()) }
/// RuntimeDiagnostics.stop()
/// ```
///
/// A program run under `timerfires` (or attached with `timerfires --pid`) records into a
/// file the tool reads; `snapshot()` then works as well.
public enum RuntimeDiagnostics {
    /// The environment variable through which `timerfires` asks a program it starts to
    /// record into a trace file (which the tool has created).
    public static let traceEnvironmentVariable = DiagnosticsEnvironment.traceFile
    /// The ring's capacity in records for a recording the environment asks for.
    public static let capacityEnvironmentVariable = DiagnosticsEnvironment.capacity
    /// The ring's capacity when none is given: 262,144 records (16 MiB, touched as used).
    public static let defaultCapacity = TraceLayout.defaultRecordCapacity

    private struct Recording {
        var kernelBaseline: Int?
    }

    private static let recording = Mutex<Recording?>(nil)

    /// True while the runtime records.
    public static var isRecording: Bool {
        environmentChecked.touch()
        return Diagnostics.recorder.isRecording
    }

    /// Starts recording in memory, with room for `capacity` records (wake-ups and timer
    /// fires, 64 bytes each).
    /// - Throws: `DiagnosticsError` if a recording is already running, the capacity is out
    ///   of range (1 ... 16,777,216) or the memory cannot be mapped.
    public static func start(capacity: Int = defaultCapacity) throws(DiagnosticsError) {
        environmentChecked.touch()
        try checkCapacity(capacity)
        try begin(TraceBuffer(capacity: capacity))
    }

    /// Stops recording and returns the report of the whole recording (nil if none ran).
    @discardableResult
    public static func stop(groupingByIdentity: Bool = false) -> WakeupReport? {
        let report = snapshot(groupingByIdentity: groupingByIdentity)
        stopRecording()
        return report
    }

    /// The report of the recording so far, or nil when not recording.
    /// - Parameter groupingByIdentity: one row per label or creation site, however many
    ///   timers share it (otherwise one row per timer source).
    public static func snapshot(groupingByIdentity: Bool = false) -> WakeupReport? {
        let baseline = recording.locked { $0?.kernelBaseline }
        let trace: Trace?
        do throws(TraceError) {
            trace = try Diagnostics.recorder.withBuffer { buffer throws(TraceError) -> Trace? in
                guard let buffer else { return nil }
                return try buffer.withBytes { bytes throws(TraceError) in try Trace(bytes: bytes) }
            }
        } catch {
            // The runtime wrote it: a damaged in-process trace is a bug in Lull itself.
            lullFatal("the in-process wake-up trace does not decode: \(error)")
        }
        guard let trace else { return nil }
        let kernel = baseline.flatMap { start in
            KernelSwitches.voluntary(pid: getpid()).map { KernelCount(voluntarySwitches: $0.total - start, threads: $0.threads) }
        }
        return trace.report(endTime: SystemClock.monotonicNanoseconds(), groupingByIdentity: groupingByIdentity,
                            kernel: kernel)
    }

    // MARK: For the runtime and the control socket

    static func startRecording(file path: String, capacity: Int) throws(DiagnosticsError) {
        try checkCapacity(capacity)
        try begin(TraceBuffer(file: path, capacity: capacity))
    }

    static func stopRecording() {
        Diagnostics.recorder.stop()
        recording.locked { $0 = nil }
    }

    private static func begin(_ buffer: TraceBuffer) throws(DiagnosticsError) {
        let baseline = KernelSwitches.voluntary(pid: getpid())?.total
        try recording.locked { state throws(DiagnosticsError) in
            guard Diagnostics.recorder.start(buffer) else { throw DiagnosticsError("a recording is already running") }
            state = Recording(kernelBaseline: baseline)
        }
    }

    private static func checkCapacity(_ capacity: Int) throws(DiagnosticsError) {
        guard (1...TraceLayout.maximumRecordCapacity).contains(capacity) else {
            throw DiagnosticsError("capacity \(capacity) is out of range 1...\(TraceLayout.maximumRecordCapacity)")
        }
    }

    /// Starts the recording the environment asks for, once: when the reactor is created or
    /// when the program first asks about recording, whichever comes first.
    static let environmentChecked = OnceToken { startFromEnvironment() }

    /// Starts the recording `LULL_DIAGNOSTICS_TRACE` asks for, if any. A file another
    /// process already records into is left alone.
    private static func startFromEnvironment() {
        guard let path = getenv(traceEnvironmentVariable).map({ String(cString: $0) }), !path.isEmpty else { return }
        let capacity = getenv(capacityEnvironmentVariable).flatMap { Int(String(cString: $0)) } ?? defaultCapacity
        do throws(DiagnosticsError) {
            try startRecording(file: path, capacity: capacity)
        } catch {
            RuntimeLog.once("diagnostics-environment") { "not recording wake-ups into \(path): \(error)" }
        }
    }
}

/// Runs its action the first time it is touched (a lazily initialised static does the
/// once-only part).
final class OnceToken: Sendable {
    private let done = Mutex<Bool>(false)
    private let action: @Sendable () -> Void

    init(_ action: @escaping @Sendable () -> Void) {
        self.action = action
    }

    func touch() {
        let first = done.locked { done -> Bool in
            defer { done = true }
            return !done
        }
        if first { action() }
    }
}
