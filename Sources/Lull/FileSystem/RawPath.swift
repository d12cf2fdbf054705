/// A path as the kernel has it: bytes, any but NUL, components split by "/". Linux names
/// need not be UTF-8, and two different names can be canonically equivalent Strings (NFC
/// and NFD "é"), so the tree watcher keeps, compares and hands to system calls the bytes,
/// and makes a `String` only for what it reports (`PathEncoding`).
struct RawPath: Hashable, Sendable {
    /// The bytes, without a terminating NUL.
    private(set) var bytes: [UInt8]

    init(bytes: some Sequence<UInt8>) {
        self.bytes = Array(bytes)
    }

    /// The path a String names, in `PathEncoding`'s lossless form.
    init(_ string: String) {
        bytes = PathEncoding.bytes(of: string)
    }

    static let root = RawPath(bytes: [slash])
    private static let slash = UInt8(ascii: "/")

    /// The String the path is reported as (lossless: `RawPath(path.string) == path`).
    var string: String { PathEncoding.string(of: bytes) }

    /// `name` appended as a component.
    func appending(_ name: some Collection<UInt8>) -> RawPath {
        var result = self
        if bytes.last != Self.slash { result.bytes.append(Self.slash) }
        result.bytes.append(contentsOf: name)
        return result
    }

    /// Appends `name` as a component.
    mutating func append(_ name: PathComponent) {
        if bytes.last != Self.slash { bytes.append(Self.slash) }
        name.append(to: &bytes)
    }

    /// The directory that holds the last component; nil for "/" and for a relative name.
    var parent: RawPath? {
        guard bytes != [Self.slash], let slash = bytes.lastIndex(of: Self.slash) else { return nil }
        return slash == 0 ? .root : RawPath(bytes: bytes[..<slash])
    }

    /// The last component ("/" for the root).
    var lastComponent: ArraySlice<UInt8> {
        guard bytes != [Self.slash], let slash = bytes.lastIndex(of: Self.slash) else { return bytes[...] }
        return bytes[(slash + 1)...]
    }

    /// Whether this is `ancestor` or a path below it (component-wise: "/a/bc" is not below "/a/b").
    func isWithin(_ ancestor: RawPath) -> Bool {
        guard bytes.starts(with: ancestor.bytes) else { return false }
        return bytes.count == ancestor.bytes.count || ancestor.bytes.last == Self.slash
            || bytes[ancestor.bytes.count] == Self.slash
    }

    /// The path one component below `ancestor` on the way to this one.
    func nextStep(below ancestor: RawPath) -> RawPath {
        let rest = bytes.dropFirst(ancestor.bytes.count).drop { $0 == Self.slash }
        return ancestor.appending(rest.prefix { $0 != Self.slash })
    }

    /// The path as a NUL-terminated C string, for a system call.
    func withCString<Result>(_ body: (UnsafePointer<CChar>) throws -> Result) rethrows -> Result {
        try (bytes + [0]).withUnsafeBufferPointer { buffer in
            try buffer.withMemoryRebound(to: CChar.self) { try body($0.baseAddress!) }
        }
    }
}
