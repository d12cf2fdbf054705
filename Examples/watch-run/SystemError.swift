#if canImport(Glibc)
import Glibc
#endif

/// A failed system call: the system's reason, as `strerror` words it.
struct SystemError: Error, CustomStringConvertible {
    let code: Int32
    var description: String { String(cString: strerror(code)) }
}
