/// Parses OData request URLs relative to a service root, V4 or V2 syntax.
///
/// Parsing is in stages: the raw URL is split into path segments and query options, each part
/// is percent-decoded and parsed into a syntax tree; ``PathResolver`` and
/// ``ExpressionBinder`` then bind the tree to a model.
public struct URLParser: Sendable {
    public var version: ODataVersion

    /// Creates a value from its parts.
    public init(version: ODataVersion = .v4) { self.version = version }

    /// Parses `path?query` (a leading `/` is ignored).
    public func parse(_ url: String) throws(SyntaxError) -> ParsedURL {
        let raw = Array(url.utf8)
        if let hash = raw.firstIndex(of: UInt8(ascii: "#")) {
            // Only a metadata URL may carry a fragment (a context URL: `$metadata#Customers`).
            guard raw[..<hash].elementsEqual("$metadata".utf8) || raw[..<hash].elementsEqual("/$metadata".utf8) else {
                throw SyntaxError(.unexpectedCharacter, "'#' starts a fragment, which a request URL must not have", input: url, offset: hash)
            }
            return ParsedURL(path: ResourcePath(segments: [PathSegment(.metadata, offset: 0)]), query: QueryOptions())
        }
        let questionMark = raw.firstIndex(of: UInt8(ascii: "?")) ?? raw.count
        let path = try parsePath(raw, 0..<questionMark, input: url)
        var query = QueryOptions()
        if questionMark < raw.count {
            query = try parseQuery(raw, (questionMark + 1)..<raw.count, input: url)
        }
        try checkPathAgainstQuery(path, query, input: url, queryStart: questionMark)
        return ParsedURL(path: path, query: query)
    }

    private func checkPathAgainstQuery(_ path: ResourcePath, _ query: QueryOptions, input: String, queryStart: Int) throws(SyntaxError) {
        guard let first = path.segments.first else { return }
        if first.kind == .entity && query.id == nil {
            throw SyntaxError(.invalidQueryOption, "$entity needs an $id query option", input: input, offset: input.utf8.count)
        }
        if first.kind == .entity && path.segments.count == 1 && (query.select != nil || query.expand != nil) {
            throw SyntaxError(.invalidQueryOption, "$select and $expand on $entity need a type cast ($entity/Ns.Type)", input: input, offset: queryStart + 1)
        }
    }

    /// The decoded value of a system query option in `url` (`name` without `$`), for error
    /// messages that show the option's own text.
    public func optionText(_ name: String, in url: String) -> String? {
        guard let question = url.firstIndex(of: "?") else { return nil }
        for part in url[url.index(after: question)...].split(separator: "&") {
            guard let equals = part.firstIndex(of: "=") else { continue }
            let key = part[..<equals].lowercased()
            if key == "$" + name.lowercased() || key == name.lowercased() {
                let raw = Array(part[part.index(after: equals)...].utf8)
                return (try? DecodedText.decode(raw, 0..<raw.count, plusAsSpace: true, input: String(part)))?.text
            }
        }
        return nil
    }

    // MARK: Path

    /// Parses only a resource path.
    public func parsePath(_ path: String) throws(SyntaxError) -> ResourcePath {
        let raw = Array(path.utf8)
        return try parsePath(raw, 0..<raw.count, input: path)
    }

