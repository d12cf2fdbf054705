import Glibc
import Testing

/// Runs the project's executables (timerfires, the examples) from tests: they are built by
/// `make examples` (see `ExecutableLocator`).
enum ToolProcess {
    /// What a finished run printed, and how it ended.
    struct Outcome {
        var status: Int32
        var standardOutput: String
        var standardError: String
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// The path of a built executable (a tool or an example: `ExecutableLocator` says where
    /// they are looked for); the test fails if it is missing.
    static func executable(_ name: String) throws -> String {
        try ExecutableLocator.path(of: name)
    }

    /// Starts `path` with `arguments` and this process's environment plus `environment`
    /// (`NAME=value` entries); its output goes to pipes when `capture`.
    static func spawn(_ path: String, _ arguments: [String],
                      output: (Int32, Int32)? = nil, environment: [String] = []) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let (standardOutput, standardError) = output {
            posix_spawn_file_actions_adddup2(&actions, standardOutput, 1)
            posix_spawn_file_actions_adddup2(&actions, standardError, 2)
        }
        let words = [path] + arguments
        let argv: [UnsafeMutablePointer<CChar>?] = words.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let result: Int32
        if environment.isEmpty {
            result = posix_spawn(&pid, path, &actions, nil, argv, environ)
        } else {
            var inherited: [UnsafeMutablePointer<CChar>?] = []
            var entry = environ
            while let variable = entry.pointee {
                inherited.append(variable)
                entry += 1
            }
            let added: [UnsafeMutablePointer<CChar>?] = environment.map { strdup($0) }
            defer { added.forEach { free($0) } }
            result = posix_spawn(&pid, path, &actions, nil, argv, inherited + added + [nil])
        }
        guard result == 0 else { throw Failure(description: "posix_spawn \(path): \(String(cString: strerror(result)))") }
        return pid
    }

    /// Runs `path` to completion (at most `timeoutSeconds`, then it is killed) and
    /// returns its output.
    static func run(_ path: String, _ arguments: [String], timeoutSeconds: Int = 60,
                    environment: [String] = []) throws -> Outcome {
        var outPipe: [Int32] = [0, 0]
        var errPipe: [Int32] = [0, 0]
        // Close-on-exec (set right after: the suite runs one test at a time), so that no
        // other child inherits the write ends and holds the pipes open.
        guard pipe(&outPipe) == 0, pipe(&errPipe) == 0 else {
            throw Failure(description: "pipe failed: errno \(errno)")
        }
        for descriptor in outPipe + errPipe { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        let pid: pid_t
        do {
            pid = try spawn(path, arguments, output: (outPipe[1], errPipe[1]), environment: environment)
        } catch {
            [outPipe[0], outPipe[1], errPipe[0], errPipe[1]].forEach { close($0) }
            throw error
        }
        close(outPipe[1])
        close(errPipe[1])
        defer {
            close(outPipe[0])
            close(errPipe[0])
        }
        var collected: [Int32: [UInt8]] = [outPipe[0]: [], errPipe[0]: []]
        var open = [outPipe[0], errPipe[0]]
        let deadline = monotonicNanoseconds() + UInt64(timeoutSeconds) * 1_000_000_000
        var timedOut = false
        while !open.isEmpty {
            if monotonicNanoseconds() > deadline {
                timedOut = true
                kill(pid, SIGKILL)
                break
            }
            var descriptors = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&descriptors, nfds_t(descriptors.count), 100)
            if ready <= 0 { continue }
            for descriptor in descriptors where descriptor.revents != 0 {
                var chunk = [UInt8](repeating: 0, count: 65_536)
                let count = chunk.withUnsafeMutableBytes { read(descriptor.fd, $0.baseAddress, $0.count) }
                if count > 0 {
                    collected[descriptor.fd]! += chunk[0..<count]
                } else if count == 0 || errno != EINTR {
                    open.removeAll { $0 == descriptor.fd }
                }
            }
        }
        let status = reap(pid)
        if timedOut { throw Failure(description: "\(path) \(arguments) did not finish within \(timeoutSeconds) s") }
        return Outcome(status: status,
                       standardOutput: String(decoding: collected[outPipe[0]]!, as: UTF8.self),
                       standardError: String(decoding: collected[errPipe[0]]!, as: UTF8.self))
    }

