import Glibc
import Testing
@testable import Lull

/// Thread creation can fail (EAGAIN under RLIMIT_NPROC): queued work still runs once a
/// thread can be had, without any further submit to trigger it.
extension LullSuite {
    @Suite struct ThreadCreationFailureTests {
        @Test func workQueuedWhileThreadCreationFailsRunsOnceItSucceeds() throws {
            // The retries run on the poller: a default worker must exist to become it (in a
            // process that has no thread to poll with, nothing can run until one is created).
            let ran = Flag()
            WorkQueue.global(qos: .default).async { ran.set() }
            try #require(ran.await())
            let utility = Runtime.shared.pool.classes[QoS.QoSClass.utility.poolIndex]
            // Every utility worker waits (a Lull wait, so the pool knows) for a block queued
            // behind them; their number is unknown, so more waiters than threads are queued.
            let threads = utility.state.locked { $0.threads }
            let group = WorkGroup()
            group.enter()
            let waiters = threads + 1
            let waited = Counter()
            let left = Flag()
            let queue = WorkQueue(label: "lull.test.creation", qos: .utility, attributes: .concurrent)
            SyscallFault.arm(.threadCreate, errno: EAGAIN, count: 3)
            defer { SyscallFault.disarmAll() }
            for _ in 0..<waiters {
                queue.async {
                    group.wait()
                    waited.increment()
                }
            }
            queue.async {
                left.set()
                group.leave()
            }
            #expect(left.await(), "the block queued while thread creation failed never ran")
            if !left.isSet { group.leave() }
            #expect(waited.await { $0 == waiters })
        }
    }
}
