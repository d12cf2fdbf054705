/// A JSON document, built in code and rendered as text (the runtime has no Foundation).
indirect enum JSONValue: Equatable, Sendable {
    case object([(String, JSONValue)])
    case array([JSONValue])
    case string(String)
    case number(Double)
    case integer(Int)
    case bool(Bool)
    case null

    static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        lhs.rendered() == rhs.rendered()
    }

    /// Compact JSON text, or indented with two spaces per level.
    func rendered(indented: Bool = false) -> String {
        var text = ""
        render(into: &text, indent: indented ? 0 : nil)
        return text
    }

    private func render(into text: inout String, indent: Int?) {
        let newline = indent.map { "\n" + String(repeating: "  ", count: $0 + 1) } ?? ""
        let closing = indent.map { "\n" + String(repeating: "  ", count: $0) } ?? ""
        let inner = indent.map { $0 + 1 }
        switch self {
        case .object(let members):
            if members.isEmpty { text += "{}"; return }
            text += "{"
            for (index, (key, value)) in members.enumerated() {
                text += (index == 0 ? "" : ",") + newline
                JSONValue.string(key).render(into: &text, indent: nil)
                text += indent == nil ? ":" : ": "
                value.render(into: &text, indent: inner)
            }
            text += closing + "}"
        case .array(let elements):
            if elements.isEmpty { text += "[]"; return }
            text += "["
            for (index, value) in elements.enumerated() {
                text += (index == 0 ? "" : ",") + newline
                value.render(into: &text, indent: inner)
            }
            text += closing + "]"
        case .string(let string):
            text += "\""
            for scalar in string.unicodeScalars {
                switch scalar {
                case "\"": text += "\\\""
                case "\\": text += "\\\\"
                case "\n": text += "\\n"
                case "\t": text += "\\t"
                case "\r": text += "\\r"
                default:
                    if scalar.value < 0x20 {
                        let hex = String(scalar.value, radix: 16)
                        text += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                    } else {
                        text.unicodeScalars.append(scalar)
                    }
                }
            }
            text += "\""
        case .number(let value):
            text += value.isFinite ? "\(value)" : "null"
        case .integer(let value):
            text += "\(value)"
        case .bool(let value):
            text += value ? "true" : "false"
        case .null:
            text += "null"
        }
    }
}
