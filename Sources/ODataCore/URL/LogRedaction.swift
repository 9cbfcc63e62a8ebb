/// What may be logged of a request above `trace` level.
public enum LogRedaction {
    /// `url` without what may hold personal data or secrets: key predicates and other
    /// parenthesized parts of the path (also when their parentheses or quotes are
    /// percent-encoded), query option values, the fragment, and credentials in the authority.
    /// `https://h/odata/Customers('ALFKI')/Orders?$filter=City eq 'Rome'&$top=5` gives
    /// `https://h/odata/Customers(…)/Orders?$filter=…&$top=…`.
    ///
    /// A query option without `=` is kept when it starts with `$` and becomes `…` otherwise.
    /// Not covered: keys written as path segments (`Customers/ALFKI`). One pass, linear in the
    /// URL's length.
    public static func url(_ url: String) -> String {
        let bytes = Array(url.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        // `scheme://authority`: credentials before an `@` are dropped.
        if let schemeEnd = schemeLength(bytes) {
            out += bytes[0..<schemeEnd]
            index = schemeEnd
            let authorityEnd = bytes[index...].firstIndex { $0 == slash || $0 == question || $0 == hash } ?? bytes.count
            if let at = bytes[index..<authorityEnd].lastIndex(of: atSign) { index = at + 1 }
        }
        var depth = 0
        var quoted = false
        while index < bytes.count {
            let (character, width) = decoded(bytes, at: index)
            if depth > 0 {
                if character == quote {
                    quoted.toggle()
                } else if !quoted, character == open {
                    depth += 1
                } else if !quoted, character == close {
                    depth -= 1
                    if depth == 0 { out.append(close) }
                }
                index += width
                continue
            }
            if character == open {
                out += Array("(…".utf8)
                depth = 1
                index += width
                continue
            }
            if width == 1, character == question {
                out.append(question)
                out += redactedQuery(bytes[(index + 1)...])
                break
            }
            if width == 1, character == hash { break }
            out += bytes[index..<(index + width)]
            index += width
        }
        if depth > 0 { out.append(close) }
        return String(decoding: out, as: UTF8.self)
    }

    private static let slash = UInt8(ascii: "/"), question = UInt8(ascii: "?"), hash = UInt8(ascii: "#")
    private static let atSign = UInt8(ascii: "@"), quote = UInt8(ascii: "'"), ampersand = UInt8(ascii: "&")
    private static let open = UInt8(ascii: "("), close = UInt8(ascii: ")"), equals = UInt8(ascii: "=")

    /// The length of `scheme://` when the URL starts with one (`[A-Za-z][A-Za-z0-9+.-]*://`).
    private static func schemeLength(_ bytes: [UInt8]) -> Int? {
        guard let first = bytes.first, isLetter(first) else { return nil }
        var index = 1
        while index < bytes.count, isLetter(bytes[index]) || isDigit(bytes[index]) || "+.-".utf8.contains(bytes[index])
        {
            index += 1
        }
        guard index + 2 < bytes.count, bytes[index] == UInt8(ascii: ":"), bytes[index + 1] == slash,
            bytes[index + 2] == slash
        else { return nil }
        return index + 3
    }

    private static func isLetter(_ byte: UInt8) -> Bool { (byte | 0x20) >= 0x61 && (byte | 0x20) <= 0x7A }
    private static func isDigit(_ byte: UInt8) -> Bool { byte >= 0x30 && byte <= 0x39 }

    /// The byte at `index`, with `%28`, `%29` and `%27` (any case) read as the character they
    /// encode, and how many bytes it took.
    private static func decoded(_ bytes: [UInt8], at index: Int) -> (UInt8, Int) {
        guard bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count, bytes[index + 1] == UInt8(ascii: "2") else {
            return (bytes[index], 1)
        }
        switch bytes[index + 2] | 0x20 {
        case UInt8(ascii: "8"): return (open, 3)
        case UInt8(ascii: "9"): return (close, 3)
        case UInt8(ascii: "7"): return (quote, 3)
        default: return (bytes[index], 1)
        }
    }

    /// `name=value&…` with each value as `…`; the fragment is dropped.
    private static func redactedQuery(_ query: ArraySlice<UInt8>) -> [UInt8] {
        let end = query.firstIndex(of: hash) ?? query.endIndex
        var parts: [[UInt8]] = []
        for option in query[query.startIndex..<end].split(separator: ampersand, omittingEmptySubsequences: false) {
            if let equalsAt = option.firstIndex(of: equals) {
                parts.append(Array(option[option.startIndex..<equalsAt]) + Array("=…".utf8))
            } else if option.first == UInt8(ascii: "$") || option.isEmpty {
                parts.append(Array(option))
            } else {
                parts.append(Array("…".utf8))
            }
        }
        return Array(parts.joined(separator: [ampersand]))
    }
}
