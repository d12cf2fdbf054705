extension KernelWakeupReport {
    /// Cause rows printed at most (the JSON has them all).
    static let printedCauses = 25
    /// Timer rows printed at most for every process (the JSON has them all).
    static let printedSystemTimers = 40

    /// The report for people: the timers by site, the wake-ups by cause, then the totals.
    public func formatted() -> String {
        func milliseconds(_ value: Double?) -> String {
            guard let value else { return "-" }
            return fixed(value, value < 10 ? 2 : 1) + " ms"
        }
        func percent(_ fraction: Double) -> String { "\(Int((fraction * 100).rounded()))%" }
        let system = pid == nil
        var lines: [String] = []
        lines.append("Kernel wake-ups of \(scope) over \(fixed(durationSeconds, 2)) s"
            + (lostEvents > 0 ? " (the kernel dropped \(lostEvents) events: counts may be short)" : ""))
        lines.append("")
        var table = [[system ? "PROCESS" : nil, "TIMER", "SYSCALL", "THREADS", "TIMERS", "FIRES", "INTERVAL", "SLACK",
                      "LATE MEAN", "LATE P99", "WOKE", "SHARED"].compactMap { $0 }]
        let printedTimers = system ? Array(timers.prefix(KernelWakeupReport.printedSystemTimers)) : timers
        for row in printedTimers {
            table.append([system ? row.process ?? "?" : nil, row.function, row.syscall, row.threads, "\(row.timers)",
                          "\(row.fires)", milliseconds(row.meanIntervalMilliseconds), milliseconds(row.slackMilliseconds),
                          milliseconds(row.meanLatenessMilliseconds), milliseconds(row.p99LatenessMilliseconds),
                          percent(row.wokeFraction), percent(row.sharedWakeupFraction)].compactMap { $0 })
        }
        if timers.isEmpty {
            lines.append("No timer fired.")
        } else {
            lines += alignedColumns(table, leftColumns: system ? 4 : 3)
            if printedTimers.count < timers.count {
                lines.append("(and \(timers.count - printedTimers.count) more timer rows; --json lists them all)")
            }
        }
        lines.append("")
        if causes.isEmpty {
            lines.append("No thread woke up.")
        } else {
            var causeTable = [[system ? "PROCESS" : nil, "CAUSE", "SOURCE", "WAKE-UPS", "PER SECOND"].compactMap { $0 }]
            for cause in causes.prefix(KernelWakeupReport.printedCauses) {
                causeTable.append([system ? cause.process ?? "?" : nil, cause.kind, cause.source,
                                   "\(cause.wakeups.count)", fixed(cause.wakeups.perSecond, 1)].compactMap { $0 })
            }
            lines += alignedColumns(causeTable, leftColumns: system ? 3 : 2)
            if causes.count > KernelWakeupReport.printedCauses {
                lines.append("(and \(causes.count - KernelWakeupReport.printedCauses) more sources; --json lists them all)")
            }
        }
        lines.append("")
        lines.append("Wake-ups: \(wakeups.total.count) (\(fixed(wakeups.total.perSecond, 1))/s): "
            + "timer \(fixed(wakeups.timer.perSecond, 1))/s, interrupt \(fixed(wakeups.interrupt.perSecond, 1))/s, "
            + "thread \(fixed(wakeups.thread.perSecond, 1))/s, other \(fixed(wakeups.other.perSecond, 1))/s")
        let ratio = coalescing.ratio.map { fixed($0, 2) } ?? "-"
        lines.append("Timer windows: \(coalescing.windows) (\(windowsWithSlack) with slack) fired in "
            + "\(coalescing.wakeupsWithTimerFires) timer interrupts; optimal \(coalescing.optimalWakeups); ratio \(ratio)")
        if let kernel { lines.append(kernel.summaryLine) }
        return lines.joined(separator: "\n")
    }

    /// The report for machines (see `KernelWakeupReport` for the meaning of each field).
    public func json() -> String {
        jsonValue.rendered(indented: true)
    }

    var jsonValue: JSONValue {
        func optional(_ value: Double?) -> JSONValue { value.map { .number($0) } ?? .null }
        let rows = timers.map { row -> JSONValue in
            .object([
                ("process", row.process.map { .string($0) } ?? .null),
                ("function", .string(row.function)), ("syscall", .string(row.syscall)),
                ("threads", .string(row.threads)), ("timers", .integer(row.timers)), ("fires", .integer(row.fires)),
                ("meanIntervalMilliseconds", optional(row.meanIntervalMilliseconds)),
                ("slackMilliseconds", optional(row.slackMilliseconds)),
                ("meanLatenessMilliseconds", optional(row.meanLatenessMilliseconds)),
                ("p99LatenessMilliseconds", optional(row.p99LatenessMilliseconds)),
                ("wokeFraction", .number(row.wokeFraction)),
                ("sharedWakeupFraction", .number(row.sharedWakeupFraction)),
            ])
        }
        return .object([
            ("scope", .string(scope)),
            ("pid", pid.map { .integer(Int($0)) } ?? .null),
            ("durationSeconds", .number(durationSeconds)),
            ("groupedBySite", .bool(groupedBySite)),
            ("lostEvents", .integer(lostEvents)),
            ("timers", .array(rows)),
            ("wakeups", .object([("timer", wakeups.timer.jsonValue), ("interrupt", wakeups.interrupt.jsonValue),
                                 ("thread", wakeups.thread.jsonValue), ("other", wakeups.other.jsonValue),
                                 ("total", wakeups.total.jsonValue)])),
            ("causes", .array(causes.map { cause in
                .object([("process", cause.process.map { .string($0) } ?? .null), ("kind", .string(cause.kind)),
                         ("source", .string(cause.source)), ("wakeups", cause.wakeups.jsonValue)])
            })),
            ("coalescing", .object([("windows", .integer(coalescing.windows)),
                                    ("windowsWithSlack", .integer(windowsWithSlack)),
                                    ("wakeupsWithTimerFires", .integer(coalescing.wakeupsWithTimerFires)),
                                    ("optimalWakeups", .integer(coalescing.optimalWakeups)),
                                    ("ratio", coalescing.ratio.map { .number($0) } ?? .null)])),
            ("kernel", kernel?.jsonValue ?? .null),
        ])
    }
}
