/// Makes a `StressPlan` from a seed: 2 to 4 threads, 2 to 5 slots of kinds drawn from
/// the mix, 8 to 40 steps per thread. Each slot's first source is created early by a
/// random thread; the other operations are drawn by weight, stimuli most often (they make
/// events flow while the lifecycle calls race).
enum StressGenerator {
    static func plan(seed: UInt64, mix: StressMix) -> StressPlan {
        let kinds = mix.kinds
        precondition(!kinds.isEmpty, "no source kinds to stress")
        var random = StressRandom(seed: seed)
        let threads = random.pick(2...4)
        let slots = (0..<random.pick(2...5)).map { _ in kinds[random.pick(0...(kinds.count - 1))] }
        let endings = slots.map { _ in random.weighted([(3, StressEnding.cancel), (1, .drop)]) }
        var perThread: [[StressStep]] = Array(repeating: [], count: threads)
        for slot in slots.indices {
            let thread = random.pick(0...(threads - 1))
            perThread[thread].append(StressStep(thread: thread, slot: slot, operation: .create(random.byte())))
        }
        for thread in 0..<threads {
            for _ in 0..<random.pick(8...40) {
                let slot = random.pick(0...(slots.count - 1))
                perThread[thread].append(StressStep(thread: thread, slot: slot, operation: operation(&random)))
            }
        }
        for thread in 0..<threads {
            perThread[thread] = perThread[thread].compactMap { step in
                guard mix.activatedAtCreation.contains(slots[step.slot]) else { return step }
                switch step.operation {
                case .create(let parameter): return StressStep(thread: thread, slot: step.slot, operation: .createActive(parameter))
                case .activate: return nil
                default: return step
                }
            }
        }
        // Stored round-robin, so that the text of a plan reads roughly in running order.
        var steps: [StressStep] = []
        for index in 0..<(perThread.map(\.count).max() ?? 0) {
            for thread in 0..<threads where index < perThread[thread].count {
                steps.append(perThread[thread][index])
            }
        }
        return StressPlan(seed: seed, threads: threads, slots: slots, endings: endings, steps: steps)
    }

    private static func operation(_ random: inout StressRandom) -> StressOperation {
        let parameter = random.byte()
        return random.weighted([
            (3, .create(parameter)),
            (12, .activate),
            (8, .suspend),
            (10, .resume),
            (6, .cancel),
            (3, .drop),
            (6, .setEventHandler(parameter)),
            (3, .setCancelHandler(parameter)),
            (3, .setRegistrationHandler(parameter)),
            (36, .stimulate(parameter)),
            (2, .closePeer),
            (8, .pause(parameter)),
        ])
    }
}
