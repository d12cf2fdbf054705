import Glibc
import Testing

extension IndependentSuite {
    /// Every example and tool answers `--help` with its usage and exit status 0, without
    /// running (a demo that runs instead takes seconds and prints no usage; lull-bench, in the
    /// benchmarks package that make test never builds, is not among them); the examples
    /// without an argument parser refuse an argument they do not take with status 2.
    @Suite(.serialized) struct ExampleHelpTests {
        static let programs = ["qos-demo", "activities", "timer-coalescing", "memory-pressure-cache",
                               "echo-server", "watch-run", "timerfires"]

        @Test(arguments: ExampleHelpTests.programs)
        func answersHelp(_ program: String) throws {
            let outcome = try ToolProcess.run(try ToolProcess.executable(program), ["--help"], timeoutSeconds: 10)
            #expect(outcome.status == 0, "\(program) --help: \(outcome.standardError)")
            let text = outcome.standardOutput.lowercased()
            #expect(text.hasPrefix("usage: \(program)") || text.contains("\nusage: \(program)"),
                    "\(program) --help printed: \(outcome.standardOutput.prefix(300))")
            // The demos print these when they run.
            #expect(!outcome.standardOutput.contains("fired "), "\(program) ran instead of answering --help")
            #expect(!outcome.standardOutput.contains("finished after"), "\(program) ran instead of answering --help")
        }

        @Test(arguments: ["qos-demo", "activities", "timer-coalescing", "memory-pressure-cache"])
        func refusesAnUnknownArgument(_ program: String) throws {
            let outcome = try ToolProcess.run(try ToolProcess.executable(program), ["--no-such-option"], timeoutSeconds: 10)
            #expect(outcome.status == 2)
            #expect(outcome.standardError.contains("unknown argument"), "\(outcome.standardError)")
            #expect(outcome.standardError.lowercased().contains("usage: \(program)"))
        }
    }
}
