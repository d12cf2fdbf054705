import CLullShims
import CLullTestSupport
import Glibc
import Synchronization
import Testing
@testable import Lull

/// Every suite of this target is nested in this one, which runs its tests one at a time.
///
/// Lull's worker pool is shared by the whole process and bounded by the CPU count: two
/// tests that each park a worker on a gate could starve a third of threads on a 2-core
/// machine. Running the tests one at a time keeps every test's view of the pool its own.
@Suite(.serialized) enum LullSuite {}

/// Suites that share no state of this process with the others — they run child processes,
/// or check pure logic — and so run alongside `LullSuite`; each runs its own tests one at a
/// time (`.serialized` on the suite). Tests that own their runtime parts outright (a
/// `DrivenEngine`) are top-level suites and run fully in parallel.
@Suite enum IndependentSuite {}

// MARK: Waiting

/// How long a test waits for something that must happen. Generous: the machine is noisy.
let generousTimeout: Duration = .seconds(10)

/// Polls `condition` until it holds or `timeout` passes; true when it held.
@discardableResult
func waitUntil(timeout: Duration = generousTimeout, _ condition: () -> Bool) -> Bool {
    let clock = SuspendingClock()
    let end = clock.now.advanced(by: timeout)
    while true {
        if condition() { return true }
        if clock.now >= end { return condition() }
        usleep(200)
    }
}

/// Polls `condition` for `duration`; true when it held at every look. Used only to check
/// that something does *not* happen: a correct library can never fail such a check.
func keepsHolding(for duration: Duration = .milliseconds(100), _ condition: () -> Bool) -> Bool {
    let clock = SuspendingClock()
    let end = clock.now.advanced(by: duration)
    while clock.now < end {
        if !condition() { return false }
        usleep(1_000)
    }
    return condition()
}

func sleep(milliseconds: Int) {
    usleep(UInt32(milliseconds * 1_000))
}

/// Busy-waits for `microseconds`, to make overlaps likely when they are possible at all.
func spin(microseconds: UInt64) {
    let end = monotonicNanoseconds() + microseconds * 1_000
    while monotonicNanoseconds() < end {}
}

// MARK: Clocks, read straight from the kernel

func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

func realtimeNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

// MARK: Threads

/// Who is running: the kernel thread id and the pthread handle.
struct ThreadIdentity: Equatable, Sendable, CustomStringConvertible {
    let tid: Int32
    let pthread: pthread_t

    static var current: ThreadIdentity {
        ThreadIdentity(tid: lull_gettid(), pthread: pthread_self())
    }

    static func == (lhs: ThreadIdentity, rhs: ThreadIdentity) -> Bool {
        lhs.tid == rhs.tid && pthread_equal(lhs.pthread, rhs.pthread) != 0
    }

    var description: String { "tid \(tid)" }
}

/// The calling thread's nice value (Linux nice values are per thread).
func currentNice() -> Int32 {
    errno = 0
    return getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
}

/// The I/O scheduling class of the calling thread (1 real time, 2 best effort, 3 idle;
/// 0 means "none set", which the kernel treats as best effort), or nil if unreadable.
func currentIOPriorityClass() -> Int32? {
    var value: Int32 = 0
    guard lull_get_thread_ioprio(lull_gettid(), &value) == 0 else { return nil }
    return value >> 13
}

let ioPriorityClassIdle: Int32 = 3

let onlineCPUs: Int = sysconf(Int32(_SC_NPROCESSORS_ONLN))

// MARK: Shared state for blocks

final class Counter: Sendable {
    private let storage = Atomic<Int>(0)
    private let notifier = ChangeNotifier()

    var value: Int { storage.load(ordering: .acquiring) }

    @discardableResult
    func increment() -> Int {
        defer { notifier.notifyAll() }
        return storage.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue
    }

    @discardableResult
    func decrement() -> Int {
        defer { notifier.notifyAll() }
        return storage.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue
    }

    /// Waits until `holds(value)`, woken by every change (no polling); false if it did not
    /// hold within `timeout`.
    @discardableResult
    func await(timeout: Duration = generousTimeout, until holds: (Int) -> Bool) -> Bool {
        notifier.wait(timeout: timeout) { holds(value) }
    }
}

final class Flag: Sendable {
    private let storage = Atomic<Bool>(false)
    private let notifier = ChangeNotifier()

    var isSet: Bool { storage.load(ordering: .acquiring) }

    func set() {
        storage.store(true, ordering: .releasing)
        notifier.notifyAll()
    }

    /// Waits until set, woken by `set` (no polling); false if it stayed clear for `timeout`.
    @discardableResult
    func await(timeout: Duration = generousTimeout) -> Bool {
        notifier.wait(timeout: timeout) { isSet }
    }
}

