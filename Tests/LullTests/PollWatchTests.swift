import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    /// A handler that blocks in a plain system call, or runs long on the CPU, must not stall
    /// the reactor or the handlers of other queues from its wake-up (the poll watch,
    /// docs/WorkerPool.md): a timer due meanwhile fires, the other handlers run, and a
    /// handler that reads what another source's handler writes is not left waiting for ever.
    @Suite(.serialized) struct PollWatchTests {
        /// A pipe that a handler blocks on with a plain `poll` until the test writes it.
        final class Gate: Sendable {
            let readEnd: Int32
            let writeEnd: Int32

            init() throws {
                var ends: [Int32] = [0, 0]
                try #require(pipe(&ends) == 0)
                readEnd = ends[0]
                writeEnd = ends[1]
            }

            deinit {
                close(readEnd)
                close(writeEnd)
            }

            /// Blocks in `poll` (the failure bound: `milliseconds`); true when opened.
            func block(milliseconds: Int32 = 5_000) -> Bool {
                var entry = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
                return poll(&entry, 1, milliseconds) == 1
            }

            func open() {
                var byte: UInt8 = 1
                _ = write(writeEnd, &byte, 1)
            }
        }

        /// Timers on `count` queues, due together `after` from now, so that one wake-up fires
        /// them all and its poller runs their handlers in one inline batch; each handler calls
        /// `handler(place)`, its place in the order the handlers started.
        final class WakeUp {
            var timers: [TimerSource] = []

            init(count: Int, label: String, after: Duration = .milliseconds(10),
                 handler: @escaping @Sendable (Int) -> Void) {
                let started = Atomic<Int>(0)
                let deadline = Deadline.now() + after
                for index in 0..<count {
                    let timer = EventSource.makeTimerSource(queue: WorkQueue(label: "lull.test.watch.\(label).\(index)"))
                    timer.setEventHandler { handler(started.add(1, ordering: .relaxed).oldValue) }
                    timer.schedule(deadline: deadline)
                    timers.append(timer)
                }
            }

            func activate() {
                for timer in timers { timer.activate() }
            }

            func cancel() {
                let cancelled = Counter()
                for timer in timers {
                    timer.setCancelHandler { cancelled.increment() }
                    timer.cancel()
                }
                #expect(cancelled.await { $0 == timers.count })
            }
        }

        enum Writer: CaseIterable {
            /// A timer's handler on another queue writes the pipe.
            case timer
            /// A second read source's handler writes it, once the test makes its pipe readable.
            case readSource
        }

        @Test(arguments: Writer.allCases)
        func aHandlerBlockedInAPlainReadOfWhatAnotherSourceWritesCompletes(_ writer: Writer) throws {
            let data = try Gate()
            let trigger = try Gate()
            let blocking = Flag()
            let finished = Flag()
            let gotByte = Atomic<Bool>(false)
            let timer = EventSource.makeTimerSource(queue: WorkQueue(label: "lull.test.watch.writer-timer"))
            timer.setEventHandler { data.open() }
            let second = EventSource.makeReadSource(fileDescriptor: trigger.readEnd,
                                                    queue: WorkQueue(label: "lull.test.watch.writer-source"))
            second.setEventHandler {
                var byte: UInt8 = 0
                _ = read(trigger.readEnd, &byte, 1)
                data.open()
            }
            // Armed before the reader blocks: nothing asks for a poller after it does.
            if writer == .timer { timer.schedule(deadline: .now() + .milliseconds(40)) }
            let readable = try Gate()
            readable.open()
            let reader = EventSource.makeReadSource(fileDescriptor: readable.readEnd,
                                                    queue: WorkQueue(label: "lull.test.watch.reader"))
            reader.setEventHandler {
                var byte: UInt8 = 0
                _ = read(readable.readEnd, &byte, 1)
                guard !blocking.isSet else { return }
                blocking.set()
                // A plain blocking read: poll (the failure bound), then read.
                if data.block() {
                    gotByte.store(read(data.readEnd, &byte, 1) == 1, ordering: .relaxed)
                }
                finished.set()
            }
            timer.activate()
            second.activate()
            reader.activate()
            #expect(blocking.await())
            if writer == .readSource { trigger.open() }
            #expect(finished.await(), "the reading handler never returned")
            let readTheByte = gotByte.load(ordering: .relaxed)
            #expect(readTheByte, "the reading handler's read timed out: the writer never ran")
            reader.cancel()
            timer.cancel()
            second.cancel()
        }

        @Test func aTimerDueWhileAHandlerBlocksInAPlainPollFiresOnTime() throws {
            let gate = try Gate()
            let scheduledAt = Atomic<UInt64>(0)
            let firedAt = Atomic<UInt64>(0)
            let fired = Flag()
            let blockerReturned = Flag()
            let timer = EventSource.makeTimerSource(queue: WorkQueue(label: "lull.test.watch.timer"))
            timer.setEventHandler {
                firedAt.store(monotonicNanoseconds(), ordering: .relaxed)
                fired.set()
            }
            timer.activate()
            let othersRan = Counter()
            let count = 8
            // Armed before the handler blocks: nothing asks for a poller after it does.
            scheduledAt.store(monotonicNanoseconds(), ordering: .relaxed)
            timer.schedule(deadline: .now() + .milliseconds(40))
            let wakeUp = WakeUp(count: count, label: "timer") { place in
                guard place == 0 else {
                    othersRan.increment()
                    return
                }
                _ = gate.block()
                blockerReturned.set()
            }
            wakeUp.activate()
            let firedInTime = fired.await(timeout: .seconds(3))
            let othersInTime = othersRan.await(timeout: .seconds(3)) { $0 == count - 1 }
            let stillBlocked = !blockerReturned.isSet
            gate.open()
            #expect(firedInTime, "the timer did not fire while the handler blocked")
            #expect(othersInTime, "the other handlers of the wake-up waited behind the blocked one (\(othersRan.value) ran)")
            #expect(stillBlocked)
            if firedInTime {
                let late = firedAt.load(ordering: .relaxed) &- scheduledAt.load(ordering: .relaxed)
                #expect(late < 500_000_000, "the timer fired \(late / 1_000_000) ms after it was scheduled (due at 40 ms)")
            }
            #expect(blockerReturned.await())
            wakeUp.cancel()
            timer.cancel()
        }

        @Test func theHandlersBehindACPUBoundHandlerRunMeanwhile() throws {
            let othersRan = Counter()
            let count = 8
            let stop = Flag()
            let spinnerReturned = Flag()
            let wakeUp = WakeUp(count: count, label: "spin") { place in
                guard place == 0 else {
                    othersRan.increment()
                    return
                }
                let end = monotonicNanoseconds() + 5_000_000_000
                while !stop.isSet && monotonicNanoseconds() < end {}
                spinnerReturned.set()
            }
            wakeUp.activate()
            let othersInTime = othersRan.await(timeout: .seconds(3)) { $0 == count - 1 }
            let stillSpinning = !spinnerReturned.isSet
            stop.set()
            #expect(othersInTime, "the other handlers of the wake-up waited behind the spinning one (\(othersRan.value) ran)")
            #expect(stillSpinning)
            #expect(spinnerReturned.await())
            wakeUp.cancel()
        }

        /// The shared runtime's watch, started: it exists once the reactor needed a poller.
        func startedWatch() -> PollWatch {
            let watch = Runtime.shared.pool.pollWatch
            let warmUp = Flag()
            Runtime.shared.pool.ensurePoller()
            WorkQueue(label: "lull.test.watch.warm-up").asyncAfter(deadline: .now() + .milliseconds(1)) { warmUp.set() }
            #expect(warmUp.await())
            #expect(watch.isStarted)
            return watch
        }

        /// Once parked, the watch ticks no more: a timer 200 ms away, a whole quiet period
        /// of ten ticks, finds the tick count where it was when the watch parked.
        @Test func theWatchDoesNotTickWhileNothingRuns() throws {
            let watch = startedWatch()
            var quiet = false
            for _ in 0..<3 where !quiet {
                #expect(waitUntil { watch.isParked })
                let ticksBefore = watch.ticks.load(ordering: .relaxed)
                let ticksAtFire = Atomic<UInt64>(.max)
                let fired = Flag()
                let timer = EventSource.makeTimerSource(queue: WorkQueue(label: "lull.test.watch.idle"))
                timer.setEventHandler {
                    ticksAtFire.store(watch.ticks.load(ordering: .relaxed), ordering: .relaxed)
                    fired.set()
                }
                timer.schedule(deadline: .now() + .milliseconds(200))
                timer.activate()
                #expect(fired.await())
                timer.cancel()
                quiet = ticksAtFire.load(ordering: .relaxed) == ticksBefore
            }
            #expect(quiet, "the watch ticked through a quiet period")
        }

        /// A process that polls now and then (a timer every 40 ms) never wakes the parked
        /// watch: each batch arms the watch's alarm and disarms it when it ends, so neither a
        /// wake nor a tick happens across five fires. (Three attempts: another suite's work
        /// running alongside may wake it.)
        @Test func sparseBatchesArmTheAlarmInsteadOfWakingTheWatch() throws {
            let watch = startedWatch()
            try #require(watch.alarm.load() != nil, "the watch's alarm could not be opened")
            var quiet = false
            var seen = ""
            for _ in 0..<3 where !quiet {
                #expect(waitUntil { watch.isParked })
                let before = (wakes: watch.wakes.load(ordering: .relaxed), ticks: watch.ticks.load(ordering: .relaxed),
                              alarmed: watch.alarmedBatches.load(ordering: .relaxed))
                let after = Mutex<(wakes: UInt64, ticks: UInt64, alarmed: UInt64)?>(nil)
                let fires = Atomic<Int>(0)
                let fifth = Flag()
                let timer = EventSource.makeTimerSource(queue: WorkQueue(label: "lull.test.watch.sparse"))
                timer.setEventHandler {
                    guard fires.wrappingAdd(1, ordering: .relaxed).newValue == 5 else { return }
                    after.locked { $0 = (watch.wakes.load(ordering: .relaxed), watch.ticks.load(ordering: .relaxed),
                                         watch.alarmedBatches.load(ordering: .relaxed)) }
                    fifth.set()
                }
                timer.schedule(deadline: .now() + .milliseconds(40), repeating: .milliseconds(40), leeway: .zero)
                timer.activate()
                #expect(fifth.await())
                timer.cancel()
                guard let seenAfter = after.locked({ $0 }) else { continue }
                seen = "wakes \(before.wakes) → \(seenAfter.wakes), ticks \(before.ticks) → \(seenAfter.ticks), alarmed batches \(before.alarmed) → \(seenAfter.alarmed)"
                quiet = seenAfter.wakes == before.wakes && seenAfter.ticks == before.ticks && seenAfter.alarmed >= before.alarmed + 4
            }
            #expect(quiet, "sparse batches woke the watch: \(seen)")
        }

        #if DEBUG
        /// Runs `body` with the batch hooks installed, and uninstalls them after.
        func withBatchHooks(owner: (@Sendable (InlineBatch) -> Void)?, handOver: (@Sendable (InlineBatch) -> Void)?,
                            _ body: () throws -> Void) rethrows {
            PoolTestHooks.ownerTakesNextJob.locked { $0 = owner }
            PoolTestHooks.batchHandOver.locked { $0 = handOver }
            PoolTestHooks.batchHooksInstalled.store(true, ordering: .relaxed)
            defer {
                PoolTestHooks.batchHooksInstalled.store(false, ordering: .relaxed)
                PoolTestHooks.ownerTakesNextJob.locked { $0 = nil }
                PoolTestHooks.batchHandOver.locked { $0 = nil }
            }
            try body()
        }

        /// Each handler's runs, by its place in the order they started.
        final class Runs: Sendable {
            private let counts: Mutex<[Int]>
            init(_ count: Int) { counts = Mutex(Array(repeating: 0, count: count)) }
            func record(_ place: Int) { counts.locked { $0[place] += 1 } }
            var total: Int { counts.locked { $0.reduce(0, +) } }
            var eachOnce: Bool { counts.locked { $0.allSatisfy { $0 == 1 } } }
        }

        /// The watch's hand-over and the owner taking its next job, at the same moment: the
        /// owner is held just before its next job until the hand-over is about to take the
        /// batch, then both go. Every job runs exactly once.
        @Test func aHandOverWhileTheOwnerTakesItsNextJobRunsEachJobOnce() throws {
            let pool = Runtime.shared.pool
            for attempt in 0..<10 {
                let count = 8
                let runs = Runs(count)
                let done = Counter()
                let captured = Mutex<InlineBatch?>(nil)
                let ownerHeld = Flag()
                let go = Flag()
                try withBatchHooks(owner: { batch in
                    let first = captured.locked { slot -> Bool in
                        guard slot == nil, !batch.isEmpty else { return false }
                        slot = batch
                        return true
                    }
                    guard first else { return }
                    ownerHeld.set()
                    _ = go.await()
                }, handOver: nil) {
                    let wakeUp = WakeUp(count: count, label: "race-next-\(attempt)") { place in
                        runs.record(place)
                        done.increment()
                    }
                    wakeUp.activate()
                    #expect(ownerHeld.await())
                    let batch = try #require(captured.locked { $0 })
                    go.set()
                    pool.handOverInlineBatch(batch, in: batch.pool, for: .watch)
                    #expect(done.await { $0 == count })
                    #expect(keepsHolding(for: .milliseconds(20)) { runs.total == count })
                    #expect(runs.eachOnce, "attempt \(attempt): a job ran twice or never")
                    wakeUp.cancel()
                }
            }
        }

        /// The watch's hand-over and the owner's own (it enters a Lull wait) at the same
        /// moment: each job runs exactly once, and the waiter is released by a later one.
        @Test func aHandOverWhileTheOwnerEntersAWaitRunsEachJobOnce() throws {
            let pool = Runtime.shared.pool
            for attempt in 0..<10 {
                let count = 8
                let runs = Runs(count)
                let done = Counter()
                let semaphore = WorkSemaphore(value: 0)
                let captured = Mutex<InlineBatch?>(nil)
                let ownerHandingOver = Flag()
                let go = Flag()
                try withBatchHooks(owner: nil, handOver: { batch in
                    // The owner's hand-over (from its wait) is held; the test's passes.
                    guard ThreadState.current.workerPool != nil else { return }
                    let first = captured.locked { slot -> Bool in
                        guard slot == nil else { return false }
                        slot = batch
                        return true
                    }
                    guard first else { return }
                    ownerHandingOver.set()
                    _ = go.await()
                }) {
                    let wakeUp = WakeUp(count: count, label: "race-wait-\(attempt)") { place in
                        runs.record(place)
                        if place == 0 {
                            semaphore.wait()
                        } else if place == count - 1 {
                            _ = semaphore.signal()
                        }
                        done.increment()
                    }
                    wakeUp.activate()
                    #expect(ownerHandingOver.await())
                    let batch = try #require(captured.locked { $0 })
                    go.set()
                    pool.handOverInlineBatch(batch, in: batch.pool, for: .watch)
                    let finished = done.await { $0 == count }
                    #expect(finished, "attempt \(attempt): \(done.value) of \(count) handlers finished")
                    if !finished { _ = semaphore.signal() }
                    #expect(keepsHolding(for: .milliseconds(20)) { runs.total == count })
                    #expect(runs.eachOnce, "attempt \(attempt): a job ran twice or never")
                    wakeUp.cancel()
                }
            }
        }
        #endif
    }
}
