import CLullShims
import Glibc
import Testing
@testable import Lull

extension LullSuite {
    /// The hazard of a deferred level check (a later handler of the poller's inline batch
    /// blocks in a plain system call for the deferred source's next delivery) is served by the
    /// stall check's look, which only a polling thread fires. When the timer engine is armed
    /// already at or before the look's window (any timer due soon), arming the look requests
    /// no poller, and the poller may be the thread that blocks: the watch asks for a poller
    /// itself (`WorkerPool.watchDeferredChecks`).
    @Suite struct DeferredLevelCheckPollerTests {
        typealias WatchedTwice = DeferredLevelCheckTests.WatchedTwice
        typealias Roles = DeferredLevelCheckTests.Roles

        @Test
        func aLaterHandlerThatBlocksIsServedWhileATimerIsDueSoon() throws {
            // The attempts go round the polling classes (see DeferredLevelCheckTests).
            var met = false
            for attempt in 0..<21 where !met {
                met = try self.attempt(qos: DeferredLevelCheckTests.pollingQoS[attempt % DeferredLevelCheckTests.pollingQoS.count])
            }
            #expect(met, "in 21 attempts, the two sources never ran one after the other on one thread")
        }

        /// False when the roles did not come out (see DeferredLevelCheckTests.blockingAttempt).
        private func attempt(qos: QoS) throws -> Bool {
            let watched = try WatchedTwice(label: "poller", qos: qos)
            let relay = try SourceTestKit.makePipe()
            defer {
                close(relay.read)
                close(relay.write)
            }
            let roles = Roles()
            let second = Captured<Int?>()
            let sameThread = Captured<Bool>()
            let relayed = Captured<[UInt8]>()
            #expect(watched.start { index in
                let place = roles.ran(index)
                let first = roles.runs.first
                if place == 0 { return }
                if index != first {
                    guard place == 1 else { return }
                    sameThread.set(roles.threads.first == lull_gettid())
                    second.set(index)
                    var entry = pollfd(fd: relay.read, events: Int16(POLLIN), revents: 0)
                    _ = poll(&entry, 1, 2_000)
                    relayed.set(entry.revents & Int16(POLLIN) != 0 ? SourceTestKit.readSome(relay.read, max: 1) : [])
                    return
                }
                let bytes = ReadSourceDeliveryTests.readNow(watched.readers[index], max: 1) ?? 0
                if place == 1 {
                    second.set(nil)
                } else if bytes > 0 {
                    SourceTestKit.writeAll(relay.write, [42])
                }
            })
            // A timer due before the look's window ends: the engine is armed for it.
            let fired = Flag()
            WorkQueue.global().asyncAfter(deadline: .now() + .milliseconds(30), leeway: .zero) { fired.set() }
            #expect(SourceTestKit.writeAll(watched.writer, [7]) == 1)
            guard let outcome = second.await(), outcome != nil else {
                #expect(watched.finish())
                return false
            }
            let result = relayed.await()
            guard sameThread.await() == true else {
                #expect(watched.finish())
                return false
            }
            #expect(result == [42], "the blocked handler waited 2 s: runs \(roles)")
            #expect(fired.await())
            #expect(watched.finish())
            return true
        }
    }
}