/// Wakes the threads that wait for a condition other threads change: the changer calls
/// `notifyAll` after the change, and each waiter looks at its condition again. A pthread
/// mutex and a condition variable on CLOCK_MONOTONIC: a waiter looks under the mutex and
/// sleeps in the same critical section, and `notifyAll` takes the mutex, so a change made
/// before `notifyAll` is never missed.
///
/// With nobody waiting, `notifyAll` costs one atomic load: a waiter counts itself in
/// `waiting` before its first look, and the changer reads `waiting` after its change, each
/// behind a sequentially consistent fence, so either the changer sees the waiter (and takes
/// the mutex) or the waiter's look sees the change.
final class ChangeNotifier: Sendable {
    private let waiting = Atomic<Int>(0)
    // Allocated and initialised in init, destroyed in deinit once no thread can use them;
    // every other access is a pthread call, which synchronises itself.
    private nonisolated(unsafe) let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private nonisolated(unsafe) let condition: UnsafeMutablePointer<pthread_cond_t>

    init() {
        mutex = .allocate(capacity: 1)
        condition = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func notifyAll() {
        atomicMemoryFence(ordering: .sequentiallyConsistent)
        guard waiting.load(ordering: .sequentiallyConsistent) > 0 else { return }
        pthread_mutex_lock(mutex)
        pthread_cond_broadcast(condition)
        pthread_mutex_unlock(mutex)
    }

    /// Sleeps until `holds` is true (looked at after every `notifyAll`) or `timeout` passes;
    /// returns the last look.
    func wait(timeout: Duration, until holds: () -> Bool) -> Bool {
        let (seconds, attoseconds) = timeout.components
        let end = monotonicNanoseconds() &+ UInt64(max(0, seconds)) * 1_000_000_000
            &+ UInt64(max(0, attoseconds / 1_000_000_000))
        waiting.add(1, ordering: .sequentiallyConsistent)
        atomicMemoryFence(ordering: .sequentiallyConsistent)
        pthread_mutex_lock(mutex)
        defer {
            pthread_mutex_unlock(mutex)
            waiting.subtract(1, ordering: .sequentiallyConsistent)
        }
        while !holds() {
            guard monotonicNanoseconds() < end else { return holds() }
            var until = timespec(tv_sec: Int(end / 1_000_000_000), tv_nsec: Int(end % 1_000_000_000))
            pthread_cond_timedwait(condition, mutex, &until)
        }
        return true
    }
}

/// A block that must not finish before the test says so waits on a gate.
final class Gate: Sendable {
    private let flag = Flag()

    func open() { flag.set() }
    var isOpen: Bool { flag.isSet }

    /// Waits until opened (woken by `open`); false if it stayed closed for the generous
    /// timeout.
    @discardableResult
    func wait() -> Bool {
        flag.await()
    }
}

/// An ordered log that blocks append to from any thread.
final class Recorder<Element: Sendable>: Sendable {
    private let storage = Mutex<[Element]>([])

    func append(_ element: Element) {
        storage.locked { $0.append(element) }
    }

    var values: [Element] { storage.locked { $0 } }
    var count: Int { storage.locked { $0.count } }
}

/// One value handed from a block to the test.
final class Captured<Value: Sendable>: Sendable {
    private let storage = Mutex<Value?>(nil)

    func set(_ value: Value) {
        storage.locked { $0 = value }
    }

    var value: Value? { storage.locked { $0 } }

    /// Waits until a value was set and returns it (nil after the generous timeout).
    func await() -> Value? {
        waitUntil { value != nil }
        return value
    }
}

/// Counts how many blocks run at once and remembers the most seen.
final class OverlapTracker: Sendable {
    private let current = Atomic<Int>(0)
    private let highest = Atomic<Int>(0)

    func enter() {
        let now = current.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue
        var seen = highest.load(ordering: .relaxed)
        while now > seen {
            let (exchanged, original) = highest.compareExchange(expected: seen, desired: now, ordering: .relaxed)
            if exchanged { break }
            seen = original
        }
    }

    func exit() {
        current.wrappingSubtract(1, ordering: .acquiringAndReleasing)
    }

    var running: Int { current.load(ordering: .acquiring) }
    var maximum: Int { highest.load(ordering: .acquiring) }
}

struct TestError: Error, Equatable {
    let code: Int
}

// MARK: Exit tests

/// The standard error a child process of an exit test wrote, as text.
func standardErrorText(_ result: ExitTest.Result?) -> String {
    guard let result else { return "" }
    return String(decoding: result.standardErrorContent, as: UTF8.self)
}

/// Prints what a child wrote to standard error when it did not exit with status 0, so that
/// a failed exit test says which requirement failed (`childRequire` writes it there).
func printChildFailure(_ result: ExitTest.Result?) {
    guard let result else { return }
    if case .exitCode(0) = result.exitStatus { return }
    print("child exited with \(result.exitStatus); its standard error:\n\(standardErrorText(result))")
}

/// Writes a line to standard error (file descriptor 2), where exit tests can observe it.
func printToStandardError(_ text: String) {
    let line = text + "\n"
    _ = line.utf8CString.withUnsafeBufferPointer { buffer in
        write(2, buffer.baseAddress, buffer.count - 1)
    }
}
