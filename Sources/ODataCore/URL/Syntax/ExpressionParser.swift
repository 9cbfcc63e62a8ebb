/// Recursive-descent parser for OData expressions over decoded option text.
///
/// Follows the 4.01 ABNF (`commonExpr`), with operator precedence from OData Part 2
/// §5.1.1.16: `has`/`in` (primary), unary `-`/`not`, multiplicative, additive, relational,
/// equality, `and`, `or`. Binary operators need whitespace on both sides.
struct ExpressionParser {
    let b: [UInt8]
    let text: String
    var i = 0
    let version: ODataVersion
    /// Lambda variables in scope, innermost last.
    var variables: [String] = []
    private var depth = 0
    private static let maxDepth = 100

    init(_ text: String, version: ODataVersion, variables: [String] = []) {
        self.text = text
        self.b = Array(text.utf8)
        self.version = version
        self.variables = variables
    }

    // MARK: Errors and helpers

    func fail(_ message: String, at offset: Int? = nil, code: SyntaxError.Code = .invalidExpression) -> SyntaxError {
        let position = offset ?? i
        let actual = code == .invalidExpression && position >= b.count ? SyntaxError.Code.unexpectedEnd : code
        return SyntaxError(actual, message, input: text, offset: position)
    }

    var atEnd: Bool { i >= b.count }
    func peek(_ offset: Int = 0) -> UInt8? { i + offset < b.count ? b[i + offset] : nil }

    mutating func skipWhitespace() {
        while let c = peek(), c == 0x20 || c == 0x09 { i += 1 }
    }

    func isWhitespace(at index: Int) -> Bool { index < b.count && (b[index] == 0x20 || b[index] == 0x09) }

    /// Case-insensitive keyword at `index` followed by a non-identifier byte.
    func keyword(_ word: String, at index: Int) -> Bool {
        let w = Array(word.utf8)
        guard index + w.count <= b.count else { return false }
        for k in 0..<w.count where (b[index + k] | 0x20) != (w[k] | 0x20) { return false }
        return !continuesIdentifier(b, index + w.count)
    }

    mutating func expect(_ c: UInt8, _ what: String) throws(SyntaxError) {
        guard peek() == c else {
            throw fail("Expected \(what)", code: atEnd ? .unexpectedEnd : .unexpectedCharacter)
        }
        i += 1
    }

    /// Parses a whole expression; the text must be used up.
    mutating func parseComplete() throws(SyntaxError) -> CommonExpression {
        guard !b.isEmpty else { throw SyntaxError(.unexpectedEnd, "An expression is required", input: text, offset: 0) }
        if isWhitespace(at: 0) { throw fail("An expression must not start with whitespace", at: 0, code: .unexpectedCharacter) }
        let expression = try parseExpression()
        guard atEnd else {
            var j = i
            while isWhitespace(at: j) { j += 1 }
            if let op = BinaryOperator.allCases.first(where: { keyword($0.rawValue, at: j) }) {
                let end = j + op.rawValue.utf8.count
                throw fail("Expected an operand after '\(op.rawValue)'", at: end, code: end >= b.count ? .unexpectedEnd : .unexpectedCharacter)
            }
            throw fail("Unexpected text after the expression", code: .unexpectedCharacter)
        }
        return expression
    }

    // MARK: Operators

    /// The highest expression tree accepted: readers of the tree (binder, SQL compiler,
    /// printers) recurse over it, so its height is bounded, not only the parser's recursion.
    static let maxHeight = 200

