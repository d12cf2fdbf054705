/// What one stress case does: source slots of fixed kinds, and for each thread an ordered
/// list of public API calls on those slots. A plan is data: generated from a seed
/// (`StressGenerator`), shrunk by dropping steps (`StressShrinker`), printed and parsed as
/// one line of text (`LULL_STRESS_CASE`), and run by `StressRunner`. The threads' steps
/// interleave differently on every run: replaying a plan replays the calls, and the runner
/// runs a failing plan several times to see it fail again.
struct StressPlan: Equatable, Sendable, CustomStringConvertible {
    var seed: UInt64
    var threads: Int
    /// The kind of each slot; a slot holds at most one live source of its kind at a time.
    var slots: [StressKind]
    /// How each slot's last source ends once the threads are done (after its outstanding
    /// suspensions are resumed).
    var endings: [StressEnding]
    var steps: [StressStep]

    /// `seed=… threads=… slots=read,timer endings=cancel,drop steps=0/1/create.3 …`
    var description: String {
        "seed=\(seed) threads=\(threads) slots=\(slots.map(\.rawValue).joined(separator: ","))"
            + " endings=\(endings.map(\.rawValue).joined(separator: ","))"
            + " steps=\(steps.map(\.description).joined(separator: " "))"
    }

    /// Parses `description`; nil if the text is not a plan.
    init?(text: String) {
        var fields: [String: String] = [:]
        var stepTokens: [Substring] = []
        var inSteps = false
        for token in text.split(separator: " ") {
            if inSteps && !token.contains("=") {
                stepTokens.append(token)
                continue
            }
            let parts = token.split(separator: "=", maxSplits: 1)
            guard parts.count == 2 else { return nil }
            inSteps = parts[0] == "steps"
            if inSteps { stepTokens.append(parts[1]) } else { fields[String(parts[0])] = String(parts[1]) }
        }
        guard let seed = fields["seed"].flatMap({ UInt64($0) }),
              let threads = fields["threads"].flatMap({ Int($0) }), threads > 0,
              let slots = fields["slots"]?.split(separator: ",").map({ StressKind(rawValue: String($0)) }),
              let endings = fields["endings"]?.split(separator: ",").map({ StressEnding(rawValue: String($0)) })
        else { return nil }
        let kinds = slots.compactMap { $0 }
        let ends = endings.compactMap { $0 }
        let parsed = stepTokens.compactMap { StressStep(text: $0) }
        guard kinds.count == slots.count, ends.count == kinds.count, parsed.count == stepTokens.count,
              parsed.allSatisfy({ $0.thread < threads && $0.slot < kinds.count })
        else { return nil }
        self.init(seed: seed, threads: threads, slots: kinds, endings: ends, steps: parsed)
    }

    init(seed: UInt64, threads: Int, slots: [StressKind], endings: [StressEnding], steps: [StressStep]) {
        self.seed = seed
        self.threads = threads
        self.slots = slots
        self.endings = endings
        self.steps = steps
    }

    /// The steps of one thread, in order.
    func steps(of thread: Int) -> [StressStep] {
        steps.filter { $0.thread == thread }
    }
}

/// The source kinds the harness drives.
enum StressKind: String, CaseIterable, Sendable {
    case read, write, timer, add, or, replace, signal, process
    case fileSystem = "fs"
}

/// How a slot's last source ends: cancelled and then released, or only released (the
/// runtime cancels a source the program no longer references).
enum StressEnding: String, CaseIterable, Sendable {
    case cancel, drop
}

/// One call made by one thread on one slot.
struct StressStep: Equatable, Sendable, CustomStringConvertible {
    var thread: Int
    var slot: Int
    var operation: StressOperation

    /// `thread/slot/operation`
    var description: String { "\(thread)/\(slot)/\(operation)" }

    init(thread: Int, slot: Int, operation: StressOperation) {
        self.thread = thread
        self.slot = slot
        self.operation = operation
    }

    init?(text: Substring) {
        let parts = text.split(separator: "/")
        guard parts.count == 3, let thread = Int(parts[0]), let slot = Int(parts[1]),
              let operation = StressOperation(text: parts[2]) else { return nil }
        self.init(thread: thread, slot: slot, operation: operation)
    }
}

/// A public API call (or a stimulus of what the source watches). Parameters are bytes the
/// subject interprets per kind, so every operation applies to every kind.
enum StressOperation: Equatable, Sendable, CustomStringConvertible {
    /// Makes a new source in the slot (the previous one, if any, is released).
    case create(UInt8)
    /// Makes a new source and activates it before it is put in the slot.
    case createActive(UInt8)
    case activate
    /// Only ever resumed by the thread that suspended it (`resume` without one is skipped).
    case suspend
    case resume
    case cancel
    /// Releases the slot's reference: the last one, unless another thread is mid-call.
    case drop
    case setEventHandler(UInt8)
    case setCancelHandler(UInt8)
    case setRegistrationHandler(UInt8)
    /// Merges data, schedules the timer, writes to or drains the pipe, raises the signal,
    /// ends the child, touches the file: per kind.
    case stimulate(UInt8)
    /// Closes the peer end (end of file, a broken pipe), ends the child, or replaces the
    /// watched file with a new one of the same name.
    case closePeer
    /// Sleeps the calling thread for a few microseconds, to vary interleavings.
    case pause(UInt8)

    var description: String {
        switch self {
        case .create(let value): "create.\(value)"
        case .createActive(let value): "createactive.\(value)"
        case .activate: "activate"
        case .suspend: "suspend"
        case .resume: "resume"
        case .cancel: "cancel"
        case .drop: "drop"
        case .setEventHandler(let value): "event.\(value)"
        case .setCancelHandler(let value): "cancelh.\(value)"
        case .setRegistrationHandler(let value): "registration.\(value)"
        case .stimulate(let value): "stim.\(value)"
        case .closePeer: "closepeer"
        case .pause(let value): "pause.\(value)"
        }
    }

    init?(text: Substring) {
        let parts = text.split(separator: ".")
        let value = parts.count == 2 ? UInt8(parts[1]) : nil
        switch (parts.first ?? "", value) {
        case ("create", let value?): self = .create(value)
        case ("createactive", let value?): self = .createActive(value)
        case ("activate", nil): self = .activate
        case ("suspend", nil): self = .suspend
        case ("resume", nil): self = .resume
        case ("cancel", nil): self = .cancel
        case ("drop", nil): self = .drop
        case ("event", let value?): self = .setEventHandler(value)
        case ("cancelh", let value?): self = .setCancelHandler(value)
        case ("registration", let value?): self = .setRegistrationHandler(value)
        case ("stim", let value?): self = .stimulate(value)
        case ("closepeer", nil): self = .closePeer
        case ("pause", let value?): self = .pause(value)
        default: return nil
        }
    }
}
