#if canImport(Glibc)
import Glibc
#endif

/// The runtime's lock order, checked in debug builds: a thread that holds a ranked lock may
/// take only ranked locks of a higher rank. Two ranks nest in themselves, each in one
/// direction only: a queue's lock may be held while its target's is taken (never the
/// reverse: targets form no cycle), and a descriptor's new mux holds its lock while it
/// retires the mux it replaced (a retired mux never takes another's). `Runtime` documents the order; a lock that
/// breaks it stops a debug build at once, naming both locks. Release builds check nothing
/// and pay nothing.
enum LockRank: Int, Comparable, Sendable {
    /// The descriptor table (Mutex).
    case descriptorTable = 10
    /// A descriptor's mux (Mutex): reactor callbacks merge into its sources under it.
    case descriptorMux = 12
    /// The signal hub (Mutex): its callback merges counts into sources under it.
    case signalHub = 14
    /// The inotify hub's kernel lock and its state lock (Mutexes).
    case inotifyKernel = 16
    case inotifyState = 17
    /// A source core's state (Mutex).
    case sourceCore = 20
    /// A queue's state (SpinFutexLock).
    case queue = 30
    /// The timer engine's state (SpinFutexLock).
    case timerEngine = 40
    /// The reactor's timer state (Mutex).
    case reactorTimer = 50
    /// A worker class's state (SpinFutexLock).
    case workerClass = 60
    /// The main thread's job list (SpinFutexLock).
    case mainThreadJobs = 62
    /// A worker's running inline batch (SpinFutexLock): taken alone by its owner (per job)
    /// and by a hand-over, and inside a class lock by the poll watch's look.
    case inlineBatch = 64
    /// The diagnostics socket's listener (Mutex).
    case diagnosticsListener = 70
    /// The wake-up recorder's state (SpinFutexLock): its hooks run under any other lock.
    case wakeupRecorder = 80

    static func < (lhs: LockRank, rhs: LockRank) -> Bool { lhs.rawValue < rhs.rawValue }

    /// A spin lock's rank: no system call and no thread creation while one is held.
    var isSpinLock: Bool {
        switch self {
        case .queue, .timerEngine, .workerClass, .mainThreadJobs, .inlineBatch, .wakeupRecorder: true
        default: false
        }
    }

    /// Whether a thread holding `self` may take a lock of rank `next`.
    func allows(_ next: LockRank) -> Bool {
        self < next || (self == next && (self == .queue || self == .descriptorMux))
    }
}

#if DEBUG
/// The ranked locks the calling thread holds, innermost last (debug builds only).
enum LockOrder {
    private final class Held {
        var ranks: [LockRank] = []
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let result = pthread_key_create(&key) { pointer in
            guard let pointer else { return }
            Unmanaged<Held>.fromOpaque(pointer).release()
        }
        precondition(result == 0, "Lull: pthread_key_create for the lock-order check failed with \(result)")
        return key
    }()

    private static var held: Held {
        if let pointer = pthread_getspecific(key) {
            return Unmanaged<Held>.fromOpaque(pointer).takeUnretainedValue()
        }
        let held = Held()
        pthread_setspecific(key, Unmanaged.passRetained(held).toOpaque())
        return held
    }

    static func willAcquire(_ rank: LockRank) {
        let held = held
        if let innermost = held.ranks.last {
            assert(innermost.allows(rank), "Lull: lock order broken: \(rank) taken while holding \(innermost)")
        }
        held.ranks.append(rank)
    }

    /// Asserts that the calling thread holds no spin lock: it is about to make `call`.
    static func assertNoSpinLockHeld(_ call: StaticString) {
        if let spin = held.ranks.last(where: \.isSpinLock) {
            assertionFailure("Lull: \(call) while holding the \(spin) spin lock")
        }
    }

    static func didRelease(_ rank: LockRank) {
        let held = held
        assert(held.ranks.last == rank, "Lull: lock \(rank) released out of order (held: \(held.ranks))")
        held.ranks.removeLast()
    }
}
#endif
