import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    @Suite struct UserDataSourceTests {
        // MARK: add

        @Test func addSumsExactlyUnderABurstOfMillionsOfMergesFromSeveralThreads() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.add.burst"))
            let total = Atomic<UInt>(0)
            let calls = Counter()
            let zeroCalls = Counter()
            source.setEventHandler {
                let value = source.data
                if value == 0 { zeroCalls.increment() }
                total.add(value, ordering: .relaxed)
                calls.increment()
            }
            source.activate()
            let threads = 4
            let perThread = 500_000
            SourceTestKit.runThreads(threads) { _ in
                for _ in 0..<perThread { source.add(data: 1) }
            }
            let expected = UInt(threads * perThread)
            #expect(waitFor(seconds: 10) { total.load(ordering: .relaxed) == expected })
            #expect(keepsHolding(for: .milliseconds(100)) { total.load(ordering: .relaxed) == expected })
            #expect(zeroCalls.value == 0, "the handler ran with data 0")
            #expect(calls.value >= 1 && calls.value <= Int(expected))
            source.cancel()
        }

        @Test func addSumsWhatWasMergedWhileSuspended() {
            let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.add.suspended"))
            let seen = Recorder<UInt>()
            let registered = Flag()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { seen.append(source.data) }
            source.activate()
            #expect(registered.await(timeout: .seconds(10)))
            source.suspend()
            source.add(data: 100)
            source.add(data: 20)
            source.add(data: 3)
            source.resume()
            #expect(waitFor(seconds: 10) { seen.count == 1 })
            #expect(keepsHolding(for: .milliseconds(100)) { seen.count == 1 })
            #expect(seen.values == [123])
            #expect(source.handle == 0)
            source.cancel()
        }

        // MARK: or

        @Test func orCombinesBitsMergedWhileSuspended() {
            let source = EventSource.makeUserDataOrSource(queue: WorkQueue(label: "lull.test.src.or.suspended"))
            let seen = Recorder<UInt>()
            let registered = Flag()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { seen.append(source.data) }
            source.activate()
            #expect(registered.await(timeout: .seconds(10)))
            source.suspend()
            source.or(data: 0b0001)
            source.or(data: 0b0100)
            source.or(data: 0b0001)
            source.or(data: 0b1_0000_0000)
            source.resume()
            #expect(waitFor(seconds: 10) { seen.count == 1 })
            #expect(keepsHolding(for: .milliseconds(100)) { seen.count == 1 })
            #expect(seen.values == [0b1_0000_0101])
            // The next invocation starts from nothing.
            source.or(data: 0b0010)
            #expect(waitFor(seconds: 10) { seen.count == 2 })
            #expect(seen.values == [0b1_0000_0101, 0b0010])
            source.cancel()
        }

        @Test func orFromSeveralThreadsLosesNoBit() {
            let source = EventSource.makeUserDataOrSource(queue: WorkQueue(label: "lull.test.src.or.threads"))
            let combined = Atomic<UInt>(0)
            let zeroCalls = Counter()
            source.setEventHandler {
                let value = source.data
                if value == 0 { zeroCalls.increment() }
                combined.bitwiseOr(value, ordering: .relaxed)
            }
            source.activate()
            let threads = 8
            SourceTestKit.runThreads(threads) { index in
                for round in 0..<20_000 {
                    // Each thread owns bits index and index + 8; the rare one comes last.
                    source.or(data: 1 << UInt(index))
                    if round == 19_999 { source.or(data: 1 << UInt(index + 8)) }
                }
            }
            #expect(waitFor(seconds: 10) { combined.load(ordering: .relaxed) == 0xFFFF })
            #expect(zeroCalls.value == 0)
            source.cancel()
        }

        // MARK: replace

        @Test func replaceKeepsTheLastValue() {
            let source = EventSource.makeUserDataReplaceSource(queue: WorkQueue(label: "lull.test.src.replace.last"))
            let seen = Recorder<UInt>()
            let registered = Flag()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { seen.append(source.data) }
            source.activate()
            #expect(registered.await(timeout: .seconds(10)))
            source.suspend()
            source.replace(data: 3)
            source.replace(data: 70)
            source.replace(data: 7)
            source.resume()
            #expect(waitFor(seconds: 10) { seen.count == 1 })
            #expect(keepsHolding(for: .milliseconds(100)) { seen.count == 1 })
            #expect(seen.values == [7])
            source.cancel()
        }

        @Test func replaceWithZeroBeforeDeliveryClearsThePendingValue() {
            let target = WorkQueue(label: "lull.test.src.replace.zero")
            let source = EventSource.makeUserDataReplaceSource(queue: target)
            let seen = Recorder<UInt>()
            let registered = Flag()
            source.setRegistrationHandler { registered.set() }
            source.setEventHandler { seen.append(source.data) }
            source.activate()
            #expect(registered.await(timeout: .seconds(10)))
            source.suspend()
            source.replace(data: 5)
            source.replace(data: 0)
            SourceTestKit.settle(target)
            source.resume()
            SourceTestKit.settle(target)
            #expect(keepsHolding(for: .milliseconds(300)) { seen.count == 0 }, "calls: \(seen.values)")
            // The source still works.
            source.replace(data: 9)
            #expect(waitFor(seconds: 10) { seen.count == 1 })
            #expect(seen.values == [9])
            source.cancel()
        }

        // MARK: zero

        @Test func mergingZeroDoesNotFire() {
            let targets = ["add", "or", "replace"].map { WorkQueue(label: "lull.test.src.zero.\($0)") }
            let add = EventSource.makeUserDataAddSource(queue: targets[0])
            let or = EventSource.makeUserDataOrSource(queue: targets[1])
            let replace = EventSource.makeUserDataReplaceSource(queue: targets[2])
            let seen = Recorder<String>()
            add.setEventHandler { seen.append("add \(add.data)") }
            or.setEventHandler { seen.append("or \(or.data)") }
            replace.setEventHandler { seen.append("replace \(replace.data)") }
            add.activate()
            or.activate()
            replace.activate()
            for target in targets { SourceTestKit.settle(target) }
            for _ in 0..<100 {
                add.add(data: 0)
                or.or(data: 0)
                replace.replace(data: 0)
            }
            for target in targets { SourceTestKit.settle(target) }
            #expect(keepsHolding(for: .milliseconds(300)) { seen.count == 0 }, "calls: \(seen.values)")
            add.add(data: 2)
            or.or(data: 4)
            replace.replace(data: 6)
            #expect(waitFor(seconds: 10) { seen.count == 3 })
            #expect(seen.values.sorted() == ["add 2", "or 4", "replace 6"])
            add.cancel()
            or.cancel()
            replace.cancel()
        }

        @Test func zeroMergedWhileAValueIsPendingDoesNotChangeAddOrOr() {
            let add = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.zero-pending.add"))
            let or = EventSource.makeUserDataOrSource(queue: WorkQueue(label: "lull.test.src.zero-pending.or"))
            let seen = Recorder<String>()
            let registered = Counter()
            add.setRegistrationHandler { registered.increment() }
            or.setRegistrationHandler { registered.increment() }
            add.setEventHandler { seen.append("add \(add.data)") }
            or.setEventHandler { seen.append("or \(or.data)") }
            add.activate()
            or.activate()
            #expect(registered.await(timeout: .seconds(10)) { $0 == 2 })
            add.suspend()
            or.suspend()
            add.add(data: 5)
            add.add(data: 0)
            or.or(data: 8)
            or.or(data: 0)
            add.resume()
            or.resume()
            #expect(waitFor(seconds: 10) { seen.count == 2 })
            #expect(keepsHolding(for: .milliseconds(100)) { seen.count == 2 })
            #expect(seen.values.sorted() == ["add 5", "or 8"])
            add.cancel()
            or.cancel()
        }

        @Test func dataMergedAfterActivateReturnsIsDelivered() {
            // Merged right after activate(), with the registration handler still running.
            for round in 0..<50 {
                let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "lull.test.src.after-activate.\(round)"))
                let log = Recorder<String>()
                source.setRegistrationHandler { log.append("registration") }
                source.setEventHandler { log.append("event \(source.data)") }
                source.activate()
                source.add(data: UInt(round + 1))
                #expect(waitFor(seconds: 10) { log.count == 2 }, "round \(round): \(log.values)")
                #expect(log.values == ["registration", "event \(round + 1)"])
                source.cancel()
            }
        }
    }
}
