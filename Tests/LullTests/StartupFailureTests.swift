import Glibc
import Testing
@testable import Lull

extension IndependentSuite {
    /// Lull first used when no descriptor is free (a server that opened its sockets first):
    /// the program stops with a message naming EMFILE and what to do — not libevent's
    /// `exit(1)`, not a message that blames the backend — and libevent writes nothing raw
    /// to stderr. Each case leaves a different number of descriptors free, which fails a
    /// different step of libevent's start-up: epoll itself (0), libevent's signal pipe, its
    /// fatal path (1), and its notification descriptor (3).
    @Suite(.serialized) struct StartupFailureTests {
        @Test func noFreeDescriptorStopsTheProgramNamingEMFILE() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                DescriptorExhaustion.fill(leavingFree: 0)
                DescriptorExhaustion.useLull()
            }
            DescriptorExhaustion.expectClearStop(standardErrorText(result))
        }

        @Test func oneFreeDescriptorStopsTheProgramNamingEMFILE() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                DescriptorExhaustion.fill(leavingFree: 1)
                DescriptorExhaustion.useLull()
            }
            DescriptorExhaustion.expectClearStop(standardErrorText(result))
        }

        @Test func threeFreeDescriptorsStopTheProgramNamingEMFILE() async {
            let result = await #expect(processExitsWith: .failure, observing: [\.standardErrorContent]) {
                DescriptorExhaustion.fill(leavingFree: 3)
                DescriptorExhaustion.useLull()
            }
            DescriptorExhaustion.expectClearStop(standardErrorText(result))
        }
    }
}

/// Fills the descriptor table of an exit test's child process before it first uses Lull.
enum DescriptorExhaustion {
    /// Lowers the soft RLIMIT_NOFILE (so that filling is quick) and opens descriptors
    /// until none is left, then closes `free` of them.
    static func fill(leavingFree free: Int) {
        var limit = rlimit()
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        if getrlimit(resource, &limit) == 0 {
            limit.rlim_cur = min(limit.rlim_cur, 256)
            _ = setrlimit(resource, &limit)
        }
        var opened: [Int32] = []
        opened.reserveCapacity(256)
        while true {
            let descriptor = dup(2)
            if descriptor < 0 { break }
            opened.append(descriptor)
        }
        for descriptor in opened.suffix(free) { close(descriptor) }
    }

    /// The first use: a block on a global queue, which starts a worker and the reactor.
    /// Exits with success if nothing stops the program (which fails the exit test).
    static func useLull() {
        let ran = Flag()
        WorkQueue.global().async { ran.set() }
        _ = ran.await()
        exit(0)
    }

    static func expectClearStop(_ message: String) {
        #expect(message.contains("EMFILE"), "stderr: \(message)")
        #expect(message.contains("cannot start its reactor"), "stderr: \(message)")
        #expect(message.contains("RLIMIT_NOFILE"), "stderr: \(message)")
        // libevent's own log lines ("[warn] epoll_create: ...", "[err] ...") go through
        // swift-log, never raw.
        #expect(!message.contains("[warn]") && !message.contains("[err]"), "stderr: \(message)")
    }
}
