/// A small deterministic random number generator (SplitMix64): the same seed gives the same
/// sequence on every platform and Swift version, unlike the standard library's generator or its
/// `random(in:using:)` algorithms.
public struct OracleRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// A generator whose sequence depends only on `seed`.
    public init(seed: UInt64) { state = seed }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A number in `range` (ranges of the sizes used here; the modulo bias is negligible).
    public mutating func int(_ range: ClosedRange<Int>) -> Int {
        let span = UInt64(range.upperBound - range.lowerBound) &+ 1
        guard span != 0 else { return range.lowerBound &+ Int(truncatingIfNeeded: next()) }
        return range.lowerBound + Int(next() % span)
    }

    /// True with probability `probability`.
    public mutating func chance(_ probability: Double) -> Bool {
        Double(next() >> 11) / Double(UInt64(1) << 53) < probability
    }

    /// One of `items`, which must not be empty.
    public mutating func pick<T>(_ items: [T]) -> T {
        items[int(0...(items.count - 1))]
    }

    /// An index into `weights`, each chosen in proportion to its weight (weights are ≥ 0, and
    /// at least one is positive).
    public mutating func weightedIndex(_ weights: [Int]) -> Int {
        let total = weights.reduce(0) { $0 + max(0, $1) }
        guard total > 0 else { return 0 }
        var roll = int(0...(total - 1))
        for (index, weight) in weights.enumerated() where weight > 0 {
            if roll < weight { return index }
            roll -= weight
        }
        return weights.count - 1
    }
}

/// One generated request: the option values as OData URL syntax before percent-encoding.
public struct OracleCase: Sendable, Hashable {
    public var entitySet: String
    public var filter: String?
    /// `$orderby` without the key that ``url(tieBreak:)`` appends.
    public var orderBy: String?
    public var top: Int?
    public var skip: Int?
    public var select: [String]?

    /// Creates a value from its parts.
    public init(entitySet: String, filter: String?, orderBy: String?, top: Int?, skip: Int?, select: [String]?) {
        self.entitySet = entitySet
        self.filter = filter
        self.orderBy = orderBy
        self.top = top
        self.skip = skip
        self.select = select
    }

    /// The options as name/value pairs, `$orderby` ending with `tieBreak` (the key, so that
    /// the order is total and both sides must agree on it).
    public func options(tieBreak: String) -> [(String, String)] {
        var options: [(String, String)] = []
        if let filter { options.append(("$filter", filter)) }
        options.append(("$orderby", orderBy.map { $0 + "," + tieBreak } ?? tieBreak))
        if let top { options.append(("$top", String(top))) }
        if let skip { options.append(("$skip", String(skip))) }
        if let select { options.append(("$select", select.joined(separator: ","))) }
        return options
    }

    /// The request as a person reads it (not percent-encoded).
    public func text(tieBreak: String) -> String {
        entitySet + "?" + options(tieBreak: tieBreak).map { $0.0 + "=" + $0.1 }.joined(separator: "&")
    }

    /// The request URL (relative to the service root) with each option value percent-encoded.
    public func url(tieBreak: String) -> String {
        entitySet + "?" + options(tieBreak: tieBreak).map { $0.0 + "=" + Self.percentEncoded($0.1) }
            .joined(separator: "&")
    }

    /// `text` with every byte percent-encoded but letters, digits and `-._~'(),:/$@!*;`: `+`
    /// (a space in a query), `&`, `#`, `%`, `=`, spaces and non-ASCII text are encoded.
    public static func percentEncoded(_ text: String) -> String {
        let hex = Array("0123456789ABCDEF")
        var out = ""
        for byte in text.utf8 {
            let isLetterOrDigit = (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A)
                || (byte >= 0x61 && byte <= 0x7A)
            if isLetterOrDigit || "-._~'(),:/$@!*;".utf8.contains(byte) {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                out.append("%")
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0x0F)])
            }
        }
        return out
    }
}

/// Generates well-typed `$filter` and `$orderby` expressions over ``OracleModel``'s `Thing`,
/// plus `$top`, `$skip` and `$select`, deterministically from a seed.
///
/// Expressions use the store's functions and operators (and, now and then, ones the store
/// refuses with 501, which the test counts as refused): comparisons, `and`/`or`/`not`,
/// arithmetic, string and date functions, `round`/`floor`/`ceiling`, `cast`, `isof`, enums
/// with `has`, `in` lists, null comparisons, `any`/`all` over the collections and `$count`.
/// Composite operands are parenthesized, so precedence never decides the meaning. Divisors
/// are non-zero literals, except sometimes a property (a zero there makes the oracle refuse).
public struct OracleGenerator: Sendable {
    public var random: OracleRandom
    /// The deepest nesting of operators and functions.
    public var maxDepth: Int

