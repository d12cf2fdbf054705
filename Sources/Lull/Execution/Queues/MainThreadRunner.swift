import Synchronization

/// Runs the main queue's drains on the thread inside `WorkQueue.runMain()`.
final class MainThreadRunner: Sendable {

    private let jobs = SpinFutexLock<Fifo<Job>>(Fifo(), rank: .mainThreadJobs)
    private let parker = Parker()
    private let started = Atomic<Bool>(false)

    func submit(_ job: Job) {
        jobs.locked { $0.append(job) }
        parker.unpark()
    }

    func run() -> Never {
        guard started.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else {
            lullFatal("WorkQueue.runMain() called twice: the main queue already has its thread")
        }
        let thread = ThreadState.current
        thread.adoptQoS(.userInteractive)
        while true {
            while let job = jobs.locked({ $0.popFirst() }) {
                JobRunner.run(job, floor: .unspecified, drainQoS: nil, thread: thread)
            }
            parker.park()
        }
    }
}