    mutating func parseExpression(minPrecedence: Int = 0) throws(SyntaxError) -> CommonExpression {
        depth += 1
        defer { depth -= 1 }
        guard depth < Self.maxDepth else { throw fail("Expression nested too deeply", code: .tooDeep) }
        var left = try parseUnary()
        var leftHeight = CommonExpression.height(of: left)
        // A run of `and` (or of `or`) becomes a balanced tree: `a or b or … ` with thousands of
        // terms (a key list) stays a few levels high, and means the same.
        // (Kept in separate variables: appending to an array inside an optional tuple that
        // was also bound to a constant copied the whole array each time, quadratic in the run.)
        var runOp: BinaryOperator?
        var runOperands: [CommonExpression] = []
        var runHeight = 0
        func finishRun() {
            guard let op = runOp else { return }
            left = Self.balanced(op, runOperands[...])
            leftHeight = runHeight + Self.levels(runOperands.count)
            runOp = nil
            runOperands = []
        }
        while true {
            guard let (op, after) = binaryOperator(), op.precedence > minPrecedence else { break }
            i = after
            let right: CommonExpression
            switch op {
            case .in: right = try parseInRight()
            case .has: right = try parseHasRight()
            default: right = try parseExpression(minPrecedence: op.precedence)
            }
            let rightHeight = CommonExpression.height(of: right)
            if op == .and || op == .or {
                if runOp == op {
                    runOperands.append(right)
                    runHeight = max(runHeight, rightHeight)
                } else {
                    finishRun()
                    runOp = op
                    runOperands = [left, right]
                    runHeight = max(leftHeight, rightHeight)
                }
                continue
            }
            finishRun()
            left = CommonExpression(.binary(op, left, right), at: left.offset)
            leftHeight = 1 + max(leftHeight, rightHeight)
            guard leftHeight <= Self.maxHeight else {
                throw fail("Expression nested too deeply (more than \(Self.maxHeight) levels)", code: .tooDeep)
            }
        }
        finishRun()
        guard leftHeight <= Self.maxHeight else {
            throw fail("Expression nested too deeply (more than \(Self.maxHeight) levels)", code: .tooDeep)
        }
        return left
    }

    /// `op` over `operands`, split in halves (the left half one longer): three operands give
    /// `(a op b) op c`, as the left-to-right reading does.
    static func balanced(_ op: BinaryOperator, _ operands: ArraySlice<CommonExpression>) -> CommonExpression {
        guard operands.count > 1, let first = operands.first else { return operands.first ?? CommonExpression(.literal(.null), at: 0) }
        let middle = operands.startIndex + (operands.count + 1) / 2
        let left = balanced(op, operands[..<middle]), right = balanced(op, operands[middle...])
        return CommonExpression(.binary(op, left, right), at: first.offset)
    }

    /// How many levels a balanced tree over `count` operands adds.
    static func levels(_ count: Int) -> Int {
        var levels = 0
        while (1 << levels) < count { levels += 1 }
        return levels
    }

    /// An operator at the current position: RWS keyword RWS.
    func binaryOperator() -> (BinaryOperator, Int)? {
        guard isWhitespace(at: i) else { return nil }
        var j = i
        while isWhitespace(at: j) { j += 1 }
        for op in BinaryOperator.allCases where keyword(op.rawValue, at: j) {
            let end = j + op.rawValue.utf8.count
            guard isWhitespace(at: end) else { continue }
            var k = end
            while isWhitespace(at: k) { k += 1 }
            return (op, k)
        }
        return nil
    }

    mutating func parseUnary() throws(SyntaxError) -> CommonExpression {
        let start = i
        if keyword("not", at: i), isWhitespace(at: i + 3) {
            i += 3
            skipWhitespace()
            let operand = try parseUnaryOperand()
            return CommonExpression(.unary(.not, operand), at: start)
        }
        if peek() == UInt8(ascii: "-"), let next = peek(1), !isDigit(next), !(keyword("INF", at: i + 1)) {
            i += 1
            skipWhitespace()
            let operand = try parseUnaryOperand()
            return CommonExpression(.unary(.negate, operand), at: start)
        }
        return try parsePrimary()
    }

    /// The operand of a unary operator binds tighter than any binary operator but `has`/`in`.
    mutating func parseUnaryOperand() throws(SyntaxError) -> CommonExpression {
        // `not not …` and `- - …` recurse here: each prefix operator counts as a level of
        // nesting (a plain operand does not, so parentheses keep their 100 levels).
        depth += 1
        defer { depth -= 1 }
        guard depth < Self.maxDepth else { throw fail("Expression nested too deeply", code: .tooDeep) }
        var operand = try parseUnary()
        while let (op, after) = binaryOperator(), op == .has || op == .in {
            i = after
            let right = op == .in ? try parseInRight() : try parseHasRight()
            operand = CommonExpression(.binary(op, operand, right), at: operand.offset)
        }
        return operand
    }

