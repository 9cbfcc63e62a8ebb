/// Checks the syntax of a JSON value embedded in a URL (4.01 `arrayOrObject`, JSON strings)
/// and finds where it ends. Values stay text; payload codecs decode them.
enum JSONScanner {
    static let maxDepth = 100

    static func scanValue(_ b: [UInt8], _ start: Int, text: String) throws(SyntaxError) -> Int {
        var i = start
        try value(b, &i, text: text, depth: 0)
        return i
    }

    private static func fail(_ message: String, _ i: Int, _ text: String) -> SyntaxError {
        SyntaxError(.invalidLiteral, message, input: text, offset: i)
    }

    private static func skipSpace(_ b: [UInt8], _ i: inout Int) {
        while i < b.count, b[i] == 0x20 || b[i] == 0x09 || b[i] == 0x0A || b[i] == 0x0D { i += 1 }
    }

    private static func value(_ b: [UInt8], _ i: inout Int, text: String, depth: Int) throws(SyntaxError) {
        guard depth < maxDepth else { throw SyntaxError(.tooDeep, "JSON nested too deeply", input: text, offset: i) }
        skipSpace(b, &i)
        guard i < b.count else { throw fail("Expected a JSON value", i, text) }
        switch b[i] {
        case UInt8(ascii: "["):
            i += 1
            skipSpace(b, &i)
            if i < b.count, b[i] == UInt8(ascii: "]") {
                i += 1
                return
            }
            while true {
                try value(b, &i, text: text, depth: depth + 1)
                skipSpace(b, &i)
                guard i < b.count else { throw fail("Unterminated JSON array", i, text) }
                if b[i] == UInt8(ascii: ",") {
                    i += 1
                    continue
                }
                guard b[i] == UInt8(ascii: "]") else { throw fail("Expected ',' or ']' in a JSON array", i, text) }
                i += 1
                return
            }
        case UInt8(ascii: "{"):
            i += 1
            skipSpace(b, &i)
            if i < b.count, b[i] == UInt8(ascii: "}") {
                i += 1
                return
            }
            while true {
                skipSpace(b, &i)
                guard i < b.count, b[i] == UInt8(ascii: "\"") else { throw fail("Expected a member name in a JSON object", i, text) }
                try string(b, &i, text: text)
                skipSpace(b, &i)
                guard i < b.count, b[i] == UInt8(ascii: ":") else { throw fail("Expected ':' in a JSON object", i, text) }
                i += 1
                try value(b, &i, text: text, depth: depth + 1)
                skipSpace(b, &i)
                guard i < b.count else { throw fail("Unterminated JSON object", i, text) }
                if b[i] == UInt8(ascii: ",") {
                    i += 1
                    continue
                }
                guard b[i] == UInt8(ascii: "}") else { throw fail("Expected ',' or '}' in a JSON object", i, text) }
                i += 1
                return
            }
        case UInt8(ascii: "\""):
            try string(b, &i, text: text)
        case UInt8(ascii: "'"):
            // OData allows single-quoted strings inside URL JSON.
            guard let (_, end) = Literal.scanQuoted(b, i) else { throw fail("Unterminated string", i, text) }
            i = end
        default:
            for word in ["true", "false", "null"] where b[i...].starts(with: word.utf8) {
                i += word.utf8.count
                return
            }
            guard let number = Literal.scanNumber(b, i, allowPlus: false) else { throw fail("Expected a JSON value", i, text) }
            i = number.end
        }
    }

    private static func string(_ b: [UInt8], _ i: inout Int, text: String) throws(SyntaxError) {
        let start = i
        i += 1
        while i < b.count {
            switch b[i] {
            case UInt8(ascii: "\""):
                i += 1
                return
            case UInt8(ascii: "\\"):
                guard i + 1 < b.count else { throw fail("Unterminated escape", i, text) }
                if b[i + 1] == UInt8(ascii: "u") {
                    guard i + 5 < b.count, (2...5).allSatisfy({ isHexDigit(b[i + $0]) }) else { throw fail("Bad \\u escape", i, text) }
                    i += 6
                } else {
                    guard "\"\\/bfnrt".utf8.contains(b[i + 1]) else { throw fail("Bad escape in a JSON string", i, text) }
                    i += 2
                }
            default:
                i += 1
            }
        }
        throw fail("Unterminated JSON string", start, text)
    }
}

