import Glibc

/// Runs one stress plan in a child process: this test binary again, filtered to the test
/// that runs the plan named by `LULL_STRESS_CHILD_CASE` (`StressConfiguration.repetitions`
/// times, so that descriptor numbers are reused as in a long-lived process) and exits. A crash — a trap, a
/// segmentation fault, an AddressSanitizer report — then fails the case instead of the
/// whole run, so it is logged with its seed and shrunk like any other failure.
enum IsolatedStressCase {
    static let variable = "LULL_STRESS_CHILD_CASE"
    static let violationPrefix = "stress violation: "
    static let childTest = "aCaseHandedOverByTheIsolatingParent"

    /// The violations of the plan's run in a child (none: it passed). `quiet` turns the
    /// Swift runtime's backtracer off in the child (seconds per crash, while shrinking).
    static func run(_ plan: StressPlan, quiet: Bool = false) -> [String] {
        let outcome: ToolProcess.Outcome
        do {
            outcome = try ToolProcess.run(executable, ["--testing-library", "swift-testing", "--filter", childTest],
                                          timeoutSeconds: 600,
                                          environment: ["\(variable)=\(plan)"] + (quiet ? ["SWIFT_BACKTRACE=enable=no"] : []))
        } catch {
            return ["the case's process: \(error)"]
        }
        if outcome.status == 0 { return [] }
        let lines = outcome.standardError.split(separator: "\n", omittingEmptySubsequences: false)
        let violations = lines.filter { $0.hasPrefix(violationPrefix) }.map { String($0.dropFirst(violationPrefix.count)) }
        if !violations.isEmpty { return violations }
        return ["the case's process ended with status \(outcome.status):\n" + crashReport(lines)]
    }

    /// From the first line that says what went wrong (the backtracer's crashed thread, a
    /// fatal error, a sanitizer's report) on, or else the end of the output.
    private static func crashReport(_ lines: [Substring]) -> String {
        let markers = ["crashed", "Fatal error", "ERROR: AddressSanitizer", "WARNING: ThreadSanitizer", "SUMMARY:"]
        let interesting = lines.filter { !$0.allSatisfy(\.isWhitespace) }
        guard let first = interesting.firstIndex(where: { line in markers.contains { line.contains($0) } }) else {
            return interesting.suffix(40).joined(separator: "\n")
        }
        let crashedThread = interesting.firstIndex { $0.hasSuffix("crashed:") } ?? first
        let heading = crashedThread == first ? [] : [interesting[first]]
        return (heading + interesting[crashedThread...].prefix(30)).joined(separator: "\n")
    }

    /// Runs the plan handed over in the environment, if any, and exits: 0 when it passed.
    static func runHandedOverCase() {
        guard let text = StressConfiguration.environment(variable) else { return }
        guard let plan = StressPlan(text: text) else {
            printToStandardError("\(violationPrefix)\(variable) is not a plan: \(text)")
            exit(2)
        }
        var violations: [String] = []
        for _ in 0..<StressConfiguration.repetitions where violations.isEmpty {
            violations = StressRunner.run(plan)
        }
        for violation in violations { printToStandardError(violationPrefix + violation) }
        exit(violations.isEmpty ? 0 : 1)
    }

    /// This test binary.
    private static var executable: String {
        var buffer = [CChar](repeating: 0, count: 4_096)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        return length > 0 ? String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self) : ""
    }
}
