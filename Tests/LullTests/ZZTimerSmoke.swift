import Synchronization
import Testing
@testable import Lull
#if canImport(Glibc)
import Glibc
#endif

@Test func zzTimerOneShotAndRepeating() {
    let queue = WorkQueue(label: "timer.smoke")
    let timer = EventSource.makeTimerSource(queue: queue)
    let fires = Atomic<UInt>(0)
    let start = Deadline.now()
    let early = Atomic<Bool>(false)
    let deadline = start + .milliseconds(30)
    timer.setEventHandler {
        if Deadline.now() < deadline { early.store(true, ordering: .relaxed) }
        fires.add(timer.data, ordering: .relaxed)
    }
    timer.schedule(deadline: deadline, repeating: .milliseconds(10), leeway: .milliseconds(1))
    timer.activate()
    #expect(waitFor(seconds: 5) { fires.load(ordering: .relaxed) >= 10 })
    timer.cancel()
    let wasEarly = early.load(ordering: .relaxed)
    #expect(!wasEarly)
    let oneShot = EventSource.makeTimerSource(flags: .strict, queue: queue)
    let oneFires = Atomic<Int>(0)
    oneShot.setEventHandler { oneFires.add(1, ordering: .relaxed) }
    oneShot.schedule(deadline: .now() + .milliseconds(5))
    oneShot.activate()
    #expect(waitFor(seconds: 5) { oneFires.load(ordering: .relaxed) == 1 })
    usleep(50_000)
    #expect(oneFires.load(ordering: .relaxed) == 1)
    oneShot.schedule(deadline: .now() + .milliseconds(5))
    #expect(waitFor(seconds: 5) { oneFires.load(ordering: .relaxed) == 2 })
    oneShot.cancel()
    print("engine count after", TimerEngine.shared.count)
}
