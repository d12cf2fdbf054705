#if canImport(Glibc)
import Glibc
#endif

/// The one way Lull makes a system call that can fail: through a shim of CLullShims (which
/// returns a non-negative result or -errno) or a Glibc function (which returns -1 and sets
/// errno). An interrupted call (EINTR) is made again; any other failure comes back as a
/// `SystemError` that names the call.
///
/// Debug builds assert that no spin lock is held (see `LockRank`).
///
/// Not for calls that must not be repeated after EINTR (`close`): those are made directly
/// and their failure is documented where they are.
enum Syscall {
    /// A CLullShims call: its result (>= 0), or its -errno as a `SystemError`.
    @inline(__always)
    static func shim<Result: FixedWidthInteger & SignedInteger>(
        _ call: StaticString, _ body: () -> Result
    ) throws(SystemError) -> Result {
        #if DEBUG
        LockOrder.assertNoSpinLockHeld(call)
        #endif
        while true {
            let result = body()
            if result >= 0 { return result }
            if result == -Result(EINTR) { continue }
            throw SystemError(call, code: Int32(truncatingIfNeeded: -result))
        }
    }

    /// A CLullShims call whose result is not needed: nil when it succeeded, or its failure.
    @inline(__always)
    static func failure<Result: FixedWidthInteger & SignedInteger>(
        _ call: StaticString, _ body: () -> Result
    ) -> SystemError? {
        do throws(SystemError) {
            _ = try shim(call, body)
            return nil
        } catch {
            return error
        }
    }

    /// A Glibc call that returns -1 and sets errno on failure: its result, or errno as a
    /// `SystemError`.
    @inline(__always)
    static func posix<Result: FixedWidthInteger & SignedInteger>(
        _ call: StaticString, _ body: () -> Result
    ) throws(SystemError) -> Result {
        #if DEBUG
        LockOrder.assertNoSpinLockHeld(call)
        #endif
        while true {
            let result = body()
            if result != -1 { return result }
            let code = errno
            if code == EINTR { continue }
            throw SystemError(call, code: code)
        }
    }
}
