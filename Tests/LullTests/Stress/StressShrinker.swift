/// Shrinks a failing plan to a smaller one that still fails, for a replayable report.
///
/// Drops runs of steps — halves, then quarters, down to single steps — keeping a removal
/// whenever the smaller plan still fails (a delta-debugging pass, repeated while it
/// removes something). Whether a plan fails depends on the interleaving, so `fails` runs
/// a candidate several times; the result is small, not necessarily minimal. Stops when
/// `budget` of candidate runs is spent.
enum StressShrinker {
    static func shrink(_ plan: StressPlan, budget: Int, fails: (StressPlan) -> Bool) -> StressPlan {
        var current = plan
        var spent = 0
        var removedSome = true
        while removedSome && spent < budget {
            removedSome = false
            var chunk = max(current.steps.count / 2, 1)
            while chunk >= 1 && spent < budget {
                var start = 0
                while start < current.steps.count && spent < budget {
                    var candidate = current
                    candidate.steps.removeSubrange(start..<min(start + chunk, current.steps.count))
                    spent += 1
                    if fails(candidate) {
                        current = candidate
                        removedSome = true
                    } else {
                        start += chunk
                    }
                }
                chunk /= 2
            }
        }
        return current
    }
}
