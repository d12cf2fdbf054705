import Synchronization
import Testing
@testable import Lull
#if canImport(Glibc)
import Glibc
#endif

@Test func zzReadSourceSmoke() throws {
    var fds: [Int32] = [0, 0]
    try #require(pipe(&fds) == 0)
    let readEnd = fds[0]
    let queue = WorkQueue(label: "smoke.read")
    let source = EventSource.makeReadSource(fileDescriptor: fds[0], queue: queue)
    let got = Mutex<[UInt]>([])
    let cancelled = Atomic<Bool>(false)
    let registered = Atomic<Bool>(false)
    source.setRegistrationHandler { registered.store(true, ordering: .relaxed) }
    source.setEventHandler {
        let n = source.data
        got.withLock { $0.append(n) }
        var buffer = [UInt8](repeating: 0, count: 100)
        _ = read(readEnd, &buffer, 100)
    }
    source.setCancelHandler { close(readEnd); cancelled.store(true, ordering: .relaxed) }
    source.activate()
    _ = write(fds[1], "hello", 5)
    #expect(waitFor(seconds: 5) { got.withLock { $0.count } == 1 })
    #expect(got.withLock { $0 } == [5])
    let wasRegistered = registered.load(ordering: .relaxed)
    #expect(wasRegistered)
    source.cancel()
    #expect(waitFor(seconds: 5) { cancelled.load(ordering: .relaxed) })
    close(fds[1])
}

@Test func zzUserDataSmoke() {
    let source = EventSource.makeUserDataAddSource(queue: WorkQueue(label: "smoke.add"))
    let total = Atomic<UInt>(0)
    source.setEventHandler { total.add(source.data, ordering: .relaxed) }
    source.activate()
    WorkQueue.concurrentPerform(iterations: 4) { _ in
        for _ in 0..<100_000 { source.add(data: 1) }
    }
    #expect(waitFor(seconds: 10) { total.load(ordering: .relaxed) == 400_000 })
    source.cancel()
}

@Test func zzSignalSmoke() {
    signal(SIGUSR2, SIG_IGN)
    let source = EventSource.makeSignalSource(signal: SIGUSR2, queue: WorkQueue(label: "smoke.sig"))
    let count = Atomic<UInt>(0)
    source.setEventHandler { count.add(source.data, ordering: .relaxed) }
    source.activate()
    let registered = waitFor(seconds: 2) { false }
    _ = registered
    kill(getpid(), SIGUSR2)
    #expect(waitFor(seconds: 5) { count.load(ordering: .relaxed) >= 1 })
    source.cancel()
}

@Test func zzProcessSmoke() {
    let pid = fork()
    if pid == 0 { usleep(100_000); _exit(3) }
    let source = EventSource.makeProcessSource(identifier: pid, eventMask: .exit, queue: WorkQueue(label: "smoke.proc"))
    let seen = Atomic<UInt>(0)
    source.setEventHandler { seen.store(source.data, ordering: .relaxed) }
    source.activate()
    #expect(waitFor(seconds: 5) { seen.load(ordering: .relaxed) == ProcessEvent.exit.rawValue })
    var status: Int32 = 0
    #expect(waitpid(pid, &status, 0) == pid)
    source.cancel()
    let bad = EventSource.makeProcessSource(identifier: 999_999, eventMask: .exit)
    let badCancelled = Atomic<Bool>(false)
    bad.setCancelHandler { badCancelled.store(true, ordering: .relaxed) }
    bad.activate()
    #expect(waitFor(seconds: 2) { badCancelled.load(ordering: .relaxed) })
    print(bad.registrationError.map { "\($0)" } ?? "nil")
}
