/// Text problems the JSON readers repair, so that one bad record from a backend does not fail a
/// whole download, but that a request body must not have: bytes that are not UTF-8, and `\\u`
/// escapes of half a surrogate pair. Both would be stored as U+FFFD, not as what was sent.
public enum JSONTextCheck {
    /// Nil when the body's text is sound, else what is wrong and where.
    public static func problem(_ bytes: [UInt8]) -> String? {
        if bytes.contains(where: { $0 >= 0x80 }), let bad = DecodedText.firstInvalidUTF8(bytes) {
            return "The body is not valid UTF-8 (byte \(bad))"
        }
        func hex4(_ at: Int) -> UInt32? { JSONReader.hex4(bytes, at) }
        var i = 0
        while i + 1 < bytes.count {
            guard bytes[i] == 0x5C else {
                i += 1
                continue
            }
            // An escape: `\uXXXX` is checked, any other escaped byte skipped (also `\\`).
            guard bytes[i + 1] == UInt8(ascii: "u"), let value = hex4(i + 2) else {
                i += 2
                continue
            }
            if (0xD800...0xDBFF).contains(value) {
                if i + 11 < bytes.count, bytes[i + 6] == 0x5C, bytes[i + 7] == UInt8(ascii: "u"),
                   let low = hex4(i + 8), (0xDC00...0xDFFF).contains(low) {
                    i += 12
                    continue
                }
                return "\\u\(String(value, radix: 16, uppercase: true)) at byte \(i) is half a surrogate pair, not a character"
            }
            if (0xDC00...0xDFFF).contains(value) {
                return "\\u\(String(value, radix: 16, uppercase: true)) at byte \(i) is half a surrogate pair, not a character"
            }
            i += 6
        }
        return nil
    }
}
