import CLullShims
import Glibc
import Synchronization
import Testing
@testable import Lull

/// The pool's wake policy for a class fed by one of its own workers (a task spawning child
/// tasks, a block submitting blocks): a worker that runs out of work while its class leaves
/// a CPU unused spins for the next job instead of parking, so that the feeding worker hands
/// it over without a futex wake-up (docs/WorkerPool.md, "Spinning"). On a private pool
/// (`DrivenPool`): no other work of the process shares its classes.
///
/// In `LullSuite`: the spin hook is process-wide (it filters on the test's pool).
extension LullSuite {
    @Suite struct SpinHandoffTests {
        /// One worker stays in a job (asleep on a condition, counted running); a second
        /// worker runs a short job and runs out of work. With a CPU of the class unused it
        /// spins — while the first is still in its job — rather than park until a submit
        /// wakes it.
        @Test(.enabled(if: onlineCPUs >= 2, "one CPU: the class has no CPU to spin on"))
        func aWorkerThatRunsOutWhileAnotherRunsSpins() throws {
            let driven = DrivenPool()
            let pool = driven.pool
            let release = Flag()
            defer {
                PoolTestHooks.spinEnds.locked { $0 = nil }
                release.set()
                driven.shutDown()
            }
            let holderIn = Flag()
            let spunWhileHeld = Beacon<Int32>()
            PoolTestHooks.spinEnds.locked { hook in
                hook = { worker in
                    guard worker.owner === pool, holderIn.isSet, !release.isSet else { return }
                    spunWhileHeld.post(lull_gettid())
                }
            }
            let holder = Beacon<Int32>()
            pool.submit(DrivenPool.job {
                holder.post(lull_gettid())
                holderIn.set()
                release.await()
            })
            let holderTid = try #require(holder.await(count: 1).first)
            let ran = Beacon<Int32>()
            pool.submit(DrivenPool.job { ran.post(lull_gettid()) })
            let runner = try #require(ran.await(count: 1).first, "the second job did not run")
            #expect(runner != holderTid)
            let spinner = try #require(spunWhileHeld.await(count: 1).first,
                                       "the worker parked while its class left a CPU unused")
            #expect(spinner == runner)
            // At most one spinner per class, never counted running.
            #expect(pool.classes[QoS.QoSClass.default.poolIndex].state.locked { $0.spinning <= 1 })
        }

        /// A job that submits its class's next job and returns, a chain of them (utility: a
        /// class that never polls the driven target, whose poll only the test ends): each link
        /// runs, on the chain's workers, with the spinner taking what the feeding worker
        /// queues; none is lost and the class ends with no worker counted running or spinning.
        @Test func aChainOfJobsEachSubmittingTheNextLosesNone() throws {
            let driven = DrivenPool()
            defer { driven.shutDown() }
            let pool = driven.pool
            let links = 20_000
            let chain = JobTree(pool: pool)
            chain.submitChain(links)
            #expect(waitUntil { chain.ran == links }, "\(chain.ran) of \(links) links ran")
            let utilityClass = pool.classes[QoS.QoSClass.utility.poolIndex]
            #expect(waitUntil { utilityClass.state.locked { $0.running == 0 && $0.spinning == 0 && $0.jobs.isEmpty } })
        }

        /// A storm: plain threads and workers submit at once (each worker job submits two
        /// more until its depth runs out); every job runs exactly once.
        @Test func aSubmitStormFromManyThreadsLosesNoJob() throws {
            let driven = DrivenPool()
            defer { driven.shutDown() }
            let threads = 6
            let rootsPerThread = 400
            let depth = 4  // each root makes 2^(depth+1) - 1 jobs
            let expected = threads * rootsPerThread * ((1 << (depth + 1)) - 1)
            let tree = JobTree(pool: driven.pool)
            var pthreads: [pthread_t] = []
            for _ in 0..<threads {
                pthreads.append(startThread {
                    for _ in 0..<rootsPerThread { tree.submitTree(depth) }
                })
            }
            for thread in pthreads { pthread_join(thread, nil) }
            #expect(waitUntil { tree.ran == expected }, "\(tree.ran) of \(expected) jobs ran")
            #expect(keepsHolding(for: .milliseconds(20)) { tree.ran == expected }, "a job ran twice")
        }
    }
}

/// Utility-QoS jobs on a pool (a class that never polls the driven target, whose poll only
/// the test ends) that submit more of themselves, counting each run.
private final class JobTree: Sendable {
    let pool: WorkerPool
    private let count = Atomic<Int>(0)

    init(pool: WorkerPool) { self.pool = pool }

    var ran: Int { count.load(ordering: .acquiring) }

    /// A job that, once run, submits the next link until `left` runs out.
    func submitChain(_ left: Int) {
        pool.submit(utilityJob { [self] in
            count.add(1, ordering: .acquiringAndReleasing)
            if left > 1 { submitChain(left - 1) }
        })
    }

    /// A job that, once run, submits two of depth `level - 1`.
    func submitTree(_ level: Int) {
        pool.submit(utilityJob { [self] in
            count.add(1, ordering: .acquiringAndReleasing)
            guard level > 0 else { return }
            submitTree(level - 1)
            submitTree(level - 1)
        })
    }
}

/// A utility-QoS block for `pool.submit`.
private func utilityJob(_ block: @escaping @Sendable () -> Void) -> Job {
    Job(work: .block(block), qos: QoS(.utility), flags: [], context: .empty, group: nil)
}

/// Starts a joinable plain thread running `body`.
private func startThread(_ body: @escaping @Sendable () -> Void) -> pthread_t {
    final class Box: Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    var thread = pthread_t()
    let context = Unmanaged.passRetained(Box(body)).toOpaque()
    let result = pthread_create(&thread, nil, { context in
        Unmanaged<Box>.fromOpaque(context!).takeRetainedValue().body()
        return nil
    }, context)
    precondition(result == 0, "pthread_create: \(result)")
    return thread
}