    mutating func parseInRight() throws(SyntaxError) -> CommonExpression {
        let start = i
        if peek() == UInt8(ascii: "(") {
            i += 1
            skipWhitespace()
            var items: [CommonExpression] = []
            // `x in (expr)` is a parenthesized expression; `x in (lit, lit)` a list of literals.
            let save = i
            if let single = try? parseExpression() {
                var j = i
                while isWhitespace(at: j) { j += 1 }
                if j < b.count, b[j] == UInt8(ascii: ")") {
                    i = j + 1
                    if case .literal = single.node { return CommonExpression(.list([single]), at: start) }
                    return single
                }
            }
            i = save
            // An empty list is allowed (the ABNF's list is optional): it matches nothing.
            if peek() != UInt8(ascii: ")") {
                while true {
                    let itemStart = i
                    guard let item = try parseListItem() else {
                        throw fail("A list after 'in' holds only literals", at: itemStart)
                    }
                    items.append(item)
                    skipWhitespace()
                    if peek() == UInt8(ascii: ",") {
                        i += 1
                        skipWhitespace()
                        continue
                    }
                    break
                }
            }
            try expect(UInt8(ascii: ")"), "')' to close the list")
            return CommonExpression(.list(items), at: start)
        }
        return try parsePrimary()
    }

    mutating func parseListItem() throws(SyntaxError) -> CommonExpression? {
        let start = i
        if peek() == UInt8(ascii: "@") { return try parsePrimary() }
        if peek() == UInt8(ascii: "[") || peek() == UInt8(ascii: "{") || peek() == UInt8(ascii: "\"") { return try parsePrimary() }
        guard let (value, end) = Literal.scan(b, i, version: version) else { return nil }
        i = end
        return CommonExpression(.literal(value), at: start)
    }

    mutating func parseHasRight() throws(SyntaxError) -> CommonExpression {
        let start = i
        if peek() == UInt8(ascii: "@") { return try parsePrimary() }
        guard let (value, end) = Literal.scan(b, i, version: version) else {
            throw fail("Expected an enum literal after 'has'")
        }
        switch value {
        case .enumeration: break
        case .primitive(.string) where !version.isLegacy:
            // 4.01: an enum literal may leave out its type (`Status has 'Shipped'`); the other
            // side's enum type says which members the string names.
            break
        default:
            throw fail("The right side of 'has' must be an enum literal", at: start)
        }
        i = end
        return CommonExpression(.literal(value), at: start)
    }

    // MARK: Primary

    mutating func parsePrimary() throws(SyntaxError) -> CommonExpression {
        let start = i
        guard let c = peek() else { throw fail("Expected an expression", code: .unexpectedEnd) }
        switch c {
        case UInt8(ascii: "("):
            i += 1
            skipWhitespace()
            let inner = try parseExpression()
            skipWhitespace()
            try expect(UInt8(ascii: ")"), "')'")
            return inner
        case UInt8(ascii: "@"):
            i += 1
            let name = try annotationName()
            if peek() == UInt8(ascii: "/") {
                i += 1
                return try parsePathContinuation(root: .alias(name), steps: [], start: start, afterRoot: false, forceStep: true)
            }
            return CommonExpression(.alias(name), at: start)
        case UInt8(ascii: "["):
            return try parseArray()
        case UInt8(ascii: "{"):
            return try parseObject()
        case UInt8(ascii: "$"):
            return try parseDollarPath()
        default:
            break
        }
        if c == UInt8(ascii: "\"") {
            // A JSON string is a literal string in 4.01 URL JSON syntax.
            return CommonExpression(.literal(.primitive(.string(try jsonString()))), at: start)
        }
        if let (value, end) = Literal.scan(b, i, version: version) {
            i = end
            return CommonExpression(.literal(value), at: start)
        }
        if let problem = Literal.temporalProblem(b, i) { throw fail(problem, code: .invalidLiteral) }
        guard isIdentifierStart(c) else {
            throw fail("Expected an expression", code: .unexpectedCharacter)
        }
        // Identifier: function call, lambda variable, property path, cast.
        let nameStart = i
        let name = try identifierOrQualified()
        let lower = name.lowercased()
        if peek() == UInt8(ascii: "(") {
            if CanonicalFunctions.arity[lower] != nil || (version.isLegacy && CanonicalFunctions.legacy.contains(lower)) {
                return try parseCall(lower, at: nameStart)
            }
            if lower == "case" && !version.isLegacy {
                return try parseCase(at: nameStart)
            }
        }
        if variables.contains(name) {
            return try parsePathContinuation(root: .variable(name), steps: [], start: nameStart)
        }
        i = nameStart
        return try parsePathContinuation(root: .implicit, steps: [], start: nameStart)
    }

