import Glibc

/// Where the tests find the programs they start as child processes.
///
/// The examples (Examples/) and the tools (Tools/) are packages of their own, so that their
/// dependencies never reach a client of the library: `swift build --build-tests` in the root
/// does not build them. `make test` builds them first (`make examples`), and the tests look
/// for a program in, in order:
/// - the directories of `LULL_EXECUTABLES_PATH` (colon-separated), when it is set;
/// - `Examples/.build/debug` and `Tools/.build/debug` of this checkout;
/// - the directory of the running test bundle (the root package's own test helpers, such as
///   `lull-priority-probe`), last, so that an example left there by an older build of the
///   root package never shadows the examples package's.
enum ExecutableLocator {
    struct Missing: Error, CustomStringConvertible {
        let description: String
    }

    /// The directories searched, in order.
    static var searchPath: [String] {
        var directories: [String] = []
        if let configured = getenv("LULL_EXECUTABLES_PATH") {
            directories += String(cString: configured).split(separator: ":").map(String.init)
        }
        let root = checkoutRoot
        directories += ["\(root)/Examples/.build/debug", "\(root)/Tools/.build/debug"]
        directories.append(testBundleDirectory)
        return directories
    }

    /// The path of the executable `name`, or an error that says how to build it.
    static func path(of name: String) throws -> String {
        for directory in searchPath {
            let candidate = "\(directory)/\(name)"
            if access(candidate, X_OK) == 0 { return candidate }
        }
        throw Missing(description: "\(name) is missing from \(searchPath.joined(separator: ", ")): "
                      + "build the examples and tools with `make examples` (or `swift build --package-path Examples` "
                      + "and `swift build --package-path Tools`)")
    }

    /// The directory that holds the running test bundle (`.build/debug`, or the scratch path's).
    static var testBundleDirectory: String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard length > 0 else { return "." }
        var path = String(decoding: buffer[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        // The test binary is .build/debug/LullPackageTests.xctest (a file, or a bundle directory).
        while let slash = path.lastIndex(of: "/") {
            path = String(path[..<slash])
            if !path.hasSuffix(".xctest") { break }
        }
        return path
    }

    /// The checkout this test file was compiled from (three levels above it).
    static var checkoutRoot: String {
        var path = #filePath
        for _ in 0..<3 {
            guard let slash = path.lastIndex(of: "/") else { return "." }
            path = String(path[..<slash])
        }
        return path
    }
}
