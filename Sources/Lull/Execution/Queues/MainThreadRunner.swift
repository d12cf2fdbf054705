import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Runs the main queue's drains on the thread inside `WorkQueue.runMain()`.
final class MainThreadRunner: Sendable {

    private let jobs = SpinFutexLock<Fifo<Job>>(Fifo(), rank: .mainThreadJobs)
    private let parker = Parker()
    private let started = Atomic<Bool>(false)
    /// The thread inside `runMain()` (0 until one is).
    private let runnerTid = Atomic<Int32>(0)

    /// Whether `thread` stands for the main queue when it runs no block: the process's main
    /// thread while no other thread drains the main queue (as on Darwin, where the main
    /// queue is bound to the main thread, code on the main thread is on the main queue).
    func representsMainQueue(_ thread: ThreadState) -> Bool {
        guard thread.tid == getpid() else { return false }
        let runner = runnerTid.load(ordering: .acquiring)
        return runner == 0 || runner == thread.tid
    }

    func submit(_ job: Job) {
        jobs.locked { $0.append(job) }
        parker.unpark()
    }

    func run() -> Never {
        guard started.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else {
            lullFatal("WorkQueue.runMain() called twice: the main queue already has its thread")
        }
        let thread = ThreadState.current
        runnerTid.store(thread.tid, ordering: .releasing)
        thread.adoptQoS(.userInteractive)
        while true {
            while let job = jobs.locked({ $0.popFirst() }) {
                JobRunner.run(job, floor: .unspecified, drainQoS: nil, thread: thread)
            }
            parker.park()
        }
    }
}