    mutating func parseDollarPath() throws(SyntaxError) -> CommonExpression {
        let start = i
        if keyword("$it", at: i) {
            i += 3
            if peek() == UInt8(ascii: "/") {
                i += 1
                return try parsePathContinuation(root: .it, steps: [], start: start, forceStep: true)
            }
            return CommonExpression(.path(PathExpression(root: .it, steps: [])), at: start)
        }
        if keyword("$root", at: i) {
            i += 5
            guard peek() == UInt8(ascii: "/") else { throw fail("$root must be followed by a path") }
            i += 1
            return try parsePathContinuation(root: .root, steps: [], start: start, forceStep: true)
        }
        if keyword("$this", at: i) {
            i += 5
            if peek() == UInt8(ascii: "/") {
                i += 1
                return try parsePathContinuation(root: .this, steps: [], start: start, forceStep: true)
            }
            return CommonExpression(.path(PathExpression(root: .this, steps: [])), at: start)
        }
        throw fail("Unknown $-name in an expression", code: .unexpectedCharacter)
    }

    /// `Ns.Term` or `Term`, with an optional `#qualifier`.
    mutating func annotationName() throws(SyntaxError) -> String {
        var name = try identifierOrQualified()
        if peek() == UInt8(ascii: "#") {
            i += 1
            name += "#" + (try identifier())
        }
        return name
    }

    /// A double-quoted JSON string; returns its unescaped content.
    mutating func jsonString() throws(SyntaxError) -> String {
        let start = i
        let end = try JSONScanner.scanValue(b, i, text: text)
        i = end
        let raw = String(decoding: b[(start + 1)..<(end - 1)], as: UTF8.self)
        guard raw.contains("\\") else { return raw }
        var out = ""
        var iterator = raw.unicodeScalars.makeIterator()
        while let c = iterator.next() {
            guard c == "\\", let e = iterator.next() else {
                out.unicodeScalars.append(c)
                continue
            }
            switch e {
            case "n": out += "\n"
            case "t": out += "\t"
            case "r": out += "\r"
            case "b": out += "\u{08}"
            case "f": out += "\u{0C}"
            case "u":
                var hex = ""
                for _ in 0..<4 { if let h = iterator.next() { hex.unicodeScalars.append(h) } }
                if let value = UInt32(hex, radix: 16), let scalar = Unicode.Scalar(value) { out.unicodeScalars.append(scalar) }
            default: out.unicodeScalars.append(e)
            }
        }
        return out
    }

    mutating func parseArray() throws(SyntaxError) -> CommonExpression {
        let start = i
        i += 1
        skipJSONSpace()
        var items: [CommonExpression] = []
        if peek() == UInt8(ascii: "]") {
            i += 1
            return CommonExpression(.array(items), at: start)
        }
        while true {
            items.append(try parseExpression())
            skipJSONSpace()
            if peek() == UInt8(ascii: ",") {
                i += 1
                skipJSONSpace()
                continue
            }
            try expect(UInt8(ascii: "]"), "',' or ']' in an array")
            return CommonExpression(.array(items), at: start)
        }
    }

