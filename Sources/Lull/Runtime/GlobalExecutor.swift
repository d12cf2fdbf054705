import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif
#if compiler(>=6.3) && os(Linux)
@_spi(ExperimentalCustomExecutors) @_spi(ExperimentalScheduling) import _Concurrency
#endif

/// Swift concurrency's global and main executors on Lull: call once, first thing in `main`.
///
/// Once installed, every task's jobs run on Lull's worker pool at the QoS of the task's
/// priority (high and userInitiated → userInitiated, medium → default, low and utility →
/// utility, background → background, none → default); `Task.sleep` on the continuous and
/// suspending clocks becomes a Lull timer whose leeway is the `tolerance` (never less than
/// the default leeway of the task's QoS; nil: that default), so sleeps whose windows
/// overlap wake the process once; and MainActor jobs run on `WorkQueue.main`, exclusive
/// with its blocks.
///
/// The install goes through the Swift runtime's custom-executor support
/// (`_createExecutors(factory:)`, SPI in the Swift 6.3 toolchains): known to work with Swift
/// 6.3.1 on Linux. Where the compiler is older or the platform is not Linux, `install()`
/// throws ``GlobalExecutorError/unsupported`` and nothing changes.
///
/// With a synchronous main, install before any task starts, then start work and call
/// `WorkQueue.runMain()`:
///
/// ```swift
/// import Lull
///
/// try GlobalExecutor.install()
/// Task { @MainActor in
///     try await Task.sleep(for: .seconds(1), tolerance: .milliseconds(200))
///     print("on the main queue")
/// }
/// WorkQueue.runMain()
/// ```
///
/// With an `async` main, install as its first statement, before its first `await`: the
/// main thread then drains `WorkQueue.main` (the async main's run loop is Lull's), so
/// MainActor work, the async main's own continuations and the main queue's blocks run on
/// the main thread, one at a time; the program ends when `main` returns.
///
/// ```swift
/// import Lull
///
/// try GlobalExecutor.install()
/// try await Task.sleep(for: .seconds(1), tolerance: .milliseconds(200))
/// print("on the main queue, on the main thread")
/// ```
///
/// Installed later in an async main (after an `await`), the platform's run loop already
/// owns the main thread: Dispatch's main queue then drains `WorkQueue.main`, so MainActor
/// work and the main queue still exclude each other, but run on Dispatch's main-queue
/// threads, as MainActor work does without Lull there. An async main calls
/// `WorkQueue.runMain()` only in that first slice, if at all.
///
/// Called from any other task, `install()` throws ``GlobalExecutorError/tooLate`` and
/// changes nothing. Tasks started from plain threads before the install cannot be
/// detected: their later jobs run on Lull's executors.
public enum GlobalExecutor {
    private static let installed = Atomic<Bool>(false)

    /// Makes Lull Swift concurrency's default and main executor.
    /// - Throws: ``GlobalExecutorError``: already installed, called from a task other than
    ///   an async main, or the toolchain has no custom-executor support. Nothing changes
    ///   when it throws.
    public static func install() throws {
        #if compiler(>=6.3) && os(Linux)
        // From a task, only an async main's: in its first slice, on the main thread before
        // the run loop starts, or later on Dispatch's main queue, which that loop drains.
        let fromTask = lull_in_swift_task() != 0
        let firstSlice = fromTask && lull_gettid() == getpid()
        if fromTask && !firstSlice && lull_dispatch_main_queue_is_current() == 0 {
            throw GlobalExecutorError.tooLate
        }
        guard installed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else {
            throw GlobalExecutorError.alreadyInstalled
        }
        let runtime = Runtime.shared
        if fromTask {
            let adopted = firstSlice
                ? !runtime.roots.mainThread.hasRunMainThread && DispatchMainQueueBridge.start()
                : runtime.roots.mainThread.hostOnDispatchMainQueue()
            guard adopted else {
                // No libdispatch hooks, or a thread is inside WorkQueue.runMain() already:
                // the async main's task could not continue.
                installed.store(false, ordering: .releasing)
                throw GlobalExecutorError.tooLate
            }
        }
        LullExecutorFactory.executors.locked { executors in
            executors = (PoolTaskExecutor(roots: runtime.roots, timers: runtime.timers),
                         MainQueueExecutor(roots: runtime.roots, timers: runtime.timers))
        }
        _createExecutors(factory: LullExecutorFactory.self)
        #else
        throw GlobalExecutorError.unsupported
        #endif
    }

    /// Whether `install()` has made Lull the default and main executor.
    public static var isInstalled: Bool {
        installed.load(ordering: .acquiring)
    }
}

/// Why `GlobalExecutor.install()` did not install; nothing changed.
public enum GlobalExecutorError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `install()` succeeded before.
    case alreadyInstalled
    /// Called from a task other than an `async` main: tasks already run on the previous
    /// executors. Install from synchronous code before the first task, or at the start of
    /// an `async` main.
    case tooLate
    /// This toolchain or platform has no custom-executor support (Lull needs Swift 6.3 or
    /// later on Linux).
    case unsupported

    public var description: String {
        switch self {
        case .alreadyInstalled: "GlobalExecutor.install(): Lull's executors are installed already"
        case .tooLate: "GlobalExecutor.install(): called from a task; install before the first task starts (or first thing in an async main)"
        case .unsupported: "GlobalExecutor.install(): the Swift runtime here has no custom-executor support (needs Swift 6.3 or later on Linux)"
        }
    }
}

#if compiler(>=6.3) && os(Linux)
/// The factory `_createExecutors(factory:)` reads once, right after `install()` stored the
/// two executors it hands out.
struct LullExecutorFactory: ExecutorFactory {
    static let executors = Mutex<(PoolTaskExecutor, MainQueueExecutor)?>(nil)

    static var mainExecutor: any MainExecutor {
        guard let main = executors.locked({ $0?.1 }) else { lullFatal("the main executor is read before install()") }
        return main
    }

    static var defaultExecutor: any TaskExecutor {
        guard let pool = executors.locked({ $0?.0 }) else { lullFatal("the default executor is read before install()") }
        return pool
    }
}
#endif