    func parsePath(_ raw: [UInt8], _ range: Range<Int>, input: String) throws(SyntaxError) -> ResourcePath {
        var start = range.lowerBound
        if start < range.upperBound, raw[start] == UInt8(ascii: "/") { start += 1 }
        var segments: [PathSegment] = []
        if start >= range.upperBound { return ResourcePath(segments: []) }
        // Split on '/' outside parentheses; a raw '/' inside a quoted string is an error (it
        // must be written %2F).
        var parts: [Range<Int>] = []
        var depth = 0
        var inQuote = false
        var segmentStart = start
        var i = start
        while i < range.upperBound {
            // OPEN, CLOSE and SQUOTE may be percent-encoded (`Products(5%29/Name`); a '/' may not.
            let (c, width) = Self.delimiter(in: raw, at: i, end: range.upperBound)
            if inQuote {
                if c == UInt8(ascii: "'") {
                    let (next, nextWidth) = Self.delimiter(in: raw, at: i + width, end: range.upperBound)
                    if next == UInt8(ascii: "'") {
                        i += width + nextWidth
                        continue
                    }
                    inQuote = false
                } else if c == UInt8(ascii: "/") {
                    throw SyntaxError(.invalidPath, "A '/' inside a quoted value must be percent-encoded as %2F", input: input, offset: i)
                }
            } else if c == UInt8(ascii: "'") {
                inQuote = true
            } else if c == UInt8(ascii: "(") {
                depth += 1
            } else if c == UInt8(ascii: ")") {
                depth -= 1
            } else if c == UInt8(ascii: "/") && depth <= 0 {
                parts.append(segmentStart..<i)
                segmentStart = i + 1
            }
            i += width
        }
        parts.append(segmentStart..<range.upperBound)
        // V2 `Orders(1)/$links/Items` addresses the links of Items: V4's `Orders(1)/Items/$ref`.
        var linksAt: Int?
        for (index, part) in parts.enumerated() {
            if part.isEmpty {
                // A trailing slash is tolerated; an empty segment elsewhere is not.
                if index == parts.count - 1 && index > 0 { continue }
                throw SyntaxError(.invalidPath, "Empty path segment", input: input, offset: part.lowerBound)
            }
            let decoded = try DecodedText.decode(raw, part, plusAsSpace: false, input: input)
            if version.isLegacy && decoded.text == "$links" {
                guard index > 0, linksAt == nil, index + 1 < parts.count, !parts[index + 1].isEmpty else {
                    throw SyntaxError(.invalidPath, "$links must follow an entity and come before one navigation property",
                                      input: input, offset: part.lowerBound)
                }
                linksAt = part.lowerBound
                continue
            }
            do throws(SyntaxError) {
                segments.append(contentsOf: try parseSegment(decoded.text, isFirst: index == 0, rawOffset: part.lowerBound))
            } catch {
                throw SyntaxError(error.code, error.message, input: input, offset: decoded.rawOffset(error.offset))
            }
            if let offset = linksAt, index > 0, parts[index - 1].lowerBound == offset {
                guard index == parts.count - 1 || (index == parts.count - 2 && parts[index + 1].isEmpty) else {
                    throw SyntaxError(.invalidPath, "Nothing may follow the navigation property after $links",
                                      input: input, offset: part.upperBound)
                }
                segments.append(PathSegment(.ref, offset: offset))
            }
        }
        return ResourcePath(segments: segments)
    }

    /// The byte at `i` with `%28`, `%29` and `%27` read as the delimiters they encode, and how
    /// many raw bytes it took; past `end`, a zero byte.
    static func delimiter(in raw: [UInt8], at i: Int, end: Int) -> (UInt8, Int) {
        guard i < end else { return (0, 1) }
        guard raw[i] == UInt8(ascii: "%"), i + 2 < end, raw[i + 1] == UInt8(ascii: "2") else { return (raw[i], 1) }
        switch raw[i + 2] {
        case UInt8(ascii: "8"): return (UInt8(ascii: "("), 3)
        case UInt8(ascii: "9"): return (UInt8(ascii: ")"), 3)
        case UInt8(ascii: "7"): return (UInt8(ascii: "'"), 3)
        default: return (raw[i], 1)
        }
    }