/// `$search` syntax (OData ABNF `searchExpr`): words, `"phrases"`, `NOT`, `AND`, `OR` (with
/// implicit AND between adjacent terms) and parentheses. `AND`, `OR` and `NOT` are operators
/// only where an operand follows; elsewhere they are words.
///
/// The parser sees decoded text plus, per byte, whether it was percent-encoded: an encoded
/// `;` or `#` may be part of a word, a raw one may not.
struct SearchParser {
    let b: [UInt8]
    let encoded: [Bool]
    let text: String
    var i: Int
    private var depth = 0

    init(b: [UInt8], text: String, i: Int, encoded: [Bool] = []) {
        self.b = b
        self.text = text
        self.i = i
        self.encoded = encoded
    }

    /// Parses a whole `$search` value.
    static func parseComplete(_ value: String, encoded: [Bool]) throws(SyntaxError) -> SearchExpression {
        let bytes = Array(value.utf8)
        // `searchExpr-incomplete`: a single-quoted string is taken as one phrase.
        if bytes.first == UInt8(ascii: "'") {
            guard let (content, end) = Literal.scanQuoted(bytes, 0), end == bytes.count else {
                throw SyntaxError(.invalidQueryOption, "Unterminated quoted $search value", input: value, offset: bytes.count)
            }
            return .phrase(content)
        }
        var parser = SearchParser(b: bytes, text: value, i: 0, encoded: encoded)
        let search = try parser.parseOr()
        guard parser.i == bytes.count else {
            throw SyntaxError(.invalidQueryOption, "Unexpected character in $search", input: value, offset: parser.i)
        }
        return search
    }

    func fail(_ message: String, at offset: Int? = nil) -> SyntaxError {
        SyntaxError(.invalidQueryOption, message, input: text, offset: offset ?? i)
    }

    private func isEncoded(_ j: Int) -> Bool { j < encoded.count && encoded[j] }
    private func isSpace(_ j: Int) -> Bool { j < b.count && (b[j] == 0x20 || b[j] == 0x09) }
    private func isQuote(_ j: Int) -> Bool { j < b.count && b[j] == UInt8(ascii: "\"") }
    /// ABNF `OPEN = "(" / "%28"`, `CLOSE = ")" / "%29"`: encoded parentheses group too.
    private func isOpen(_ j: Int) -> Bool { j < b.count && b[j] == UInt8(ascii: "(") }
    private func isClose(_ j: Int) -> Bool { j < b.count && b[j] == UInt8(ascii: ")") }

    /// Whether an operand can start at `j`.
    private func operandStarts(at j: Int) -> Bool {
        j < b.count && !isSpace(j) && !isClose(j)
    }

    private func word(at j: Int, _ w: String) -> Bool {
        let bytes = Array(w.utf8)
        guard j + bytes.count <= b.count, Array(b[j..<(j + bytes.count)]) == bytes else { return false }
        let after = j + bytes.count
        return after == b.count || isSpace(after) || isClose(after)
    }

    /// If `RWS w RWS operand` follows, the position of the operand.
    private func binaryOperator(_ w: String) -> Int? {
        guard isSpace(i) else { return nil }
        var j = i
        while isSpace(j) { j += 1 }
        guard word(at: j, w) else { return nil }
        var k = j + w.utf8.count
        guard isSpace(k) else { return nil }
        while isSpace(k) { k += 1 }
        return operandStarts(at: k) ? k : nil
    }

    /// The deepest nesting a `$search` may have: parentheses and `NOT`s. A chain of terms
    /// (`a b c`, `a OR b OR c`) is no nesting: it becomes a balanced tree, whose depth grows
    /// with the logarithm of its length, so what compiles and prints it recurses as little.
    static let maxDepth = 100

    /// Enters one level of nesting; throws past ``maxDepth``.
    private mutating func enter() throws(SyntaxError) {
        depth += 1
        guard depth <= Self.maxDepth else {
            throw SyntaxError(
                .tooDeep, "$search nested too deeply (at most \(Self.maxDepth) levels of parentheses and NOT)",
                input: text, offset: i)
        }
    }

