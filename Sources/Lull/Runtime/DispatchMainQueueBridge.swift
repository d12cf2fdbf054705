import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Dispatch's main queue drained from Lull's main queue, on the main thread: what keeps an
/// async main working after `GlobalExecutor.install()` ran in its first slice.
///
/// An async main's task starts on the platform's main executor (Dispatch's main queue), and
/// its continuations keep going there: the runtime takes every main executor for the same
/// isolation, so a continuation of a task that started on Dispatch's main queue does not
/// move to Lull's. Once the install made Lull's main executor the one the async main's run
/// loop runs, Dispatch's main queue has no drainer of its own; this read source on its
/// run-loop eventfd drains it inside a block of `WorkQueue.main`, as CoreFoundation's
/// RunLoop does, so its blocks run on the main thread, exclusive with the main queue's.
enum DispatchMainQueueBridge {
    /// The source, alive for the rest of the process once started.
    private static let source = Mutex<ReadSource?>(nil)

    /// Starts draining Dispatch's main queue on `WorkQueue.main`: false where libdispatch
    /// offers no run-loop handle, and nothing changes.
    static func start() -> Bool {
        let descriptor = lull_dispatch_main_queue_handle()
        guard descriptor >= 0 else { return false }
        let reader = EventSource.makeReadSource(fileDescriptor: descriptor, queue: WorkQueue.main)
        reader.setEventHandler {
            // libdispatch drains its main queue only on the main thread.
            guard lull_gettid() == getpid() else {
                lullFatal("WorkQueue.runMain() runs on a thread other than the main thread, so Dispatch's main "
                          + "queue, where an async main's task continues, cannot be drained")
            }
            lull_dispatch_main_queue_drain(descriptor)
        }
        source.locked { $0 = reader }
        reader.activate()
        return true
    }
}