    /// Parses one decoded segment into one or more segments (a name plus key or arguments).
    func parseSegment(_ text: String, isFirst: Bool, rawOffset: Int) throws(SyntaxError) -> [PathSegment] {
        var parser = ExpressionParser(text, version: version)
        let b = parser.b
        func finish() throws(SyntaxError) {
            guard parser.atEnd else { throw parser.fail("Unexpected text in a path segment", code: .unexpectedCharacter) }
        }
        if b.first == UInt8(ascii: "$") {
            let simple: [String: PathSegment.Kind] = [
                "$metadata": .metadata, "$batch": .batch, "$entity": .entity, "$all": .all,
                "$count": .count, "$value": .value, "$ref": .ref, "$each": .each, "$query": .query,
            ]
            if let kind = simple[text] { return [PathSegment(kind, offset: rawOffset)] }
            if text.hasPrefix("$crossjoin(") {
                parser.i = "$crossjoin".utf8.count
                try parser.expect(UInt8(ascii: "("), "'('")
                var names: [String] = []
                repeat {
                    if parser.peek() == UInt8(ascii: ",") { parser.i += 1 }
                    names.append(try parser.identifier())
                } while parser.peek() == UInt8(ascii: ",")
                try parser.expect(UInt8(ascii: ")"), "')'")
                try finish()
                return [PathSegment(.crossjoin(names), offset: rawOffset)]
            }
            if text.hasPrefix("$filter(") {
                parser.i = "$filter".utf8.count
                try parser.expect(UInt8(ascii: "("), "'('")
                let expression = try parser.parseExpression()
                try parser.expect(UInt8(ascii: ")"), "')'")
                try finish()
                return [PathSegment(.filter(expression), offset: rawOffset)]
            }
            throw SyntaxError(.invalidPath, "Unknown path segment \(text)", input: text, offset: 0)
        }
        guard let first = b.first, isIdentifierStart(first) else {
            if !isFirst {
                // Key-as-segment: a literal value on its own.
                return [PathSegment(.keySegment(text), offset: rawOffset)]
            }
            throw SyntaxError(.invalidPath, "A path must start with a name", input: text, offset: 0)
        }
        let name = try parser.identifierOrQualified()
        if parser.peek() == UInt8(ascii: ".") {
            throw parser.fail("A name must not end with '.'", code: .unexpectedCharacter)
        }
        var result: [PathSegment] = []
        // Byte by byte: `String.contains(_:)` with a string goes through Foundation's search,
        // the parser's largest cost per segment.
        let qualified = name.utf8.contains(UInt8(ascii: "."))
        if parser.atEnd {
            let kind: PathSegment.Kind = qualified ? .typeCast(name) : .unresolved(name)
            return [PathSegment(kind, offset: rawOffset)]
        }
        guard parser.peek() == UInt8(ascii: "(") else {
            if !isFirst {
                return [PathSegment(.keySegment(text), offset: rawOffset)]
            }
            throw parser.fail("Unexpected character after a name", code: .unexpectedCharacter)
        }
        // Parenthesized groups: function arguments and/or key predicates.
        let groupStart = parser.i
        let isFunctionLike = looksLikeArguments(b, from: groupStart) || (qualified && looksNamed(b, from: groupStart))
        if isFunctionLike {
            let arguments = try parser.parseNamedArguments()
            result.append(PathSegment(qualified ? .function(name, arguments) : .functionImport(name, arguments), offset: rawOffset))
        } else {
            result.append(PathSegment(qualified ? .typeCast(name) : .unresolved(name), offset: rawOffset))
            let keys = try parser.parseKeyPredicate()
            result.append(PathSegment(.key(keys), offset: rawOffset + groupStart))
        }
        while parser.peek() == UInt8(ascii: "(") {
            let keyOffset = parser.i
            let keys = try parser.parseKeyPredicate()
            result.append(PathSegment(.key(keys), offset: rawOffset + keyOffset))
        }
        try finish()
        return result
    }

    /// `()` or `(name=@alias…)` or a value that is not a literal: function arguments rather than
    /// a key. Named literals are ambiguous (`(ID=1)`) and count as a key until resolved.
    private func looksLikeArguments(_ b: [UInt8], from start: Int) -> Bool {
        start + 1 < b.count && b[start + 1] == UInt8(ascii: ")")
    }

    /// `(name=…`: named arguments or a named key.
    private func looksNamed(_ b: [UInt8], from start: Int) -> Bool {
        var j = start + 1
        while j < b.count, isIdentifierByte(b[j]) { j += 1 }
        return j > start + 1 && j < b.count && b[j] == UInt8(ascii: "=")
    }

    // MARK: Query

    /// System query options that a request may carry, in lower case without `$` (4.01 allows
    /// them without `$` too).
    public static let systemOptions: Set<String> = [
        "filter", "orderby", "top", "skip", "count", "inlinecount", "select", "expand", "search", "skiptoken",
        "deltatoken", "format", "compute", "apply", "id", "index", "schemaversion", "levels",
    ]

