import Testing
@testable import LullWakeupReport

extension IndependentSuite {
    /// The kernel trace's attribution (`timerfires --pid` on any process) on captured lines:
    /// each wake-up's cause, the timers by site, the windows, against what the lines say.
    @Suite(.serialized) struct KernelWakeupTraceTests {
        /// Process 500: `sleeper` (500) and `worker` (501) from the start, `worker-2` (502)
        /// found from its lines. Each block is one story; the comments say what it must count.
        static let fixture = """
            # timerfires kernel trace
            # scope: pid 500 threads 500 501
            # start: 1000000000000
            # A: a nanosleep of 10 ms, woken by its hrtimer; the tick re-armed in an interrupt
            # while sleeper was current is not the process's timer.
                     sleeper-500     (    500) [001] ..... 1000.000100: sys_enter: NR 230 (0, 0, 7ffd8653dda0, 0, 0, 7f4c81b026d0)
                     sleeper-500     (    500) [001] d..1. 1000.000101: hrtimer_start: hrtimer=00000000f6afb7f5 function=hrtimer_wakeup expires=1000010150000 softexpires=1000010100000 mode=REL was_armed=0
                     sleeper-500     (    500) [001] d.h1. 1000.000102: hrtimer_start: hrtimer=00000000a6225311 function=tick_nohz_handler expires=1000004000000 softexpires=1000004000000 mode=ABS was_armed=0
                     sleeper-500     (    500) [001] d..2. 1000.000105: sched_switch: prev_comm=sleeper prev_pid=500 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
                      <idle>-0       (-------) [001] d.h1. 1000.004001: hrtimer_expire_entry: hrtimer=00000000a6225311 function=tick_nohz_handler now=1000004000500
                      <idle>-0       (-------) [001] d.h1. 1000.004002: hrtimer_expire_exit: hrtimer=00000000a6225311
                      <idle>-0       (-------) [001] d.h1. 1000.010120: hrtimer_expire_entry: hrtimer=00000000f6afb7f5 function=hrtimer_wakeup now=1000010119000
                      <idle>-0       (-------) [001] d.h2. 1000.010121: sched_waking: comm=sleeper pid=500 prio=120 target_cpu=001
                      <idle>-0       (-------) [001] d.h1. 1000.010122: hrtimer_expire_exit: hrtimer=00000000f6afb7f5
                      <idle>-0       (-------) [001] d..2. 1000.010130: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=sleeper next_pid=500 next_prio=120
                     sleeper-500     (    500) [001] ..... 1000.010135: sys_exit: NR 230 = 0
            # B: worker waits on a futex with a timeout; sleeper wakes it first (a thread of the
            # same process); a second waking while it runs is no wake-up.
                      worker-501     (    500) [000] ..... 1000.000200: sys_enter: NR 202 (7f0000000000, 80, 0, 7ffd00000000, 0, 0)
                      worker-501     (    500) [000] d..1. 1000.000201: hrtimer_start: hrtimer=00000000b0000001 function=hrtimer_wakeup expires=1000020250000 softexpires=1000020200000 mode=ABS was_armed=0
                      worker-501     (    500) [000] d..2. 1000.000205: sched_switch: prev_comm=worker prev_pid=501 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
                     sleeper-500     (    500) [001] d..3. 1000.010140: sched_waking: comm=worker pid=501 prio=120 target_cpu=000
                      <idle>-0       (-------) [000] d..2. 1000.010150: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=worker next_pid=501 next_prio=120
                     sleeper-500     (    500) [001] d..3. 1000.010160: sched_waking: comm=worker pid=501 prio=120 target_cpu=000
            # C: worker in epoll_wait without a timeout, woken by the network soft interrupt.
                      worker-501     (    500) [000] ..... 1000.010190: sys_enter: NR 232 (3, 7ffd00000000, 1, ffffffffffffffff, 0, 0)
                      worker-501     (    500) [000] d..2. 1000.010200: sched_switch: prev_comm=worker prev_pid=501 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
                      <idle>-0       (-------) [000] d.h1. 1000.015000: irq_handler_entry: irq=24 name=virtio0-input.0
                      <idle>-0       (-------) [000] d.h1. 1000.015001: irq_handler_exit: irq=24 ret=handled
                      <idle>-0       (-------) [000] ..s1. 1000.015002: softirq_entry: vec=3 [action=NET_RX]
                      <idle>-0       (-------) [000] d.s3. 1000.015003: sched_waking: comm=worker pid=501 prio=120 target_cpu=000
                      <idle>-0       (-------) [000] ..s1. 1000.015004: softirq_exit: vec=3 [action=NET_RX]
                      <idle>-0       (-------) [000] d..2. 1000.015010: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=worker next_pid=501 next_prio=120
                      worker-501     (    500) [000] ..... 1000.015012: sys_exit: NR 232 = 1
            # D: two timers of the process expire in one interrupt run (shared); the second
            # (epoll_wait, 5 ms of slack) could have waited for the first.
                     sleeper-500     (    500) [001] ..... 1000.020000: sys_enter: NR 230 (0, 0, 7ffd8653dda0, 0, 0, 7f4c81b026d0)
                     sleeper-500     (    500) [001] d..1. 1000.020001: hrtimer_start: hrtimer=00000000f6afb7f5 function=hrtimer_wakeup expires=1000030050000 softexpires=1000030000000 mode=REL was_armed=0
                     sleeper-500     (    500) [001] d..2. 1000.020002: sched_switch: prev_comm=sleeper prev_pid=500 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
                      worker-501     (    500) [000] ..... 1000.020100: sys_enter: NR 232 (3, 7ffd00000000, 1, 9, 0, 0)
                      worker-501     (    500) [000] d..1. 1000.020101: hrtimer_start: hrtimer=00000000b0000002 function=hrtimer_wakeup expires=1000034000000 softexpires=1000029000000 mode=ABS was_armed=0
                      worker-501     (    500) [000] d..2. 1000.020102: sched_switch: prev_comm=worker prev_pid=501 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
                      <idle>-0       (-------) [001] d.h1. 1000.030011: hrtimer_expire_entry: hrtimer=00000000f6afb7f5 function=hrtimer_wakeup now=1000030010000
                      <idle>-0       (-------) [001] d.h2. 1000.030012: sched_waking: comm=sleeper pid=500 prio=120 target_cpu=001
                      <idle>-0       (-------) [001] d.h1. 1000.030013: hrtimer_expire_exit: hrtimer=00000000f6afb7f5
                      <idle>-0       (-------) [001] d.h1. 1000.030014: hrtimer_expire_entry: hrtimer=00000000b0000002 function=hrtimer_wakeup now=1000030010000
                      <idle>-0       (-------) [001] d.h2. 1000.030015: sched_waking: comm=worker pid=501 prio=120 target_cpu=000
                      <idle>-0       (-------) [001] d.h1. 1000.030016: hrtimer_expire_exit: hrtimer=00000000b0000002
            # E: a periodic timerfd; its read re-arms it outside any traced call, and the
            # re-arming keeps timerfd_settime as its site.
                     sleeper-500     (    500) [001] ..... 1000.040000: sys_enter: NR 286 (4, 1, 7ffd00000000, 0, 0, 0)
                     sleeper-500     (    500) [001] d..1. 1000.040001: hrtimer_start: hrtimer=00000000c0000001 function=timerfd_tmrproc expires=1000050000000 softexpires=1000050000000 mode=ABS was_armed=0
                     sleeper-500     (    500) [001] ..... 1000.040002: sys_exit: NR 286 = 0
                     sleeper-500     (    500) [001] d..2. 1000.040010: sched_switch: prev_comm=sleeper prev_pid=500 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
                      <idle>-0       (-------) [001] d.h1. 1000.050001: hrtimer_expire_entry: hrtimer=00000000c0000001 function=timerfd_tmrproc now=1000050000900
                      <idle>-0       (-------) [001] d.h2. 1000.050002: sched_waking: comm=sleeper pid=500 prio=120 target_cpu=001
                      <idle>-0       (-------) [001] d.h1. 1000.050003: hrtimer_expire_exit: hrtimer=00000000c0000001
                      <idle>-0       (-------) [001] d..2. 1000.050010: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=sleeper next_pid=500 next_prio=120
                     sleeper-500     (    500) [001] d..1. 1000.050020: hrtimer_start: hrtimer=00000000c0000001 function=timerfd_tmrproc expires=1000060000000 softexpires=1000060000000 mode=ABS was_armed=0
                     sleeper-500     (    500) [001] d..2. 1000.050030: sched_switch: prev_comm=sleeper prev_pid=500 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
                      <idle>-0       (-------) [001] d.h1. 1000.060002: hrtimer_expire_entry: hrtimer=00000000c0000001 function=timerfd_tmrproc now=1000060001000
                      <idle>-0       (-------) [001] d.h2. 1000.060003: sched_waking: comm=sleeper pid=500 prio=120 target_cpu=001
                      <idle>-0       (-------) [001] d.h1. 1000.060004: hrtimer_expire_exit: hrtimer=00000000c0000001
            # F: a thread of another process (bash) wakes worker.
                      worker-501     (    500) [000] d..2. 1000.061000: sched_switch: prev_comm=worker prev_pid=501 prev_prio=120 prev_state=S ==> next_comm=bash next_pid=600 next_prio=120
                        bash-600     (    600) [000] d..3. 1000.070000: sched_waking: comm=worker pid=501 prio=120 target_cpu=000
            # G: another process's timer wakes another process: not counted.
                      <idle>-0       (-------) [001] d.h1. 1000.070100: hrtimer_expire_entry: hrtimer=00000000d0000001 function=hrtimer_wakeup now=1000070099000
                      <idle>-0       (-------) [001] d.h2. 1000.070101: sched_waking: comm=bash pid=600 prio=120 target_cpu=001
                      <idle>-0       (-------) [001] d.h1. 1000.070102: hrtimer_expire_exit: hrtimer=00000000d0000001
            # H: a thread that started after the trace (known by its thread group), with a
            # dash in its name, times out in poll.
                    worker-2-502     (    500) [000] ..... 1000.070200: sys_enter: NR 7 (0, 0, 10, 0, 0, 0)
                    worker-2-502     (    500) [000] d..1. 1000.070201: hrtimer_start: hrtimer=00000000e0000001 function=hrtimer_wakeup expires=1000080050000 softexpires=1000080000000 mode=REL was_armed=0
                    worker-2-502     (    500) [000] d..2. 1000.070202: sched_switch: prev_comm=worker-2 prev_pid=502 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
                      <idle>-0       (-------) [000] d.h1. 1000.080010: hrtimer_expire_entry: hrtimer=00000000e0000001 function=hrtimer_wakeup now=1000080009000
                      <idle>-0       (-------) [000] d.h2. 1000.080011: sched_waking: comm=worker-2 pid=502 prio=120 target_cpu=000
                      <idle>-0       (-------) [000] d.h1. 1000.080012: hrtimer_expire_exit: hrtimer=00000000e0000001
            CPU:1 [LOST 3 EVENTS]
            # end: 1000100000000
            """

