/// The layout of a wake-up trace: one header page, a ring of fixed-size records, then a
/// table of strings (timer identities and queue labels, each stored once).
///
/// The same bytes serve the in-process recorder (an anonymous mapping) and `timerfires`
/// (a file shared with the traced process: records written before a crash or a Ctrl-C are
/// in the page cache, so the report survives the program's death). All integers are
/// little-endian, native on every platform Lull runs on.
///
/// This file is the format's one definition: the runtime's `TraceBuffer` writes it and
/// `LullWakeupReport`'s `Trace` reads it.
public enum TraceLayout {
    /// "LULLWAKE" read as a little-endian integer.
    public static let magic: UInt64 = 0x454B_4157_4C4C_554C
    public static let version: UInt32 = 1
    public static let headerSize = 4096
    public static let recordSize = 64
    public static let defaultRecordCapacity = 262_144
    public static let maximumRecordCapacity = 16_777_216
    /// Room for strings: identities are interned, so a program needs a few KiB.
    public static let stringCapacity = 1 << 20

    /// Byte offsets of the header fields.
    public enum Header {
        public static let magic = 0            // UInt64
        public static let version = 8          // UInt32
        public static let headerSize = 12      // UInt32
        public static let recordSize = 16      // UInt32
        public static let pid = 20             // Int32
        public static let capacity = 24        // UInt64: records in the ring
        public static let stringCapacity = 32  // UInt64: bytes of the string table
        public static let startTime = 40       // UInt64: monotonic ns when recording started
        public static let recordsWritten = 48  // UInt64: records ever written (the ring's head)
        public static let stringBytes = 56     // UInt64: bytes of the string table in use
        public static let stopTime = 64        // UInt64: monotonic ns when recording stopped, 0 while on
        /// UInt64 × 4: reactor wake-ups by `WakeupCause` raw value.
        public static let wakeupCounts = 72
        /// UInt64 × 8: nanoseconds of CPU time by `TraceQoS` raw value.
        public static let cpuNanoseconds = 104
        public static let timerFires = 168     // UInt64: fire records ever written
    }

    /// Byte offsets inside one record.
    public enum Record {
        public static let commit = 0           // UInt32: low 32 bits of (index + 1), written last
        public static let kind = 4             // UInt8: RecordKind
        public static let detail = 5           // UInt8: WakeupCause (wake-up) or TraceQoS (fire)
        public static let fireCount = 6        // UInt16: fires of a repeating timer merged into this one
        public static let wakeup = 8           // UInt64: the wake-up's sequence number
        public static let time = 16            // UInt64: monotonic ns of the wake-up or the fire
        public static let deadline = 24        // UInt64
        public static let leeway = 32          // UInt64
        public static let identity = 40        // UInt32: string id
        public static let queue = 44           // UInt32: string id
        public static let instance = 48        // UInt64: which timer (0: all blocks of one call site)
    }

    public enum RecordKind: UInt8 {
        case wakeup = 1
        case timerFire = 2
    }

    public static func fileSize(capacity: Int) -> Int {
        headerSize + capacity * recordSize + stringCapacity
    }

    public static func stringTableOffset(capacity: Int) -> Int {
        headerSize + capacity * recordSize
    }
}