    /// `items` joined by `join` as a balanced tree, in their order.
    static func balanced(
        _ items: ArraySlice<SearchExpression>, _ join: (SearchExpression, SearchExpression) -> SearchExpression
    ) -> SearchExpression {
        if items.count == 1, let only = items.first { return only }
        let middle = items.startIndex + items.count / 2
        return join(balanced(items[..<middle], join), balanced(items[middle...], join))
    }

    mutating func parseOr() throws(SyntaxError) -> SearchExpression {
        var items = [try parseAnd()]
        while let next = binaryOperator("OR") {
            i = next
            items.append(try parseAnd())
        }
        return Self.balanced(items[...]) { .or($0, $1) }
    }

    mutating func parseAnd() throws(SyntaxError) -> SearchExpression {
        var items = [try parseUnary()]
        while true {
            if binaryOperator("OR") != nil { break }
            if let next = binaryOperator("AND") {
                i = next
                items.append(try parseUnary())
                continue
            }
            // Implicit AND: whitespace followed by another operand.
            guard isSpace(i) else { break }
            var j = i
            while isSpace(j) { j += 1 }
            guard operandStarts(at: j) else { break }
            i = j
            items.append(try parseUnary())
        }
        return Self.balanced(items[...]) { .and($0, $1) }
    }

    mutating func parseUnary() throws(SyntaxError) -> SearchExpression {
        if word(at: i, "NOT"), isSpace(i + 3) {
            var j = i + 3
            while isSpace(j) { j += 1 }
            if operandStarts(at: j) {
                i = j
                let entry = depth
                defer { depth = entry }
                try enter()
                return .not(try parseUnary())
            }
        }
        return try parsePrimary()
    }

    mutating func parsePrimary() throws(SyntaxError) -> SearchExpression {
        guard i < b.count else { throw fail("Expected a search term") }
        if isOpen(i) {
            i += 1
            while isSpace(i) { i += 1 }
            let entry = depth
            defer { depth = entry }
            try enter()
            let inner = try parseOr()
            while isSpace(i) { i += 1 }
            guard isClose(i) else { throw fail("Expected ')' in $search") }
            i += 1
            return inner
        }
        if isQuote(i) {
            let start = i
            i += 1
            var out: [UInt8] = []
            while i < b.count, !isQuote(i) {
                if b[i] == UInt8(ascii: "\\"), i + 1 < b.count, b[i + 1] == UInt8(ascii: "\"") || b[i + 1] == UInt8(ascii: "\\") {
                    out.append(b[i + 1])
                    i += 2
                    continue
                }
                out.append(b[i])
                i += 1
            }
            guard i < b.count else { throw fail("Unterminated phrase in $search", at: b.count) }
            guard !out.isEmpty else { throw fail("Empty phrase in $search", at: start) }
            i += 1
            if i < b.count, !isSpace(i), !isClose(i) {
                throw fail("A phrase must be followed by whitespace or ')'")
            }
            return .phrase(String(decoding: out, as: UTF8.self))
        }
        let start = i
        while i < b.count, isWordByte(i, first: i == start) { i += 1 }
        guard i > start else { throw fail("Unexpected character in $search") }
        return .term(String(decoding: b[start..<i], as: UTF8.self))
    }

    /// `searchChar = unreserved / pct-encoded-no-DQUOTE / "!" / "*" / "+" / "," / ":" / "@" / "/" / "?" / "$" / "="`,
    /// plus `'` after the first character; encoded parentheses are `OPEN` and `CLOSE`, not word
    /// characters.
    private func isWordByte(_ j: Int, first: Bool) -> Bool {
        let c = b[j]
        if isEncoded(j) { return c != UInt8(ascii: "\"") && c != UInt8(ascii: "(") && c != UInt8(ascii: ")") && c != 0x20 && c != 0x09 }
        if c >= 0x80 || isAlpha(c) || isDigit(c) { return true }
        if c == UInt8(ascii: "'") { return !first }
        return "-._~!*+,:@/?$=".utf8.contains(c)
    }
}
