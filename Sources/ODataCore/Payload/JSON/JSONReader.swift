/// A fast byte-level JSON cursor. Readers built on it pull tokens in document order and decide
/// what each value means as they go, without building an intermediate tree.
struct JSONReader {
    let bytes: [UInt8]
    var i: Int
    /// Nesting depth, bounded to keep hostile input from exhausting the stack.
    var depth = 0
    static let maxDepth = 256
    /// The JSON path of the current position, maintained by callers that want it in errors.
    var path: [String] = []
    /// Whether `enter`/`leave` maintain `path`. Readers run without it for speed and, when
    /// they fail, run again with it to say where.
    var trackPath = true

    @inline(__always) mutating func enter(_ part: @autoclosure () -> String) {
        if trackPath { path.append(part()) }
    }

    @inline(__always) mutating func leave() {
        if trackPath { path.removeLast() }
    }

    init(_ bytes: [UInt8], start: Int = 0) {
        self.bytes = bytes
        self.i = start
    }

    // MARK: Errors

    func error(_ message: String, _ code: PayloadError.Code = .malformedJSON, at offset: Int? = nil) -> PayloadError {
        PayloadError(code, message, offset: offset ?? i, path: pathString)
    }

    var pathString: String {
        var text = ""
        for part in path {
            if part.hasPrefix("[") {
                text += part
            } else {
                text += text.isEmpty ? part : "." + part
            }
        }
        return text
    }

    // MARK: Tokens

    @inline(__always) mutating func skipWhitespace() {
        while i < bytes.count {
            let c = bytes[i]
            if c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 { i += 1 } else { break }
        }
    }

    /// The next non-whitespace byte, without consuming it.
    @inline(__always) mutating func peek() -> UInt8? {
        skipWhitespace()
        return i < bytes.count ? bytes[i] : nil
    }

    mutating func expect(_ c: UInt8) throws(PayloadError) {
        skipWhitespace()
        guard i < bytes.count else { throw error("Unexpected end of JSON, expected '\(Character(Unicode.Scalar(c)))'") }
        guard bytes[i] == c else {
            throw error("Expected '\(Character(Unicode.Scalar(c)))' but found '\(Character(Unicode.Scalar(bytes[i])))'")
        }
        i += 1
    }

    mutating func expectEnd() throws(PayloadError) {
        skipWhitespace()
        guard i >= bytes.count else { throw error("Unexpected data after the JSON value") }
    }

