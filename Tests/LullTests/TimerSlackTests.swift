import CLullShims
import CLullTestSupport
import Glibc
import Synchronization
import Testing
@testable import Lull

/// Timer slack and the reactor's precise timer (Reactor/TimerSlack.swift,
/// Reactor/PreciseTimer.swift): how a window becomes a timerfd instant and perhaps an
/// `epoll_wait` timeout with slack, the per-thread slack cache, the timerfd's error paths, and
/// end to end that wide windows never fire early while narrow ones still fire.
extension LullSuite {
    @Suite struct TimerSlackTests {
        static let millisecond: UInt64 = 1_000_000
        static let tick: UInt64 = 4 * millisecond

        // MARK: The plan

        @Test func slackIsOffUnlessTheEnvironmentTurnsItOn() {
            let asked = getenv("LULL_TIMER_SLACK").map { String(cString: $0) }
            #expect(TimerSlack.isEnabled == (asked == "1" || asked?.lowercased() == "on"))
            let window = WakeWindow(earliest: 1_000_000_000, latest: 2_000_000_000)
            if !TimerSlack.isEnabled {
                #expect(TimerSlack.plan(window, now: 0, coarseNow: 0).coarse == nil)
            }
        }

        @Test func narrowWindowsWakeOnTheTimerfdAtTheirEnd() {
            let now: UInt64 = 1_000 * Self.millisecond
            for leeway in [0, 1, 5, 9].map({ UInt64($0) * Self.millisecond }) {
                let window = WakeWindow(earliest: now + 100 * Self.millisecond, latest: now + 100 * Self.millisecond + leeway)
                let plan = TimerSlack.plan(window, now: now, coarseNow: now - Self.millisecond, resolution: Self.tick,
                                           wideAllowed: true)
                #expect(plan == WakePlan(precise: window.latest, coarse: nil), "leeway \(leeway)")
            }
        }

        @Test func wideWindowsSleepWithSlackThatEndsInsideTheWindow() {
            let now: UInt64 = 5_000 * Self.millisecond
            for (offset, leeway) in [(100, 20), (10, 50), (1_000, 100), (0, 12)] {
                let earliest = now + UInt64(offset) * Self.millisecond
                let window = WakeWindow(earliest: earliest, latest: earliest + UInt64(leeway) * Self.millisecond)
                for coarseLag in [0, 1, 3_999_999] as [UInt64] {
                    let coarseNow = now - coarseLag
                    let plan = TimerSlack.plan(window, now: now, coarseNow: coarseNow, resolution: Self.tick, wideAllowed: true)
                    #expect(plan.precise == window.latest)
                    guard let coarse = plan.coarse else {
                        Issue.record("window of \(leeway) ms at +\(offset) ms got no slack")
                        continue
                    }
                    // libevent's timeout, counted from the coarse reading truncated to µs,
                    // expires no earlier than the window's start...
                    let expiry = coarseNow / 1000 * 1000 + coarse.delayMicroseconds * 1000
                    #expect(expiry >= window.earliest)
                    // ...epoll_wait's expiry (up to a tick of clock lag and a millisecond of
                    // rounding later) plus the slack stays inside the window...
                    #expect(window.earliest + Self.tick + Self.millisecond + coarse.slack <= window.latest)
                    // ...and the slack is at least a tick, so that libevent's coarse clock has
                    // passed the timeout when the kernel wakes the thread at the slack's end.
                    #expect(coarse.slack >= Self.tick)
                }
            }
        }

