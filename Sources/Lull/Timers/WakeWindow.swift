/// The span in which the reactor's next wake-up must fall: not before `earliest` (nothing
/// would be due yet, or the engine would give away coalescing it wants to keep), not after
/// `latest` (the end of the earliest timer window). Monotonic ns.
struct WakeWindow: Equatable, Sendable {
    let earliest: UInt64
    let latest: UInt64

    /// A window that is a single instant.
    init(at instant: UInt64) {
        earliest = instant
        latest = instant
    }

    init(earliest: UInt64, latest: UInt64) {
        self.earliest = min(earliest, latest)
        self.latest = latest
    }
}