    /// A generator for `seed`; expressions nest at most `maxDepth` levels.
    public init(seed: UInt64, maxDepth: Int = 4) {
        self.random = OracleRandom(seed: seed)
        self.maxDepth = max(1, maxDepth)
    }

    /// The next case: usually a filter, always an order, sometimes `$top`, `$skip`, `$select`.
    public mutating func nextCase() -> OracleCase {
        let filter: String? = random.chance(0.04) ? nil : self.filter()
        let orderBy: String? = random.chance(0.1) ? nil : self.orderBy()
        let top: Int? = random.chance(0.5) ? random.int(0...20) : nil
        let skip: Int? = random.chance(0.4) ? random.int(0...30) : nil
        let select: [String]? = random.chance(0.2) ? self.select() : nil
        return OracleCase(entitySet: OracleModel.entitySet, filter: filter, orderBy: orderBy, top: top, skip: skip,
                          select: select)
    }

    /// A Boolean expression for `$filter`.
    public mutating func filter() -> String {
        boolean(maxDepth, Scope())
    }

    /// One or two `$orderby` items (properties or expressions, some `desc`), without the key.
    public mutating func orderBy() -> String {
        var items: [String] = []
        for _ in 0..<(random.chance(0.7) ? 1 : 2) {
            let type = random.pick(GenType.allCases)
            let item = random.chance(0.7) ? Self.property(type) : value(type, random.int(2...3), Scope())
            items.append(random.chance(0.4) ? item + " desc" : item)
        }
        return items.joined(separator: ",")
    }

    /// One to three distinct properties for `$select`.
    public mutating func select() -> [String] {
        let names = GenType.allCases.map(Self.property) + ["Tags", "Scores"]
        var chosen: [String] = []
        for _ in 0..<random.int(1...3) {
            let name = random.pick(names)
            if !chosen.contains(name) { chosen.append(name) }
        }
        return chosen
    }

    // MARK: Types

    /// The types the generator produces values of (one property each).
    enum GenType: CaseIterable, Sendable {
        case boolean, string, byte, sbyte, int16, int32, int64, single, double, decimal
        case date, timeOfDay, dateTimeOffset, duration, guid, status, color

        var isNumeric: Bool {
            switch self {
            case .byte, .sbyte, .int16, .int32, .int64, .single, .double, .decimal: true
            default: false
            }
        }

        var isIntegral: Bool {
            switch self {
            case .byte, .sbyte, .int16, .int32, .int64: true
            default: false
            }
        }

        /// The primitive type name for `cast` (nil for the enums).
        var edmName: String? {
            switch self {
            case .boolean: "Edm.Boolean"
            case .string: "Edm.String"
            case .byte: "Edm.Byte"
            case .sbyte: "Edm.SByte"
            case .int16: "Edm.Int16"
            case .int32: "Edm.Int32"
            case .int64: "Edm.Int64"
            case .single: "Edm.Single"
            case .double: "Edm.Double"
            case .decimal: "Edm.Decimal"
            case .date: "Edm.Date"
            case .timeOfDay: "Edm.TimeOfDay"
            case .dateTimeOffset: "Edm.DateTimeOffset"
            case .duration: "Edm.Duration"
            case .guid: "Edm.Guid"
            case .status, .color: nil
            }
        }
    }

    static let numericTypes: [GenType] = GenType.allCases.filter(\.isNumeric)
    static let integerTypes: [GenType] = GenType.allCases.filter(\.isIntegral)
    /// Cast targets the store computes (docs/store.md), and the rest it refuses.
    static let computedCastTargets: [GenType] = [.string, .int16, .int32, .int64, .byte, .sbyte, .double, .single]
    static let refusedCastTargets: [GenType] = [.boolean, .decimal, .guid, .date, .dateTimeOffset, .timeOfDay,
                                                .duration]