        @Test func planHonoursTheSwitchTheClockEndAndPastWindows() {
            let now: UInt64 = 5_000 * Self.millisecond
            let wide = WakeWindow(earliest: now + 10 * Self.millisecond, latest: now + 200 * Self.millisecond)
            #expect(TimerSlack.plan(wide, now: now, coarseNow: now, resolution: Self.tick, wideAllowed: false).coarse == nil)
            let endless = WakeWindow(earliest: now, latest: .max)
            #expect(TimerSlack.plan(endless, now: now, coarseNow: now, resolution: Self.tick, wideAllowed: true).coarse == nil)
            // A window that opened in the past counts from now: the slack is what is left.
            let past = WakeWindow(earliest: now - 100 * Self.millisecond, latest: now + 50 * Self.millisecond)
            let plan = TimerSlack.plan(past, now: now, coarseNow: now, resolution: Self.tick, wideAllowed: true)
            #expect(plan.coarse.map { now + Self.tick + Self.millisecond + $0.slack <= past.latest } == true)
            // Near the end of the clock nothing overflows.
            let last = WakeWindow(earliest: .max - 2, latest: .max - 1)
            #expect(TimerSlack.plan(last, now: now, coarseNow: now, resolution: Self.tick, wideAllowed: true).coarse == nil)
            // A window given upside down is a single instant.
            #expect(WakeWindow(earliest: 9, latest: 5) == WakeWindow(at: 5))
        }

        @Test func coarseDelayNeverExpiresBeforeItsInstant() {
            var random = SystemRandomNumberGenerator()
            for _ in 0..<10_000 {
                let coarseNow = UInt64.random(in: 0...1_000_000_000_000, using: &random)
                let instant = coarseNow + UInt64.random(in: 0...2_000_000_000, using: &random)
                let delay = TimerSlack.coarseDelay(until: instant, coarseNow: coarseNow)
                let expiry = coarseNow / 1000 * 1000 + delay * 1000
                #expect(expiry >= instant)
                #expect(expiry < instant + 2_000, "more than the µs rounding late")
            }
            #expect(TimerSlack.coarseDelay(until: 5, coarseNow: 10_000) == 0)
        }

        // MARK: How much of a window the engine gives the kernel

        @Test func theEngineGivesTheKernelLessOfTheWindowAsDeadlinesGetDenser() {
            let deadline: UInt64 = 1_000 * Self.millisecond
            let latest = deadline + 100 * Self.millisecond
            var previous = WakeWindow(at: deadline)
            for fired in [0, 1, 2, 10, 100, 10_000] {
                let window = TimerEngine.wakeWindow(deadline: deadline, latest: latest, firedAtLastWake: fired)
                #expect(window.latest == latest)
                #expect(window.earliest >= deadline, "the kernel may never wake before the deadline")
                #expect(window.earliest >= previous.earliest, "denser deadlines, narrower window")
                previous = window
            }
            #expect(TimerEngine.wakeWindow(deadline: deadline, latest: latest, firedAtLastWake: 1).earliest
                == latest - 25 * Self.millisecond)
            // The 10,000-timer benchmark's density (about 100 fires per wake-up) keeps its
            // windows too narrow for slack: they wake at their end, as the optimum wants.
            let dense = TimerEngine.wakeWindow(deadline: deadline, latest: latest, firedAtLastWake: 100)
            #expect(TimerSlack.plan(dense, now: 0, coarseNow: 0, resolution: Self.tick, wideAllowed: true).coarse == nil)
            #expect(TimerEngine.wakeWindow(deadline: latest, latest: latest, firedAtLastWake: 1) == WakeWindow(at: latest))
        }

        // MARK: The per-thread slack

        @Test func threadSlackIsSetReadBackAndOnlyChangedWhenItDiffers() {
            let thread = ThreadState.current
            let original = lull_get_timer_slack()
            #expect(original > 0)
            defer {
                thread.applyTimerSlack(0)
                #expect(lull_get_timer_slack() == original)
            }
            thread.applyTimerSlack(7_000_000)
            #expect(lull_get_timer_slack() == 7_000_000)
            #expect(thread.timerSlack == 7_000_000)
            // Changed behind the cache's back: the same value again makes no system call.
            #expect(lull_set_timer_slack(123_456) == 0)
            thread.applyTimerSlack(7_000_000)
            #expect(lull_get_timer_slack() == 123_456)
            thread.applyTimerSlack(8_000_000)
            #expect(lull_get_timer_slack() == 8_000_000)
            // 0 puts back the thread's default.
            thread.applyTimerSlack(0)
            #expect(lull_get_timer_slack() == original)
            #expect(thread.timerSlack == 0)
        }

