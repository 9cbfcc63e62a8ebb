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

/// `$search` syntax: terms, `"phrases"`, `NOT`, `AND`, `OR` (with implicit AND between
/// adjacent terms) and parentheses.
struct SearchParser {
    let b: [UInt8]
    let text: String
    var i: Int
    private var depth = 0

    init(b: [UInt8], text: String, i: Int) {
        self.b = b
        self.text = text
        self.i = i
    }

    func fail(_ message: String, at offset: Int? = nil) -> SyntaxError {
        SyntaxError(.invalidQueryOption, message, input: text, offset: offset ?? i)
    }

    private func isSpace(_ j: Int) -> Bool { j < b.count && (b[j] == 0x20 || b[j] == 0x09) }

    private func keyword(_ word: String, at j: Int) -> Bool {
        let w = Array(word.utf8)
        guard j + w.count <= b.count, Array(b[j..<(j + w.count)]) == w else { return false }
        let after = j + w.count
        return after == b.count || isSpace(after) || b[after] == UInt8(ascii: "(") || b[after] == UInt8(ascii: ")")
    }

    /// The position after whitespace if `word` follows it, else nil.
    private func operatorAhead(_ word: String) -> Int? {
        guard isSpace(i) else { return nil }
        var j = i
        while isSpace(j) { j += 1 }
        guard keyword(word, at: j) else { return nil }
        var k = j + word.utf8.count
        guard isSpace(k) else { return nil }
        while isSpace(k) { k += 1 }
        return k
    }

    mutating func parseOr() throws(SyntaxError) -> SearchExpression {
        depth += 1
        defer { depth -= 1 }
        guard depth < 100 else { throw SyntaxError(.tooDeep, "$search nested too deeply", input: text, offset: i) }
        var left = try parseAnd()
        while let next = operatorAhead("OR") {
            i = next
            left = .or(left, try parseAnd())
        }
        return left
    }

    mutating func parseAnd() throws(SyntaxError) -> SearchExpression {
        var left = try parseUnary()
        while true {
            if let next = operatorAhead("AND") {
                i = next
                left = .and(left, try parseUnary())
                continue
            }
            if operatorAhead("OR") != nil { break }
            // Implicit AND: whitespace followed by another term.
            guard isSpace(i) else { break }
            var j = i
            while isSpace(j) { j += 1 }
            guard j < b.count, b[j] != UInt8(ascii: ")") else { break }
            i = j
            left = .and(left, try parseUnary())
        }
        return left
    }

    mutating func parseUnary() throws(SyntaxError) -> SearchExpression {
        if keyword("NOT", at: i), isSpace(i + 3) {
            i += 3
            while isSpace(i) { i += 1 }
            return .not(try parseUnary())
        }
        return try parsePrimary()
    }

    mutating func parsePrimary() throws(SyntaxError) -> SearchExpression {
        guard i < b.count else { throw fail("Expected a search term") }
        let c = b[i]
        if c == UInt8(ascii: "(") {
            i += 1
            while isSpace(i) { i += 1 }
            let inner = try parseOr()
            while isSpace(i) { i += 1 }
            guard i < b.count, b[i] == UInt8(ascii: ")") else { throw fail("Expected ')' in $search") }
            i += 1
            return inner
        }
        if c == UInt8(ascii: "\"") {
            let start = i
            i += 1
            var out: [UInt8] = []
            while i < b.count, b[i] != UInt8(ascii: "\"") {
                if b[i] == UInt8(ascii: "\\"), i + 1 < b.count, b[i + 1] == UInt8(ascii: "\"") || b[i + 1] == UInt8(ascii: "\\") {
                    out.append(b[i + 1])
                    i += 2
                    continue
                }
                out.append(b[i])
                i += 1
            }
            guard i < b.count else { throw fail("Unterminated phrase in $search", at: start) }
            i += 1
            guard out.contains(where: { $0 != 0x20 }) else { throw fail("Empty phrase in $search", at: start) }
            if i < b.count, !isSpace(i), b[i] != UInt8(ascii: ")") {
                throw fail("A phrase must be followed by whitespace or ')'")
            }
            return .phrase(String(decoding: out, as: UTF8.self))
        }
        let start = i
        while i < b.count, isSearchWordByte(b[i]) { i += 1 }
        guard i > start else { throw fail("Expected a search term") }
        let word = String(decoding: b[start..<i], as: UTF8.self)
        if ["AND", "OR", "NOT"].contains(word) { throw fail("\(word) needs a term", at: start) }
        if i < b.count, !isSpace(i), b[i] != UInt8(ascii: ")") {
            throw fail("Unexpected character in a search term")
        }
        return .term(word)
    }

    private func isSearchWordByte(_ c: UInt8) -> Bool {
        if c >= 0x80 { return true }
        if isAlpha(c) || isDigit(c) { return true }
        return "-._~!$'*+,:@/?%".utf8.contains(c)
    }
}
