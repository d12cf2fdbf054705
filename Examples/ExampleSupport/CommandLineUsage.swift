#if canImport(Glibc)
import Glibc
#endif

/// The command line of an example without an argument parser, checked before it does
/// anything: `--help` (or `-h`) prints `usage` and exits 0; an argument it does not take, or
/// an option without its value, prints the problem and `usage` to standard error and exits
/// 2. `valueOptions` are the options that take a value (the next argument).
public func checkCommandLine(usage: String, valueOptions: Set<String> = []) {
    var arguments = CommandLine.arguments.dropFirst()
    while let argument = arguments.popFirst() {
        if argument == "--help" || argument == "-h" {
            print(usage)
            exit(0)
        }
        guard valueOptions.contains(argument) else { usageError("unknown argument '\(argument)'", usage) }
        guard arguments.popFirst() != nil else { usageError("\(argument) needs a value", usage) }
    }
}

private func usageError(_ problem: String, _ usage: String) -> Never {
    let program = CommandLine.arguments.first.map { String($0.split(separator: "/").last ?? "") } ?? ""
    var text = "\(program): \(problem)\n\(usage)\n"
    text.withUTF8 { bytes in _ = write(2, bytes.baseAddress, bytes.count) }
    exit(2)
}
