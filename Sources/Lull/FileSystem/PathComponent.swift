/// One name of a path (no "/"), as the tree watcher keeps it for each directory: the
/// String of `PathEncoding`'s lossless form, which holds a name of up to 15 UTF-8 bytes
/// inline (nearly every directory name) and so costs 16 bytes and no allocation. Names are
/// compared byte for byte, never as canonically equivalent Strings (NFC and NFD "é" are two
/// names).
struct PathComponent: Equatable, Sendable {
    private let encoded: String

    init(_ bytes: some Collection<UInt8>) {
        encoded = PathEncoding.string(of: bytes)
    }

    /// The root's record has no name of its own.
    static let none = PathComponent([UInt8]())

    /// The same bytes (not canonical equivalence, which String's == is).
    static func == (lhs: PathComponent, rhs: PathComponent) -> Bool {
        lhs.encoded.utf8.elementsEqual(rhs.encoded.utf8)
    }

    /// Appends the name's bytes to `bytes`.
    func append(to bytes: inout [UInt8]) {
        // The escapes' UTF-8 all begin with 0xEE; without one the UTF-8 is the name.
        if encoded.utf8.contains(0xEE) {
            bytes.append(contentsOf: PathEncoding.bytes(of: encoded))
        } else {
            bytes.append(contentsOf: encoded.utf8)
        }
    }
}
