import CLullShims
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Creates worker threads on behalf of threads that would hand them the wrong priority.
///
/// A new thread starts with its creator's nice value, and a thread without `CAP_SYS_NICE`
/// may lower a nice value only down to 20 - RLIMIT_NICE. So in a process that cannot lower
/// nice values at will (`ThreadPriority.canRaise` false: most unprivileged processes), a
/// utility worker (nice p+5) that starts a user-interactive worker would leave it at p+5 for
/// good. There, a creating thread whose nice value is above the new worker's asks the
/// starter instead: one thread, made with the pool on the program's thread (at the process's
/// nice value), asleep until asked. Where nice values can be lowered, every thread creates
/// its workers itself and the starter is never made.
///
/// State model. A request is *posted* (appended to `requests` under the lock, then the
/// starter is unparked), *taken* (the starter empties `requests` under the lock), and
/// *answered* (the starter stores the `pthread_create` result in it, then unparks the
/// requester, which waits on its own parker until the result is there). Invariants: each
/// request is answered exactly once (asserted); a request posted while the starter runs is
/// seen by its next look at `requests`, because the starter parks only after finding it
/// empty and an unpark before a park is not lost; `pthread_create` runs outside the lock.
final class ThreadStarter: Sendable {
    /// One creation asked of the starter: the result is `pending` until answered.
    final class Request: Sendable {
        /// Not a result: `pthread_create` through its shim gives 0 or -errno.
        static let pending: Int32 = .min
        let create: @Sendable () -> Int32
        let result = Atomic<Int32>(Request.pending)
        let answered = Parker()

        init(create: @escaping @Sendable () -> Int32) {
            self.create = create
        }
    }

    private let requests = Mutex<[Request]>([])
    private let wake = Parker()
    /// The starter's nice value: a creator above it asks the starter.
    let niceValue: Int32

    /// Starts the starter thread; nil when it cannot be created (creators then create their
    /// workers themselves, at their own nice value, which `ThreadPriority.apply` reports).
    static func make() -> ThreadStarter? {
        var nice: Int32 = 0
        guard lull_get_thread_nice(lull_gettid(), &nice) == 0 else { return nil }
        let starter = ThreadStarter(niceValue: nice)
        var thread = pthread_t()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        let context = Unmanaged.passRetained(starter).toOpaque()
        #if DEBUG
        LockOrder.assertNoSpinLockHeld("pthread_create")
        #endif
        let result = lull_pthread_create(&thread, &attributes, { context in
            Unmanaged<ThreadStarter>.fromOpaque(context!).takeRetainedValue().run()
            return nil
        }, context)
        pthread_attr_destroy(&attributes)
        guard result == 0 else {
            Unmanaged<ThreadStarter>.fromOpaque(context).release()
            RuntimeLog.once("thread-starter-failed") {
                "could not start Lull's thread starter (\(SystemError("pthread_create", code: -result))); workers created by lower-priority workers keep their creator's nice value"
            }
            return nil
        }
        return starter
    }

    private init(niceValue: Int32) {
        self.niceValue = niceValue
    }

    /// Runs `create` (a `pthread_create`) on the starter and returns its result.
    func create(_ create: @escaping @Sendable () -> Int32) -> Int32 {
        let request = Request(create: create)
        requests.locked { $0.append(request) }
        wake.unpark()
        while request.result.load(ordering: .acquiring) == Request.pending {
            request.answered.park()
        }
        return request.result.load(ordering: .acquiring)
    }

    private func run() {
        _ = lull_set_thread_name("lull.starter")
        while true {
            let taken = requests.locked { requests -> [Request] in
                defer { requests.removeAll(keepingCapacity: true) }
                return requests
            }
            if taken.isEmpty {
                wake.park()
                continue
            }
            for request in taken {
                let result = request.create()
                let previous = request.result.exchange(result, ordering: .releasing)
                assert(previous == Request.pending, "Lull: a thread-start request answered twice")
                request.answered.unpark()
            }
        }
    }
}