    func parseQuery(_ raw: [UInt8], _ range: Range<Int>, input: String) throws(SyntaxError) -> QueryOptions {
        var options = QueryOptions()
        var seen: Set<String> = []
        var start = range.lowerBound
        var parts: [Range<Int>] = []
        for i in range where raw[i] == UInt8(ascii: "&") {
            parts.append(start..<i)
            start = i + 1
        }
        parts.append(start..<range.upperBound)
        for part in parts {
            if part.isEmpty { continue }
            let equals = raw[part].firstIndex(of: UInt8(ascii: "=")) ?? part.upperBound
            let name = try DecodedText.decode(raw, part.lowerBound..<equals, plusAsSpace: true, input: input).text
            let hasValue = equals < part.upperBound
            let valueRange = hasValue ? (equals + 1)..<part.upperBound : part.upperBound..<part.upperBound
            let value = try DecodedText.decode(raw, valueRange, plusAsSpace: true, input: input)
            let bareSystem = version >= .v401 && Self.systemOptions.contains(name.lowercased())
            if name.hasPrefix("$") || bareSystem || (name.hasPrefix("@") && !version.isLegacy) {
                guard hasValue else {
                    throw SyntaxError(.invalidQueryOption, "\(name) needs '=' and a value", input: input, offset: part.upperBound)
                }
                if name.hasPrefix("@") {
                    let aliasName = String(name.dropFirst())
                    do throws(SyntaxError) {
                        var parser = ExpressionParser(value.text, version: version)
                        options.aliases[aliasName] = try parser.parseComplete()
                    } catch {
                        throw SyntaxError(error.code, error.message, input: input, offset: value.rawOffset(error.offset))
                    }
                    continue
                }
                let key = bareSystem ? name.lowercased() : name.dropFirst().lowercased()
                guard Self.systemOptions.contains(key) else {
                    throw SyntaxError(.invalidQueryOption, "Unknown system query option \(name)", input: input, offset: part.lowerBound)
                }
                guard seen.insert(key).inserted else {
                    throw SyntaxError(.duplicateQueryOption, "\(name) is given twice", input: input, offset: part.lowerBound)
                }
                do throws(SyntaxError) {
                    try apply(key, value.text, encoded: value.encoded[...], to: &options, nested: false)
                } catch {
                    throw SyntaxError(error.code, error.message, input: input, offset: value.rawOffset(error.offset))
                }
            } else {
                if name.isEmpty {
                    throw SyntaxError(.invalidQueryOption, "A query option needs a name", input: input, offset: part.lowerBound)
                }
                if name == "!deltatoken" {
                    options.deltaToken = value.text
                }
                options.custom.append(CustomOption(name: name, value: hasValue ? value.text : nil))
            }
        }
        return options
    }

    /// Parses a single system query option value (decoded) into `options`.
    func apply(_ key: String, _ value: String, encoded: ArraySlice<Bool>, to options: inout QueryOptions, nested: Bool) throws(SyntaxError) {
        func nonNegative() throws(SyntaxError) -> Int {
            guard !value.isEmpty, value.utf8.allSatisfy(isDigit), let n = Int(value) else {
                let bad = value.utf8.firstIndex { !isDigit($0) }.map { value.utf8.distance(from: value.utf8.startIndex, to: $0) } ?? 0
                throw SyntaxError(.invalidQueryOption, "$\(key) needs a non-negative integer", input: value, offset: bad)
            }
            return n
        }
        switch key {
        case "filter":
            var parser = ExpressionParser(value, version: version)
            options.filter = try parser.parseComplete()
        case "orderby":
            options.orderBy = try parseOrderBy(value)
        case "top": options.top = try nonNegative()
        case "skip": options.skip = try nonNegative()
        case "index":
            guard let n = Int(value), value.utf8.allSatisfy({ isDigit($0) || $0 == UInt8(ascii: "-") }) else {
                throw SyntaxError(.invalidQueryOption, "$index needs an integer", input: value, offset: 0)
            }
            options.index = n
        case "count":
            switch value.lowercased() {
            case "true": options.count = true
            case "false": options.count = false
            default: throw SyntaxError(.invalidQueryOption, "$count must be true or false", input: value, offset: 0)
            }
        case "inlinecount":
            guard let inline = InlineCount(rawValue: value.lowercased()) else {
                throw SyntaxError(.invalidQueryOption, "$inlinecount must be allpages or none", input: value, offset: 0)
            }
            options.inlineCount = inline
        case "select":
            if !nested { try checkNesting(value) }
            options.select = try parseSelect(value, encoded: encoded)
        case "expand":
            if !nested { try checkNesting(value) }
            options.expand = try parseExpand(value, encoded: encoded)
        case "search":
            options.search = try SearchParser.parseComplete(value, encoded: Array(encoded))
        case "skiptoken": options.skipToken = value
        case "deltatoken": options.deltaToken = value
        case "format":
            guard !value.isEmpty else { throw SyntaxError(.invalidQueryOption, "$format needs a value", input: value, offset: 0) }
            options.format = value
        case "compute": options.compute = try parseCompute(value)
        case "apply": options.apply = value
        case "id": options.id = value
        case "schemaversion": options.schemaVersion = value
        case "levels":
            guard nested else { throw SyntaxError(.invalidQueryOption, "$levels is only allowed inside $expand", input: value, offset: 0) }
            if value.lowercased() == "max" {
                options.levels = .max
            } else {
                let n = try nonNegative()
                guard n > 0, !value.hasPrefix("0") else {
                    throw SyntaxError(.invalidQueryOption, "$levels needs a positive integer without leading zeros or max", input: value, offset: 0)
                }
                options.levels = .count(n)
            }
        default:
            throw SyntaxError(.invalidQueryOption, "Unknown system query option $\(key)", input: value, offset: 0)
        }
    }

