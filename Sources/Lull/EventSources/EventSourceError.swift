#if canImport(Glibc)
import Glibc
#endif

/// Why a source could not watch what it was given: the system's reason, with what was asked.
public struct EventSourceError: Error, CustomStringConvertible, Sendable {
    /// The `errno` value behind the failure (0 when it is not a system error).
    public let code: Int32
    /// What was being done, for example "ReadSource on 'net': descriptor 42".
    public let subject: String
    let reason: String

    init(subject: String, code: Int32, reason: String? = nil) {
        self.subject = subject
        self.code = code
        self.reason = reason ?? String(cString: strerror(code))
    }

    /// "subject: reason (errno N)", for logs and error messages.
    public var description: String {
        code == 0 ? "\(subject): \(reason)" : "\(subject): \(reason) (errno \(code))"
    }
}
