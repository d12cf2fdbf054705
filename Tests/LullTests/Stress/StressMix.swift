/// What a generated plan may do: which source kinds it makes, and which of them are
/// activated by the thread that creates them, before any other thread can reach them
/// (`StressOperation.createActive`, and no `activate` step), instead of racing `activate()`
/// against the other threads' calls.
struct StressMix: Equatable, Sendable {
    var kinds: [StressKind]
    var activatedAtCreation: Set<StressKind>

    /// Every kind, every call racing every other.
    static let everything = StressMix(kinds: StressKind.allCases, activatedAtCreation: [])

    /// `kinds`, all racing.
    static func only(_ kinds: [StressKind]) -> StressMix {
        StressMix(kinds: kinds, activatedAtCreation: [])
    }
}
