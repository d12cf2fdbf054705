import Glibc
import Synchronization
import Testing
@testable import Lull

/// The worker/poller hand-off (docs/WorkerPool.md): a poller request is answered by the
/// worker it designates, whatever happens to the thread that made it.
extension LullSuite {
    @Suite struct PollerHandoffTests {
        /// Waits until nothing is registered with the reactor, nobody polls and the default
        /// class has an idle worker: the state in which a new interest claims that worker.
        static func quiescentWithAnIdleDefaultWorker() -> Bool {
            let pool = Runtime.shared.pool
            let defaultPool = pool.classes[QoS.QoSClass.default.poolIndex]
            let ran = Flag()
            WorkQueue.global(qos: .default).async { ran.set() }
            return waitUntil {
                ran.isSet && !Runtime.shared.reactor.needsPoller && pool.pollerIsVacant
                    && defaultPool.state.locked { !$0.idle.isEmpty && $0.running == 0 && $0.spinning == 0 }
            }
        }

        /// The thread that claimed a worker to poll is held between the claim and the wake-up
        /// while the claimed worker wakes on its own (an earlier permit, its idle timeout),
        /// finds nothing to poll for and parks again. The reactor must still poll afterwards.
        /// In a process of its own: nothing else may be registered with the reactor.
        @Test func aClaimedPollerWokenEarlyLeavesNoStuckRequest() async {
            // Exit status 2: never quiescent; 3: no claim, or no early wake-up; 4: no poll.
            await #expect(processExitsWith: .success) {
                guard PollerHandoffTests.quiescentWithAnIdleDefaultWorker() else {
                    printToStandardError("the pool never became quiescent")
                    exit(2)
                }
                let defaultPool = Runtime.shared.pool.classes[QoS.QoSClass.default.poolIndex]
                let claimed = Flag()
                let parkedAgain = Flag()
                PoolTestHooks.claimedToPoll.locked { hook in
                    hook = { worker in
                        guard !claimed.isSet else { return }
                        claimed.set()
                        // The interest that asked for the poller goes away again...
                        Runtime.shared.reactor.removeInterest()
                        // ...and the claimed worker wakes before it is told why.
                        worker.parker.unpark()
                        if waitUntil(timeout: .seconds(5), {
                            defaultPool.state.locked { state in state.idle.contains { $0 === worker } }
                        }) {
                            parkedAgain.set()
                        }
                    }
                }
                Runtime.shared.reactor.addInterest()
                guard claimed.isSet, parkedAgain.isSet else {
                    printToStandardError("no idle worker was claimed to poll, or it did not park again")
                    exit(3)
                }
                let fired = Flag()
                WorkQueue(label: "lull.test.handoff").asyncAfter(deadline: .now() + .milliseconds(50)) { fired.set() }
                guard fired.await() else {
                    printToStandardError("the reactor no longer polls: the timer never fired")
                    exit(4)
                }
            }
        }
    }
}