        /// Another thread's slack (/proc/<tid>/timerslack_ns) is readable only with CAP_SYS_NICE.
        static let canReadOtherThreadsSlack = NiceAllowance.current.privileged

        @Test func thePollerSleepsWithTheSlackOfAWideWindowAndDropsItAfterwards() throws {
            let wasEnabled = TimerSlack.isEnabled
            TimerSlack.isEnabled = true  // off by default
            defer { TimerSlack.isEnabled = wasEnabled }
            #expect(TimerSlack.isUsable, "prctl refused a timer slack earlier in this process")
            let defaultSlack = lull_get_timer_slack()
            // One lone fire first: the engine then judges deadlines sparse.
            let warmed = Flag()
            WorkQueue.global().asyncAfter(deadline: .now() + .milliseconds(5)) { warmed.set() }
            #expect(warmed.await())
            let timer = EventSource.makeTimerSource(queue: WorkQueue.global())
            let fired = Counter()
            timer.setEventHandler { _ = fired.increment() }
            timer.schedule(deadline: .now() + .seconds(5), leeway: .seconds(4))
            timer.activate()
            defer { timer.cancel() }
            if Self.canReadOtherThreadsSlack {
                var seen: Int = 0
                let slept = waitUntil {
                    let poller = Runtime.shared.pool.pollerThreadID.load(ordering: .acquiring)
                    guard poller != 0, let slack = Self.timerSlack(ofThread: poller) else { return false }
                    seen = slack
                    return slack > defaultSlack
                }
                #expect(slept, "the polling thread never slept with more than its default slack (last seen \(seen) ns)")
                #expect(seen <= 4_000_000_000, "more slack than the window has")
                #expect(fired.value == 0)
            }
            // After its turn as the poller a worker runs work at its default slack.
            let workSlack = Captured<Int>()
            WorkQueue.global().async { workSlack.set(lull_get_timer_slack()) }
            #expect(workSlack.await() == defaultSlack)
        }

