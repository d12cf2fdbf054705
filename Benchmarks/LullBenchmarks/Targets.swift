// The targets of issue #18 for the report's table, by row: Lull/peer at least a ratio (rates)
// or at most one (costs: time, memory, wake-ups, CPU). One table here, by row label, so that
// the goals are read in one place and a benchmark's file says only what it measures.
//
// A row without an entry has no target: its peer is not a runtime a user would pick instead
// (timer-slack against Lull without slack), or its figure is the same work for both
// (timer-piggyback's fires). The events-* rows compare a `for await` loop with a plain event
// handler of Lull's own: issue #16 wants the loop within 2x of the handler.

/// What the ratio Lull/peer of one row must reach, or, for a row whose figure is itself a
/// ratio to an optimum (wake-ups ÷ the fewest possible), what Lull's figure must reach.
struct Target: Sendable {
    /// The bound on Lull/peer, or on Lull's own figure when `onLullsFigure`.
    let ratio: Double
    /// True: the value ≥ ratio (higher is better); false: the value ≤ ratio.
    let atLeast: Bool
    /// True: the bound applies to Lull's figure, not to Lull/peer.
    var onLullsFigure = false

    static func atLeast(_ ratio: Double) -> Target { Target(ratio: ratio, atLeast: true) }
    static func atMost(_ ratio: Double) -> Target { Target(ratio: ratio, atLeast: false) }
    /// Lull's own figure at most `bound` (for example wake-ups ≤ 1.1x the optimum).
    static func lullAtMost(_ bound: Double) -> Target { Target(ratio: bound, atLeast: false, onLullsFigure: true) }

    /// "≥ 2.0x", "≤ 1.0x", "≥ 0.50x"; "Lull ≤ 1.1x" for a bound on Lull's figure.
    var text: String {
        (onLullsFigure ? "Lull " : "") + (atLeast ? "≥ " : "≤ ") + Format.fixed(ratio, ratio < 1 ? 2 : 1) + "x"
    }

    func isMet(by value: Double) -> Bool {
        atLeast ? value >= ratio : value <= ratio
    }
}

enum Targets {
    /// Rows of the Dispatch workloads (part 3: every one ≥ 1.0x, asyncAfter churn ≥ 2x), the
    /// SwiftNIO comparison (part 2), the libevent floor (part 4), file watching memory (part 5),
    /// the task workloads (part 6), and issue #16's events and sleep rows. Keys are the
    /// table's first column, trimmed.
    static let byRow: [String: Target] = {
        var table: [String: Target] = [
            // Queues.
            "serial-async": .atLeast(1), "concurrent-async": .atLeast(1), "sync": .atLeast(1),
            "context-async": .atLeast(1),
            // Timers.
            "async-after": .atLeast(2),
            "timer-wakeups": .atMost(1), "timer-accuracy": .atMost(1), "timer-accuracy p99": .atMost(1),
            "timer-churn": .atLeast(1), "timer-memory": .atMost(1),
            // Idle and sources.
            "idle": .atMost(1), "ping-pong": .atLeast(1), "read-throughput": .atLeast(1),
            "user-data-merges": .atLeast(1), "echo-load": .atLeast(1), "qos-hogs": .atMost(1),
            // The floor: half of raw libevent on one thread.
            "ping-pong-floor": .atLeast(0.5),
            // File watching memory against inotifywait -r.
            "fs-tree-watch RSS increase": .atMost(1),
            // Swift concurrency on Lull against the default executor.
            "tasks-spawn": .atLeast(1), "tasks-actor-pingpong": .atLeast(1), "tasks-sleep-tolerance": .atMost(1),
            "task-sleep-wakeups": .atMost(1),
            // Issue #16: the sleeps of 1,000 tasks wake the process at most 1.1x the optimum.
            "wake-ups / optimum": .lullAtMost(1.1),
            // Issue #16: `for await` over a source's events within 2x of a plain handler.
            "events-chain": .atLeast(0.5), "events-stream": .atLeast(0.5), "events-ping-pong": .atLeast(0.5),
            "events-ping-pong-installed": .atLeast(0.5), "events-ping-pong-queue": .atLeast(0.5),
            // Timers riding on other wake-ups: the process wakes no more than Dispatch's.
            "piggyback voluntary switches": .atMost(1), "piggyback 5 ms voluntary switches": .atMost(1),
            "piggyback 20 ms voluntary switches": .atMost(1),
        ]
        for suffix in ["1k", "100k"] { table["idle-read-sources-" + suffix] = .atMost(1) }
        for size in ["100", "1k", "10k"] {
            let name = "echo-nio-" + size
            table[name] = .atLeast(1)
            table[name + " p99"] = .atMost(1)
            table[name + " server CPU per M messages"] = .atMost(1)
            table[name + " memory per idle connection"] = .atMost(1)
        }
        return table
    }()

    static func target(forRow label: String) -> Target? {
        byRow[label.trimmingCharacters(in: " ")]
    }
}

extension String {
    /// The string without leading and trailing `character`s.
    fileprivate func trimmingCharacters(in character: Character) -> String {
        guard let first = firstIndex(where: { $0 != character }),
              let last = lastIndex(where: { $0 != character }) else { return "" }
        return String(self[first...last])
    }
}
