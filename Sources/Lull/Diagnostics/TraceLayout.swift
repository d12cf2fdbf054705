/// The layout of a wake-up trace: one header page, a ring of fixed-size records, then a
/// table of strings (timer identities and queue labels, each stored once).
///
/// The same bytes serve the in-process recorder (an anonymous mapping) and `timerfires`
/// (a file shared with the traced process: records written before a crash or a Ctrl-C are
/// in the page cache, so the report survives the program's death). All integers are
/// little-endian, native on every platform Lull runs on.
package enum TraceLayout {
    /// "LULLWAKE" read as a little-endian integer.
    package static let magic: UInt64 = 0x454B_4157_4C4C_554C
    package static let version: UInt32 = 1
    package static let headerSize = 4096
    package static let recordSize = 64
    package static let defaultRecordCapacity = 262_144
    package static let maximumRecordCapacity = 16_777_216
    /// Room for strings: identities are interned, so a program needs a few KiB.
    package static let stringCapacity = 1 << 20

    /// Byte offsets of the header fields.
    package enum Header {
        static let magic = 0            // UInt64
        static let version = 8          // UInt32
        static let headerSize = 12      // UInt32
        static let recordSize = 16      // UInt32
        static let pid = 20             // Int32
        static let capacity = 24        // UInt64: records in the ring
        static let stringCapacity = 32  // UInt64: bytes of the string table
        static let startTime = 40       // UInt64: monotonic ns when recording started
        static let recordsWritten = 48  // UInt64: records ever written (the ring's head)
        static let stringBytes = 56     // UInt64: bytes of the string table in use
        static let stopTime = 64        // UInt64: monotonic ns when recording stopped, 0 while on
        /// UInt64 × 4: reactor wake-ups by `WakeupCause` raw value.
        static let wakeupCounts = 72
        /// UInt64 × 8: nanoseconds of CPU time by `TraceLayout.qosIndex`.
        static let cpuNanoseconds = 104
        static let timerFires = 168     // UInt64: fire records ever written
    }

    /// Byte offsets inside one record.
    package enum Record {
        static let commit = 0           // UInt32: low 32 bits of (index + 1), written last
        static let kind = 4             // UInt8: RecordKind
        static let detail = 5           // UInt8: WakeupCause (wake-up) or QoS index (fire)
        static let fireCount = 6        // UInt16: fires of a repeating timer merged into this one
        static let wakeup = 8           // UInt64: the wake-up's sequence number
        static let time = 16            // UInt64: monotonic ns of the wake-up or the fire
        static let deadline = 24        // UInt64
        static let leeway = 32          // UInt64
        static let identity = 40        // UInt32: string id
        static let queue = 44           // UInt32: string id
        static let instance = 48        // UInt64: which timer (0: all blocks of one call site)
    }

    package enum RecordKind: UInt8 {
        case wakeup = 1
        case timerFire = 2
    }

    /// The QoS classes in the order of the CPU counters.
    package static let qosClasses: [QoS.QoSClass] = [.unspecified, .background, .utility, .default,
                                                     .userInitiated, .userInteractive]

    static func qosIndex(_ qosClass: QoS.QoSClass) -> Int { qosClass.rank }

    package static func fileSize(capacity: Int) -> Int {
        headerSize + capacity * recordSize + stringCapacity
    }

    package static func stringTableOffset(capacity: Int) -> Int {
        headerSize + capacity * recordSize
    }
}

/// Why the reactor's poll returned.
package enum WakeupCause: UInt8, Sendable {
    /// The reactor's next-timer expired.
    case timer = 0
    /// A descriptor (socket, pipe, signal, inotify, process...) became ready.
    case descriptor = 1
    /// Another thread changed the reactor's events while it slept: libevent's notification.
    case crossThread = 2
    /// The poll returned without any of the above (libevent's own events).
    case other = 3
}