        @Test(.enabled(if: canReadOtherThreadsSlack, "reading the leader's timer slack needs CAP_SYS_NICE"))
        func aLeaderAsleepTakesTheSlackOfAWindowArmedFromAnotherThread() {
            let wasEnabled = TimerSlack.isEnabled
            TimerSlack.isEnabled = true  // off by default
            defer { TimerSlack.isEnabled = wasEnabled }
            #expect(TimerSlack.isUsable, "prctl refused a timer slack earlier in this process")
            let defaultSlack = lull_get_timer_slack()
            let warmed = Flag()
            WorkQueue.global().asyncAfter(deadline: .now() + .milliseconds(5)) { warmed.set() }
            #expect(warmed.await())
            func pollerSlack() -> Int? {
                let poller = Runtime.shared.pool.pollerThreadID.load(ordering: .acquiring)
                return poller == 0 ? nil : Self.timerSlack(ofThread: poller)
            }
            func timer(_ flags: TimerFlags = [], in delay: Duration, leeway: Duration) -> TimerSource {
                let timer = EventSource.makeTimerSource(flags: flags, queue: WorkQueue.global())
                timer.setEventHandler {}
                timer.schedule(deadline: .now() + delay, leeway: leeway)
                timer.activate()
                return timer
            }
            // A wide window: the leader sleeps with most of its last quarter as slack.
            let far = timer(in: .seconds(20), leeway: .seconds(8))
            defer { far.cancel() }
            #expect(waitUntil { (pollerSlack() ?? 0) > 1_000_000_000 }, "last seen \(pollerSlack() ?? -1)")
            // From this thread, a window that ends earlier with less slack: the leader must
            // come out of its sleep and sleep again with the new slack.
            let nearer = timer(in: .seconds(10), leeway: .seconds(2))
            defer { nearer.cancel() }
            #expect(waitUntil { (pollerSlack() ?? 0) > defaultSlack && (pollerSlack() ?? .max) < 600_000_000 },
                    "last seen \(pollerSlack() ?? -1)")
            // A narrow window: back to the default slack (it wakes on the timerfd).
            let strict = timer(.strict, in: .seconds(5), leeway: .zero)
            defer { strict.cancel() }
            #expect(waitUntil { pollerSlack() == defaultSlack }, "last seen \(pollerSlack() ?? -1)")
        }

        static func timerSlack(ofThread tid: Int32) -> Int? {
            var length: UInt = 0
            var text: UnsafeMutablePointer<CChar>?
            guard lull_read_small_file("/proc/\(tid)/timerslack_ns", &text, &length) == 0, let text else { return nil }
            defer { lull_free(text) }
            let string = String(decoding: UnsafeRawBufferPointer(start: text, count: Int(length)), as: UTF8.self)
            return Int(string.filter(\.isNumber))
        }

        // MARK: The precise timer

        @Test func preciseTimerExpiresOnlyWhenItsInstantHasPassed() throws {
            let timer = try PreciseTimer.open()
            defer { close(timer.descriptor) }
            #expect(fcntl(timer.descriptor, F_GETFD) & FD_CLOEXEC != 0)
            #expect(fcntl(timer.descriptor, F_GETFL) & O_NONBLOCK != 0)
            try timer.arm(at: monotonicNanoseconds() + 3_600_000_000_000)
            #expect(lull_timerfd_take(timer.descriptor) == 0)
            #expect(lull_poll_now(timer.descriptor, Int16(POLLIN)) == 0)
            // A past instant (and 0, which a timerfd would read as "disarm") expire at once.
            for instant: UInt64 in [monotonicNanoseconds() - 1_000, 0] {
                try timer.arm(at: instant)
                #expect(waitUntil { lull_poll_now(timer.descriptor, Int16(POLLIN)) & Int32(POLLIN) != 0 })
                #expect(lull_timerfd_take(timer.descriptor) == 1)
                #expect(lull_timerfd_take(timer.descriptor) == 0, "taken twice")
            }
            // Re-arming discards an expiration not yet taken; disarming too.
            try timer.arm(at: 1)
            #expect(waitUntil { lull_poll_now(timer.descriptor, Int16(POLLIN)) & Int32(POLLIN) != 0 })
            try timer.arm(at: monotonicNanoseconds() + 3_600_000_000_000)
            #expect(lull_timerfd_take(timer.descriptor) == 0)
            try timer.arm(at: 1)
            #expect(waitUntil { lull_poll_now(timer.descriptor, Int16(POLLIN)) & Int32(POLLIN) != 0 })
            try timer.disarm()
            #expect(lull_timerfd_take(timer.descriptor) == 0)
        }

        @Test func preciseTimerFailuresAreTypedErrors() throws {
            let invalid = PreciseTimer(descriptor: -1)
            #expect(throws: PreciseTimerError(operation: .arm, errno: EBADF)) { try invalid.arm(at: 1) }
            #expect(throws: PreciseTimerError(operation: .disarm, errno: EBADF)) { try invalid.disarm() }
            #expect(lull_timerfd_take(invalid.descriptor) == -Int64(EBADF))
            // A descriptor that is not a timerfd.
            let eventfd = lull_eventfd()
            try #require(eventfd >= 0)
            defer { close(eventfd) }
            #expect(throws: PreciseTimerError(operation: .arm, errno: EINVAL)) {
                try PreciseTimer(descriptor: eventfd).arm(at: 1)
            }
            #expect(PreciseTimerError(operation: .arm, errno: EBADF).description.contains("timerfd_settime"))
        }

        // MARK: End to end

        @Test func wideWindowsNeverFireEarlyAndNarrowOnesStillFire() {
            struct Fire: Sendable {
                let index: Int
                let time: UInt64
            }
            let fires = Recorder<Fire>()
            let start = monotonicNanoseconds()
            // Wide windows (slack) and narrow ones (the timerfd), some sharing instants.
            let plans: [(offset: UInt64, leeway: UInt64, strict: Bool)] = [
                (30, 60, false), (45, 60, false), (50, 0, true), (80, 100, false), (81, 0, true), (120, 30, false),
            ].map { (UInt64($0.0) * Self.millisecond, UInt64($0.1) * Self.millisecond, $0.2) }
            var timers: [TimerSource] = []
            for (index, plan) in plans.enumerated() {
                let timer = EventSource.makeTimerSource(flags: plan.strict ? .strict : [], queue: WorkQueue.global())
                timer.setEventHandler { fires.append(Fire(index: index, time: monotonicNanoseconds())) }
                timer.schedule(deadline: Deadline(uptimeNanoseconds: start + plan.offset), repeating: .milliseconds(150),
                               leeway: .nanoseconds(Int(plan.leeway)))
                timer.activate()
                timers.append(timer)
            }
            #expect(waitUntil { Set(fires.values.filter { $0.time > start + 400 * Self.millisecond }.map(\.index)).count == plans.count })
            for timer in timers { timer.cancel() }
            let seen = fires.values
            for (index, plan) in plans.enumerated() {
                let mine = seen.filter { $0.index == index }.map(\.time)
                #expect(mine.count >= 2, "timer \(index) fired \(mine.count) times")
                for (n, time) in mine.enumerated() {
                    let deadline = start + plan.offset + UInt64(n) * 150 * Self.millisecond
                    #expect(time >= deadline, "timer \(index) fire \(n) came \(deadline - min(time, deadline)) ns early")
                    #expect(time <= deadline + plan.leeway + TimerTestKit.lateSlack, "timer \(index) fire \(n) far too late")
                }
            }
        }
    }
}