    /// `$expand` and `$select` nest by parentheses, and each level is parsed by recursion: more
    /// than 100 levels are refused before parsing (one pass over the text).
    func checkNesting(_ value: String) throws(SyntaxError) {
        var depth = 0
        var quoted = false
        for (offset, c) in value.utf8.enumerated() {
            if c == UInt8(ascii: "'") { quoted.toggle() }
            guard !quoted else { continue }
            if c == UInt8(ascii: "(") {
                depth += 1
                guard depth <= 100 else { throw SyntaxError(.tooDeep, "Options nested more than 100 levels deep", input: value, offset: offset) }
            } else if c == UInt8(ascii: ")") {
                depth -= 1
            }
        }
    }

    // MARK: Lists

    /// Splits at top-level `separator` (outside parentheses, brackets and quotes).
    /// A separator that was percent-encoded (flag set in `encoded`) splits only where an option
    /// (`$name=`, `@alias=` or `name=`) follows: `$expand=A(%24top%3D1%3B%24skip%3D1)` has two
    /// options, `$expand=A($search=a%3Bb)` one search term `a;b`.
    func splitTopLevel(_ text: String, separator: UInt8, encoded: ArraySlice<Bool> = []) throws(SyntaxError) -> [(String, Int)] {
        let b = Array(text.utf8)
        var result: [(String, Int)] = []
        var depth = 0
        var quote: UInt8?
        var start = 0
        var i = 0
        while i < b.count {
            let c = b[i]
            if let q = quote {
                if c == q {
                    if q == UInt8(ascii: "'"), i + 1 < b.count, b[i + 1] == q {
                        i += 2
                        continue
                    }
                    quote = nil
                } else if q == UInt8(ascii: "\"") && c == UInt8(ascii: "\\") {
                    i += 1
                }
            } else if c == UInt8(ascii: "'") || c == UInt8(ascii: "\"") {
                quote = c
            } else if c == UInt8(ascii: "(") || c == UInt8(ascii: "[") || c == UInt8(ascii: "{") {
                depth += 1
            } else if c == UInt8(ascii: ")") || c == UInt8(ascii: "]") || c == UInt8(ascii: "}") {
                depth -= 1
                if depth < 0 { throw SyntaxError(.unexpectedCharacter, "Unbalanced ')'", input: text, offset: i) }
            } else if c == separator && depth == 0
                        && (!(encoded.startIndex + i < encoded.endIndex && encoded[encoded.startIndex + i]) || startsOption(b, at: i + 1)) {
                result.append((String(decoding: b[start..<i], as: UTF8.self), start))
                start = i + 1
            }
            i += 1
        }
        if quote != nil { throw SyntaxError(.unexpectedEnd, "Unterminated string", input: text, offset: b.count) }
        if depth != 0 { throw SyntaxError(.unexpectedEnd, "Unbalanced '('", input: text, offset: b.count) }
        result.append((String(decoding: b[start..<b.count], as: UTF8.self), start))
        return result
    }

