/// One line of the kernel's text trace (tracefs `trace_pipe`), as `timerfires` reads it for a
/// process that is not (or not only) a Lull program.
///
/// The line's header names the task that was current on the CPU, its thread group when the
/// instance records it (`options/record-tgid`), the CPU, the context flags (`irq-info`) and
/// the timestamp; the event's own fields follow. Only the events the wake-up attribution
/// uses are decoded; any other line is nil.
public struct KernelTraceLine: Equatable, Sendable {
    /// The task current on the CPU when the event fired (in an interrupt, whoever it interrupted).
    public var task: String
    public var tid: Int32
    /// The current task's thread group (its process), when the trace records it.
    public var tgid: Int32?
    public var cpu: Int
    /// The event fired in a hard interrupt (or an NMI).
    public var inHardInterrupt: Bool
    /// The event fired in a soft interrupt.
    public var inSoftInterrupt: Bool
    /// The trace clock's time in nanoseconds (the text has microseconds).
    public var time: UInt64
    public var event: Event

    /// The events the attribution uses.
    public enum Event: Equatable, Sendable {
        /// An hrtimer armed: it may fire anywhere in [softExpires, expires] of its clock base.
        case hrtimerStart(timer: String, function: String, expires: Int64, softExpires: Int64)
        /// An hrtimer's callback starts; `now` is its clock base's time.
        case hrtimerExpireEntry(timer: String, function: String, now: Int64)
        case hrtimerExpireExit(timer: String)
        /// A timer-wheel timer armed (jiffies resolution).
        case timerStart(timer: String, function: String)
        case timerExpireEntry(timer: String, function: String)
        case timerExpireExit(timer: String)
        case irqHandlerEntry(irq: Int, name: String)
        case irqHandlerExit(irq: Int)
        case softirqEntry(action: String)
        case softirqExit(action: String)
        /// `sched_waking` (in the waker's context) or `sched_wakeup`.
        case waking(task: String, tid: Int32, isWakeup: Bool)
        /// A context switch; `previousState` is "R" or "R+" when the task was preempted.
        case contextSwitch(previousTask: String, previousTid: Int32, previousState: String,
                           nextTask: String, nextTid: Int32)
        case syscallEnter(number: Int)
        case syscallExit(number: Int)
        /// The ring buffer dropped events on this CPU (`CPU:1 [LOST 12 EVENTS]`).
        case lost(count: Int)
    }

    public init(task: String, tid: Int32, tgid: Int32?, cpu: Int, inHardInterrupt: Bool, inSoftInterrupt: Bool,
                time: UInt64, event: Event) {
        self.task = task
        self.tid = tid
        self.tgid = tgid
        self.cpu = cpu
        self.inHardInterrupt = inHardInterrupt
        self.inSoftInterrupt = inSoftInterrupt
        self.time = time
        self.event = event
    }

    /// Parses one line of trace text; nil for comments, blank lines and events not used.
    public init?(_ text: Substring) {
        let bytes = Array(text.utf8)
        if let lost = KernelTraceLine.lostEvents(bytes) {
            self.init(task: "", tid: 0, tgid: nil, cpu: lost.cpu, inHardInterrupt: false, inSoftInterrupt: false,
                      time: 0, event: .lost(count: lost.count))
            return
        }
        guard let header = KernelTraceLine.header(bytes) else { return nil }
        guard let event = KernelTraceLine.event(name: header.eventName, fields: header.fields) else { return nil }
        self.init(task: header.task, tid: header.tid, tgid: header.tgid, cpu: header.cpu,
                  inHardInterrupt: header.hardInterrupt, inSoftInterrupt: header.softInterrupt,
                  time: header.time, event: event)
    }

    private struct Header {
        var task: String
        var tid: Int32
        var tgid: Int32?
        var cpu: Int
        var hardInterrupt: Bool
        var softInterrupt: Bool
        var time: UInt64
        var eventName: String
        var fields: String
    }

