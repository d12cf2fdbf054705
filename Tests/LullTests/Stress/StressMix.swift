/// What a generated plan may do: which source kinds it makes, and which of them are
/// activated by the thread that creates them, before any other thread can reach them
/// (`StressOperation.createActive`, and no `activate` step), instead of racing `activate()`
/// against the other threads' calls.
struct StressMix: Equatable, Sendable {
    var kinds: [StressKind]
    var activatedAtCreation: Set<StressKind>

    /// Every kind, every call racing every other.
    static let everything = StressMix(kinds: StressKind.allCases, activatedAtCreation: [])

    /// Every kind; the descriptor-backed ones (read, write, process, file system) activated
    /// at creation, because `activate()` racing `cancel()` on them (or racing the release
    /// of a source on a reused descriptor) corrupts memory in the runtime today (issue 14,
    /// item 1: `DescriptorDriver.readinessReported`, `DescriptorDriver.staleDescriptor`).
    static let passingToday = StressMix(kinds: StressKind.allCases, activatedAtCreation: [.read, .write, .process, .fileSystem])

    /// `kinds`, all racing.
    static func only(_ kinds: [StressKind]) -> StressMix {
        StressMix(kinds: kinds, activatedAtCreation: [])
    }

    /// The same mix without `kind`.
    func without(_ kind: StressKind) -> StressMix {
        StressMix(kinds: kinds.filter { $0 != kind }, activatedAtCreation: activatedAtCreation.subtracting([kind]))
    }
}
