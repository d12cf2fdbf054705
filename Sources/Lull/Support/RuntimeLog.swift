import Logging
import Synchronization

/// Lull's own diagnostics, through swift-log, each distinct condition said once.
enum RuntimeLog {
    static let logger = Logger(label: "lull")
    private static let said = Mutex<Set<String>>([])

    /// Logs `message` the first time `key` is said, at `level` (a degradation is a warning;
    /// a feature this kernel or process does not offer is information).
    static func once(_ key: String, level: Logger.Level = .warning, _ message: () -> String) {
        let first = said.locked { $0.insert(key).inserted }
        if first {
            logger.log(level: level, "\(message())")
        }
    }

    static func warning(_ message: String) {
        logger.warning("\(message)")
    }
}