    /// `comm-pid (tgid) [cpu] flags seconds.micros: event: fields`; the tgid group and the
    /// flags are optional. The CPU field is the first "[digits]" after the task.
    private static func header(_ bytes: [UInt8]) -> Header? {
        var index = 0
        while index < bytes.count, bytes[index] == UInt8(ascii: " ") { index += 1 }
        guard index < bytes.count, bytes[index] != UInt8(ascii: "#") else { return nil }
        let start = index
        // The CPU bracket: " [" digits "] ".
        var open: Int?
        var scan = start
        while scan + 2 < bytes.count {
            if bytes[scan] == UInt8(ascii: " "), bytes[scan + 1] == UInt8(ascii: "["), isDigit(bytes[scan + 2]) {
                var close = scan + 2
                while close < bytes.count, isDigit(bytes[close]) { close += 1 }
                if close < bytes.count, bytes[close] == UInt8(ascii: "]") { open = scan; break }
            }
            scan += 1
        }
        guard let open else { return nil }
        // Before it: "comm-pid", then optionally "(tgid)" or "(-------)".
        var taskEnd = open
        while taskEnd > start, bytes[taskEnd - 1] == UInt8(ascii: " ") { taskEnd -= 1 }
        var tgid: Int32?
        if taskEnd > start, bytes[taskEnd - 1] == UInt8(ascii: ")"),
           let paren = bytes[start..<taskEnd].lastIndex(of: UInt8(ascii: "(")) {
            let inside = String(decoding: bytes[(paren + 1)..<(taskEnd - 1)], as: UTF8.self)
            tgid = Int32(inside.trimmingSpaces())
            taskEnd = paren
            while taskEnd > start, bytes[taskEnd - 1] == UInt8(ascii: " ") { taskEnd -= 1 }
        }
        guard let dash = bytes[start..<taskEnd].lastIndex(of: UInt8(ascii: "-")),
              let tid = Int32(String(decoding: bytes[(dash + 1)..<taskEnd], as: UTF8.self)) else { return nil }
        let task = String(decoding: bytes[start..<dash], as: UTF8.self)
        var cursor = open + 2
        var cpu = 0
        while cursor < bytes.count, isDigit(bytes[cursor]) {
            cpu = cpu * 10 + Int(bytes[cursor] - UInt8(ascii: "0"))
            cursor += 1
            guard cpu < 1 << 20 else { return nil }
        }
        cursor += 1  // "]"
        // The rest: [flags] timestamp ": " event ": " fields, scanned as bytes.
        func skipSpaces() { while cursor < bytes.count, bytes[cursor] == UInt8(ascii: " ") { cursor += 1 } }
        func word() -> Range<Int> {
            skipSpaces()
            let begin = cursor
            while cursor < bytes.count, bytes[cursor] != UInt8(ascii: " ") { cursor += 1 }
            return begin..<cursor
        }
        var first = word()
        guard !first.isEmpty else { return nil }
        var hard = false
        var soft = false
        if bytes[first.upperBound - 1] != UInt8(ascii: ":") {
            // The context flags ("d.h2."): the third says hard or soft interrupt (or NMI).
            if first.count >= 3 {
                let context = bytes[first.lowerBound + 2]
                hard = context == UInt8(ascii: "h") || context == UInt8(ascii: "H")
                    || context == UInt8(ascii: "z") || context == UInt8(ascii: "Z")
                soft = context == UInt8(ascii: "s")
            }
            first = word()
        }
        guard first.count >= 2, bytes[first.upperBound - 1] == UInt8(ascii: ":"),
              let time = parseTimestamp(bytes[first.lowerBound..<(first.upperBound - 1)]) else { return nil }
        let name = word()
        guard name.count >= 2, bytes[name.upperBound - 1] == UInt8(ascii: ":") else { return nil }
        skipSpaces()
        var fieldsEnd = bytes.count
        while fieldsEnd > cursor, bytes[fieldsEnd - 1] == UInt8(ascii: " ") || bytes[fieldsEnd - 1] == UInt8(ascii: "\r") {
            fieldsEnd -= 1
        }
        return Header(task: task, tid: tid, tgid: tgid, cpu: cpu, hardInterrupt: hard, softInterrupt: soft, time: time,
                      eventName: String(decoding: bytes[name.lowerBound..<(name.upperBound - 1)], as: UTF8.self),
                      fields: String(decoding: bytes[cursor..<max(cursor, fieldsEnd)], as: UTF8.self))
    }

    private static func event(name: String, fields: String) -> Event? {
        let values = FieldReader(fields)
        switch name {
        case "hrtimer_start":
            guard let timer = values["hrtimer"], let function = values["function"],
                  let expires = values["expires"].flatMap({ Int64($0) }),
                  let soft = values["softexpires"].flatMap({ Int64($0) }) else { return nil }
            return .hrtimerStart(timer: timer, function: function, expires: expires, softExpires: soft)
        case "hrtimer_expire_entry":
            guard let timer = values["hrtimer"], let function = values["function"],
                  let now = values["now"].flatMap({ Int64($0) }) else { return nil }
            return .hrtimerExpireEntry(timer: timer, function: function, now: now)
        case "hrtimer_expire_exit":
            guard let timer = values["hrtimer"] else { return nil }
            return .hrtimerExpireExit(timer: timer)
        case "timer_start":
            guard let timer = values["timer"], let function = values["function"] else { return nil }
            return .timerStart(timer: timer, function: function)
        case "timer_expire_entry":
            guard let timer = values["timer"], let function = values["function"] else { return nil }
            return .timerExpireEntry(timer: timer, function: function)
        case "timer_expire_exit":
            guard let timer = values["timer"] else { return nil }
            return .timerExpireExit(timer: timer)
        case "irq_handler_entry":
            guard let irq = values["irq"].flatMap({ Int($0) }) else { return nil }
            return .irqHandlerEntry(irq: irq, name: values["name"] ?? "irq \(irq)")
        case "irq_handler_exit":
            guard let irq = values["irq"].flatMap({ Int($0) }) else { return nil }
            return .irqHandlerExit(irq: irq)
        case "softirq_entry", "softirq_exit":
            // "vec=3 [action=NET_RX]"
            guard let action = values["[action"].map({ $0.hasSuffix("]") ? String($0.dropLast()) : $0 })
                ?? values["vec"] else { return nil }
            return name == "softirq_entry" ? .softirqEntry(action: action) : .softirqExit(action: action)
        case "sched_waking", "sched_wakeup":
            guard let tid = values.value(of: "pid", after: "comm").flatMap({ Int32($0) }) else { return nil }
            return .waking(task: values.value(of: "comm", before: "pid") ?? "", tid: tid, isWakeup: name == "sched_wakeup")
        case "sched_switch":
            guard let previous = values.value(of: "prev_pid", after: "prev_comm").flatMap({ Int32($0) }),
                  let next = values.value(of: "next_pid", after: "next_comm").flatMap({ Int32($0) }),
                  let state = values.value(of: "prev_state", after: "prev_prio") else { return nil }
            return .contextSwitch(previousTask: values.value(of: "prev_comm", before: "prev_pid") ?? "",
                                  previousTid: previous, previousState: state,
                                  nextTask: values.value(of: "next_comm", before: "next_pid") ?? "", nextTid: next)
        case "sys_enter", "sys_exit":
            // "NR 230 (0, 0, ...)" and "NR 230 = 0"
            let words = fields.split(separator: " ")
            guard words.count >= 2, words[0] == "NR", let number = Int(words[1]) else { return nil }
            return name == "sys_enter" ? .syscallEnter(number: number) : .syscallExit(number: number)
        default:
            return nil
        }
    }

