/// The stress generator's source of randomness: the test target's SplitMix64
/// (`TimerTestKit.Random`), so a seed names one plan on every machine and every run (the
/// standard library's generator is neither seedable nor stable across releases), with the
/// picks the generator makes.
struct StressRandom: RandomNumberGenerator {
    private var base: TimerTestKit.Random

    init(seed: UInt64) {
        base = TimerTestKit.Random(seed: seed)
    }

    mutating func next() -> UInt64 {
        base.next()
    }

    /// A value in `range`.
    mutating func pick(_ range: ClosedRange<Int>) -> Int {
        Int.random(in: range, using: &self)
    }

    /// One of `choices`, each as likely as its weight.
    mutating func weighted<Choice>(_ choices: [(weight: Int, choice: Choice)]) -> Choice {
        var roll = pick(0...(choices.reduce(0) { $0 + $1.weight } - 1))
        for entry in choices {
            if roll < entry.weight { return entry.choice }
            roll -= entry.weight
        }
        return choices[choices.count - 1].choice
    }

    mutating func byte() -> UInt8 {
        UInt8(truncatingIfNeeded: next())
    }
}