    /// `$name=`, `@name=` or `name=` at `start`.
    private func startsOption(_ b: [UInt8], at start: Int) -> Bool {
        var j = start
        if j < b.count, b[j] == UInt8(ascii: "$") || b[j] == UInt8(ascii: "@") { j += 1 }
        let nameStart = j
        while j < b.count, isIdentifierByte(b[j]) { j += 1 }
        return j > nameStart && j < b.count && b[j] == UInt8(ascii: "=")
    }

    /// Rebases an error in `part` (which starts at `offset` of `whole`) onto `whole`.
    func rebase(_ error: SyntaxError, _ offset: Int, _ whole: String) -> SyntaxError {
        SyntaxError(error.code, error.message, input: whole, offset: offset + error.offset)
    }

    func parseOrderBy(_ value: String) throws(SyntaxError) -> [OrderByItem] {
        var items: [OrderByItem] = []
        for (part, offset) in try splitTopLevel(value, separator: UInt8(ascii: ",")) {
            do throws(SyntaxError) {
                var text = part
                var descending = false
                for (suffix, isDescending) in [("desc", true), ("asc", false)] where text.lowercased().hasSuffix(suffix) {
                    let head = text.dropLast(suffix.count)
                    guard let last = head.last, last == " " || last == "\t" else { continue }
                    text = String(head)
                    while let end = text.last, end == " " || end == "\t" { text.removeLast() }
                    descending = isDescending
                    break
                }
                var parser = ExpressionParser(text, version: version)
                items.append(OrderByItem(expression: try parser.parseComplete(), descending: descending))
            } catch {
                throw rebase(error, offset, value)
            }
        }
        return items
    }

    func parseCompute(_ value: String) throws(SyntaxError) -> [ComputeItem] {
        var items: [ComputeItem] = []
        for (part, offset) in try splitTopLevel(value, separator: UInt8(ascii: ",")) {
            do throws(SyntaxError) {
                guard let range = part.range(of: " as ", options: .backwards) else {
                    throw SyntaxError(.invalidQueryOption, "$compute items need 'as' and an alias", input: part, offset: part.utf8.count)
                }
                let alias = String(part[range.upperBound...])
                guard let first = alias.utf8.first, isIdentifierStart(first), alias.utf8.allSatisfy(isIdentifierByte) else {
                    throw SyntaxError(.invalidQueryOption, "'\(alias)' is not a valid alias", input: part, offset: part.utf8.distance(from: part.startIndex, to: range.upperBound))
                }
                var parser = ExpressionParser(String(part[..<range.lowerBound]), version: version)
                items.append(ComputeItem(expression: try parser.parseComplete(), alias: alias))
            } catch {
                throw rebase(error, offset, value)
            }
        }
        return items
    }

    /// Parses `(opt;opt)` nested options at `text[open...]`, returning the options.
    func parseNestedOptions(_ inner: String, encoded: ArraySlice<Bool>, allowed: Set<String>) throws(SyntaxError) -> QueryOptions {
        var options = QueryOptions()
        var seen: Set<String> = []
        for (part, offset) in try splitTopLevel(inner, separator: UInt8(ascii: ";"), encoded: encoded) {
            do throws(SyntaxError) {
                guard let equals = part.firstIndex(of: "=") else {
                    throw SyntaxError(.invalidQueryOption, "Nested options need '='", input: part, offset: part.utf8.count)
                }
                let name = part[..<equals].lowercased()
                if name.hasPrefix("@") {
                    // A parameter alias local to this item (4.01).
                    var parser = ExpressionParser(String(part[part.index(after: equals)...]), version: version)
                    let valueStart = part.utf8.distance(from: part.startIndex, to: equals) + 1
                    do throws(SyntaxError) {
                        options.aliases[String(name.dropFirst())] = try parser.parseComplete()
                    } catch {
                        throw rebase(error, valueStart, part)
                    }
                    continue
                }
                guard name.hasPrefix("$") || version >= .v401 else {
                    throw SyntaxError(.invalidQueryOption, "Only system query options may be nested", input: part, offset: 0)
                }
                let key = name.hasPrefix("$") ? String(name.dropFirst()) : name
                guard allowed.contains(key) else {
                    throw SyntaxError(.invalidQueryOption, "$\(key) is not allowed here", input: part, offset: 0)
                }
                guard seen.insert(key).inserted else {
                    throw SyntaxError(.duplicateQueryOption, "$\(key) is given twice", input: part, offset: 0)
                }
                let valueStart = part.utf8.distance(from: part.startIndex, to: equals) + 1
                do throws(SyntaxError) {
                    let valueEncoded = slice(encoded, from: offset + valueStart, count: part.utf8.count - valueStart)
                    try apply(key, String(part[part.index(after: equals)...]), encoded: valueEncoded, to: &options, nested: true)
                } catch {
                    throw rebase(error, valueStart, part)
                }
            } catch {
                throw rebase(error, offset, inner)
            }
        }
        return options
    }

