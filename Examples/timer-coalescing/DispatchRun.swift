import Dispatch

/// The same timers on Apple's Dispatch (swift-corelibs-libdispatch), for `--runtime dispatch`:
/// four repeating timer sources with the same leeway and a chain of `asyncAfter` blocks on
/// one serial queue. `timerfires --kernel -- ...` is not needed: `timerfires --kernel --pid`
/// reads both runtimes' wake-ups the same way, from the kernel's tracepoints.
func runDispatchTimers(leewayMilliseconds: Int) -> String {
    let queue = DispatchQueue(label: "example.timers")
    let group = DispatchGroup()
    let tally = Tally()
    var sources: [DispatchSourceTimer] = []
    for plan in plans {
        let timer = DispatchSource.makeTimerSource(flags: .strict, queue: queue)
        let interval = DispatchTimeInterval.milliseconds(plan.intervalMilliseconds)
        timer.schedule(deadline: DispatchTime.now() + interval, repeating: interval,
                       leeway: .milliseconds(leewayMilliseconds))
        timer.setEventHandler {
            if tally.add(plan.label, Int(timer.data)) >= plan.fires { timer.cancel() }
        }
        group.enter()
        timer.setCancelHandler { group.leave() }
        timer.activate()
        sources.append(timer)
    }
    group.enter()
    scheduleDispatchRetry(on: queue, remaining: retryCount, tally: tally, group: group)
    group.wait()
    withExtendedLifetime(sources) {}
    return tally.line
}

/// The chain of delayed blocks on Dispatch.
func scheduleDispatchRetry(on queue: DispatchQueue, remaining: Int, tally: Tally, group: DispatchGroup) {
    queue.asyncAfter(deadline: DispatchTime.now() + .milliseconds(retryDelayMilliseconds)) {
        _ = tally.add("retry", 1)
        if remaining > 1 {
            scheduleDispatchRetry(on: queue, remaining: remaining - 1, tally: tally, group: group)
        } else {
            group.leave()
        }
    }
}
