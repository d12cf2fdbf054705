import LullDiagnosticsFormat
#if canImport(Glibc)
import Glibc
#endif

/// Why a trace cannot be read.
public enum TraceError: Error, CustomStringConvertible, Equatable {
    /// The file is empty: the program never started recording.
    case empty
    /// Not a trace, or a trace whose numbers contradict each other.
    case damaged(String)
    /// The file cannot be read.
    case unreadable(String)

    public var description: String {
        switch self {
        case .empty: "the trace is empty: the program never started recording (is it a Lull program?)"
        case .damaged(let why): "the trace is damaged: \(why)"
        case .unreadable(let why): why
        }
    }
}

/// One timer fire as recorded.
public struct TraceFire: Sendable {
    public var wakeup: UInt64
    public var time: UInt64
    public var deadline: UInt64
    public var leeway: UInt64
    public var count: Int
    public var identity: String
    public var queue: String
    public var qos: TraceQoS
    public var instance: UInt64
}

/// One reactor wake-up as recorded.
public struct TraceWakeup: Sendable {
    public var sequence: UInt64
    public var time: UInt64
    public var cause: WakeupCause
}

/// A decoded trace: what the recorder wrote, checked for consistency.
public struct Trace: Sendable {
    public var pid: Int32
    public var startTime: UInt64
    /// 0 while recording (or when the program died without stopping).
    public var stopTime: UInt64
    public var wakeupCounts: [WakeupCause: UInt64]
    public var cpuNanoseconds: [TraceQoS: UInt64]
    public var fires: [TraceFire]
    public var wakeups: [TraceWakeup]
    /// Records overwritten because the ring was full.
    public var lostRecords: UInt64
    /// Timer fires ever recorded, including the lost ones.
    public var totalFires: UInt64