    /// The part of an encoded-flags slice for a sub-range (relative offsets), clamped.
    func slice(_ flags: ArraySlice<Bool>, from offset: Int, count: Int) -> ArraySlice<Bool> {
        let start = min(flags.startIndex + max(0, offset), flags.endIndex)
        let end = min(start + max(0, count), flags.endIndex)
        return flags[start..<end]
    }

    /// Splits `name(inner)` into the name and the inner text; nil inner when there are no parens.
    func splitParens(_ item: String) throws(SyntaxError) -> (head: String, inner: String?, innerOffset: Int) {
        guard let open = item.firstIndex(of: "(") else { return (item, nil, 0) }
        guard item.hasSuffix(")") else {
            throw SyntaxError(.unexpectedCharacter, "Expected ')' at the end", input: item, offset: item.utf8.count)
        }
        let head = String(item[..<open])
        let inner = String(item[item.index(after: open)..<item.index(before: item.endIndex)])
        return (head, inner, head.utf8.count + 1)
    }

    private static let expandOptions: Set<String> = ["filter", "select", "expand", "orderby", "skip", "top", "count", "search", "levels", "compute", "apply"]
    private static let refOptions: Set<String> = ["filter", "search", "orderby", "skip", "top", "count"]
    private static let countOptions: Set<String> = ["filter", "search"]
    private static let selectOptions: Set<String> = ["filter", "search", "orderby", "skip", "top", "count", "select", "compute"]

    func parseExpand(_ value: String, encoded: ArraySlice<Bool> = []) throws(SyntaxError) -> [ExpandItem] {
        var items: [ExpandItem] = []
        // COMMA is `","` or `"%2C"` (clients such as Python's requests encode it), so an encoded
        // comma separates items too; only SEMI inside nested options keeps its encoded form.
        for (part, offset) in try splitTopLevel(value, separator: UInt8(ascii: ",")) {
            do throws(SyntaxError) {
                let (head, inner, innerOffset) = try splitParens(part)
                var segments = head.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
                var item = ExpandItem(path: [])
                if segments.last == "$ref" {
                    item.isRef = true
                    segments.removeLast()
                } else if segments.last == "$count" {
                    item.isCount = true
                    segments.removeLast()
                }
                guard !segments.isEmpty else {
                    throw SyntaxError(.invalidQueryOption, "An expand item needs a navigation path", input: part, offset: 0)
                }
                // A V2 path becomes one nesting level per step (see `nestLegacyPaths`).
                guard segments.count <= 100 else {
                    throw SyntaxError(.tooDeep, "An expand path of more than 100 steps", input: part, offset: 0)
                }
                var position = 0
                for (index, segment) in segments.enumerated() {
                    let valid = segment == "*" ? index == segments.count - 1 && !item.isCount
                        : segment == "$value" ? segments.count == 1
                        : segment.hasPrefix("@") ? isQualifiedOrSimpleName(String(segment.dropFirst()).components(separatedBy: "#")[0])
                        : isQualifiedOrSimpleName(segment)
                    guard valid else {
                        throw SyntaxError(.invalidQueryOption, "'\(segment)' is not a valid expand path segment", input: part, offset: position)
                    }
                    position += segment.utf8.count + 1
                }
                item.path = segments
                if let inner {
                    let allowed = item.isRef ? Self.refOptions : item.isCount ? Self.countOptions
                        : segments.last == "*" ? ["levels"] : Self.expandOptions
                    do throws(SyntaxError) {
                        let innerEncoded = slice(encoded, from: offset + innerOffset, count: inner.utf8.count)
                        item.options = try parseNestedOptions(inner, encoded: innerEncoded, allowed: allowed)
                    } catch {
                        throw rebase(error, innerOffset, part)
                    }
                }
                items.append(item)
            } catch {
                throw rebase(error, offset, value)
            }
        }
        return version.isLegacy ? Self.nestLegacyPaths(items) : items
    }