    mutating func parseObject() throws(SyntaxError) -> CommonExpression {
        let start = i
        i += 1
        skipJSONSpace()
        var members: [CommonExpression.Member] = []
        if peek() == UInt8(ascii: "}") {
            i += 1
            return CommonExpression(.object(members), at: start)
        }
        while true {
            guard peek() == UInt8(ascii: "\"") else { throw fail("Expected a member name in double quotes", code: .unexpectedCharacter) }
            let name = try jsonString()
            skipJSONSpace()
            try expect(UInt8(ascii: ":"), "':' after a member name")
            skipJSONSpace()
            members.append(CommonExpression.Member(name: name, value: try parseExpression()))
            skipJSONSpace()
            if peek() == UInt8(ascii: ",") {
                i += 1
                skipJSONSpace()
                continue
            }
            try expect(UInt8(ascii: "}"), "',' or '}' in an object")
            return CommonExpression(.object(members), at: start)
        }
    }

    mutating func skipJSONSpace() {
        while let c = peek(), c == 0x20 || c == 0x09 || c == 0x0A || c == 0x0D { i += 1 }
    }

    /// Reads `name` or `Ns.Name` (dots between identifiers).
    mutating func identifierOrQualified() throws(SyntaxError) -> String {
        let start = i
        guard let c = peek(), isIdentifierStart(c) else { throw fail("Expected a name", code: atEnd ? .unexpectedEnd : .unexpectedCharacter) }
        while let c = peek(), isIdentifierByte(c) { i += 1 }
        while peek() == UInt8(ascii: "."), let next = peek(1), isIdentifierStart(next) {
            i += 1
            while let c = peek(), isIdentifierByte(c) { i += 1 }
        }
        return String(decoding: b[start..<i], as: UTF8.self)
    }

    mutating func identifier() throws(SyntaxError) -> String {
        let start = i
        guard let c = peek(), isIdentifierStart(c) else { throw fail("Expected a name", code: atEnd ? .unexpectedEnd : .unexpectedCharacter) }
        while let c = peek(), isIdentifierByte(c) { i += 1 }
        return String(decoding: b[start..<i], as: UTF8.self)
    }

