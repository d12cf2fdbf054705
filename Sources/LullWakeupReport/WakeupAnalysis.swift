import LullDiagnosticsFormat

/// The numbers of a `WakeupReport` computed from a trace.
enum WakeupAnalysis {
    private struct RowKey: Hashable {
        var identity: String
        var queue: String
        var qos: TraceQoS
        var instance: UInt64
    }

    static func rows(_ trace: Trace, grouping: Bool) -> [WakeupReport.TimerRow] {
        let shared = sharedFires(trace)
        var groups: [RowKey: [Int]] = [:]
        var order: [RowKey] = []
        for (index, fire) in trace.fires.enumerated() {
            let key = grouping ? RowKey(identity: fire.identity, queue: "", qos: .unspecified, instance: 0)
                               : RowKey(identity: fire.identity, queue: fire.queue, qos: fire.qos, instance: fire.instance)
            if groups[key] == nil { order.append(key) }
            groups[key, default: []].append(index)
        }
        let rows = order.map { key -> WakeupReport.TimerRow in
            let fires = groups[key]!.map { trace.fires[$0] }
            let lateness = fires.map { Double($0.time > $0.deadline ? $0.time - $0.deadline : 0) / 1e6 }.sorted()
            // Per fire, not per record: a record of a late repeating timer stands for
            // several fires, and the span from the first record covers all but its own.
            let span = Double(fires.last!.time - fires.first!.time) / 1e6
            let intervals = fires.reduce(0) { $0 + $1.count } - fires.first!.count
            let sharedCount = groups[key]!.filter { shared.contains($0) }.count
            return WakeupReport.TimerRow(
                identity: key.identity,
                queue: distinct(fires.map(\.queue)).joined(separator: ", "),
                qos: distinct(fires.map(\.qos.name)).joined(separator: ", "),
                timers: Set(fires.map { RowKey(identity: "", queue: $0.queue, qos: $0.qos, instance: $0.instance) }).count,
                fires: fires.reduce(0) { $0 + $1.count },
                meanIntervalMilliseconds: fires.count > 1 && intervals > 0 ? span / Double(intervals) : nil,
                leewayMilliseconds: fires.reduce(0.0) { $0 + Double($1.leeway) } / Double(fires.count) / 1e6,
                meanLatenessMilliseconds: lateness.reduce(0, +) / Double(lateness.count),
                p99LatenessMilliseconds: percentile(lateness, 0.99),
                sharedWakeupFraction: Double(sharedCount) / Double(fires.count))
        }
        return rows.sorted { ($0.fires, $1.identity) > ($1.fires, $0.identity) }
    }

    /// Indices of the fires that did not have their wake-up to themselves: another timer
    /// fired in it too, or it came for a descriptor.
    private static func sharedFires(_ trace: Trace) -> Set<Int> {
        var firesPerWakeup: [UInt64: Int] = [:]
        for fire in trace.fires { firesPerWakeup[fire.wakeup, default: 0] += 1 }
        var descriptorWakeups = Set<UInt64>()
        for wakeup in trace.wakeups where wakeup.cause == .descriptor { descriptorWakeups.insert(wakeup.sequence) }
        var shared = Set<Int>()
        for (index, fire) in trace.fires.enumerated()
        where firesPerWakeup[fire.wakeup, default: 0] > 1 || descriptorWakeups.contains(fire.wakeup) {
            shared.insert(index)
        }
        return shared
    }

    static func coalescing(_ fires: [TraceFire]) -> WakeupReport.Coalescing {
        let optimal = optimalWakeups(fires.map { fire in
            // The window's end, at most the end of the clock (a leeway may be "no end").
            let (end, overflow) = fire.deadline.addingReportingOverflow(fire.leeway)
            return (start: fire.deadline, end: overflow ? .max : end)
        })
        let used = Set(fires.map(\.wakeup)).count
        return WakeupReport.Coalescing(windows: fires.count, wakeupsWithTimerFires: used, optimalWakeups: optimal,
                                       ratio: optimal > 0 ? Double(used) / Double(optimal) : nil)
    }

    /// The fewest instants that hit every window: take windows by their end, and wake at
    /// the end of each window that the last wake-up missed.
    static func optimalWakeups(_ windows: [(start: UInt64, end: UInt64)]) -> Int {
        var count = 0
        var last: UInt64?
        for window in windows.sorted(by: { $0.end < $1.end }) {
            if let last, window.start <= last { continue }
            last = window.end
            count += 1
        }
        return count
    }

    /// The nearest-rank percentile of sorted values.
    static func percentile(_ sorted: [Double], _ fraction: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        let rank = Int((fraction * Double(sorted.count)).rounded(.up))
        return sorted[min(sorted.count, max(1, rank)) - 1]
    }

    private static func distinct(_ values: [String]) -> [String] {
        var seen = Set<String>()
        return values.filter { seen.insert($0).inserted }
    }
}