    /// V2's only nested expand is a path of navigation properties (`Orders/Items`): it becomes
    /// `Orders($expand=Items)`, and items with the same first step share it
    /// (`Orders,Orders/Items` is one `Orders` with `Items` inside).
    static func nestLegacyPaths(_ items: [ExpandItem]) -> [ExpandItem] {
        var result: [ExpandItem] = []
        var indexOfHead: [String: Int] = [:]
        var nested: [Int: [ExpandItem]] = [:]
        for item in items {
            guard let head = item.path.first else { continue }
            if item.path.count == 1 && (item.isRef || item.isCount) {
                result.append(item)
                continue
            }
            let index = indexOfHead[head] ?? result.count
            if index == result.count {
                indexOfHead[head] = index
                result.append(ExpandItem(path: [head]))
            }
            if item.path.count == 1 {
                if result[index].options == nil { result[index].options = item.options }
            } else {
                var rest = item
                rest.path.removeFirst()
                nested[index, default: []].append(rest)
            }
        }
        // Each item is handled once per level; paths have at most 100 steps (checked above).
        for (index, rests) in nested {
            var options = result[index].options ?? QueryOptions()
            options.expand = nestLegacyPaths((options.expand ?? []) + rests)
            result[index].options = options
        }
        return result
    }

    func parseSelect(_ value: String, encoded: ArraySlice<Bool> = []) throws(SyntaxError) -> [SelectItem] {
        var items: [SelectItem] = []
        for (part, offset) in try splitTopLevel(value, separator: UInt8(ascii: ",")) {
            do throws(SyntaxError) {
                let (head, inner, innerOffset) = try splitParens(part)
                var item: SelectItem
                if head == "*" {
                    item = SelectItem(kind: .star)
                } else if head.hasSuffix(".*") {
                    let namespace = String(head.dropLast(2))
                    guard isQualifiedOrSimpleName(namespace) else {
                        throw SyntaxError(.invalidQueryOption, "'\(head)' is not a valid namespace wildcard", input: part, offset: 0)
                    }
                    item = SelectItem(kind: .allOperations(namespace))
                } else {
                    let segments = head.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
                    var position = 0
                    for segment in segments {
                        let name = segment.hasPrefix("@") ? String(segment.dropFirst()) : segment
                        let parameterList = name.firstIndex(of: "(") == nil
                        guard parameterList, isQualifiedOrSimpleName(name.split(separator: "#", maxSplits: 1).first.map(String.init) ?? "") else {
                            throw SyntaxError(.invalidQueryOption, "'\(segment)' is not a valid select path segment", input: part, offset: position)
                        }
                        position += segment.utf8.count + 1
                    }
                    item = SelectItem(kind: .path(segments))
                }
                if let inner, isParameterNameList(inner), case .path(let segments) = item.kind, segments.last?.contains(".") == true || segments.count == 1 {
                    // `Ns.Function(p1,p2)`: a function overload by parameter names.
                    item.kind = .path(segments.dropLast() + [(segments.last ?? "") + "(" + inner + ")"])
                } else if let inner {
                    do throws(SyntaxError) {
                        let innerEncoded = slice(encoded, from: offset + innerOffset, count: inner.utf8.count)
                        item.options = try parseNestedOptions(inner, encoded: innerEncoded, allowed: Self.selectOptions)
                    } catch {
                        throw rebase(error, innerOffset, part)
                    }
                }
                items.append(item)
            } catch {
                throw rebase(error, offset, value)
            }
        }
        return items
    }

    /// `p1,p2`: names only, no `$` options.
    func isParameterNameList(_ text: String) -> Bool {
        text.split(separator: ",", omittingEmptySubsequences: false).allSatisfy { isQualifiedOrSimpleName(String($0)) && !$0.contains(".") }
    }

    func isQualifiedOrSimpleName(_ text: String) -> Bool {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        return !parts.isEmpty && parts.allSatisfy { part in
            guard let first = part.utf8.first, isIdentifierStart(first) else { return false }
            return part.utf8.allSatisfy(isIdentifierByte)
        }
    }
}
