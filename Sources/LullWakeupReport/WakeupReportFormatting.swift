extension WakeupReport {
    /// The report for people: a table of timers, then the totals.
    public func formatted() -> String {
        var lines: [String] = []
        lines.append("Lull wake-ups of pid \(pid) over \(fixed(durationSeconds, 2)) s"
            + (lostRecords > 0 ? " (the oldest \(lostRecords) records were overwritten: timers cover the rest)" : ""))
        lines.append("")
        let header = ["TIMER", "QUEUE", "QOS", groupedByIdentity ? "TIMERS" : nil, "FIRES", "INTERVAL", "LEEWAY",
                      "LATE MEAN", "LATE P99", "SHARED"].compactMap { $0 }
        var table = [header]
        for row in timers {
            table.append([row.identity, row.queue, row.qos, groupedByIdentity ? "\(row.timers)" : nil, "\(row.fires)",
                          row.meanIntervalMilliseconds.map { milliseconds($0) } ?? "-", milliseconds(row.leewayMilliseconds),
                          milliseconds(row.meanLatenessMilliseconds), milliseconds(row.p99LatenessMilliseconds),
                          "\(Int((row.sharedWakeupFraction * 100).rounded()))%"].compactMap { $0 })
        }
        if timers.isEmpty {
            lines.append("No timer fired.")
        } else {
            lines += alignedColumns(table, leftColumns: 3)
        }
        lines.append("")
        lines.append("Wake-ups: \(wakeups.total.count) (\(fixed(wakeups.total.perSecond, 1))/s): "
            + "timer \(fixed(wakeups.timer.perSecond, 1))/s, descriptor \(fixed(wakeups.descriptor.perSecond, 1))/s, "
            + "cross-thread \(fixed(wakeups.crossThread.perSecond, 1))/s, other \(fixed(wakeups.other.perSecond, 1))/s")
        let ratio = coalescing.ratio.map { fixed($0, 2) } ?? "-"
        lines.append("Timer windows: \(coalescing.windows) fired in \(coalescing.wakeupsWithTimerFires) wake-ups; "
            + "optimal \(coalescing.optimalWakeups); ratio \(ratio)")
        if let kernel {
            lines.append(kernel.summaryLine)
        } else {
            lines.append("Kernel: no count (the process could not be read)")
        }
        lines.append("CPU time per QoS (ms/s): "
            + cpu.map { "\($0.qos) \(fixed($0.millisecondsPerSecond, 2))" }.joined(separator: ", "))
        return lines.joined(separator: "\n")
    }

    /// The report for machines (see `WakeupReport` for the meaning of each field).
    public func json() -> String {
        jsonValue.rendered(indented: true)
    }

    var jsonValue: JSONValue {
        let rows = timers.map { row -> JSONValue in
            .object([
                ("identity", .string(row.identity)), ("queue", .string(row.queue)), ("qos", .string(row.qos)),
                ("timers", .integer(row.timers)), ("fires", .integer(row.fires)),
                ("meanIntervalMilliseconds", row.meanIntervalMilliseconds.map { .number($0) } ?? .null),
                ("leewayMilliseconds", .number(row.leewayMilliseconds)),
                ("meanLatenessMilliseconds", .number(row.meanLatenessMilliseconds)),
                ("p99LatenessMilliseconds", .number(row.p99LatenessMilliseconds)),
                ("sharedWakeupFraction", .number(row.sharedWakeupFraction)),
            ])
        }
        return .object([
            ("pid", .integer(Int(pid))),
            ("durationSeconds", .number(durationSeconds)),
            ("groupedByIdentity", .bool(groupedByIdentity)),
            ("lostRecords", .integer(lostRecords)),
            ("timers", .array(rows)),
            ("wakeups", .object([("timer", wakeups.timer.jsonValue), ("descriptor", wakeups.descriptor.jsonValue),
                                 ("crossThread", wakeups.crossThread.jsonValue), ("other", wakeups.other.jsonValue),
                                 ("total", wakeups.total.jsonValue)])),
            ("coalescing", .object([("windows", .integer(coalescing.windows)),
                                    ("wakeupsWithTimerFires", .integer(coalescing.wakeupsWithTimerFires)),
                                    ("optimalWakeups", .integer(coalescing.optimalWakeups)),
                                    ("ratio", coalescing.ratio.map { .number($0) } ?? .null)])),
            ("kernel", kernel?.jsonValue ?? .null),
            ("cpu", .array(cpu.map { time in
                .object([("qos", .string(time.qos)), ("milliseconds", .number(time.milliseconds)),
                         ("millisecondsPerSecond", .number(time.millisecondsPerSecond))])
            })),
        ])
    }

    private func milliseconds(_ value: Double) -> String {
        fixed(value, value < 10 ? 2 : 1) + " ms"
    }

}

extension WakeupReport.Rate {
    /// `{"count": …, "perSecond": …}`, as both reports' JSON give a rate.
    var jsonValue: JSONValue {
        .object([("count", .integer(count)), ("perSecond", .number(perSecond))])
    }
}

extension WakeupReport.KernelWakeups {
    /// The "Kernel: …" line both reports end with.
    var summaryLine: String {
        let over = threads.map { " over \($0) threads" } ?? ""
        return "Kernel: \(voluntaryContextSwitches) voluntary context switches (\(fixed(perSecond, 1))/s)\(over)"
    }

    var jsonValue: JSONValue {
        .object([("voluntaryContextSwitches", .integer(voluntaryContextSwitches)),
                 ("perSecond", .number(perSecond)),
                 ("threads", threads.map { .integer($0) } ?? .null)])
    }
}

/// Rows padded to their columns' widths; the first `leftColumns` align left.
func alignedColumns(_ rows: [[String]], leftColumns: Int) -> [String] {
    let widths = rows[0].indices.map { column in rows.map { $0[column].count }.max() ?? 0 }
    return rows.map { row in
        row.enumerated().map { column, cell in
            let padding = String(repeating: " ", count: widths[column] - cell.count)
            return column < leftColumns ? cell + padding : padding + cell
        }.joined(separator: "  ").trimmingSuffix()
    }
}

/// `value` with `digits` decimals (no Foundation in the runtime).
func fixed(_ value: Double, _ digits: Int) -> String {
    guard value.isFinite else { return "\(value)" }
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let scaled = (abs(value) * scale).rounded()
    guard scaled < 9e15 else { return "\(value)" }
    let integer = Int(scaled)
    let whole = integer / Int(scale)
    let fraction = integer % Int(scale)
    let sign = value < 0 && integer != 0 ? "-" : ""
    guard digits > 0 else { return "\(sign)\(whole)" }
    let fractionText = String(fraction)
    return "\(sign)\(whole)." + String(repeating: "0", count: digits - fractionText.count) + fractionText
}

extension String {
    fileprivate func trimmingSuffix() -> String {
        var text = self
        while text.last == " " { text.removeLast() }
        return text
    }
}