/// The timer slack tests that run wholly in a child process: they share nothing with this
/// process, so they run alongside `LullSuite`.
extension IndependentSuite {
    @Suite(.serialized) struct TimerSlackChildTests {
        @Test func workersStartedWhileThePollerSleepsWithSlackRunWorkAtTheDefaultSlack() async {
            await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
                // A fresh process: no utility or default worker exists yet, so the timer's
                // handler gets a thread started from the reactor's callback, on the poller
                // while it has the window's slack, and the handler starts more.
                TimerSlack.isEnabled = true
                let defaultSlack = lull_get_timer_slack()
                let seen = Recorder<Int>()
                let done = Counter()
                let flood = WorkQueue(label: "lull.test.slack.flood", attributes: .concurrent)
                let timer = EventSource.makeTimerSource(queue: WorkQueue.global(qos: .utility))
                timer.setEventHandler {
                    seen.append(lull_get_timer_slack())
                    for _ in 0..<8 {
                        flood.async {
                            seen.append(lull_get_timer_slack())
                            usleep(50_000)
                            done.increment()
                        }
                    }
                }
                timer.schedule(deadline: .now() + .milliseconds(300), leeway: .milliseconds(200))
                timer.activate()
                childRequire(done.await { $0 == 8 }, "the handler's blocks did not run")
                timer.cancel()
                // Utility work runs with its class's slack, never with the poller's window's.
                let utilitySlack = Int(ThreadState.classTimerSlack(.utility))
                childRequire(defaultSlack > 0 && seen.values.allSatisfy { $0 == utilitySlack },
                             "slack seen by work \(seen.values), utility's \(utilitySlack)")
            }
        }
    }
}
