#if canImport(Glibc)
import Glibc
#endif

/// A thread's scheduler statistics from `/proc/self/task/<tid>/schedstat`: CPU time, time
/// spent runnable on a run queue waiting for a CPU, time slices (all since it started).
struct ThreadSchedStat: Sendable, Equatable {
    var cpuNanoseconds: UInt64
    var runQueueWaitNanoseconds: UInt64

    /// The statistics of thread `tid` of this process; nil when the file cannot be read
    /// (the thread exited, or a kernel without scheduler statistics).
    static func read(tid: Int32) -> ThreadSchedStat? {
        let descriptor = open("/proc/self/task/\(tid)/schedstat", O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 96)
        let count = buffer.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress, 96) }
        guard count > 0 else { return nil }
        return parse(buffer[0..<count])
    }

    /// "cpu_ns run_delay_ns slices\n".
    static func parse(_ bytes: ArraySlice<UInt8>) -> ThreadSchedStat? {
        var fields: [UInt64] = []
        var value: UInt64 = 0
        var inNumber = false
        for byte in bytes {
            if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") {
                let (times, overflow) = value.multipliedReportingOverflow(by: 10)
                guard !overflow else { return nil }
                value = times &+ UInt64(byte - UInt8(ascii: "0"))
                inNumber = true
            } else if inNumber {
                fields.append(value)
                value = 0
                inNumber = false
            }
        }
        if inNumber { fields.append(value) }
        guard fields.count >= 2 else { return nil }
        return ThreadSchedStat(cpuNanoseconds: fields[0], runQueueWaitNanoseconds: fields[1])
    }
}
