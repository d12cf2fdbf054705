/// The lossless String form of a file name's bytes, for paths that are not UTF-8.
///
/// Linux allows any byte but "/" and NUL in a name; a Swift String holds only Unicode. The
/// bytes are decoded as UTF-8 where they are valid, and every byte that is not part of a
/// valid sequence becomes one code point of the Private Use Area, U+EF00 + byte (U+EF80 to
/// U+EFFF, the mapping of MirBSD's OPTU-8). Those code points themselves, spelled in valid
/// UTF-8 in a name, are taken as invalid bytes too (each of their three bytes escaped), so
/// every code point of that range in a decoded String stands for exactly one byte: decoding
/// is injective and `bytes(of: string(of: b)) == b` for every byte sequence `b`.
///
/// A name that is valid UTF-8 outside that range (nearly every name) decodes to the String
/// one expects, with its bytes kept as they are (no normalization).
enum PathEncoding {
    /// The first code point of the escapes: byte b (0x80...0xFF) is U+EF00 + b.
    private static let escapeBase: UInt32 = 0xEF00
    private static let escapes: ClosedRange<UInt32> = 0xEF80...0xEFFF

    /// The String a path's bytes are reported as.
    static func string(of bytes: some Collection<UInt8>) -> String {
        if !bytes.contains(where: { $0 >= 0x80 }) { return String(decoding: bytes, as: UTF8.self) }
        let bytes = Array(bytes)
        var scalars = String.UnicodeScalarView()
        var index = 0
        while index < bytes.count {
            if let (scalar, length) = validScalar(in: bytes, at: index), !escapes.contains(scalar.value) {
                scalars.append(scalar)
                index += length
            } else {
                scalars.append(Unicode.Scalar(escapeBase + UInt32(bytes[index]))!)
                index += 1
            }
        }
        return String(scalars)
    }

    /// The bytes a String from `string(of:)` stands for (a String without escapes: its UTF-8).
    static func bytes(of string: String) -> [UInt8] {
        // The escapes' UTF-8 all begin with 0xEE.
        guard string.utf8.contains(0xEE) else { return Array(string.utf8) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(string.utf8.count)
        for scalar in string.unicodeScalars {
            if escapes.contains(scalar.value) {
                bytes.append(UInt8(scalar.value - escapeBase))
            } else {
                bytes.append(contentsOf: UTF8.encode(scalar)!)
            }
        }
        return bytes
    }

    /// The scalar of the well-formed UTF-8 sequence at `index` (Unicode table 3-7) and its
    /// length, or nil when the byte there does not begin one.
    private static func validScalar(in bytes: [UInt8], at index: Int) -> (Unicode.Scalar, Int)? {
        let lead = bytes[index]
        if lead < 0x80 { return (Unicode.Scalar(lead), 1) }
        let length: Int
        var second: ClosedRange<UInt8> = 0x80...0xBF
        var value: UInt32
        switch lead {
        case 0xC2...0xDF: length = 2; value = UInt32(lead & 0x1F)
        case 0xE0: length = 3; second = 0xA0...0xBF; value = UInt32(lead & 0x0F)
        case 0xE1...0xEC, 0xEE...0xEF: length = 3; value = UInt32(lead & 0x0F)
        case 0xED: length = 3; second = 0x80...0x9F; value = UInt32(lead & 0x0F)
        case 0xF0: length = 4; second = 0x90...0xBF; value = UInt32(lead & 0x07)
        case 0xF1...0xF3: length = 4; value = UInt32(lead & 0x07)
        case 0xF4: length = 4; second = 0x80...0x8F; value = UInt32(lead & 0x07)
        default: return nil
        }
        guard index + length <= bytes.count else { return nil }
        for offset in 1..<length {
            let byte = bytes[index + offset]
            guard (offset == 1 ? second : 0x80...0xBF).contains(byte) else { return nil }
            value = value << 6 | UInt32(byte & 0x3F)
        }
        return Unicode.Scalar(value).map { ($0, length) }
    }
}
