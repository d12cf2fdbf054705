import CLullShims
#if canImport(Glibc)
import Glibc
#endif

/// A one-permit parking spot for one thread: `park` sleeps until `unpark` (from any thread)
/// gives the permit, or until a deadline. An `unpark` before the `park` is not lost.
///
/// Built on a futex word so that `unpark` costs a system call only when a thread sleeps.
final class Parker: Sendable {
    // The word is only touched through the C atomics and futex calls in CLullShims; the
    // pointer itself never changes and is freed in deinit, after every user is gone.
    private nonisolated(unsafe) let word: UnsafeMutablePointer<UInt32>

    init() {
        word = .allocate(capacity: 1)
        word.initialize(to: 0)
    }

    deinit {
        word.deallocate()
    }

    /// Sleeps until unparked. Spurious returns do not happen.
    func park() {
        _ = lull_park(word, nil)
    }

    /// Sleeps until unparked or until `deadline`; true when unparked.
    func park(until deadline: Deadline) -> Bool {
        if deadline == .distantFuture {
            park()
            return true
        }
        var spec = timespec(
            tv_sec: Int(deadline.uptimeNanoseconds / 1_000_000_000),
            tv_nsec: Int(deadline.uptimeNanoseconds % 1_000_000_000))
        return lull_park(word, &spec) == 0
    }

    func unpark() {
        lull_unpark(word)
    }
}