    /// Continues a path: the first member (unless `afterRoot`), then `/step`s.
    mutating func parsePathContinuation(root: PathExpression.Root, steps initial: [PathExpression.Step], start: Int,
                                        afterRoot: Bool = false, forceStep: Bool = false) throws(SyntaxError) -> CommonExpression {
        var steps = initial
        var expectStep = forceStep || (!afterRoot && root == .implicit)
        var lastWasCast = false
        while true {
            if expectStep {
                let stepStart = i
                if keyword("$filter", at: i), peek(7) == UInt8(ascii: "(") {
                    i += 8
                    skipWhitespace()
                    let condition = try parseExpression()
                    skipWhitespace()
                    try expect(UInt8(ascii: ")"), "')' to close $filter(")
                    steps.append(.filter(condition))
                    if peek() == UInt8(ascii: "(") { steps.append(.key(try parseKeyPredicate())) }
                    lastWasCast = false
                    expectStep = true
                    guard peek() == UInt8(ascii: "/") else { break }
                    i += 1
                    continue
                }
                if peek() == UInt8(ascii: "$") {
                    guard keyword("$count", at: i) else { throw fail("Unknown $-segment in a path", code: .unexpectedCharacter) }
                    guard !steps.isEmpty || root != .implicit else { throw fail("$count needs a collection before it", at: stepStart) }
                    i += 6
                    var filter: CommonExpression?
                    var search: SearchExpression?
                    if peek() == UInt8(ascii: "(") {
                        (filter, search) = try parseCountOptions()
                    }
                    steps.append(.count(filter: filter, search: search))
                    break
                }
                if peek() == UInt8(ascii: "@") {
                    i += 1
                    steps.append(.annotation(try annotationName()))
                    lastWasCast = false
                    expectStep = true
                    guard peek() == UInt8(ascii: "/") else { break }
                    i += 1
                    continue
                }
                let name = try identifierOrQualified()
                let lower = name.lowercased()
                if (lower == "any" || lower == "all") && peek() == UInt8(ascii: "(") && (!steps.isEmpty || root != .implicit) {
                    steps.append(try parseLambda(lower == "any" ? .any : .all))
                    break
                }
                if (lower == "any" || lower == "all") && peek() == UInt8(ascii: "(") {
                    throw fail("\(lower)() needs a collection path before it", at: stepStart + name.utf8.count)
                }
                if name.contains(".") {
                    if peek() == UInt8(ascii: "(") {
                        steps.append(.function(name, try parseNamedArguments()))
                        lastWasCast = false
                    } else if peek() == UInt8(ascii: "'") {
                        throw fail("Unexpected quote after a qualified name", code: .unexpectedCharacter)
                    } else {
                        if lastWasCast { throw fail("Two type casts in a row", at: stepStart) }
                        steps.append(.cast(name))
                        lastWasCast = true
                        if peek() != UInt8(ascii: "/") {
                            // A cast may end a path only after a member (`Address/Ns.Derived`);
                            // on its own it needs a member after it.
                            guard steps.count > 1 || root != .implicit else {
                                throw fail("A type cast must be followed by '/' and a member", code: atEnd ? .unexpectedEnd : .unexpectedCharacter)
                            }
                            break
                        }
                        i += 1
                        continue
                    }
                } else {
                    lastWasCast = false
                    if peek() == UInt8(ascii: "("), peek(1) == UInt8(ascii: ")") {
                        // `Name()`: an unqualified bound function (4.01 default namespace).
                        steps.append(.function(name, try parseNamedArguments()))
                    } else {
                        steps.append(.member(name))
                        if peek() == UInt8(ascii: "(") {
                            steps.append(.key(try parseKeyPredicate()))
                        }
                    }
                }
            }
            expectStep = true
            guard peek() == UInt8(ascii: "/") else { break }
            i += 1
        }
        return CommonExpression(.path(PathExpression(root: root, steps: steps)), at: start)
    }

    mutating func parseCountOptions() throws(SyntaxError) -> (CommonExpression?, SearchExpression?) {
        try expect(UInt8(ascii: "("), "'('")
        var filter: CommonExpression?
        var search: SearchExpression?
        while true {
            let optionStart = i
            if keyword("$filter", at: i), peek(7) == UInt8(ascii: "=") {
                i += 8
                filter = try parseExpression()
            } else if keyword("$search", at: i), peek(7) == UInt8(ascii: "=") {
                i += 8
                var parser = SearchParser(b: b, text: text, i: i)
                search = try parser.parseOr()
                i = parser.i
            } else {
                throw fail("Only $filter and $search are allowed after $count", at: optionStart)
            }
            if peek() == UInt8(ascii: ";") {
                i += 1
                continue
            }
            break
        }
        try expect(UInt8(ascii: ")"), "')'")
        return (filter, search)
    }

    mutating func parseLambda(_ kind: PathExpression.LambdaKind) throws(SyntaxError) -> PathExpression.Step {
        try expect(UInt8(ascii: "("), "'('")
        skipWhitespace()
        if peek() == UInt8(ascii: ")") {
            guard kind == .any else { throw fail("all() needs a lambda expression") }
            i += 1
            return .lambda(kind, variable: nil, predicate: nil)
        }
        let variable = try identifier()
        skipWhitespace()
        try expect(UInt8(ascii: ":"), "':' after the lambda variable")
        skipWhitespace()
        variables.append(variable)
        let predicate = try parseExpression()
        variables.removeLast()
        skipWhitespace()
        try expect(UInt8(ascii: ")"), "')' to close the lambda")
        return .lambda(kind, variable: variable, predicate: predicate)
    }

