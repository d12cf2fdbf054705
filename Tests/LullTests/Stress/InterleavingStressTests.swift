import Glibc
import Testing
import Lull

extension LullSuite {
    /// Random sequences of public API calls on random source kinds from several threads
    /// (`StressGenerator`), run against the contract's invariants (`StressRunner`,
    /// `StressProbe`, `ResourceCensus`). `StressConfiguration` says what a run covers:
    /// `make test` runs a fixed set of seeds, `make stress` a long run, also under
    /// AddressSanitizer. A failure prints its seed and a shrunk plan to replay with
    /// `LULL_STRESS_CASE`.
    @Suite struct InterleavingStressTests {
        @Test func randomCallSequencesKeepTheSourceContract() {
            let isolated = StressConfiguration.isIsolated
            func run(_ plan: StressPlan, quiet: Bool = false) -> [String] {
                isolated ? IsolatedStressCase.run(plan, quiet: quiet) : StressRunner.run(plan)
            }
            for plan in StressConfiguration.plans() {
                let violations = run(plan)
                if violations.isEmpty { continue }
                printToStandardError("stress: seed \(plan.seed) failed: \(violations.joined(separator: "\n  "))")
                printToStandardError("stress: shrinking \(plan.steps.count) steps (replay the seed: LULL_STRESS_SEED=\(plan.seed))")
                let attempts = isolated ? 3 : 5
                let minimal = StressShrinker.shrink(plan, budget: StressConfiguration.shrinkBudget(isolated: isolated)) { candidate in
                    (0..<attempts).contains { _ in !run(candidate, quiet: true).isEmpty }
                }
                let replay = "LULL_STRESS_CASE='\(minimal)'"
                printToStandardError("stress: shrunk to \(minimal.steps.count) steps: \(replay)")
                Issue.record("""
                    stress seed \(plan.seed) failed (LULL_STRESS_SEED=\(plan.seed)): \(violations.joined(separator: "; "))
                    shrunk to \(minimal.steps.count) steps: \(minimal.steps.map(\.description).joined(separator: " "))
                    replay: \(replay)\(isolated ? " LULL_STRESS_ISOLATE=1" : "")
                    """)
                return
            }
        }

        /// The child of an isolated run (`IsolatedStressCase`); does nothing in any other run.
        @Test func aCaseHandedOverByTheIsolatingParent() {
            IsolatedStressCase.runHandedOverCase()
        }

        // MARK: The harness itself

        @Test func aSeedNamesOnePlanThatPrintsAndParsesBack() {
            for seed in UInt64(1)...50 {
                let plan = StressGenerator.plan(seed: seed, mix: .everything)
                #expect(plan == StressGenerator.plan(seed: seed, mix: .everything))
                #expect(StressPlan(text: plan.description) == plan, "\(plan)")
            }
            #expect(StressGenerator.plan(seed: 1, mix: .only([.timer])) != StressGenerator.plan(seed: 2, mix: .only([.timer])))
            #expect(StressPlan(text: "seed=1 threads=2 slots=nothing endings=cancel steps=") == nil)
        }

        @Test func shrinkingKeepsTheStepsAFailureNeeds() {
            let plan = StressGenerator.plan(seed: 7, mix: .everything)
            let needed = [plan.steps[3], plan.steps[plan.steps.count - 2]]
            let minimal = StressShrinker.shrink(plan, budget: 1_000) { candidate in
                needed.allSatisfy(candidate.steps.contains)
            }
            #expect(minimal.steps == needed)
        }

        @Test func theProbeReportsOverlapsRepeatsAndLateHandlers() {
            let violations = Recorder<String>()
            let probe = StressProbe(name: "probe", violations: violations)
            probe.enter(.registration)
            probe.leave(.registration)
            probe.enter(.event)
            #expect(violations.values.isEmpty)
            probe.enter(.event)
            #expect(violations.values.contains { $0.contains("started while another handler") })
            probe.leave(.event)
            probe.enter(.registration)
            probe.leave(.registration)
            #expect(violations.values.contains { $0.contains("registration handler ran twice") })
            #expect(violations.values.contains { $0.contains("registration handler ran after an event") })
            probe.enter(.cancel)
            probe.leave(.cancel)
            #expect(probe.isFinished)
            probe.enter(.event)
            probe.leave(.event)
            #expect(violations.values.contains { $0.contains("event handler ran after the cancel handler") })
            probe.enter(.cancel)
            probe.leave(.cancel)
            #expect(violations.values.contains { $0.contains("cancel handler ran twice") })
        }

        @Test func theCensusSeesALeakedDescriptorAndWatch() throws {
            let baseline = ResourceCensus.take()
            let (reader, writer) = try SourceTestKit.makePipe()
            let inotify = inotify_init1(Int32(IN_CLOEXEC))
            try #require(inotify >= 0)
            #expect(inotify_add_watch(inotify, "/tmp", UInt32(IN_ATTRIB)) >= 0)
            let excess = ResourceCensus.take().excess(over: baseline)
            #expect(excess.contains("2 more pipe descriptor(s)"), "\(excess)")
            #expect(excess.contains("1 more anon_inode:inotify descriptor(s)"), "\(excess)")
            #expect(excess.contains("1 more inotify watch(es)"), "\(excess)")
            [reader, writer, inotify].forEach { close($0) }
            #expect(ResourceCensus.take().excess(over: baseline).isEmpty)
        }
    }
}
