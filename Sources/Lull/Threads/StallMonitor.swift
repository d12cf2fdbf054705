import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Blocking work must not starve a class. Lull's own waits tell the pool when a worker
/// blocks (`WorkerPool.blocking`); a block that sleeps or does blocking I/O on its own does
/// not. So while a class has queued work and every thread it may run is taken, the pool
/// looks again `interval` later, from the polling thread: workers the kernel reports as
/// sleeping (`S` or `D` in /proc) that Lull does not know to be blocked are replaced by new
/// threads, up to the pool's ceiling — but only if the class finished no job in the
/// meantime (a thread caught asleep on a lock for an instant is not blocked). Nothing runs while the pool is not saturated: the
/// check is armed by a saturated submit, never by a clock.
final class StallMonitor: Sendable {
    static let interval: UInt64 = 50_000_000

    private let armed = Atomic<Bool>(false)

    func arm(_ check: @escaping @Sendable () -> Void) {
        guard armed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else {
            return
        }
        DelayedWork.scheduleHousekeeping(at: SystemClock.monotonicNanoseconds() + StallMonitor.interval, check)
    }

    func disarm() {
        armed.store(false, ordering: .releasing)
    }

    /// True when the kernel says the thread sleeps (interruptibly or not).
    static func isSleeping(tid: Int32) -> Bool {
        let path = "/proc/self/task/\(tid)/stat"
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, 256) }
        guard count > 0 else { return false }
        // "tid (comm) S ...": the state follows the last ')', since comm may hold one.
        guard let close = buffer[0..<count].lastIndex(of: UInt8(ascii: ")")), close + 2 < count else { return false }
        let state = buffer[close + 2]
        return state == UInt8(ascii: "S") || state == UInt8(ascii: "D")
    }
}

extension WorkerPool {
    /// Called when work was queued and no thread could take it.
    func noteSaturated() {
        stallMonitor.arm { WorkerPool.shared.checkForStalls() }
    }

    func checkForStalls() {
        stallMonitor.disarm()
        var stillSaturated = false
        let pollerTid = pollerThreadID.load(ordering: .acquiring)
        for pool in classes {
            let snapshot = pool.state.locked { state -> (tids: [Int32], knownBlocked: Int, taken: UInt64)? in
                guard !state.jobs.isEmpty, state.idle.isEmpty, state.running >= cpuCount else { return nil }
                // Workers woken for work and not yet back on a CPU sleep in the kernel's
                // eyes too: on a loaded machine that lasts, and replacing them would only
                // add threads to the queue for the CPU.
                return (Array(state.threadIDs), state.blocked + state.waking, state.taken)
            }
            guard let snapshot else { continue }
            stillSaturated = true
            // Progress since the last look: threads seen asleep were only between jobs or on
            // a lock for a moment (a caller's lock, the allocator's), not blocked.
            if pool.takenAtLastCheck.exchange(snapshot.taken, ordering: .relaxed) != snapshot.taken { continue }
            let sleeping = snapshot.tids.filter { $0 != pollerTid && StallMonitor.isSleeping(tid: $0) }.count
            let unknownBlocked = sleeping - snapshot.knownBlocked
            guard unknownBlocked > 0 else { continue }
            for _ in 0..<unknownBlocked {
                let spawn = pool.state.locked { state -> Bool in
                    guard !state.jobs.isEmpty, reserveThread() else { return false }
                    state.running += 1
                    state.threads += 1
                    state.waking += 1
                    return true
                }
                guard spawn else { break }
                startWorker(in: pool, wokenForWork: true)
            }
        }
        if stillSaturated { noteSaturated() }
    }
}