    /// `CPU:1 [LOST 12 EVENTS]`
    private static func lostEvents(_ bytes: [UInt8]) -> (cpu: Int, count: Int)? {
        guard let first = bytes.firstIndex(where: { $0 != UInt8(ascii: " ") }), bytes.count - first > 4,
              bytes[first..<(first + 4)].elementsEqual("CPU:".utf8) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self).trimmingSpaces()
        guard text.hasPrefix("CPU:"), text.hasSuffix("EVENTS]"),
              let open = text.firstIndex(of: "[") else { return nil }
        let cpu = Int(text[text.index(text.startIndex, offsetBy: 4)..<open].trimmingSpaces())
        let words = text[open...].split(separator: " ")
        guard words.count == 3, words[0] == "[LOST", let count = Int(words[1]) else { return nil }
        return (cpu ?? 0, count)
    }

    /// "10232.471719" (seconds and microseconds; any number of fraction digits).
    private static func parseTimestamp(_ text: ArraySlice<UInt8>) -> UInt64? {
        var seconds: UInt64 = 0
        var nanoseconds: UInt64 = 0
        var fractionDigits = -1
        for byte in text {
            if byte == UInt8(ascii: ".") {
                guard fractionDigits < 0 else { return nil }
                fractionDigits = 0
                continue
            }
            guard isDigit(byte) else { return nil }
            let digit = UInt64(byte - UInt8(ascii: "0"))
            if fractionDigits < 0 {
                let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 10)
                guard !overflow else { return nil }
                seconds = scaled + digit
            } else if fractionDigits < 9 {
                nanoseconds = nanoseconds * 10 + digit
                fractionDigits += 1
            }
        }
        guard !text.isEmpty, text.first != UInt8(ascii: ".") else { return nil }
        for _ in max(0, fractionDigits)..<9 { nanoseconds *= 10 }
        let (total, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { return nil }
        let (time, carry) = total.addingReportingOverflow(nanoseconds)
        return carry ? nil : time
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }
}

/// The `key=value` fields of an event. Values end at the next space, except where a value
/// may hold spaces (a task's name): `value(of:before:)` reads up to the key that follows it.
private struct FieldReader {
    let text: String
    /// The space-separated `key=value` words, split once.
    private let words: [Substring]

    init(_ text: String) {
        self.text = text
        words = text.split(separator: " ")
    }

    subscript(key: String) -> String? {
        for word in words where word.count > key.count && word.hasPrefix(key) {
            let equals = word.index(word.startIndex, offsetBy: key.count)
            if word[equals] == "=" { return String(word[word.index(after: equals)...]) }
        }
        return nil
    }

    /// The value of `key`, found after `previous=` so that a task name cannot fake it.
    func value(of key: String, after previous: String) -> String? {
        guard let previousRange = text.firstRange(of: previous + "=") else { return nil }
        let rest = text[previousRange.upperBound...]
        guard let range = rest.firstRange(of: " " + key + "=") else { return nil }
        return rest[range.upperBound...].prefix { $0 != " " }.description
    }

    /// The value of `key` up to " next=" (the value may hold spaces).
    func value(of key: String, before next: String) -> String? {
        guard let range = text.firstRange(of: key + "=") else { return nil }
        let rest = text[range.upperBound...]
        guard let end = rest.firstRange(of: " " + next + "=") else { return String(rest) }
        return String(rest[..<end.lowerBound])
    }
}

extension StringProtocol {
    func trimmingSpaces() -> String {
        String(self.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" || $0 == "\n" }.reversed())
    }
}