    /// Waits for `pid` to end; its exit status (128 + signal when killed).
    static func reap(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}

/// A parsed JSON document, for checking the reports' schema.
indirect enum ParsedJSON: Equatable {
    case object([String: ParsedJSON])
    case array([ParsedJSON])
    case string(String)
    case number(Double)
    case bool(Bool)
    case null

    subscript(key: String) -> ParsedJSON? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    var number: Double? {
        if case .number(let value) = self { return value }
        return nil
    }

    var integer: Int? {
        number.flatMap { $0 == $0.rounded() ? Int($0) : nil }
    }

    var string: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    var array: [ParsedJSON]? {
        if case .array(let value) = self { return value }
        return nil
    }

    var keys: Set<String> {
        if case .object(let members) = self { return Set(members.keys) }
        return []
    }

    struct SyntaxError: Error, CustomStringConvertible {
        let description: String
    }

    /// Parses RFC 8259 JSON (the subset the reports use: no \u escapes beyond ASCII).
    static func parse(_ text: String) throws -> ParsedJSON {
        var parser = Parser(bytes: Array(text.utf8))
        let value = try parser.value()
        parser.skipSpace()
        guard parser.index == parser.bytes.count else { throw SyntaxError(description: "trailing text at \(parser.index)") }
        return value
    }

    private struct Parser {
        let bytes: [UInt8]
        var index = 0

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x0a, 0x0d, 0x09].contains(bytes[index]) { index += 1 }
        }

        mutating func expect(_ literal: String) throws {
            let expected = Array(literal.utf8)
            guard index + expected.count <= bytes.count, Array(bytes[index..<index + expected.count]) == expected else {
                throw SyntaxError(description: "expected \(literal) at \(index)")
            }
            index += expected.count
        }

        mutating func value() throws -> ParsedJSON {
            skipSpace()
            guard index < bytes.count else { throw SyntaxError(description: "unexpected end") }
            switch bytes[index] {
            case UInt8(ascii: "{"):
                index += 1
                var members: [String: ParsedJSON] = [:]
                skipSpace()
                if bytes[index] == UInt8(ascii: "}") { index += 1; return .object(members) }
                while true {
                    skipSpace()
                    guard case .string(let key) = try value() else { throw SyntaxError(description: "key expected at \(index)") }
                    skipSpace()
                    try expect(":")
                    members[key] = try value()
                    skipSpace()
                    if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                    try expect("}")
                    return .object(members)
                }
            case UInt8(ascii: "["):
                index += 1
                var elements: [ParsedJSON] = []
                skipSpace()
                if bytes[index] == UInt8(ascii: "]") { index += 1; return .array(elements) }
                while true {
                    elements.append(try value())
                    skipSpace()
                    if bytes[index] == UInt8(ascii: ",") { index += 1; continue }
                    try expect("]")
                    return .array(elements)
                }
            case UInt8(ascii: "\""):
                index += 1
                var scalars: [UInt8] = []
                while bytes[index] != UInt8(ascii: "\"") {
                    if bytes[index] == UInt8(ascii: "\\") {
                        index += 1
                        let escaped: [UInt8: UInt8] = [0x6e: 0x0a, 0x74: 0x09, 0x72: 0x0d]
                        if bytes[index] == UInt8(ascii: "u") {
                            let hex = String(decoding: bytes[index + 1...index + 4], as: UTF8.self)
                            scalars.append(UInt8(UInt32(hex, radix: 16) ?? 0x3f))
                            index += 4
                        } else {
                            scalars.append(escaped[bytes[index]] ?? bytes[index])
                        }
                    } else {
                        scalars.append(bytes[index])
                    }
                    index += 1
                }
                index += 1
                return .string(String(decoding: scalars, as: UTF8.self))
            case UInt8(ascii: "t"):
                try expect("true")
                return .bool(true)
            case UInt8(ascii: "f"):
                try expect("false")
                return .bool(false)
            case UInt8(ascii: "n"):
                try expect("null")
                return .null
            default:
                let start = index
                while index < bytes.count, "+-0123456789.eE".utf8.contains(bytes[index]) { index += 1 }
                guard let number = Double(String(decoding: bytes[start..<index], as: UTF8.self)) else {
                    throw SyntaxError(description: "bad number at \(start)")
                }
                return .number(number)
            }
        }
    }
}
