import Glibc

/// What a stress run covers, from the environment:
///
/// - `LULL_STRESS_CASE`: one plan, as printed by a failing run (replays it).
/// - `LULL_STRESS_SEED`: the plan of one seed.
/// - `LULL_STRESS_ROUNDS`: that many seeds, from `LULL_STRESS_FIRST_SEED` (default: one
///   taken from the clock, printed) — the long run of `make stress`. Without it, the
///   bounded run of `make test`: seeds 1 ... `boundedRounds`.
/// - `LULL_STRESS_KINDS`: `all`, or a comma-separated list of kinds (`read,timer,fs`);
///   default `defaultMix`.
/// - `LULL_STRESS_ISOLATE=1`: every case runs in a child process of its own
///   (`IsolatedStressCase`), so a crash is a failing case that is logged and shrunk too;
///   `LULL_STRESS_REPEAT` times there (default 10).
/// - `LULL_STRESS_SHRINK`: how many candidates shrinking may run (0: none).
enum StressConfiguration {
    /// The mix of a run when `LULL_STRESS_KINDS` is not set: every kind, every call racing.
    static let defaultMix: StressMix = .everything

    /// Seeds of the run in `make test`: a few seconds.
    static let boundedRounds = 40

    /// `LULL_STRESS_KINDS`: `all` (`StressMix.everything`), or a comma-separated list of
    /// kinds, all racing (`read,timer,fs`); otherwise `defaultMix`.
    static var mix: StressMix {
        guard let text = environment("LULL_STRESS_KINDS") else { return defaultMix }
        if text == "all" { return .everything }
        let kinds = text.split(separator: ",").compactMap { StressKind(rawValue: String($0)) }
        return kinds.isEmpty ? defaultMix : .only(kinds)
    }

    static var isIsolated: Bool { environment("LULL_STRESS_ISOLATE") == "1" }

    /// How many candidate plans shrinking a failure may run (`LULL_STRESS_SHRINK`; 0: report
    /// the failing seed unshrunk).
    static func shrinkBudget(isolated: Bool) -> Int {
        environment("LULL_STRESS_SHRINK").flatMap { Int($0) } ?? (isolated ? 80 : 150)
    }

    /// How often a child process of an isolated run runs its case (stopping at a failure):
    /// `LULL_STRESS_REPEAT`, default 10.
    static var repetitions: Int {
        environment("LULL_STRESS_REPEAT").flatMap { Int($0) }.map { max($0, 1) } ?? 10
    }

    /// The plans to run, in order.
    static func plans() -> [StressPlan] {
        if let text = environment("LULL_STRESS_CASE") {
            guard let plan = StressPlan(text: text) else {
                printToStandardError("stress: LULL_STRESS_CASE is not a plan: \(text)")
                return []
            }
            return [plan]
        }
        let mix = mix
        if let seed = environment("LULL_STRESS_SEED").flatMap({ UInt64($0) }) {
            return [StressGenerator.plan(seed: seed, mix: mix)]
        }
        guard let rounds = environment("LULL_STRESS_ROUNDS").flatMap({ Int($0) }) else {
            return (1...UInt64(boundedRounds)).map { StressGenerator.plan(seed: $0, mix: mix) }
        }
        let first = environment("LULL_STRESS_FIRST_SEED").flatMap { UInt64($0) }
            ?? (monotonicNanoseconds() ^ realtimeNanoseconds()) % 1_000_000_000
        printToStandardError("stress: \(rounds) seeds from \(first), kinds \(mix.kinds.map(\.rawValue).joined(separator: ","))"
            + (mix.activatedAtCreation.isEmpty ? "" : " (activated at creation: \(mix.activatedAtCreation.map(\.rawValue).sorted().joined(separator: ",")))")
            + (isIsolated ? ", each in its own process" : ""))
        return (0..<UInt64(max(rounds, 0))).map { StressGenerator.plan(seed: first + $0, mix: mix) }
    }

    /// True in a ThreadSanitizer or AddressSanitizer build (its runtime is linked in).
    static let underSanitizer: Bool = dlsym(nil, "__tsan_init") != nil || dlsym(nil, "__asan_init") != nil

    static func environment(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}