    /// Reads a string token and returns its unescaped text.
    mutating func readString() throws(PayloadError) -> String {
        skipWhitespace()
        guard i < bytes.count, bytes[i] == 0x22 else {
            throw error(i < bytes.count ? "Expected a string" : "Unexpected end of JSON, expected a string")
        }
        let start = i + 1
        var j = start
        // Fast path: no escapes.
        while j < bytes.count {
            let c = bytes[j]
            if c == 0x22 {
                i = j + 1
                return String(decoding: bytes[start..<j], as: UTF8.self)
            }
            if c == 0x5C { break }
            if c < 0x20 { throw error("Control character in a string", at: j) }
            j += 1
        }
        guard j < bytes.count else { throw error("Unterminated string", at: start - 1) }
        var out = Array(bytes[start..<j])
        while j < bytes.count {
            let c = bytes[j]
            if c == 0x22 {
                i = j + 1
                return String(decoding: out, as: UTF8.self)
            }
            if c < 0x20 { throw error("Control character in a string", at: j) }
            if c != 0x5C {
                out.append(c)
                j += 1
                continue
            }
            guard j + 1 < bytes.count else { break }
            let e = bytes[j + 1]
            switch e {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "/"): out.append(0x2F)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                guard let scalarValue = hex4(j + 2) else { throw error("Bad \\u escape", at: j) }
                var value = scalarValue
                var consumed = 6
                if (0xD800...0xDBFF).contains(value), j + 11 < bytes.count, bytes[j + 6] == 0x5C, bytes[j + 7] == UInt8(ascii: "u"),
                   let low = hex4(j + 8), (0xDC00...0xDFFF).contains(low) {
                    value = 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00)
                    consumed = 12
                }
                // Half a surrogate pair becomes U+FFFD here, so one bad record from a backend
                // does not fail a download; request bodies are checked first (`JSONTextCheck`).
                let scalar = Unicode.Scalar(value) ?? "\u{FFFD}"
                out.append(contentsOf: Array(String(Character(scalar)).utf8))
                j += consumed
                continue
            default:
                throw error("Bad escape in a string", at: j)
            }
            j += 2
        }
        throw error("Unterminated string", at: start - 1)
    }

    private func hex4(_ at: Int) -> UInt32? { Self.hex4(bytes, at) }

    /// The value of the four hex digits at `at` (a `\u` escape's), if they are there.
    static func hex4(_ bytes: [UInt8], _ at: Int) -> UInt32? {
        guard at + 4 <= bytes.count else { return nil }
        var value: UInt32 = 0
        for k in at..<(at + 4) {
            guard let h = Literal.hexValue(bytes[k]) else { return nil }
            value = value << 4 | UInt32(h)
        }
        return value
    }

    /// A member name: its raw byte range when it has no escapes, else its decoded text.
    struct Key {
        var range: Range<Int>
        var decoded: String?
        func string(_ bytes: [UInt8]) -> String { decoded ?? String(decoding: bytes[range], as: UTF8.self) }
    }

    /// Reads a string, returning its raw range when it holds no escapes (no allocation).
    mutating func readKey() throws(PayloadError) -> Key {
        skipWhitespace()
        guard i < bytes.count, bytes[i] == 0x22 else {
            throw error(i < bytes.count ? "Expected a string" : "Unexpected end of JSON, expected a string")
        }
        let start = i + 1
        var j = start
        while j < bytes.count {
            let c = bytes[j]
            if c == 0x22 {
                i = j + 1
                return Key(range: start..<j, decoded: nil)
            }
            if c == 0x5C || c < 0x20 { break }
            j += 1
        }
        let text = try readString()
        return Key(range: start..<start, decoded: text)
    }

    /// The byte range of a number token (validated against JSON's number grammar).
    mutating func readNumberRange() throws(PayloadError) -> Range<Int> {
        skipWhitespace()
        let start = i
        var j = i
        if j < bytes.count, bytes[j] == UInt8(ascii: "-") { j += 1 }
        let intStart = j
        while j < bytes.count, isDigit(bytes[j]) { j += 1 }
        guard j > intStart else { throw error("Expected a value", at: start) }
        if bytes[intStart] == UInt8(ascii: "0") && j - intStart > 1 { throw error("Leading zero in a number", at: start) }
        if j < bytes.count, bytes[j] == UInt8(ascii: ".") {
            j += 1
            let fractionStart = j
            while j < bytes.count, isDigit(bytes[j]) { j += 1 }
            guard j > fractionStart else { throw error("Digits expected after '.'", at: j) }
        }
        if j < bytes.count, bytes[j] == UInt8(ascii: "e") || bytes[j] == UInt8(ascii: "E") {
            j += 1
            if j < bytes.count, bytes[j] == UInt8(ascii: "+") || bytes[j] == UInt8(ascii: "-") { j += 1 }
            let expStart = j
            while j < bytes.count, isDigit(bytes[j]) { j += 1 }
            guard j > expStart else { throw error("Digits expected in the exponent", at: j) }
        }
        i = j
        return start..<j
    }

    /// Whether the bytes at the position are `word` (ASCII).
    @inline(__always) func matches(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard bytes.count - i >= count else { return false }
        let start = word.utf8Start
        for k in 0..<count where bytes[i + k] != start[k] { return false }
        return true
    }

    /// Reads `true`, `false` or `null`.
    mutating func readKeyword() throws(PayloadError) -> JSONValue {
        skipWhitespace()
        if matches("true") {
            i += 4
            return .bool(true)
        }
        if matches("false") {
            i += 5
            return .bool(false)
        }
        if matches("null") {
            i += 4
            return .null
        }
        throw error(i < bytes.count ? "Unexpected character '\(Character(Unicode.Scalar(bytes[i])))'" : "Unexpected end of JSON")
    }

    /// Reads any value into a tree.
    mutating func readValue() throws(PayloadError) -> JSONValue {
        guard let c = peek() else { throw error("Unexpected end of JSON, expected a value") }
        switch c {
        case UInt8(ascii: "{"):
            var members: [JSONValue.Member] = []
            try readObject { (reader, name) throws(PayloadError) in
                members.append(JSONValue.Member(name, try reader.readValue()))
            }
            return .object(members)
        case UInt8(ascii: "["):
            var items: [JSONValue] = []
            try readArray { (reader, _) throws(PayloadError) in items.append(try reader.readValue()) }
            return .array(items)
        case 0x22:
            return .string(try readString())
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            let range = try readNumberRange()
            return .number(String(decoding: bytes[range], as: UTF8.self))
        default:
            return try readKeyword()
        }
    }

    /// Skips any value.
    mutating func skipValue() throws(PayloadError) {
        guard let c = peek() else { throw error("Unexpected end of JSON, expected a value") }
        switch c {
        case UInt8(ascii: "{"):
            try readObject { (reader, _) throws(PayloadError) in try reader.skipValue() }
        case UInt8(ascii: "["):
            try readArray { (reader, _) throws(PayloadError) in try reader.skipValue() }
        case 0x22:
            // Checked as `readString` checks it, without building the string when it has no
            // escapes.
            _ = try readKey()
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            _ = try readNumberRange()
        default:
            _ = try readKeyword()
        }
    }

    /// Iterates an object's members; `body` must consume each member's value.
    mutating func readObject(_ body: (inout JSONReader, String) throws(PayloadError) -> Void) throws(PayloadError) {
        try readObjectKeys { (reader, key) throws(PayloadError) in try body(&reader, key.string(reader.bytes)) }
    }

    /// Like `readObject`, but hands over member names as `Key`s without allocating.
    mutating func readObjectKeys(_ body: (inout JSONReader, Key) throws(PayloadError) -> Void) throws(PayloadError) {
        try expect(UInt8(ascii: "{"))
        depth += 1
        defer { depth -= 1 }
        guard depth <= Self.maxDepth else { throw error("JSON nested deeper than \(Self.maxDepth) levels", .tooDeep) }
        if peek() == UInt8(ascii: "}") {
            i += 1
            return
        }
        while true {
            let key = try readKey()
            try expect(UInt8(ascii: ":"))
            try body(&self, key)
            guard let c = peek() else { throw error("Unexpected end of JSON inside an object") }
            if c == UInt8(ascii: ",") {
                i += 1
                continue
            }
            guard c == UInt8(ascii: "}") else { throw error("Expected ',' or '}' in an object") }
            i += 1
            return
        }
    }

    /// Iterates an array's elements; `body` must consume each element.
    mutating func readArray(_ body: (inout JSONReader, Int) throws(PayloadError) -> Void) throws(PayloadError) {
        try expect(UInt8(ascii: "["))
        depth += 1
        defer { depth -= 1 }
        guard depth <= Self.maxDepth else { throw error("JSON nested deeper than \(Self.maxDepth) levels", .tooDeep) }
        if peek() == UInt8(ascii: "]") {
            i += 1
            return
        }
        var index = 0
        while true {
            try body(&self, index)
            index += 1
            guard let c = peek() else { throw error("Unexpected end of JSON inside an array") }
            if c == UInt8(ascii: ",") {
                i += 1
                continue
            }
            guard c == UInt8(ascii: "]") else { throw error("Expected ',' or ']' in an array") }
            i += 1
            return
        }
    }
}