    static func property(_ type: GenType) -> String {
        switch type {
        case .boolean: "Flag"
        case .string: "Str"
        case .byte: "U8"
        case .sbyte: "I8"
        case .int16: "I16"
        case .int32: "I32"
        case .int64: "I64"
        case .single: "Sgl"
        case .double: "Dbl"
        case .decimal: "Dec"
        case .date: "Dt"
        case .timeOfDay: "Tod"
        case .dateTimeOffset: "Dto"
        case .duration: "Dur"
        case .guid: "Uid"
        case .status: "Status"
        case .color: "Color"
        }
    }

    /// Lambda variables in scope, innermost last.
    struct Scope: Sendable {
        var variables: [(name: String, type: GenType)] = []

        func variable(of type: GenType) -> String? {
            variables.last { $0.type == type }?.name
        }
    }

    // MARK: Boolean expressions

    mutating func boolean(_ depth: Int, _ scope: Scope) -> String {
        if depth <= 1 { return simplePredicate(scope) }
        let inner = depth - 1
        switch random.weightedIndex([22, 7, 7, 10, 5, 8, 6, 6, 7, 2, 3, 1, 7]) {
        case 0: return comparison(inner, scope)
        case 1: return crossNumericComparison(inner, scope)
        case 2: return nullCheck(inner, scope)
        case 3:
            let left = boolean(inner, scope)
            let right = boolean(inner, scope)
            return "(\(left) \(random.chance(0.5) ? "and" : "or") \(right))"
        case 4:
            let operand = boolean(inner, scope)
            return "not (\(operand))"
        case 5: return stringPredicate(inner, scope)
        case 6: return enumPredicate()
        case 7: return inPredicate(inner, scope)
        case 8: return scope.variables.count < 2 ? lambda(inner, scope) : comparison(inner, scope)
        case 9: return countPredicate()
        case 10: return random.pick(["Flag", "Flag eq true", "Flag ne false", "not Flag", "Flag eq false"])
        case 11: return random.chance(0.7) ? "isof(\(OracleModel.entityType))" : "isof(I32,Edm.Int32)"
        default: return castPredicate(inner, scope)
        }
    }

    /// A comparison of a property (or lambda variable) with a literal, or a null test.
    mutating func simplePredicate(_ scope: Scope) -> String {
        let type = random.pick(GenType.allCases)
        let left = leaf(type, scope)
        if random.chance(0.15) { return "\(left) \(random.chance(0.5) ? "eq" : "ne") null" }
        if type == .boolean && random.chance(0.3) { return left }
        return "\(left) \(comparisonOperator(type)) \(literal(type))"
    }

    mutating func comparisonOperator(_ type: GenType) -> String {
        switch type {
        case .boolean, .color: random.pick(["eq", "ne"])
        case .guid: random.chance(0.8) ? random.pick(["eq", "ne"]) : random.pick(["lt", "ge"])
        default: random.pick(["eq", "ne", "lt", "le", "gt", "ge"])
        }
    }

    mutating func comparison(_ depth: Int, _ scope: Scope) -> String {
        let type = random.pick(GenType.allCases)
        let left = value(type, depth, scope)
        let op = comparisonOperator(type)
        let right = random.chance(0.7) ? literal(type) : value(type, depth, scope)
        if random.chance(0.1) {
            // The literal (or other operand) on the left.
            let swapped = ["lt": "gt", "le": "ge", "gt": "lt", "ge": "le"][op] ?? op
            return "\(right) \(swapped) \(left)"
        }
        return "\(left) \(op) \(right)"
    }

    /// Numbers of two different types: numeric promotion.
    mutating func crossNumericComparison(_ depth: Int, _ scope: Scope) -> String {
        let first = random.pick(Self.numericTypes)
        var second = random.pick(Self.numericTypes)
        if second == first { second = first == .double ? .int32 : .double }
        let left = value(first, depth, scope)
        let right = random.chance(0.5) ? literal(second) : value(second, depth, scope)
        return "\(left) \(comparisonOperator(first)) \(right)"
    }

    mutating func nullCheck(_ depth: Int, _ scope: Scope) -> String {
        let operand = value(random.pick(GenType.allCases), depth, scope)
        let op = random.chance(0.5) ? "eq" : "ne"
        return random.chance(0.1) ? "null \(op) \(operand)" : "\(operand) \(op) null"
    }

    mutating func stringPredicate(_ depth: Int, _ scope: Scope) -> String {
        let function = random.pick(["contains", "startswith", "endswith"])
        let first = value(.string, depth, scope)
        let second = random.chance(0.75) ? Self.stringLiteral(random.pick(OraclePools.fragments))
            : value(.string, depth, scope)
        return "\(function)(\(first),\(second))"
    }

