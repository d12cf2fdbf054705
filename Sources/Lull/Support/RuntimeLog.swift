import Logging
import Synchronization

/// Lull's own diagnostics, through swift-log, each distinct condition said once.
enum RuntimeLog {
    static let logger = Logger(label: "lull")
    private static let said = Mutex<Set<String>>([])

    static func once(_ key: String, _ message: () -> String) {
        let first = said.locked { $0.insert(key).inserted }
        if first {
            logger.warning("\(message())")
        }
    }

    static func warning(_ message: String) {
        logger.warning("\(message)")
    }
}
