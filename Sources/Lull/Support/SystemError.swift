import CLullShims
#if canImport(Glibc)
import Glibc
#endif

/// A system call that failed: the call's name and its errno.
///
/// Its description names both, and the errno by its symbol and text:
/// "inotify_add_watch: ENOSPC (No space left on device)".
struct SystemError: Error, Sendable, CustomStringConvertible {
    /// The call that failed, as the manual names it ("timerfd_settime").
    let call: StaticString
    /// Its errno (> 0).
    let code: Int32

    init(_ call: StaticString, code: Int32) {
        self.call = call
        self.code = code
    }

    var description: String { "\(call): \(Self.describe(code))" }

    /// The symbol of an errno value ("ENOSPC"), or "errno N" for a number without one.
    static func name(of code: Int32) -> String {
        lull_errno_name(code).map { String(cString: $0) } ?? "errno \(code)"
    }

    /// An errno value by its symbol and text: "ENOSPC (No space left on device)".
    static func describe(_ code: Int32) -> String {
        "\(name(of: code)) (\(String(cString: strerror(code))))"
    }
}