    mutating func enumPredicate() -> String {
        switch random.weightedIndex([4, 3, 2, 2, 1, 1]) {
        case 0:
            let op = random.pick(["eq", "ne", "lt", "le", "gt", "ge"])
            return "Status \(op) \(literal(.status))"
        case 1:
            return "Color has " + random.pick(["O.Color'Red'", "O.Color'Green'", "O.Color'Blue'", "O.Color'Red,Blue'"])
        case 2:
            return "Color \(random.chance(0.5) ? "eq" : "ne") \(literal(.color))"
        case 3:
            let first = literal(.status)
            let second = literal(.status)
            return "Status in (\(first),\(second))"
        case 4:
            // 4.01: an enum member written as a plain string.
            return "Status eq " + random.pick(["'New'", "'Open'", "'Closed'"])
        default:
            return "Color has O.Color'Red' and not (Color has O.Color'Blue')"
        }
    }

    mutating func inPredicate(_ depth: Int, _ scope: Scope) -> String {
        if random.chance(0.2) {
            return random.chance(0.5) ? "\(literal(.string)) in Tags" : "\(literal(.int32)) in Scores"
        }
        let type = random.pick([GenType.string, .int32, .int64, .byte, .double, .decimal, .date, .guid,
                                .dateTimeOffset])
        let operand = value(type, depth, scope)
        var items: [String] = []
        for _ in 0..<random.int(1...4) { items.append(literal(type)) }
        return "\(operand) in (\(items.joined(separator: ",")))"
    }

    mutating func lambda(_ depth: Int, _ scope: Scope) -> String {
        let onTags = random.chance(0.55)
        let collection = onTags ? "Tags" : "Scores"
        let element: GenType = onTags ? .string : .int32
        let name = (onTags ? "t" : "s") + String(scope.variables.count)
        let isAny = random.chance(0.65)
        if isAny && random.chance(0.15) { return "\(collection)/any()" }
        var inner = scope
        inner.variables.append((name: name, type: element))
        var predicate = elementPredicate(name, element, max(1, depth - 1), inner)
        if depth > 1 && random.chance(0.3) {
            let other = boolean(depth - 1, inner)
            predicate = "(\(predicate) \(random.chance(0.5) ? "and" : "or") \(other))"
        }
        return "\(collection)/\(isAny ? "any" : "all")(\(name):\(predicate))"
    }

    /// A predicate on the lambda variable `name` (of type `element`).
    mutating func elementPredicate(_ name: String, _ element: GenType, _ depth: Int, _ scope: Scope) -> String {
        if element == .string {
            switch random.weightedIndex([3, 3, 2, 2, 1]) {
            case 0:
                let function = random.pick(["contains", "startswith", "endswith"])
                return "\(function)(\(name),\(Self.stringLiteral(random.pick(OraclePools.fragments))))"
            case 1:
                return "\(name) \(random.pick(["eq", "ne", "lt", "gt"])) "
                    + Self.stringLiteral(random.pick(OraclePools.tagValues + ["zz"]))
            case 2:
                return "length(\(name)) \(random.pick(["eq", "gt", "lt"])) \(random.int(0...5))"
            case 3:
                return "\(random.pick(["tolower", "toupper"]))(\(name)) eq "
                    + Self.stringLiteral(random.pick(["banana", "BANANA", "apple", "A", "é", "É"]))
            default:
                return "\(name) \(random.pick(["eq", "ne"])) \(value(.string, depth, scope))"
            }
        }
        switch random.weightedIndex([4, 2, 2, 1]) {
        case 0:
            return "\(name) \(random.pick(["eq", "ne", "lt", "le", "gt", "ge"])) \(random.int(-2...8))"
        case 1:
            return "(\(name) mod \(random.pick([2, 3, -3]))) eq \(random.int(-1...1))"
        case 2:
            return "(\(name) \(random.pick(["add", "sub", "mul"])) \(random.int(-3...3))) gt \(random.int(-5...10))"
        default:
            return "\(name) \(random.pick(["eq", "lt", "gt"])) \(value(.int32, depth, scope))"
        }
    }

    mutating func countPredicate() -> String {
        let collection = random.pick(["Tags", "Scores"])
        return "\(collection)/$count \(random.pick(["eq", "ne", "gt", "ge", "lt"])) \(random.int(0...3))"
    }

