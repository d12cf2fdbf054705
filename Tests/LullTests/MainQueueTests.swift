import Glibc
import Synchronization
import Testing
@testable import Lull

extension LullSuite {
    /// `runMain()` never returns, so each test runs in a child process that exits from a
    /// block on the main queue.
    @Suite struct MainQueueTests {
        @Test func runMainDrainsTheMainQueueInOrderOnItsThread() async {
            let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                let mainThread = Captured<ThreadIdentity>()
                let next = Counter()
                let problems = Counter()
                let count = 10_000
                WorkQueue.main.async { mainThread.set(.current) }
                for index in 0..<count {
                    WorkQueue.main.async {
                        if next.value != index { problems.increment() }
                        if mainThread.value != ThreadIdentity.current { problems.increment() }
                        next.increment()
                        if index == count - 1 {
                            if problems.value != 0 {
                                printToStandardError("main queue: \(problems.value) blocks out of order or off the main thread")
                                exit(1)
                            }
                            exit(0)
                        }
                    }
                }
                WorkQueue.runMain()
            }
            let message = standardErrorText(result)
            #expect(message.isEmpty || !message.contains("main queue:"), "\(message)")
        }

        @Test func mainQueueAcceptsBlocksFromOtherThreadsAndSync() async {
            await #expect(processExitsWith: .success) {
                let runMainThread = Captured<ThreadIdentity>()
                WorkQueue.main.async { runMainThread.set(.current) }
                WorkQueue.global(qos: .utility).async {
                    guard let expected = runMainThread.await() else { exit(4) }
                    // sync onto the main queue runs the block on the main queue's thread.
                    let (thread, value) = WorkQueue.main.sync { (ThreadIdentity.current, 42) }
                    guard thread == expected else { exit(2) }
                    guard value == 42 else { exit(3) }
                    do {
                        try WorkQueue.main.sync { throw TestError(code: 9) }
                        exit(5)
                    } catch let error as TestError where error.code == 9 {
                        // rethrown on the caller's thread
                    } catch {
                        exit(6)
                    }
                    WorkQueue.main.async { exit(0) }
                }
                WorkQueue.runMain()
            }
        }

        @Test func mainQueueIsSerial() async {
            await #expect(processExitsWith: .success) {
                let overlap = OverlapTracker()
                let done = Counter()
                for caller in 0..<4 {
                    WorkQueue.global(qos: caller % 2 == 0 ? .default : .utility).async {
                        for _ in 0..<500 {
                            WorkQueue.main.async {
                                overlap.enter()
                                overlap.exit()
                                if done.increment() == 2_000 {
                                    exit(overlap.maximum == 1 ? 0 : 1)
                                }
                            }
                        }
                    }
                }
                WorkQueue.runMain()
            }
        }
    }
}
