import CLullShims
import Glibc
import Testing
@testable import Lull

/// What one idle source costs in memory, object by object (malloc's usable size of each),
/// so that a field added carelessly shows here and not months later in `lull-bench
/// timer-memory`. Issue #4 asks an idle timer to cost at most half of Dispatch's (448 B
/// measured): the handle (24 B object, 32 B chunk), the core (at most 152 B usable, a
/// 160 B chunk) and a 16 B slot in the engine's heap come to 208 B.
extension LullSuite {
    @Suite struct SourceFootprintTests {
        static func usableSize(_ object: AnyObject) -> Int {
            withExtendedLifetime(object) { lull_malloc_usable_size(Unmanaged.passUnretained(object).toOpaque()) }
        }

        @Test func anIdleTimerIsTwoSmallObjects() {
            let timer = EventSource.makeTimerSource()
            timer.setEventHandler {}
            timer.setCancelHandler {}
            timer.schedule(deadline: .now() + .seconds(3600))
            timer.activate()
            defer { timer.cancel() }
            #expect(Self.usableSize(timer) <= 24, "the timer's handle grew")
            #expect(Self.usableSize(timer.core) <= 152, "the timer's core grew past a 160-byte malloc chunk")
            // Handlers set and scheduled on the monotonic clock: nothing else was allocated
            // for the timer (no extras box).
            #expect(timer.core.withState { $0.extras } == nil)
        }

        @Test func anIdleReadSourceCoreStaysWithinItsSizeClass() throws {
            var descriptors: [Int32] = [0, 0]
            try #require(pipe(&descriptors) == 0)
            defer { close(descriptors[0]); close(descriptors[1]) }
            let source = EventSource.makeReadSource(fileDescriptor: descriptors[0])
            source.setEventHandler {}
            source.activate()
            defer { source.cancel() }
            #expect(Self.usableSize(source.core) <= 168, "a source core grew past a 176-byte malloc chunk")
        }
    }
}