    mutating func castPredicate(_ depth: Int, _ scope: Scope) -> String {
        // A flags enum cast to a string is refused by the store: rarely.
        let sources = random.chance(0.2) ? GenType.allCases : GenType.allCases.filter { $0 != .color }
        let source = random.pick(sources)
        let computed = random.chance(0.85)
        let target = computed ? random.pick(Self.computedCastTargets) : random.pick(Self.refusedCastTargets)
        let operand = value(source, depth, scope)
        let cast = "cast(\(operand),\(target.edmName ?? "Edm.String"))"
        switch random.weightedIndex([5, 2, 2]) {
        case 0:
            let op = target == .string ? random.pick(["eq", "ne", "lt", "ge"]) : comparisonOperator(target)
            let right = target == .string ? stringForm(source) : literal(target)
            return "\(cast) \(op) \(right)"
        case 1:
            return "\(cast) \(random.chance(0.5) ? "eq" : "ne") null"
        default:
            if target == .string {
                let function = random.pick(["startswith", "contains", "endswith"])
                let fragment = Self.stringLiteral(random.pick(["1", "-", ".", "0", "T", "e", "P", ":"]))
                return "\(function)(\(cast),\(fragment))"
            }
            return "\(cast) \(comparisonOperator(target)) \(value(target, depth, scope))"
        }
    }

    /// A string that a value of `type` cast to `Edm.String` may be (the payload forms of values
    /// in the rows).
    mutating func stringForm(_ type: GenType) -> String {
        let forms: [String]
        switch type {
        case .boolean: forms = ["true", "false"]
        case .string: forms = OraclePools.stringLiterals
        case .byte, .sbyte, .int16, .int32, .int64: forms = ["0", "1", "-1", "127", "255", "2147483647", "-50", "7"]
        case .single: forms = ["0.0", "0.5", "1.5", "-2.5", "1000000.0", "0.125", "1.0"]
        case .double: forms = ["0.1", "1.5", "3.3", "1e-05", "10000000000.0", "-2.75", "1e-07", "0.0", "99.99"]
        case .decimal: forms = ["0", "1.5", "12.25", "-0.0001", "100", "3.1416", "99999999999999.9999"]
        case .date: forms = ["2000-02-29", "0001-01-01", "9999-12-31", "1970-01-01"]
        case .timeOfDay: forms = ["00:00:00", "12:30:15", "23:59:59.999"]
        case .dateTimeOffset: forms = ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z", "2020-01-01T00:30:00+02:00"]
        case .duration: forms = ["PT0S", "P1D", "-PT5M", "P1DT2H"]
        case .guid: forms = OraclePools.guids
        case .status: forms = ["New", "Open", "Closed"]
        case .color: forms = ["Red", "Red,Blue"]
        }
        return Self.stringLiteral(random.pick(forms))
    }

    // MARK: Values

    /// The property of `type`, or a lambda variable of that type in scope.
    mutating func leaf(_ type: GenType, _ scope: Scope) -> String {
        if let variable = scope.variable(of: type), random.chance(0.6) { return variable }
        return Self.property(type)
    }

    /// An expression of `type` (numbers: of a type that compares with `type`).
    mutating func value(_ type: GenType, _ depth: Int, _ scope: Scope) -> String {
        if depth <= 1 || random.chance(0.45) { return leaf(type, scope) }
        let inner = depth - 1
        switch type {
        case .string: return stringValue(inner, scope)
        case .int32: return int32Value(inner, scope)
        case .int64:
            switch random.weightedIndex([4, 2, 2]) {
            case 0: return integerArithmetic(inner, scope, wide: true)
            case 1: return "\(random.pick(["Tags", "Scores"]))/$count"
            default: return castValue(to: .int64, inner, scope)
            }
        case .byte, .sbyte, .int16:
            return castValue(to: type, inner, scope)
        case .double: return doubleValue(inner, scope)
        case .single:
            if random.chance(0.5) { return castValue(to: .single, inner, scope) }
            let right = random.chance(0.6) ? String(random.pick([1, 2, -2, 3, 8])) : leaf(.sbyte, scope)
            return "(\(leaf(.single, scope)) \(random.pick(["add", "sub", "mul"])) \(right))"
        case .decimal: return decimalValue(inner, scope)
        case .date:
            return random.chance(0.85) ? "date(\(leaf(.dateTimeOffset, scope)))" : castValue(to: .date, inner, scope)
        case .timeOfDay:
            return "time(\(leaf(.dateTimeOffset, scope)))"
        case .boolean:
            let condition = boolean(inner, scope)
            return "(\(condition))"
        case .guid:
            return random.chance(0.2) ? "cast(Str,Edm.Guid)" : leaf(type, scope)
        case .dateTimeOffset, .duration, .status, .color:
            return leaf(type, scope)
        }
    }

