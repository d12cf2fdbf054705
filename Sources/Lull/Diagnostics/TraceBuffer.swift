import LullDiagnosticsFormat
import LullWakeupReport
#if canImport(Glibc)
import Glibc
#endif

/// Why recording could not start.
public struct DiagnosticsError: Error, CustomStringConvertible, Sendable {
    /// What went wrong, for people.
    public let description: String

    init(_ description: String) {
        self.description = description
    }

    init(_ what: String, errno code: Int32) {
        self.description = "\(what): \(SystemError.describe(code))"
    }
}

/// The memory a recording is written to: a ring of records and a string table in one
/// mapping, anonymous (in-process snapshots) or of a file (`timerfires`).
///
/// Not thread-safe: `WakeupRecorder` writes it under its lock. Memory is bounded by the
/// capacity chosen at start; when the ring is full the oldest records are overwritten.
///
/// `@unchecked Sendable`: the mapping is only read and written under the recorder's lock.
final class TraceBuffer: @unchecked Sendable {
    let capacity: Int
    private let base: UnsafeMutableRawPointer
    private let size: Int
    /// The trace file, kept open (and locked) while recording; -1 for an anonymous mapping.
    private var descriptor: Int32
    private var strings: [String: UInt32] = [:]

    /// An anonymous mapping for in-process recording.
    init(capacity: Int) throws(DiagnosticsError) {
        self.capacity = capacity
        size = TraceLayout.fileSize(capacity: capacity)
        guard let mapped = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
              mapped != MAP_FAILED else {
            throw DiagnosticsError("cannot map \(size) bytes for the wake-up recorder", errno: errno)
        }
        base = mapped
        descriptor = -1
        writeHeader()
    }