    mutating func parseCall(_ name: String, at start: Int) throws(SyntaxError) -> CommonExpression {
        try expect(UInt8(ascii: "("), "'('")
        skipWhitespace()
        var arguments: [CommonExpression] = []
        if peek() != UInt8(ascii: ")") {
            while true {
                let argStart = i
                if name == "isof" || name == "cast", version.isLegacy, let typeName = scanQuotedTypeName() {
                    // V2 names the type as a string: `cast(Price,'Edm.Double')`, `isof('NS.T')`.
                    arguments.append(CommonExpression(.typeName(typeName), at: argStart))
                } else if name == "isof" || name == "cast", let typeName = try? scanTypeNameArgument() {
                    arguments.append(CommonExpression(.typeName(typeName), at: argStart))
                } else {
                    arguments.append(try parseExpression())
                }
                skipWhitespace()
                if peek() == UInt8(ascii: ",") {
                    i += 1
                    skipWhitespace()
                    continue
                }
                break
            }
        }
        try expect(UInt8(ascii: ")"), "')' to close \(name)(")
        let range = CanonicalFunctions.arity[name] ?? (version.isLegacy ? CanonicalFunctions.legacyArity[name] : nil) ?? (0...10)
        guard range.contains(arguments.count) else {
            throw fail("\(name) takes \(range.lowerBound == range.upperBound ? "\(range.lowerBound)" : "\(range.lowerBound) to \(range.upperBound)") arguments, not \(arguments.count)", at: start)
        }
        return CommonExpression(.call(name, arguments), at: start)
    }

    /// V2's last argument of `cast` and `isof`: a qualified type name in quotes, followed by `)`.
    mutating func scanQuotedTypeName() -> String? {
        guard peek() == UInt8(ascii: "'") else { return nil }
        var j = i + 1
        while j < b.count, b[j] != UInt8(ascii: "'") { j += 1 }
        guard j < b.count, j > i + 1 else { return nil }
        let text = String(decoding: b[(i + 1)..<j], as: UTF8.self)
        var k = j + 1
        while isWhitespace(at: k) { k += 1 }
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard k < b.count, b[k] == UInt8(ascii: ")"), parts.count >= 2,
            parts.allSatisfy({ part in
                guard let first = part.utf8.first, isIdentifierStart(first) else { return false }
                return part.utf8.allSatisfy(isIdentifierByte)
            })
        else { return nil }
        i = j + 1
        return text
    }

    /// A qualified type name argument (`Edm.String`, `Ns.T`), only when followed by `,` or `)`.
    mutating func scanTypeNameArgument() throws(SyntaxError) -> String {
        let save = i
        guard let c = peek(), isIdentifierStart(c) else { throw fail("no type") }
        let name = try identifierOrQualified()
        var j = i
        while isWhitespace(at: j) { j += 1 }
        guard name.contains("."), j < b.count, b[j] == UInt8(ascii: ")") || b[j] == UInt8(ascii: ",") else {
            i = save
            throw fail("no type")
        }
        return name
    }

    mutating func parseCase(at start: Int) throws(SyntaxError) -> CommonExpression {
        try expect(UInt8(ascii: "("), "'('")
        skipWhitespace()
        var branches: [CommonExpression.CaseBranch] = []
        while true {
            let condition = try parseExpression()
            skipWhitespace()
            try expect(UInt8(ascii: ":"), "':' in case()")
            skipWhitespace()
            let value = try parseExpression()
            branches.append(.init(condition: condition, value: value))
            skipWhitespace()
            if peek() == UInt8(ascii: ",") {
                i += 1
                skipWhitespace()
                continue
            }
            break
        }
        try expect(UInt8(ascii: ")"), "')' to close case(")
        return CommonExpression(.caseOf(branches), at: start)
    }

    /// `(name=value,…)` for a function, values being expressions (literals, aliases, JSON, paths).
    mutating func parseNamedArguments() throws(SyntaxError) -> [NamedArgument] {
        try expect(UInt8(ascii: "("), "'('")
        var arguments: [NamedArgument] = []
        skipWhitespace()
        if peek() == UInt8(ascii: ")") {
            i += 1
            return arguments
        }
        while true {
            skipWhitespace()
            let name = try identifier()
            skipWhitespace()
            try expect(UInt8(ascii: "="), "'=' after a parameter name")
            skipWhitespace()
            let value = try parseExpression()
            arguments.append(NamedArgument(name: name, value: value))
            skipWhitespace()
            if peek() == UInt8(ascii: ",") {
                i += 1
                continue
            }
            break
        }
        try expect(UInt8(ascii: ")"), "')' to close the arguments")
        return arguments
    }