    mutating func stringValue(_ depth: Int, _ scope: Scope) -> String {
        switch random.weightedIndex([3, 3, 2, 3, 3, 3, 3]) {
        case 0: return "tolower(\(value(.string, depth, scope)))"
        case 1: return "toupper(\(value(.string, depth, scope)))"
        case 2: return "trim(\(value(.string, depth, scope)))"
        case 3:
            let first = value(.string, depth, scope)
            let second = random.chance(0.6) ? Self.stringLiteral(random.pick(OraclePools.fragments))
                : value(.string, depth, scope)
            return random.chance(0.5) ? "concat(\(first),\(second))" : "concat(\(second),\(first))"
        case 4:
            let start = random.chance(0.85) ? String(random.int(0...6)) : leaf(.byte, scope)
            return "substring(\(value(.string, depth, scope)),\(start))"
        case 5:
            let start = random.int(0...5)
            let length = random.chance(0.85) ? String(random.int(0...6)) : leaf(.byte, scope)
            return "substring(\(value(.string, depth, scope)),\(start),\(length))"
        default:
            let source = random.pick(GenType.allCases.filter { $0 != .string && $0 != .color })
            return "cast(\(value(source, depth, scope)),Edm.String)"
        }
    }

    mutating func int32Value(_ depth: Int, _ scope: Scope) -> String {
        switch random.weightedIndex([3, 2, 3, 3, 1, 4, 2, 1]) {
        case 0: return "length(\(value(.string, depth, scope)))"
        case 1:
            return "indexof(\(value(.string, depth, scope)),\(Self.stringLiteral(random.pick(OraclePools.fragments))))"
        case 2:
            let source = random.chance(0.5) ? "Dt" : random.chance(0.7) ? "Dto" : "date(Dto)"
            return "\(random.pick(["year", "month", "day"]))(\(source))"
        case 3:
            let source = random.chance(0.5) ? "Tod" : random.chance(0.7) ? "Dto" : "time(Dto)"
            return "\(random.pick(["hour", "minute", "second"]))(\(source))"
        case 4: return "totaloffsetminutes(Dto)"
        case 5: return integerArithmetic(depth, scope, wide: false)
        case 6: return castValue(to: .int32, depth, scope)
        default: return "-(\(value(.int32, depth, scope)))"
        }
    }

    /// Integer arithmetic; `wide` involves Int64.
    mutating func integerArithmetic(_ depth: Int, _ scope: Scope, wide: Bool) -> String {
        let op = random.pick(["add", "add", "sub", "sub", "mul", "div", "div", "mod", "mod"])
        let left = wide ? value(.int64, depth, scope) : value(random.pick([.int32, .int32, .int16, .byte, .sbyte]),
                                                              depth, scope)
        let right: String
        if op == "div" || op == "mod" {
            right = random.chance(0.9) ? String(random.pick([1, 2, 3, -3, 7, -7, 10, 100]))
                : leaf(random.pick([.sbyte, .int16, .int32]), scope)
        } else if random.chance(0.5) {
            right = String(random.pick([0, 1, -1, 2, 5, -7, 100, 1000, 2147483647]))
        } else {
            right = value(random.pick(Self.integerTypes), depth, scope)
        }
        return "(\(left) \(op) \(right))"
    }

    mutating func doubleValue(_ depth: Int, _ scope: Scope) -> String {
        switch random.weightedIndex([5, 3, 2, 1]) {
        case 0:
            let op = random.pick(["add", "sub", "mul", "div", "div", "mod"])
            let left = random.chance(0.8) ? value(.double, depth, scope) : leaf(.int32, scope)
            let right: String
            if op == "div" || op == "mod" {
                right = random.chance(0.9) ? random.pick(["2e0", "4e0", "-1.5e0", "0.5e0", "1e3", "3e0"])
                    : leaf(random.pick([.double, .int32]), scope)
            } else {
                right = random.chance(0.6) ? random.pick(["1.5e0", "-2.5e0", "1e10", "0.1e0", "2e0", "1e-5"])
                    : value(random.pick([.double, .int32, .single]), depth, scope)
            }
            // `divby` now and then (the binder types it Double for floating operands).
            return "(\(left) \(random.chance(0.05) ? "divby" : op) \(right))"
        case 1:
            let function = random.pick(["round", "floor", "ceiling"])
            return "\(function)(\(value(random.chance(0.7) ? .double : .single, depth, scope)))"
        case 2: return castValue(to: .double, depth, scope)
        default: return "-(\(value(.double, depth, scope)))"
        }
    }