    /// Reads the trace file at `path`.
    public init(contentsOf path: String) throws(TraceError) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw .unreadable("cannot open the trace \(path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            throw .unreadable("cannot stat the trace \(path): \(String(cString: strerror(errno)))")
        }
        let size = Int(status.st_size)
        if size == 0 { throw .empty }
        guard size >= TraceLayout.headerSize else { throw .damaged("\(size) bytes is shorter than a header") }
        guard let mapped = mmap(nil, size, PROT_READ, MAP_SHARED, descriptor, 0), mapped != MAP_FAILED else {
            throw .unreadable("cannot map the trace \(path): \(String(cString: strerror(errno)))")
        }
        defer { munmap(mapped, size) }
        try self.init(bytes: UnsafeRawBufferPointer(start: mapped, count: size))
    }

    /// Decodes a trace from memory.
    public init(bytes: UnsafeRawBufferPointer) throws(TraceError) {
        func load<T: FixedWidthInteger>(_ type: T.Type, _ offset: Int) -> T {
            T(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
        }
        guard bytes.count >= TraceLayout.headerSize else { throw .damaged("shorter than a header") }
        guard load(UInt64.self, TraceLayout.Header.magic) == TraceLayout.magic else {
            throw .damaged("it does not start with Lull's trace signature")
        }
        let version = load(UInt32.self, TraceLayout.Header.version)
        guard version == TraceLayout.version else { throw .damaged("unknown version \(version)") }
        guard Int(load(UInt32.self, TraceLayout.Header.headerSize)) == TraceLayout.headerSize,
              Int(load(UInt32.self, TraceLayout.Header.recordSize)) == TraceLayout.recordSize else {
            throw .damaged("unexpected header or record size")
        }
        let capacity = load(UInt64.self, TraceLayout.Header.capacity)
        let stringCapacity = load(UInt64.self, TraceLayout.Header.stringCapacity)
        guard capacity > 0, capacity <= UInt64(TraceLayout.maximumRecordCapacity),
              stringCapacity == UInt64(TraceLayout.stringCapacity),
              TraceLayout.fileSize(capacity: Int(capacity)) == bytes.count else {
            throw .damaged("its size (\(bytes.count) bytes) does not match its capacity (\(capacity) records)")
        }
        pid = load(Int32.self, TraceLayout.Header.pid)
        startTime = load(UInt64.self, TraceLayout.Header.startTime)
        stopTime = load(UInt64.self, TraceLayout.Header.stopTime)
        totalFires = load(UInt64.self, TraceLayout.Header.timerFires)
        var wakeupCounts: [WakeupCause: UInt64] = [:]
        for cause in [WakeupCause.timer, .descriptor, .crossThread, .other] {
            wakeupCounts[cause] = load(UInt64.self, TraceLayout.Header.wakeupCounts + Int(cause.rawValue) * 8)
        }
        self.wakeupCounts = wakeupCounts
        var cpu: [TraceQoS: UInt64] = [:]
        for qosClass in TraceQoS.allCases {
            cpu[qosClass] = load(UInt64.self, TraceLayout.Header.cpuNanoseconds + Int(qosClass.rawValue) * 8)
        }
        cpuNanoseconds = cpu

        let strings = try Trace.readStrings(bytes, capacity: Int(capacity))
        func string(_ id: UInt32) throws(TraceError) -> String {
            if id == 0 { return "?" }
            guard let string = strings[id] else { throw .damaged("a record names string \(id), which is not in the table") }
            return string
        }

        let written = load(UInt64.self, TraceLayout.Header.recordsWritten)
        let first = written > capacity ? written - capacity : 0
        lostRecords = first
        fires = []
        wakeups = []
        for index in first..<written {
            let record = TraceLayout.headerSize + Int(index % capacity) * TraceLayout.recordSize
            guard load(UInt32.self, record + TraceLayout.Record.commit) == UInt32(truncatingIfNeeded: index &+ 1) else {
                throw .damaged("record \(index) is incomplete or overwritten")
            }
            let detail = load(UInt8.self, record + TraceLayout.Record.detail)
            let wakeup = load(UInt64.self, record + TraceLayout.Record.wakeup)
            let time = load(UInt64.self, record + TraceLayout.Record.time)
            switch TraceLayout.RecordKind(rawValue: load(UInt8.self, record + TraceLayout.Record.kind)) {
            case .wakeup:
                guard let cause = WakeupCause(rawValue: detail) else { throw .damaged("record \(index) has cause \(detail)") }
                wakeups.append(TraceWakeup(sequence: wakeup, time: time, cause: cause))
            case .timerFire:
                guard let qos = TraceQoS(rawValue: detail) else { throw .damaged("record \(index) has QoS \(detail)") }
                fires.append(TraceFire(
                    wakeup: wakeup, time: time,
                    deadline: load(UInt64.self, record + TraceLayout.Record.deadline),
                    leeway: load(UInt64.self, record + TraceLayout.Record.leeway),
                    count: Int(max(1, load(UInt16.self, record + TraceLayout.Record.fireCount))),
                    identity: try string(load(UInt32.self, record + TraceLayout.Record.identity)),
                    queue: try string(load(UInt32.self, record + TraceLayout.Record.queue)),
                    qos: qos,
                    instance: load(UInt64.self, record + TraceLayout.Record.instance)))
            case nil:
                throw .damaged("record \(index) is of unknown kind")
            }
        }
    }

    private static func readStrings(_ bytes: UnsafeRawBufferPointer, capacity: Int) throws(TraceError) -> [UInt32: String] {
        let table = TraceLayout.stringTableOffset(capacity: capacity)
        let used = Int(UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: TraceLayout.Header.stringBytes, as: UInt64.self)))
        guard used <= TraceLayout.stringCapacity else { throw .damaged("its string table claims \(used) bytes") }
        var strings: [UInt32: String] = [:]
        var offset = 0
        while offset < used {
            guard offset + 8 <= used else { throw .damaged("its string table ends inside an entry") }
            let id = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: table + offset, as: UInt32.self))
            let length = Int(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: table + offset + 4, as: UInt32.self)))
            guard offset + 8 + length <= used else { throw .damaged("string \(id) runs past the table") }
            let start = table + offset + 8
            strings[id] = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<start + length]), as: UTF8.self)
            offset += 8 + (length + 7) & ~7
        }
        return strings
    }
}