    /// The file at `path`, which must exist (created by `timerfires`). The file is locked:
    /// a second Lull process that inherits the same environment leaves it alone.
    init(file path: String, capacity: Int) throws(DiagnosticsError) {
        self.capacity = capacity
        size = TraceLayout.fileSize(capacity: capacity)
        let opened: Int32
        do throws(SystemError) {
            opened = try Syscall.posix("open") { open(path, O_RDWR | O_CLOEXEC) }
        } catch {
            throw DiagnosticsError("cannot open the trace file \(path)", errno: error.code)
        }
        guard flock(opened, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            close(opened)
            if code == EWOULDBLOCK { throw DiagnosticsError("the trace file \(path) is taken by another process") }
            throw DiagnosticsError("cannot lock the trace file \(path)", errno: code)
        }
        // Emptied first: a file reused from an earlier recording starts from zeros.
        guard ftruncate(opened, 0) == 0, ftruncate(opened, off_t(size)) == 0 else {
            let code = errno
            close(opened)
            throw DiagnosticsError("cannot size the trace file \(path)", errno: code)
        }
        guard let mapped = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED, opened, 0), mapped != MAP_FAILED else {
            let code = errno
            close(opened)
            throw DiagnosticsError("cannot map the trace file \(path)", errno: code)
        }
        base = mapped
        descriptor = opened
        writeHeader()
    }

    deinit {
        munmap(base, size)
        if descriptor >= 0 { close(descriptor) }
    }

    private func writeHeader() {
        store(TraceLayout.version, at: TraceLayout.Header.version)
        store(UInt32(TraceLayout.headerSize), at: TraceLayout.Header.headerSize)
        store(UInt32(TraceLayout.recordSize), at: TraceLayout.Header.recordSize)
        store(getpid(), at: TraceLayout.Header.pid)
        store(UInt64(capacity), at: TraceLayout.Header.capacity)
        store(UInt64(TraceLayout.stringCapacity), at: TraceLayout.Header.stringCapacity)
        store(SystemClock.monotonicNanoseconds(), at: TraceLayout.Header.startTime)
        // The magic last: a reader never takes a half-written header for a trace.
        store(TraceLayout.magic, at: TraceLayout.Header.magic)
    }

    private func store<T: FixedWidthInteger>(_ value: T, at offset: Int) {
        base.storeBytes(of: value.littleEndian, toByteOffset: offset, as: T.self)
    }

    private func load<T: FixedWidthInteger>(_ type: T.Type, at offset: Int) -> T {
        T(littleEndian: base.loadUnaligned(fromByteOffset: offset, as: T.self))
    }

    private func add(_ amount: UInt64, at offset: Int) {
        store(load(UInt64.self, at: offset) &+ amount, at: offset)
    }

    func countWakeup(_ cause: WakeupCause) {
        add(1, at: TraceLayout.Header.wakeupCounts + Int(cause.rawValue) * 8)
    }

    func addCPU(_ nanoseconds: UInt64, qos: TraceQoS) {
        add(nanoseconds, at: TraceLayout.Header.cpuNanoseconds + Int(qos.rawValue) * 8)
    }

    func markStopped() {
        store(SystemClock.monotonicNanoseconds(), at: TraceLayout.Header.stopTime)
    }

    /// Appends one record: its commit word cleared first, then its fields, then the commit
    /// word set, so that a reader never takes a half-written record for a complete one.
    func append(_ kind: TraceLayout.RecordKind, detail: UInt8, wakeup: UInt64, time: UInt64,
                deadline: UInt64 = 0, leeway: UInt64 = 0, fireCount: UInt16 = 0,
                identity: UInt32 = 0, queue: UInt32 = 0, instance: UInt64 = 0) {
        let index = load(UInt64.self, at: TraceLayout.Header.recordsWritten)
        let record = TraceLayout.headerSize + Int(index % UInt64(capacity)) * TraceLayout.recordSize
        store(UInt32(0), at: record + TraceLayout.Record.commit)
        store(kind.rawValue, at: record + TraceLayout.Record.kind)
        store(detail, at: record + TraceLayout.Record.detail)
        store(fireCount, at: record + TraceLayout.Record.fireCount)
        store(wakeup, at: record + TraceLayout.Record.wakeup)
        store(time, at: record + TraceLayout.Record.time)
        store(deadline, at: record + TraceLayout.Record.deadline)
        store(leeway, at: record + TraceLayout.Record.leeway)
        store(identity, at: record + TraceLayout.Record.identity)
        store(queue, at: record + TraceLayout.Record.queue)
        store(instance, at: record + TraceLayout.Record.instance)
        store(UInt32(truncatingIfNeeded: index &+ 1), at: record + TraceLayout.Record.commit)
        store(index &+ 1, at: TraceLayout.Header.recordsWritten)
        if kind == .timerFire { add(1, at: TraceLayout.Header.timerFires) }
    }

    /// The id of `string` in the table, adding it if new; 0 (unknown) when the table is full.
    func intern(_ string: String) -> UInt32 {
        if let id = strings[string] { return id }
        let bytes = Array(string.utf8.prefix(1024))
        let used = Int(load(UInt64.self, at: TraceLayout.Header.stringBytes))
        let entrySize = 8 + (bytes.count + 7) & ~7
        guard used + entrySize <= TraceLayout.stringCapacity else { return 0 }
        let id = UInt32(strings.count + 1)
        let entry = TraceLayout.stringTableOffset(capacity: capacity) + used
        store(id, at: entry)
        store(UInt32(bytes.count), at: entry + 4)
        bytes.withUnsafeBytes { (base + entry + 8).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        store(UInt64(used + entrySize), at: TraceLayout.Header.stringBytes)
        strings[string] = id
        return id
    }

    /// Lends the trace's bytes as they are now (for an in-process snapshot).
    func withBytes<T>(_ body: (UnsafeRawBufferPointer) throws(TraceError) -> T) throws(TraceError) -> T {
        try body(UnsafeRawBufferPointer(start: base, count: size))
    }
}