    mutating func decimalValue(_ depth: Int, _ scope: Scope) -> String {
        switch random.weightedIndex([4, 2, 1, 1, 1]) {
        case 0: return "fractionalseconds(\(random.pick(["Tod", "Dto", "time(Dto)"])))"
        case 1: return "\(random.pick(["round", "floor", "ceiling"]))(\(random.chance(0.5) ? "Dec" : "I32"))"
        case 2: return "(Dec \(random.pick(["add", "sub", "mul"])) \(literal(.decimal)))"
        case 3: return castValue(to: .decimal, depth, scope)
        default: return leaf(.decimal, scope)
        }
    }

    mutating func castValue(to target: GenType, _ depth: Int, _ scope: Scope) -> String {
        let source = random.pick(GenType.allCases.filter { $0 != .color && $0 != .status })
        return "cast(\(value(source, depth, scope)),\(target.edmName ?? "Edm.String"))"
    }

    // MARK: Literals

    static func stringLiteral(_ text: String) -> String {
        var out = "'"
        for character in text {
            out.append(character)
            if character == "'" { out.append("'") }
        }
        return out + "'"
    }

    mutating func literal(_ type: GenType) -> String {
        switch type {
        case .boolean: return random.chance(0.5) ? "true" : "false"
        case .string: return Self.stringLiteral(random.pick(OraclePools.stringLiterals))
        case .byte: return random.pick(["0", "1", "127", "128", "255", "7", "300", "-1"])
        case .sbyte: return random.pick(["0", "1", "-1", "-128", "127", "5", "-50"])
        case .int16: return random.pick(["0", "1", "-1", "300", "-32768", "32767", "-100"])
        case .int32:
            return random.chance(0.7) ? String(random.int(-50...50))
                : random.pick(["2147483647", "-2147483648", "100000", "-100000", "0"])
        case .int64:
            return random.chance(0.6) ? String(random.int(-100...100))
                : random.pick(["5000000000", "-5000000000", "4611686018427387904", "9223372036854775807", "0"])
        case .single:
            return random.pick(["0", "0.5", "-0.5", "1.5", "-2.5", "0.125", "1000000", "3.75", "100", "-100", "2.5e0"])
        case .double:
            return random.pick(["0.1", "1.5", "3.3", "-2.75", "1e10", "-1e-5", "2.5", "0", "1.5e0", "99.99", "-0.5",
                                "7.25e0", "123.456", "INF", "-INF"])
        case .decimal:
            return random.pick(OraclePools.decimalValues + ["0.25", "-1000", "12.3"])
        case .date:
            return random.pick(OraclePools.dateValues + ["2020-01-01", "2019-12-31", "2050-06-15", "1950-01-01"])
        case .timeOfDay:
            return random.pick(["00:00:00", "12:00:00", "12:30:15", "23:59:59.999", "08:05:00", "06:00:00.5",
                                "23:00:00"])
        case .dateTimeOffset:
            return random.pick(OraclePools.dateTimeOffsetBoundaries + [
                "2020-01-01T00:00:00Z", "2020-01-01T01:00:00+02:00", "2019-12-31T23:00:00Z",
                "2010-06-15T12:00:00-05:30", "2000-01-01T00:00:00+14:00", "2030-12-31T23:59:59.999Z",
            ])
        case .duration:
            return "duration'" + random.pick(["PT0S", "P1D", "PT2H", "P1DT2H30M", "-PT5M", "PT1.5S", "P30D", "P200D"])
                + "'"
        case .guid:
            return random.pick(OraclePools.guids + ["12345678-1234-1234-1234-123456789abc"])
        case .status:
            return "O.Status'" + random.pick(["New", "Open", "Closed"]) + "'"
        case .color:
            return "O.Color'" + random.pick(OraclePools.colorValues) + "'"
        }
    }
}