        func read() throws -> KernelTraceDocument.Contents {
            try KernelTraceDocument.read(KernelWakeupTraceTests.fixture)
        }

        @Test func parsesLineHeadersAndEvents() throws {
            let timer = try #require(KernelTraceLine("          <idle>-0       (-------) [001] d.h1. 1000.010120: hrtimer_expire_entry: hrtimer=00000000f6afb7f5 function=hrtimer_wakeup now=1000010119000"))
            #expect(timer == KernelTraceLine(task: "<idle>", tid: 0, tgid: nil, cpu: 1, inHardInterrupt: true, inSoftInterrupt: false,
                                             time: 1_000_010_120_000,
                                             event: .hrtimerExpireEntry(timer: "00000000f6afb7f5", function: "hrtimer_wakeup", now: 1_000_010_119_000)))
            // A name with spaces and dashes, no thread-group column, no context flags.
            let named = try #require(KernelTraceLine("  Web Content-x-4242 [003] 12.5: sched_waking: comm=DOM Worker pid=4250 prio=120 target_cpu=003"))
            #expect(named.task == "Web Content-x" && named.tid == 4242 && named.tgid == nil && named.cpu == 3)
            #expect(named.time == 12_500_000_000)
            #expect(named.event == .waking(task: "DOM Worker", tid: 4250, isWakeup: false))
            let soft = try #require(KernelTraceLine("  <idle>-0 (-------) [000] ..s1. 1.000001: softirq_entry: vec=3 [action=NET_RX]"))
            #expect(soft.inSoftInterrupt && !soft.inHardInterrupt && soft.event == .softirqEntry(action: "NET_RX"))
            let switched = try #require(KernelTraceLine("  a b-7 (7) [0] d..2. 1.0: sched_switch: prev_comm=a b prev_pid=7 prev_prio=120 prev_state=R+ ==> next_comm=c d next_pid=8 next_prio=120"))
            #expect(switched.tgid == 7)
            #expect(switched.event == .contextSwitch(previousTask: "a b", previousTid: 7, previousState: "R+", nextTask: "c d", nextTid: 8))
            #expect(KernelTraceLine("  x-1 (1) [000] ..... 1.0: sys_enter: NR 230 (0, 0, 0, 0, 0, 0)")?.event == .syscallEnter(number: 230))
            #expect(KernelTraceLine("CPU:1 [LOST 3 EVENTS]")?.event == .lost(count: 3))
            #expect(KernelTraceLine("# tracer: nop") == nil)
            #expect(KernelTraceLine("  x-1 (1) [000] ..... 1.0: kmalloc: call_site=x") == nil)
            #expect(KernelTraceLine("garbage") == nil)
            // Damaged text is refused, never trapped on.
            #expect(KernelTraceLine("  x-1 (1) [99999999999999999999999] ..... 1.0: sys_exit: NR 7 = 0") == nil)
            #expect(KernelTraceLine("  x-1 (1) [000] ..... 99999999999999999999.0: sys_exit: NR 7 = 0") == nil)
            #expect(KernelTraceLine("  x-1 (1) [000] ..... 18446744073.999999999: sys_exit: NR 7 = 0") == nil)
            #expect(KernelTraceLine("  x-1 (1) [000] ..... .5: sys_exit: NR 7 = 0") == nil)
            #expect(KernelTraceLine("  x-1 (1) [000] ..... 1.0: sched_waking: comm=a pid=99999999999 prio=1") == nil)
            #expect(KernelTraceLine("  x-1 (1) [000]") == nil)
        }

        @Test func attributesEachWakeupToItsCause() throws {
            let trace = try read().trace
            let causes = trace.wakeups.map { wakeup -> String in
                switch wakeup.cause {
                case .timer(let fire): "\(wakeup.tid) timer \(trace.fires[fire].syscall ?? "?") \(trace.fires[fire].function)"
                case .interrupt(let name): "\(wakeup.tid) interrupt \(name)"
                case .thread(let tid, let task): "\(wakeup.tid) thread \(task)[\(tid)]"
                case .other: "\(wakeup.tid) other"
                }
            }
            #expect(causes == [
                "500 timer clock_nanosleep hrtimer_wakeup",      // A
                "501 thread sleeper[500]",                       // B (the second waking is no wake-up)
                "501 interrupt softirq NET_RX",                  // C
                "500 timer clock_nanosleep hrtimer_wakeup",      // D
                "501 timer epoll_wait hrtimer_wakeup",           // D
                "500 timer timerfd_settime timerfd_tmrproc",     // E
                "500 timer timerfd_settime timerfd_tmrproc",     // E, re-armed by the read
                "501 thread bash[600]",                          // F (G is another process's)
                "502 timer poll hrtimer_wakeup",                 // H
            ])
            #expect(trace.lostEvents == 3)
            #expect(trace.fires.allSatisfy { $0.function != "tick_nohz_handler" })
            #expect(trace.voluntarySwitches == [500: 4, 501: 4, 502: 1])
        }

        @Test func reportsTimersBySiteWakeupsByCauseAndTheOptimalCount() throws {
            let contents = try read()
            let report = KernelWakeupReport(trace: contents.trace, startTime: contents.startTime, endTime: contents.endTime,
                                            groupingBySite: true)
            #expect(report.scope == "pid 500 (sleeper)")
            #expect(abs(report.durationSeconds - 0.1) < 1e-9)
            let rows = report.timers.map { "\($0.function) \($0.syscall) \($0.threads) \($0.timers) \($0.fires)" }
            #expect(rows == [
                "hrtimer_wakeup clock_nanosleep sleeper[500] 1 2",
                "timerfd_tmrproc timerfd_settime sleeper[500] 1 2",
                "hrtimer_wakeup epoll_wait worker[501] 1 1",
                "hrtimer_wakeup poll worker-2[502] 1 1",
            ])
            let nanosleep = report.timers[0]
            #expect(abs((nanosleep.slackMilliseconds ?? 0) - 0.05) < 1e-9)
            // Fired 19 µs and 10 µs after their windows opened.
            #expect(abs((nanosleep.meanLatenessMilliseconds ?? 0) - 0.0145) < 1e-9)
            #expect(abs((nanosleep.meanIntervalMilliseconds ?? 0) - 19.891) < 1e-9)
            #expect(nanosleep.wokeFraction == 1 && nanosleep.sharedWakeupFraction == 0.5)
            let epoll = report.timers[2]
            #expect(epoll.slackMilliseconds == 5 && epoll.sharedWakeupFraction == 1)
            #expect(report.wakeups.total.count == 9)
            #expect(report.wakeups.timer.count == 6 && report.wakeups.interrupt.count == 1)
            #expect(report.wakeups.thread.count == 2 && report.wakeups.other.count == 0)
            #expect(abs(report.wakeups.total.perSecond - 90) < 1e-6)
            let causes = report.causes.map { "\($0.kind) \($0.source) \($0.wakeups.count)" }
            #expect(causes == [
                "timer clock_nanosleep hrtimer_wakeup 2", "timer timerfd_settime timerfd_tmrproc 2",
                "interrupt softirq NET_RX 1", "thread bash[600] 1", "thread sleeper[500] (same process) 1",
                "timer epoll_wait hrtimer_wakeup 1", "timer poll hrtimer_wakeup 1",
            ])
            // Windows: A, D (two, one inside the other's reach), E twice (no slack), H.
            #expect(report.coalescing.windows == 6 && report.windowsWithSlack == 4)
            #expect(report.coalescing.wakeupsWithTimerFires == 5 && report.coalescing.optimalWakeups == 5)
            #expect(report.kernel?.voluntaryContextSwitches == 9 && report.kernel?.threads == 3)
            #expect(report.lostEvents == 3)

            let ungrouped = KernelWakeupReport(trace: contents.trace, groupingBySite: false)
            #expect(ungrouped.timers.count == 4 && !ungrouped.groupedBySite)

            let text = report.formatted()
            #expect(text.hasPrefix("Kernel wake-ups of pid 500 (sleeper) over 0.10 s (the kernel dropped 3 events"))
            #expect(text.contains("Wake-ups: 9 (90.0/s): timer 60.0/s, interrupt 10.0/s, thread 20.0/s, other 0.0/s"))
            #expect(text.contains("Timer windows: 6 (4 with slack) fired in 5 timer interrupts; optimal 5; ratio 1.00"))
            #expect(text.contains("Kernel: 9 voluntary context switches (90.0/s) over 3 threads"))
            let json = try ParsedJSON.parse(report.json())
            #expect(json.keys == ["scope", "pid", "durationSeconds", "groupedBySite", "lostEvents", "timers", "wakeups",
                                  "causes", "coalescing", "kernel"])
            #expect(json["timers"]?.array?.first?["syscall"]?.string == "clock_nanosleep")
            #expect(json["wakeups"]?["interrupt"]?["count"]?.integer == 1)
        }

        @Test func aTimerArmedBeforeTheTraceOrInAnInterruptIsNamedSo() throws {
            var trace = KernelWakeupTrace(scope: .process(pid: 9, threads: [9]))
            for line in [
                // Armed before the trace: only its expiry is seen, and it wakes the process.
                "  <idle>-0 (-------) [000] d.h1. 5.000100: hrtimer_expire_entry: hrtimer=01 function=hrtimer_wakeup now=5000100000",
                "  <idle>-0 (-------) [000] d.h2. 5.000101: sched_waking: comm=p pid=9 prio=120 target_cpu=000",
                "  <idle>-0 (-------) [000] d.h1. 5.000102: hrtimer_expire_exit: hrtimer=01",
                "  p-9 (9) [000] d..2. 5.000200: sched_switch: prev_comm=p prev_pid=9 prev_prio=120 prev_state=S ==> next_comm=x next_pid=3 next_prio=120",
                // A kernel timer armed in an interrupt (an itimer's it_real_fn) wakes it.
                "  x-3 (3) [000] d.h1. 5.000300: hrtimer_start: hrtimer=02 function=it_real_fn expires=5010000000 softexpires=5010000000 mode=ABS was_armed=0",
                "  <idle>-0 (-------) [000] d.h1. 5.010001: hrtimer_expire_entry: hrtimer=02 function=it_real_fn now=5010000500",
                "  <idle>-0 (-------) [000] d.h2. 5.010002: sched_waking: comm=p pid=9 prio=120 target_cpu=000",
                "  <idle>-0 (-------) [000] d.h1. 5.010003: hrtimer_expire_exit: hrtimer=02",
                "  p-9 (9) [000] d..2. 5.010100: sched_switch: prev_comm=p prev_pid=9 prev_prio=120 prev_state=S ==> next_comm=x next_pid=3 next_prio=120",
                // A socket wait with a timeout (schedule_timeout): a wheel timer, whose exit is
                // not traced; its context ends at the CPU's next event.
                "  x-3 (3) [000] ..s1. 5.020000: timer_expire_entry: timer=03 function=process_timeout now=4297711274 baseclk=4297711274",
                "  x-3 (3) [000] d.s2. 5.020001: sched_waking: comm=p pid=9 prio=120 target_cpu=000",
                "  x-3 (3) [000] d..2. 5.020100: sched_switch: prev_comm=x prev_pid=3 prev_prio=120 prev_state=R ==> next_comm=p next_pid=9 next_prio=120",
                "  p-9 (9) [000] d..2. 5.020200: sched_switch: prev_comm=p prev_pid=9 prev_prio=120 prev_state=S ==> next_comm=x next_pid=3 next_prio=120",
                "  x-3 (3) [000] ..s1. 5.030000: timer_expire_entry: timer=04 function=delayed_work_timer_fn now=4297711284 baseclk=4297711284",
                "  x-3 (3) [000] d.s2. 5.030001: sched_waking: comm=kworker pid=44 prio=120 target_cpu=000",
                "  x-3 (3) [000] ..s1. 5.030002: timer_start: timer=05 function=tcp_delack_timer expires=4297711300 [timeout=16] bucket_expiry=4297711300 cpu=0 idx=16 flags=",
                // In a soft interrupt whose entry is not traced: a soft interrupt, unnamed.
                "  x-3 (3) [000] d.s2. 5.030003: sched_waking: comm=p pid=9 prio=120 target_cpu=000",
            ] {
                trace.consume(line[...])
            }
            let report = KernelWakeupReport(trace: trace, groupingBySite: true)
            #expect(Set(report.timers.map { "\($0.function) \($0.syscall) \($0.threads)" })
                == ["hrtimer_wakeup ? p[9]", "it_real_fn kernel p[9]", "process_timeout ? p[9]"])
            #expect(report.timers.first { $0.function == "hrtimer_wakeup" }?.slackMilliseconds == nil)
            #expect(report.timers.first { $0.function == "process_timeout" }?.slackMilliseconds == nil)
            #expect(report.wakeups.timer.count == 3)
            #expect(report.causes.contains { $0.kind == "interrupt" && $0.source == "softirq" && $0.wakeups.count == 1 })
            #expect(report.coalescing.windows == 1)
        }

        /// A timer's address outlives its thread: a sleeper's timer is on its thread's kernel
        /// stack, and a thread of another process given that stack later arms (unseen, the
        /// trace being for one process) a timer at the same address. Neither its fire nor a
        /// fire of a periodic timer whose owner exited is the process's.
        @Test func aTimerAddressReusedAfterItsArmingIsNotTheProcesssTimer() throws {
            var trace = KernelWakeupTrace(scope: .process(pid: 9, threads: [9]))
            for line in [
                // The process's nanosleep, armed and fired: one fire, one wake-up.
                "  p-9 (9) [000] ..... 5.000000: sys_enter: NR 230 (0, 0, 7ffd8653dda0, 0, 0, 0)",
                "  p-9 (9) [000] d..1. 5.000001: hrtimer_start: hrtimer=01 function=hrtimer_wakeup expires=5010050000 softexpires=5010000000 mode=REL was_armed=0",
                "  p-9 (9) [000] d..2. 5.000002: sched_switch: prev_comm=p prev_pid=9 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120",
                "  <idle>-0 (-------) [000] d.h1. 5.010010: hrtimer_expire_entry: hrtimer=01 function=hrtimer_wakeup now=5010010000",
                "  <idle>-0 (-------) [000] d.h2. 5.010011: sched_waking: comm=p pid=9 prio=120 target_cpu=000",
                "  <idle>-0 (-------) [000] d.h1. 5.010012: hrtimer_expire_exit: hrtimer=01",
                "  <idle>-0 (-------) [000] d..2. 5.010020: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=p next_pid=9 next_prio=120",
                "  p-9 (9) [000] ..... 5.010021: sys_exit: NR 230 = 0",
                // A periodic timerfd, then the process exits.
                "  p-9 (9) [000] ..... 5.010100: sys_enter: NR 286 (4, 1, 7ffd00000000, 0, 0, 0)",
                "  p-9 (9) [000] d..1. 5.010101: hrtimer_start: hrtimer=02 function=timerfd_tmrproc expires=5020000000 softexpires=5020000000 mode=ABS was_armed=0",
                "  p-9 (9) [000] ..... 5.010102: sys_exit: NR 286 = 0",
                "  p-9 (9) [000] d..2. 5.010200: sched_switch: prev_comm=p prev_pid=9 prev_prio=120 prev_state=X ==> next_comm=swapper/0 next_pid=0 next_prio=120",
                // Thread 77 of another process, on the same kernel stack: its sleep's fire at
                // address 01, and a timer at 02 whose arming is not traced either.
                "  <idle>-0 (-------) [000] d.h1. 5.030010: hrtimer_expire_entry: hrtimer=01 function=hrtimer_wakeup now=5030010000",
                "  <idle>-0 (-------) [000] d.h2. 5.030011: sched_waking: comm=q pid=77 prio=120 target_cpu=000",
                "  <idle>-0 (-------) [000] d.h1. 5.030012: hrtimer_expire_exit: hrtimer=01",
                "  <idle>-0 (-------) [000] d.h1. 5.040010: hrtimer_expire_entry: hrtimer=02 function=timerfd_tmrproc now=5040010000",
                "  <idle>-0 (-------) [000] d.h2. 5.040011: sched_waking: comm=q pid=77 prio=120 target_cpu=000",
                "  <idle>-0 (-------) [000] d.h1. 5.040012: hrtimer_expire_exit: hrtimer=02",
            ] {
                trace.consume(line[...])
            }
            #expect(trace.fires.map(\.function) == ["hrtimer_wakeup"], "\(trace.fires)")
            let report = KernelWakeupReport(trace: trace, groupingBySite: true)
            let sleeps = report.timers.first { $0.function == "hrtimer_wakeup" }
            #expect(sleeps?.fires == 1)
            #expect(report.wakeups.timer.count == 1)
        }

        @Test func everyProcessIsGroupedByProcess() throws {
            let text = KernelWakeupTraceTests.fixture.replacingScope(with: "# scope: all excluding 600")
            let contents = try KernelTraceDocument.read(text)
            let report = KernelWakeupReport(trace: contents.trace, startTime: contents.startTime, endTime: contents.endTime,
                                            groupingBySite: true)
            #expect(report.scope == "all processes" && report.pid == nil)
            // bash (600) is the tracer here: its wake-up by G's timer is not counted.
            #expect(report.wakeups.total.count == 9)
            #expect(report.timers.allSatisfy { $0.process == "sleeper[500]" })
            #expect(report.causes.allSatisfy { $0.process == "sleeper[500]" })
            #expect(report.formatted().contains("PROCESS"))
        }

        @Test func keptTracesRoundTripTheirFrame() throws {
            let header = KernelTraceDocument.header(scope: .process(pid: 4, threads: [4, 5]), start: 7)
            let text = header + KernelTraceDocument.threads([6]) + KernelTraceDocument.taskNames([4: "main loop"])
                + KernelTraceDocument.footer(threadGroups: [6: 4], end: 9)
            let contents = try KernelTraceDocument.read(text)
            #expect(contents.trace.scope == .process(pid: 4, threads: [4, 5, 6]))
            #expect(contents.startTime == 7 && contents.endTime == 9)
            #expect(contents.trace.threadGroups == [6: 4])
            #expect(contents.trace.taskNames == [4: "main loop"])
            #expect(KernelWakeupReport(trace: contents.trace, groupingBySite: true).scope == "pid 4 (main loop)")
            #expect(throws: TraceError.self) { try KernelTraceDocument.read("  x-1 (1) [000] ..... 1.0: sys_enter: NR 7 (0)") }
            #expect(throws: TraceError.self) { try KernelTraceDocument.read("# scope: pid x") }
        }
    }
}

extension String {
    fileprivate func replacingScope(with line: String) -> String {
        split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("# scope:") ? line : String($0) }
            .joined(separator: "\n")
    }
}