    /// `(value)` or `(name=value,…)`: values are literals or aliases.
    mutating func parseKeyPredicate() throws(SyntaxError) -> [KeyValue] {
        try expect(UInt8(ascii: "("), "'('")
        var parts: [KeyValue] = []
        while true {
            let partStart = i
            var name: String?
            if let c = peek(), isIdentifierStart(c) {
                let save = i
                let word = try identifier()
                if peek() == UInt8(ascii: "=") {
                    name = word
                    i += 1
                } else {
                    i = save
                }
            }
            let valueStart = i
            let value: CommonExpression
            if peek() == UInt8(ascii: "@") {
                i += 1
                value = CommonExpression(.alias(try identifierOrQualified()), at: valueStart)
            } else if let (literal, end) = Literal.scan(b, i, version: version) {
                i = end
                value = CommonExpression(.literal(literal), at: valueStart)
            } else if let problem = Literal.temporalProblem(b, i) {
                throw fail(problem, at: valueStart, code: .invalidLiteral)
            } else {
                throw fail("A key value must be a literal or a parameter alias", at: valueStart, code: .invalidLiteral)
            }
            if name == nil && !parts.isEmpty { throw fail("Compound keys need names", at: partStart) }
            parts.append(KeyValue(name: name, value: value))
            if peek() == UInt8(ascii: ",") {
                i += 1
                continue
            }
            break
        }
        if parts.count > 1 && parts.contains(where: { $0.name == nil }) {
            throw fail("Compound keys need names")
        }
        try expect(UInt8(ascii: ")"), "')' to close the key")
        return parts
    }
}

/// The canonical functions and how many arguments each takes.
enum CanonicalFunctions {
    static let arity: [String: ClosedRange<Int>] = [
        "contains": 2...2, "endswith": 2...2, "startswith": 2...2, "length": 1...1, "indexof": 2...2,
        "substring": 2...3, "matchespattern": 2...2, "tolower": 1...1, "toupper": 1...1, "trim": 1...1,
        "concat": 2...2, "year": 1...1, "month": 1...1, "day": 1...1, "hour": 1...1, "minute": 1...1,
        "second": 1...1, "fractionalseconds": 1...1, "totalseconds": 1...1, "date": 1...1, "time": 1...1,
        "totaloffsetminutes": 1...1, "mindatetime": 0...0, "maxdatetime": 0...0, "now": 0...0,
        "round": 1...1, "floor": 1...1, "ceiling": 1...1, "geo.distance": 2...2, "geo.length": 1...1,
        "geo.intersects": 2...2, "isof": 1...2, "cast": 1...2, "hassubset": 2...2, "hassubsequence": 2...2,
        // Offline stores: the local state of an entity (`sap.isLocal()` or `isLocal()`).
        "sap.islocal": 0...0, "sap.haspendingchanges": 0...0, "sap.inerrorstate": 0...0, "sap.upsertedlastdownload": 0...0,
        "islocal": 0...0, "haspendingchanges": 0...0, "inerrorstate": 0...0, "upsertedlastdownload": 0...0,
    ]
    /// Maps the local-state functions to one name without the `sap.` prefix.
    static func localState(_ name: String) -> String? {
        let bare = name.hasPrefix("sap.") ? String(name.dropFirst(4)) : name
        return ["islocal", "haspendingchanges", "inerrorstate", "upsertedlastdownload"].contains(bare) ? bare : nil
    }
    /// V2-only functions.
    static let legacy: Set<String> = ["substringof", "replace"]
    static let legacyArity: [String: ClosedRange<Int>] = ["substringof": 2...2, "replace": 3...3]
}
