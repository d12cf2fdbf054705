import CLullShims
import CLullTestSupport
import Glibc
import Testing
@testable import Lull

/// What one idle source costs in memory, object by object (malloc's usable size of each),
/// so that a field added carelessly shows here and not months later in `lull-bench
/// timer-memory`. Issue #4 asks an idle timer to cost at most half of Dispatch's (448 B
/// measured): the handle (24 B object, 32 B chunk), the core (at most 120 B usable: a 128 B
/// chunk, also the largest size glibc frees without a lock from another thread, see
/// `SourceCore`) and a 16 B slot in the engine's heap come to 176 B.
extension LullSuite {
    @Suite struct SourceFootprintTests {
        static func usableSize(_ object: AnyObject) -> Int {
            withExtendedLifetime(object) { lull_malloc_usable_size(Unmanaged.passUnretained(object).toOpaque()) }
        }

        /// Fills this thread's malloc cache (glibc's tcache: 7 chunks of each size) with
        /// chunks of each usable size, so that an object that fits one takes a chunk of
        /// exactly that size. Otherwise glibc may hand out a free chunk one size up whose
        /// remainder is too small to split off, for every object in a row when earlier tests
        /// left many such chunks free, and the test would read the larger size.
        static func primeMallocCache(usableSizes: [Int]) {
            for size in usableSizes {
                let chunks = (0..<7).map { _ in malloc(size) }
                chunks.forEach { free($0) }
            }
        }

        @Test func anIdleTimerIsTwoSmallObjects() {
            // glibc may hand out a chunk a little larger than asked for (a free chunk whose
            // remainder is too small to split off), so the size class shows in the smallest
            // of a few allocations, not in any one of them.
            let timers = (0..<8).map { _ in
                Self.primeMallocCache(usableSizes: [24, 120])
                let timer = EventSource.makeTimerSource()
                timer.setEventHandler {}
                timer.schedule(deadline: .now() + .seconds(3600))
                timer.activate()
                return timer
            }
            defer { timers.forEach { $0.cancel() } }
            #expect(timers.map { Self.usableSize($0) }.min()! <= 24, "the timer's handle grew")
            #expect(timers.map { Self.usableSize($0.core) }.min()! <= 120, "the timer's core grew past a 128-byte malloc chunk")
            // An event handler and a one-shot on the monotonic clock: nothing else was
            // allocated for the timer.
            #expect(timers.allSatisfy { timer in timer.core.withState { _ in timer.core.extras } == nil })
        }

        @Test func aCancelHandlerTakesOneSmallBox() throws {
            // The smallest of a few boxes, for the reason `anIdleTimerIsTwoSmallObjects` gives.
            let timers = (0..<8).map { _ in
                let timer = EventSource.makeTimerSource()
                Self.primeMallocCache(usableSizes: [120])
                timer.setCancelHandler {}
                return timer
            }
            defer { timers.forEach { $0.cancel() } }
            let boxes = try timers.map { timer in try #require(timer.core.withState { _ in timer.core.extras }) }
            #expect(boxes.map { Self.usableSize($0) }.min()! <= 120, "the extras box grew past a 128-byte malloc chunk")
        }

        @Test func anIdleReadSourceCoreStaysWithinItsSizeClass() throws {
            var descriptors: [Int32] = [0, 0]
            try #require(pipe(&descriptors) == 0)
            defer { close(descriptors[0]); close(descriptors[1]) }
            // The smallest of a few cores, for the reason `anIdleTimerIsTwoSmallObjects` gives.
            let sources = (0..<8).map { _ in
                Self.primeMallocCache(usableSizes: [56, 152])
                let source = EventSource.makeReadSource(fileDescriptor: descriptors[0])
                source.setEventHandler {}
                source.activate()
                return source
            }
            defer { sources.forEach { $0.cancel() } }
            #expect(sources.map { Self.usableSize($0.core) }.min()! <= 152, "a source core grew past a 160-byte malloc chunk")
            let drivers = sources.compactMap { ($0.core as? DrivenSourceCore)?.driver }
            #expect(drivers.count == sources.count)
            #expect(drivers.map { Self.usableSize($0) }.min()! <= 56, "the descriptor driver grew past a 64-byte malloc chunk")
        }
    }
}
