public import ODataCore

/// The oracle cannot evaluate an expression: the spec leaves its result open (a precision, a
/// way of counting characters), or the evaluator does not implement it. The case is skipped.
public struct OracleRefusal: Error, Sendable, CustomStringConvertible {
    /// What was not evaluated, and why.
    public var message: String

    /// A refusal that says what was not evaluated.
    public init(_ message: String) { self.message = message }

    public var description: String { "the oracle does not evaluate \(message)" }
}

/// A small in-memory evaluator of bound `$filter`, `$orderby`, `$top`, `$skip` and `$select`
/// over entities, written from OData 4.01 URL Conventions §5.1.1 (and, for `cast`, from the
/// rules `PrimitiveCast` documents, implemented again here) as an oracle for the store's SQL.
///
/// Semantics where the spec is open, as chosen here:
/// - `eq`/`ne`: null equals null and nothing else; `lt`/`le`/`gt`/`ge` with a null operand are
///   false (§5.1.1.1.3–6), or null with ``NullOrdering/isUnknown``; `and`/`or`/`not` are
///   three-valued; `has` with a null operand is null; `in` is true when an item is `eq` the left
///   operand (so `null in (1,2)` is false, not null); `any` is true when the predicate is true
///   for an item, `all` when it is true for every item (true for none).
/// - Numbers compare and compute after numeric promotion (§5.1.1.18: Double, else Single, else
///   Decimal, else Int64). Integer arithmetic is exact in Int64 (a result that overflows its
///   Int32 type is kept as Int64; one that overflows Int64 is refused), `div` truncates, `mod`
///   has the sign of the left operand; Decimal arithmetic is exact (`div`, `mod`, `divby` of
///   decimals are refused: their scale is service-specific). A division or modulo by zero is
///   refused (the spec fails the request for integers and gives INF/NaN for floating types;
///   SQL gives null). Where Single precision changes an answer (the Single result differs from
///   the Double one) the case is refused.
/// - Strings compare by code point; `contains`/`startswith`/`endswith` match code points;
///   `length`, `indexof` and `substring` count code points, and are refused for strings where
///   code points, UTF-16 units and characters differ (outside the BMP, combining marks);
///   `substring` with a negative start or length is refused; `tolower`/`toupper` map each code
///   point by Unicode's case mapping, refusing code points whose mapping is not one code point;
///   `trim` removes spaces, refusing strings that start or end with other whitespace.
/// - DateTimeOffsets compare by instant; `year`…`second`, `date`, `time` take the value's own
///   offset; TimeOfDay and Duration compare by length; Guids by their lowercase text; enums
///   by their numeric value; Booleans false before true.
/// - `round` is half away from zero; `round`/`floor`/`ceiling` of an integer is that integer.
/// - `$orderby`: nulls first ascending (last descending), then the key ascending.
public struct OracleEvaluator: Sendable {
    /// What `lt`, `le`, `gt` and `ge` give when an operand is null.
    public enum NullOrdering: Sendable, Hashable {
        /// `false`, as OData 4.01 §5.1.1.1.3–6 say ("If any operand is null, the operator
        /// returns false").
        case isFalse
        /// `null` (unknown), as SQL has it: `not (X gt 5)` then drops rows whose X is null.
        case isUnknown
    }

    public var model: Model
    /// The key property, the last tie-break of every order.
    public var key: String
    public var nullOrdering: NullOrdering

    /// An evaluator for entities of `model` whose key is `key`.
    public init(model: Model, key: String = "ID", nullOrdering: NullOrdering = .isFalse) {
        self.model = model
        self.key = key
        self.nullOrdering = nullOrdering
    }

    // MARK: Requests

    /// The rows for which the request's `$filter` is true (not false, not null), in their order.
    public func filter(_ request: BoundRequest, _ rows: [Entity]) throws -> [Entity] {
        guard let condition = request.filter else { return rows }
        var kept: [Entity] = []
        for row in rows {
            if try evaluate(condition, row: row) == .primitive(.boolean(true)) { kept.append(row) }
        }
        return kept
    }

    /// `rows` sorted by the request's `$orderby` items, then by the key.
    public func order(_ request: BoundRequest, _ rows: [Entity]) throws -> [Entity] {
        var keyed: [(row: Entity, keys: [Value], id: Value)] = []
        for row in rows {
            var keys: [Value] = []
            for item in request.orderBy { keys.append(try evaluate(item.expression, row: row)) }
            keyed.append((row: row, keys: keys, id: row[key] ?? .null))
        }
        let descending = request.orderBy.map(\.descending)
        let sorted = try Self.stableSorted(keyed) { a, b in
            for index in descending.indices {
                var order = try orderCompare(a.keys[index], b.keys[index])
                if descending[index] { order = -order }
                if order != 0 { return order < 0 }
            }
            return try orderCompare(a.id, b.id) < 0
        }
        return sorted.map(\.row)
    }

    /// `$skip` then `$top` of `options`.
    public func page(_ options: QueryOptions, _ rows: [Entity]) -> [Entity] {
        let skipped = Array(rows.dropFirst(max(0, options.skip ?? 0)))
        guard let top = options.top else { return skipped }
        return Array(skipped.prefix(max(0, top)))
    }

    /// The names `$select` keeps (with the key), or nil when it keeps every property.
    public func selectedNames(_ options: QueryOptions) -> [String]? {
        guard let items = options.select, !items.isEmpty else { return nil }
        var names: [String] = [key]
        for item in items {
            switch item.kind {
            case .star, .allOperations: return nil
            case .path(let segments):
                if segments.count == 1, let name = segments.first, !names.contains(name) { names.append(name) }
            }
        }
        return names
    }

    /// Each row with only the properties `$select` keeps (a selected property the row lacks
    /// is null).
    public func project(_ options: QueryOptions, _ rows: [Entity]) -> [Entity] {
        guard let names = selectedNames(options) else { return rows }
        return rows.map { row in
            Entity(typeName: row.typeName, properties: names.map { NamedValue(name: $0, value: row[$0] ?? .null) })
        }
    }

    /// What a collection read answers: filtered, ordered, paged and projected.
    /// `options` are the request's parsed query options (`$top`, `$skip`, `$select`).
    public func answer(_ request: BoundRequest, options: QueryOptions, rows: [Entity]) throws -> [Entity] {
        project(options, page(options, try order(request, try filter(request, rows))))
    }

    // MARK: Expressions

    /// The value of `expression` on `row`.
    public func evaluate(_ expression: BoundExpression, row: Entity) throws -> Value {
        try eval(expression, Scope(row: row, variables: [:]))
    }

    struct Scope {
        var row: Entity
        var variables: [String: Value]
    }

    func eval(_ e: BoundExpression, _ scope: Scope) throws -> Value {
        switch e.expression.node {
        case .literal(let value):
            return value
        case .path(let path):
            return try evalPath(path, e, scope)
        case .unary(let op, _):
            guard let operand = e.operands.first else { throw OracleRefusal("a unary operator without its operand") }
            let value = try eval(operand, scope)
            switch op {
            case .not:
                guard let flag = try Self.boolean(value) else { return .null }
                return .primitive(.boolean(!flag))
            case .negate:
                return try negate(value, e.type)
            }
        case .binary(let op, _, _):
            guard e.operands.count == 2 else { throw OracleRefusal("a binary operator without two operands") }
            return try binary(op, e.operands[0], e.operands[1], e.type, scope)
        case .list:
            var items: [Value] = []
            for operand in e.operands { items.append(try eval(operand, scope)) }
            return .collection(items)
        case .call(let name, _):
            return try call(name, e, scope)
        case .alias:
            throw OracleRefusal("parameter aliases")
        case .array, .object:
            throw OracleRefusal("JSON arrays and objects")
        case .typeName(let name):
            throw OracleRefusal("the type name \(name) as a value")
        case .caseOf:
            throw OracleRefusal("case()")
        }
    }

    /// A Boolean or null; anything else is refused.
    static func boolean(_ value: Value) throws -> Bool? {
        switch value {
        case .null: return nil
        case .primitive(.boolean(let flag)): return flag
        default: throw OracleRefusal("\(value) as a Boolean")
        }
    }

    // MARK: Paths

    func evalPath(_ path: PathExpression, _ e: BoundExpression, _ scope: Scope) throws -> Value {
        // nil: the row itself.
        var current: Value?
        switch path.root {
        case .implicit, .it, .this:
            current = nil
        case .variable(let name):
            guard let value = scope.variables[name] else { throw OracleRefusal("the lambda variable \(name)") }
            current = value
        case .root, .alias:
            throw OracleRefusal("paths from $root or an alias")
        }
        var nextOperand = 0
        for step in path.steps {
            switch step {
            case .member(let name):
                switch current {
                case nil: current = scope.row[name] ?? .null
                case .complex(let structured)?: current = structured[name] ?? .null
                case .null?: current = .null
                default: throw OracleRefusal("the member \(name) of \(String(describing: current))")
                }
            case .count(let filter, let search):
                guard filter == nil, search == nil else { throw OracleRefusal("$count with options") }
                switch current {
                case .collection(let items)?: current = .primitive(.int64(Int64(items.count)))
                case .null?: current = .null
                default: throw OracleRefusal("$count of something that is not a collection")
                }
            case .lambda(let kind, let variable, let predicate):
                var bound: BoundExpression?
                if predicate != nil {
                    guard nextOperand < e.operands.count else { throw OracleRefusal("a lambda without its predicate") }
                    bound = e.operands[nextOperand]
                    nextOperand += 1
                }
                guard case .collection(let items)? = current else {
                    throw OracleRefusal("\(kind.rawValue) over something that is not a collection")
                }
                current = .primitive(.boolean(try lambda(kind, variable, bound, items, scope)))
            case .cast, .key, .function, .annotation, .filter:
                throw OracleRefusal("the path step \(step)")
            }
        }
        guard let result = current else { throw OracleRefusal("the entity itself as a value") }
        return result
    }

    func lambda(_ kind: PathExpression.LambdaKind, _ variable: String?, _ predicate: BoundExpression?,
                _ items: [Value], _ scope: Scope) throws -> Bool {
        guard let predicate else {
            guard kind == .any else { throw OracleRefusal("all() without a predicate") }
            return !items.isEmpty
        }
        for item in items {
            var inner = scope
            if let variable { inner.variables[variable] = item }
            let holds = try Self.boolean(eval(predicate, inner)) == true
            if kind == .any && holds { return true }
            if kind == .all && !holds { return false }
        }
        return kind == .all
    }

    // MARK: Operators

    func binary(_ op: BinaryOperator, _ lhs: BoundExpression, _ rhs: BoundExpression, _ type: ExpressionType,
                _ scope: Scope) throws -> Value {
        switch op {
        case .and:
            let left = try Self.boolean(eval(lhs, scope))
            if left == false { return .primitive(.boolean(false)) }
            let right = try Self.boolean(eval(rhs, scope))
            if right == false { return .primitive(.boolean(false)) }
            return left == true && right == true ? .primitive(.boolean(true)) : .null
        case .or:
            let left = try Self.boolean(eval(lhs, scope))
            if left == true { return .primitive(.boolean(true)) }
            let right = try Self.boolean(eval(rhs, scope))
            if right == true { return .primitive(.boolean(true)) }
            return left == false && right == false ? .primitive(.boolean(false)) : .null
        default:
            break
        }
        let a = try eval(lhs, scope)
        let b = try eval(rhs, scope)
        switch op {
        case .eq: return .primitive(.boolean(try equal(a, b)))
        case .ne: return .primitive(.boolean(try !equal(a, b)))
        case .lt, .le, .gt, .ge:
            if a == .null || b == .null { return nullOrdering == .isFalse ? .primitive(.boolean(false)) : .null }
            let order = try compare(a, b)
            let result: Bool
            switch op {
            case .lt: result = order < 0
            case .le: result = order <= 0
            case .gt: result = order > 0
            default: result = order >= 0
            }
            return .primitive(.boolean(result))
        case .has:
            if a == .null || b == .null { return .null }
            guard case .enumeration(let left) = a, case .enumeration(let right) = b else {
                throw OracleRefusal("has on \(a) and \(b)")
            }
            let flags = try enumNumber(right, typeName: left.typeName)
            return .primitive(.boolean(try enumNumber(left, typeName: right.typeName) & flags == flags))
        case .in:
            if b == .null { return .null }
            guard case .collection(let items) = b else { throw OracleRefusal("in with \(b) on the right") }
            for item in items {
                if try equal(a, item) { return .primitive(.boolean(true)) }
            }
            return .primitive(.boolean(false))
        case .add, .sub, .mul, .div, .divby, .mod:
            return try arithmetic(op, a, b, type)
        case .and, .or:
            throw OracleRefusal("and/or")
        }
    }

    /// `eq`: null equals null only.
    func equal(_ a: Value, _ b: Value) throws -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case (.null, _), (_, .null): return false
        default: return try compare(a, b) == 0
        }
    }

    /// The order of two values that are not null: negative, zero or positive.
    func compare(_ a: Value, _ b: Value) throws -> Int {
        switch (a, b) {
        case (.primitive(let x), .primitive(let y)):
            return try comparePrimitives(x, y)
        case (.enumeration(let x), .enumeration(let y)):
            return Self.order(try enumNumber(x, typeName: y.typeName), try enumNumber(y, typeName: x.typeName))
        case (.enumeration(let x), .primitive(let y)):
            return Self.order(try enumNumber(x, typeName: nil), try enumNumber(y, as: x))
        case (.primitive(let x), .enumeration(let y)):
            return Self.order(try enumNumber(x, as: y), try enumNumber(y, typeName: nil))
        default:
            throw OracleRefusal("comparing \(a) with \(b)")
        }
    }

    /// The order used by `$orderby`: null first, then ``compare(_:_:)``.
    func orderCompare(_ a: Value, _ b: Value) throws -> Int {
        switch (a, b) {
        case (.null, .null): return 0
        case (.null, _): return -1
        case (_, .null): return 1
        default: return try compare(a, b)
        }
    }

    static func order<T: Comparable>(_ a: T, _ b: T) -> Int {
        a < b ? -1 : (a == b ? 0 : 1)
    }

    func comparePrimitives(_ x: PrimitiveValue, _ y: PrimitiveValue) throws -> Int {
        if let a = Number(x), let b = Number(y) { return try Number.compare(a, b) }
        switch (x, y) {
        case (.string(let a), .string(let b)):
            // By code point: the order of the UTF-8 bytes, not Swift's (normalizing) order.
            let u = Array(a.unicodeScalars), v = Array(b.unicodeScalars)
            if u == v { return 0 }
            return u.lexicographicallyPrecedes(v) { $0.value < $1.value } ? -1 : 1
        case (.boolean(let a), .boolean(let b)):
            return Self.order(a ? 1 : 0, b ? 1 : 0)
        case (.date(let a), .date(let b)):
            return Self.order(a.daysSinceEpoch, b.daysSinceEpoch)
        case (.timeOfDay(let a), .timeOfDay(let b)):
            return Self.order(a.picosecondsSinceMidnight, b.picosecondsSinceMidnight)
        case (.dateTimeOffset(let a), .dateTimeOffset(let b)):
            let i = a.instant, j = b.instant
            return Self.order(i.seconds, j.seconds) != 0 ? Self.order(i.seconds, j.seconds)
                : Self.order(i.picoseconds, j.picoseconds)
        case (.duration(let a), .duration(let b)):
            let i = a.totalPicoseconds, j = b.totalPicoseconds
            return Self.order(i.whole, j.whole) != 0 ? Self.order(i.whole, j.whole) : Self.order(i.picos, j.picos)
        case (.guid(let a), .guid(let b)):
            return Self.order(a.description, b.description)
        default:
            throw OracleRefusal("comparing \(x.type.rawValue) with \(y.type.rawValue)")
        }
    }

    // MARK: Enums

    /// The numeric value of an enum value (flags OR-ed); `typeName` when the value has none.
    func enumNumber(_ value: EnumValue, typeName: String?) throws -> Int64 {
        guard let name = value.typeName ?? typeName, let type = model.enumType(name) else {
            throw OracleRefusal("an enum value of no known type (\(value.members))")
        }
        var result: Int64 = 0
        for raw in value.members {
            var trimmed = Substring(raw)
            while trimmed.first == " " { trimmed.removeFirst() }
            while trimmed.last == " " { trimmed.removeLast() }
            let member = String(trimmed)
            if let found = type.member(named: member) {
                result |= found.value
            } else if let number = Int64(member) {
                result |= number
            } else {
                throw OracleRefusal("\(member), which is not a member of \(name)")
            }
        }
        return result
    }

    /// A string (member names) or integer compared with an enum value of `other`'s type.
    func enumNumber(_ value: PrimitiveValue, as other: EnumValue) throws -> Int64 {
        if case .string(let text) = value {
            let members = text.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
            return try enumNumber(EnumValue(typeName: other.typeName, members: members), typeName: nil)
        }
        guard let number = Value.primitive(value).int64Value else {
            throw OracleRefusal("comparing an enum with \(value.type.rawValue)")
        }
        return number
    }

    /// The payload text of an enum value: its members' names (flags in declared order), or
    /// its number when no members make it up.
    func enumText(_ value: EnumValue) throws -> String {
        let number = try enumNumber(value, typeName: nil)
        guard let name = value.typeName, let type = model.enumType(name) else { return String(number) }
        if let exact = type.members.first(where: { $0.value == number }) { return exact.name }
        if type.isFlags {
            let names = type.members.filter { $0.value != 0 && number & $0.value == $0.value }
            if !names.isEmpty, names.reduce(Int64(0), { $0 | $1.value }) == number {
                return names.map(\.name).joined(separator: ",")
            }
        }
        return String(number)
    }

    // MARK: Arithmetic

    func negate(_ value: Value, _ type: ExpressionType) throws -> Value {
        guard case .primitive(let p) = value else {
            if value == .null { return .null }
            throw OracleRefusal("negating \(value)")
        }
        if case .duration(var duration) = p {
            let length = duration.totalPicoseconds
            let zero = length.whole == 0 && length.picos == 0
            duration.negative = zero ? false : !duration.negative
            return .primitive(.duration(duration))
        }
        guard let number = Number(p) else { throw OracleRefusal("negating \(p.type.rawValue)") }
        switch number {
        case .integer(let v):
            guard v != .min else { throw OracleRefusal("negating Int64.min") }
            return Self.integerResult(-v, type)
        case .decimal(let d):
            return .primitive(.decimal(try Scaled(d).negated.value))
        case .single(let f):
            return .primitive(.single(-f))
        case .double(let d):
            return .primitive(.double(-d))
        }
    }

    func arithmetic(_ op: BinaryOperator, _ a: Value, _ b: Value, _ type: ExpressionType) throws -> Value {
        if a == .null || b == .null { return .null }
        guard case .primitive(let x) = a, case .primitive(let y) = b, let left = Number(x), let right = Number(y) else {
            throw OracleRefusal("\(op.rawValue) on \(a) and \(b) (only numbers are computed)")
        }
        switch Number.promotion(left, right) {
        case .integer:
            guard case .integer(let l) = left, case .integer(let r) = right else { throw OracleRefusal("promotion") }
            return Self.integerResult(try Self.integerArithmetic(op, l, r), type)
        case .decimal:
            let l = try Scaled(left.asDecimal), r = try Scaled(right.asDecimal)
            switch op {
            case .add: return .primitive(.decimal(try l.adding(r).value))
            case .sub: return .primitive(.decimal(try l.adding(r.negated).value))
            case .mul: return .primitive(.decimal(try l.multiplied(by: r).value))
            default: throw OracleRefusal("\(op.rawValue) on decimals (the result's scale is service-specific)")
            }
        case .single:
            let f = try Self.floatingArithmetic(op, left.asSingle, right.asSingle)
            let d = try Self.floatingArithmetic(op, left.asDouble, right.asDouble)
            guard Double(f) == d else {
                throw OracleRefusal("\(op.rawValue) in Single precision (\(f)), which differs from Double's (\(d))")
            }
            return .primitive(.single(f))
        case .double:
            return .primitive(.double(try Self.floatingArithmetic(op, left.asDouble, right.asDouble)))
        }
    }

    static func integerArithmetic(_ op: BinaryOperator, _ l: Int64, _ r: Int64) throws -> Int64 {
        let result: (partialValue: Int64, overflow: Bool)
        switch op {
        case .add: result = l.addingReportingOverflow(r)
        case .sub: result = l.subtractingReportingOverflow(r)
        case .mul: result = l.multipliedReportingOverflow(by: r)
        case .div, .mod:
            guard r != 0 else { throw OracleRefusal("\(op.rawValue) by zero (the spec fails the request)") }
            result = op == .div ? l.dividedReportingOverflow(by: r) : l.remainderReportingOverflow(dividingBy: r)
        case .divby:
            throw OracleRefusal("divby on integers (a decimal whose scale is service-specific)")
        default:
            throw OracleRefusal("\(op.rawValue) as arithmetic")
        }
        guard !result.overflow else { throw OracleRefusal("\(l) \(op.rawValue) \(r), which overflows Int64") }
        return result.partialValue
    }

    static func floatingArithmetic<F: BinaryFloatingPoint>(_ op: BinaryOperator, _ l: F, _ r: F) throws -> F {
        let result: F
        switch op {
        case .add: result = l + r
        case .sub: result = l - r
        case .mul: result = l * r
        case .div, .divby, .mod:
            guard r != 0 else {
                throw OracleRefusal("\(op.rawValue) by zero (INF or NaN for OData, null in SQL)")
            }
            result = op == .mod ? l.truncatingRemainder(dividingBy: r) : l / r
        default:
            throw OracleRefusal("\(op.rawValue) as arithmetic")
        }
        guard result.isFinite, l.isFinite, r.isFinite else {
            throw OracleRefusal("arithmetic with an infinite result or operand")
        }
        return result
    }

    /// An integer result, as the bound type when it fits, else as Int64.
    static func integerResult(_ v: Int64, _ type: ExpressionType) -> Value {
        if case .primitive(let p) = type {
            switch p {
            case .byte: if let x = UInt8(exactly: v) { return .primitive(.byte(x)) }
            case .sbyte: if let x = Int8(exactly: v) { return .primitive(.sbyte(x)) }
            case .int16: if let x = Int16(exactly: v) { return .primitive(.int16(x)) }
            case .int32: if let x = Int32(exactly: v) { return .primitive(.int32(x)) }
            default: break
            }
        }
        return .primitive(.int64(v))
    }

    // MARK: Functions

    func call(_ name: String, _ e: BoundExpression, _ scope: Scope) throws -> Value {
        switch name {
        case "isof":
            guard e.operands.count == 1, case .typeName(let typeName) = e.operands[0].expression.node else {
                throw OracleRefusal("isof with an expression argument")
            }
            guard let rowType = scope.row.typeName else { throw OracleRefusal("isof on a row without a type") }
            return .primitive(.boolean(model.isType(rowType, derivedFrom: typeName)))
        case "cast":
            guard e.operands.count == 2, case .typeName(let typeName) = e.operands[1].expression.node else {
                throw OracleRefusal("cast with one argument")
            }
            guard let target = PrimitiveType(qualifiedName: typeName) else {
                throw OracleRefusal("cast to the non-primitive type \(typeName)")
            }
            return try cast(eval(e.operands[0], scope), to: target)
        default:
            break
        }
        var args: [Value] = []
        for operand in e.operands { args.append(try eval(operand, scope)) }
        if args.contains(.null) { return .null }
        func string(_ index: Int) throws -> String {
            guard index < args.count, case .primitive(.string(let text)) = args[index] else {
                throw OracleRefusal("\(name) with argument \(index + 1) not a string")
            }
            return text
        }
        func integer(_ index: Int) throws -> Int64 {
            guard index < args.count, let number = args[index].int64Value else {
                throw OracleRefusal("\(name) with argument \(index + 1) not an integer")
            }
            return number
        }
        func primitive(_ index: Int) throws -> PrimitiveValue {
            guard index < args.count, case .primitive(let p) = args[index] else {
                throw OracleRefusal("\(name) with argument \(index + 1) not a primitive value")
            }
            return p
        }
        switch name {
        case "contains", "startswith", "endswith":
            let hay = try Array(string(0).unicodeScalars), needle = try Array(string(1).unicodeScalars)
            let result: Bool
            switch name {
            case "contains": result = Self.index(of: needle, in: hay) != nil
            case "startswith": result = hay.starts(with: needle)
            default: result = hay.count >= needle.count && Array(hay.suffix(needle.count)) == needle
            }
            return .primitive(.boolean(result))
        case "length":
            let scalars = try Self.countable(string(0), name)
            return .primitive(.int32(Int32(clamping: scalars.count)))
        case "indexof":
            let hay = try Self.countable(string(0), name), needle = try Self.countable(string(1), name)
            return .primitive(.int32(Int32(clamping: Self.index(of: needle, in: hay) ?? -1)))
        case "substring":
            let scalars = try Self.countable(string(0), name)
            let start = try integer(1)
            guard start >= 0 else { throw OracleRefusal("substring with a negative start (optional in the spec)") }
            var end = scalars.count
            if args.count > 2 {
                let length = try integer(2)
                guard length >= 0 else { throw OracleRefusal("substring with a negative length (a bad request)") }
                let (sum, overflow) = start.addingReportingOverflow(length)
                end = overflow ? scalars.count : Int(clamping: min(Int64(scalars.count), sum))
            }
            guard start < Int64(scalars.count), Int(start) < end else { return .primitive(.string("")) }
            var out = String.UnicodeScalarView()
            out.append(contentsOf: scalars[Int(start)..<end])
            return .primitive(.string(String(out)))
        case "tolower", "toupper":
            var out = String.UnicodeScalarView()
            for scalar in try string(0).unicodeScalars {
                let mapped = name == "tolower" ? scalar.properties.lowercaseMapping : scalar.properties.uppercaseMapping
                guard mapped.unicodeScalars.count == 1, let single = mapped.unicodeScalars.first else {
                    throw OracleRefusal("\(name) of U+\(String(scalar.value, radix: 16)), which maps to \(mapped.count) "
                                        + "code points")
                }
                out.append(single)
            }
            return .primitive(.string(String(out)))
        case "trim":
            let scalars = Array(try string(0).unicodeScalars)
            var start = 0, end = scalars.count
            while start < end, scalars[start].properties.isWhitespace {
                guard scalars[start] == " " else { throw OracleRefusal("trim of whitespace other than spaces") }
                start += 1
            }
            while end > start, scalars[end - 1].properties.isWhitespace {
                guard scalars[end - 1] == " " else { throw OracleRefusal("trim of whitespace other than spaces") }
                end -= 1
            }
            var out = String.UnicodeScalarView()
            out.append(contentsOf: scalars[start..<end])
            return .primitive(.string(String(out)))
        case "concat":
            return .primitive(.string(try string(0) + string(1)))
        case "year", "month", "day":
            let date: DateValue
            let argument = try primitive(0)
            switch argument {
            case .date(let d): date = d
            case .dateTimeOffset(let d): date = d.date
            default: throw OracleRefusal("\(name) of \(argument.type.rawValue)")
            }
            return .primitive(.int32(Int32(clamping: name == "year" ? date.year : name == "month" ? date.month : date.day)))
        case "hour", "minute", "second", "fractionalseconds":
            let time: TimeOfDayValue
            let argument = try primitive(0)
            switch argument {
            case .timeOfDay(let t): time = t
            case .dateTimeOffset(let d): time = d.time
            default: throw OracleRefusal("\(name) of \(argument.type.rawValue)")
            }
            switch name {
            case "hour": return .primitive(.int32(Int32(clamping: time.hour)))
            case "minute": return .primitive(.int32(Int32(clamping: time.minute)))
            case "second": return .primitive(.int32(Int32(clamping: time.second)))
            default:
                guard !time.fraction.isEmpty else { return .primitive(.decimal(DecimalValue(0))) }
                guard let fraction = DecimalValue("0." + time.fraction) else {
                    throw OracleRefusal("the fraction \(time.fraction)")
                }
                return .primitive(.decimal(fraction))
            }
        case "date", "time", "totaloffsetminutes":
            let argument = try primitive(0)
            guard case .dateTimeOffset(let d) = argument else {
                throw OracleRefusal("\(name) of \(argument.type.rawValue)")
            }
            switch name {
            case "date": return .primitive(.date(d.date))
            case "time": return .primitive(.timeOfDay(d.time))
            default: return .primitive(.int32(Int32(clamping: d.offsetMinutes ?? 0)))
            }
        case "round", "floor", "ceiling":
            let rule: FloatingPointRoundingRule
            switch name {
            case "round": rule = .toNearestOrAwayFromZero
            case "floor": rule = .down
            default: rule = .up
            }
            let argument = try primitive(0)
            guard let number = Number(argument) else { throw OracleRefusal("\(name) of a non-number") }
            switch number {
            case .integer(let v): return .primitive(.decimal(DecimalValue(v)))
            case .decimal(let d): return .primitive(.decimal(try Self.rounded(d, rule)))
            case .single(let f): return .primitive(.double(Double(f).rounded(rule)))
            case .double(let d): return .primitive(.double(d.rounded(rule)))
            }
        default:
            throw OracleRefusal("the function \(name)")
        }
    }

    /// The code points of `text` when counting them is unambiguous: each is one UTF-16 unit
    /// and one character.
    static func countable(_ text: String, _ function: String) throws -> [Unicode.Scalar] {
        let scalars = Array(text.unicodeScalars)
        guard scalars.count == text.count, scalars.allSatisfy({ $0.value <= 0xFFFF }) else {
            throw OracleRefusal("\(function) of '\(text)', whose code points, UTF-16 units and characters differ")
        }
        return scalars
    }

    static func index(of needle: [Unicode.Scalar], in hay: [Unicode.Scalar]) -> Int? {
        guard needle.count <= hay.count else { return nil }
        for start in 0...(hay.count - needle.count) where hay[start..<(start + needle.count)].elementsEqual(needle) {
            return start
        }
        return nil
    }

    /// A decimal rounded to an integer by `rule` (half away from zero, down, up), exactly.
    static func rounded(_ d: DecimalValue, _ rule: FloatingPointRoundingRule) throws -> DecimalValue {
        let text = d.description
        let negative = text.hasPrefix("-")
        let body = negative ? String(text.dropFirst()) : text
        let parts = body.split(separator: ".", omittingEmptySubsequences: false)
        var whole = parts.first.map(String.init) ?? "0"
        let fraction = parts.count > 1 ? String(parts[1]) : ""
        let hasFraction = fraction.contains { $0 != "0" }
        let up: Bool
        switch rule {
        case .toNearestOrAwayFromZero: up = (fraction.first.map { $0 >= "5" } ?? false)
        case .down: up = negative && hasFraction
        case .up: up = !negative && hasFraction
        default: throw OracleRefusal("rounding by \(rule)")
        }
        if up { whole = incremented(whole) }
        let isZero = whole.allSatisfy { $0 == "0" }
        guard let result = DecimalValue((negative && !isZero ? "-" : "") + whole) else {
            throw OracleRefusal("rounding \(d)")
        }
        return result
    }

    /// A string of decimal digits plus one.
    static func incremented(_ digits: String) -> String {
        var bytes = Array(digits.utf8)
        var index = bytes.count - 1
        while index >= 0 {
            if bytes[index] == UInt8(ascii: "9") {
                bytes[index] = UInt8(ascii: "0")
                index -= 1
            } else {
                bytes[index] += 1
                return String(decoding: bytes, as: UTF8.self)
            }
        }
        return "1" + String(decoding: bytes, as: UTF8.self)
    }

    // MARK: Cast

    /// `cast(value, target)` by the rules `PrimitiveCast` documents (OData 4.01 §5.1.1.10.1):
    /// null to null; a value to its own type unchanged; anything to `Edm.String` as its payload
    /// literal; a string to another type when it is a payload literal of it, else null; numbers
    /// to integer types truncated towards zero when the integer part fits, else null; numbers to
    /// Double and Single to the nearest value (a finite value too large for Single is null); to
    /// Decimal from a floating value the shortest text that reads back the same; enums to
    /// `Edm.String` as their members' names and to integer types as their number (rule 9);
    /// every other pair null. Spatial and stream values are refused.
    public func cast(_ value: Value, to target: PrimitiveType) throws -> Value {
        if target.isSpatial || target == .stream || target == .binary {
            throw OracleRefusal("a cast to \(target.rawValue)")
        }
        switch value {
        case .null:
            return .null
        case .enumeration(let e):
            if target == .string { return .primitive(.string(try enumText(e))) }
            if target.isIntegral { return Self.integer(try enumNumber(e, typeName: nil), as: target) ?? .null }
            return .null
        case .primitive(let p):
            if p.type.isSpatial || p.type == .stream || p.type == .binary {
                throw OracleRefusal("a cast of \(p.type.rawValue)")
            }
            if p.type == target { return value }
            if target == .string { return .primitive(.string(Literal.payloadText(p))) }
            if case .string(let text) = p {
                guard let parsed = try? Literal.parsePayloadValue(text, as: target) else { return .null }
                return .primitive(parsed)
            }
            switch (p, target) {
            case (.dateTime(let d), .dateTimeOffset): return .primitive(.dateTimeOffset(d))
            case (.dateTimeOffset(let d), .dateTime): return .primitive(.dateTime(d))
            case (.time(let d), .duration): return .primitive(.duration(d))
            case (.duration(let d), .time): return .primitive(.time(d))
            default: break
            }
            guard target.isNumeric, let number = Number(p) else { return .null }
            return Self.castNumber(number, to: target)
        default:
            throw OracleRefusal("a cast of \(value)")
        }
    }

    static func castNumber(_ number: Number, to target: PrimitiveType) -> Value {
        switch target {
        case .double:
            switch number {
            case .integer(let v): return .primitive(.double(Double(v)))
            case .decimal(let d):
                guard let parsed = Double(d.description) else { return .null }
                return .primitive(.double(parsed))
            case .single(let f): return .primitive(.double(Double(f)))
            case .double(let v): return .primitive(.double(v))
            }
        case .single:
            let result: Float
            switch number {
            case .integer(let v): result = Float(v)
            case .decimal(let d):
                guard let parsed = Float(d.description) else { return .null }
                result = parsed
            case .single(let f): return .primitive(.single(f))
            case .double(let v):
                guard v.isFinite else { return .primitive(.single(Float(v))) }
                result = Float(v)
            }
            return result.isFinite ? .primitive(.single(result)) : .null
        case .decimal:
            switch number {
            case .integer(let v): return .primitive(.decimal(DecimalValue(v)))
            case .decimal(let d): return .primitive(.decimal(d))
            case .single(let f):
                guard f.isFinite, let parsed = DecimalValue("\(f)") else { return .null }
                return .primitive(.decimal(parsed))
            case .double(let v):
                guard v.isFinite, let parsed = DecimalValue("\(v)") else { return .null }
                return .primitive(.decimal(parsed))
            }
        default:
            // An integer type: the integer part, when it fits.
            let whole: Int64?
            switch number {
            case .integer(let v): whole = v
            case .decimal(let d):
                let integerPart = d.description.split(separator: ".", maxSplits: 1).first.map(String.init) ?? "0"
                whole = Int64(integerPart == "-0" ? "0" : integerPart)
            case .single(let f): whole = f.isFinite ? Int64(exactly: Double(f).rounded(.towardZero)) : nil
            case .double(let v): whole = v.isFinite ? Int64(exactly: v.rounded(.towardZero)) : nil
            }
            return whole.flatMap { integer($0, as: target) } ?? .null
        }
    }

    /// `v` as the integer type `target`, when it fits.
    static func integer(_ v: Int64, as target: PrimitiveType) -> Value? {
        switch target {
        case .byte: UInt8(exactly: v).map { Value.primitive(.byte($0)) }
        case .sbyte: Int8(exactly: v).map { Value.primitive(.sbyte($0)) }
        case .int16: Int16(exactly: v).map { Value.primitive(.int16($0)) }
        case .int32: Int32(exactly: v).map { Value.primitive(.int32($0)) }
        case .int64: Value.primitive(.int64(v))
        default: nil
        }
    }

    // MARK: Comparing results

    /// A text that two values share when they are the same value, whatever their form:
    /// decimals without trailing zeros, DateTimeOffsets by instant and offset, times and
    /// durations by length, enums by number. For comparing `$select`ed values.
    public func comparableText(_ value: Value) -> String {
        switch value {
        case .null:
            return "null"
        case .primitive(let p):
            return Self.comparableText(p)
        case .enumeration(let e):
            return (try? enumNumber(e, typeName: nil)).map { "enum:\($0)" } ?? "enum:" + e.members.joined(separator: ",")
        case .collection(let items):
            return "[" + items.map { comparableText($0) }.joined(separator: ",") + "]"
        case .complex(let s), .entity(let s):
            return "{" + s.properties.map { $0.name + ":" + comparableText($0.value) }.joined(separator: ",") + "}"
        }
    }

    static func comparableText(_ p: PrimitiveValue) -> String {
        if let integer = Value.primitive(p).int64Value { return "int:\(integer)" }
        switch p {
        case .decimal(let d):
            var text = d.description
            if text.contains(".") {
                while text.hasSuffix("0") { text.removeLast() }
                if text.hasSuffix(".") { text.removeLast() }
            }
            return "dec:" + (text == "-0" ? "0" : text)
        case .single(let f): return "sgl:\(f)"
        case .double(let d): return "dbl:\(d)"
        case .string(let s): return "str:" + s
        case .boolean(let b): return "bool:\(b)"
        case .guid(let g): return "guid:\(g)"
        case .date(let d): return "date:\(d)"
        case .timeOfDay(let t): return "tod:\(t.picosecondsSinceMidnight)"
        case .dateTimeOffset(let d), .dateTime(let d):
            let instant = d.instant
            return "dto:\(instant.seconds).\(instant.picoseconds)@\(d.offsetMinutes.map { String($0) } ?? "none")"
        case .duration(let d), .time(let d):
            let length = d.totalPicoseconds
            return "dur:\(length.whole).\(length.picos)"
        default:
            return "\(p.type.rawValue):" + Literal.payloadText(p)
        }
    }

    // MARK: Sorting

    /// A stable merge sort whose comparison may throw.
    static func stableSorted<T>(_ items: [T], by less: (T, T) throws -> Bool) rethrows -> [T] {
        guard items.count > 1 else { return items }
        let middle = items.count / 2
        let left = try stableSorted(Array(items[..<middle]), by: less)
        let right = try stableSorted(Array(items[middle...]), by: less)
        var merged: [T] = []
        merged.reserveCapacity(items.count)
        var i = 0, j = 0
        while i < left.count && j < right.count {
            if try less(right[j], left[i]) {
                merged.append(right[j])
                j += 1
            } else {
                merged.append(left[i])
                i += 1
            }
        }
        merged.append(contentsOf: left[i...])
        merged.append(contentsOf: right[j...])
        return merged
    }
}

// MARK: - Numbers

/// A number as the evaluator computes with it.
enum Number {
    case integer(Int64)
    case decimal(DecimalValue)
    case single(Float)
    case double(Double)

    init?(_ p: PrimitiveValue) {
        switch p {
        case .byte(let v): self = .integer(Int64(v))
        case .sbyte(let v): self = .integer(Int64(v))
        case .int16(let v): self = .integer(Int64(v))
        case .int32(let v): self = .integer(Int64(v))
        case .int64(let v): self = .integer(v)
        case .decimal(let d): self = .decimal(d)
        case .single(let f): self = .single(f)
        case .double(let d): self = .double(d)
        default: return nil
        }
    }

    enum Kind { case integer, decimal, single, double }

    var kind: Kind {
        switch self {
        case .integer: .integer
        case .decimal: .decimal
        case .single: .single
        case .double: .double
        }
    }

    /// OData 4.01 §5.1.1.18: Double, else Single, else Decimal, else (Int64) integer.
    static func promotion(_ a: Number, _ b: Number) -> Kind {
        if a.kind == .double || b.kind == .double { return .double }
        if a.kind == .single || b.kind == .single { return .single }
        if a.kind == .decimal || b.kind == .decimal { return .decimal }
        return .integer
    }

    var asDouble: Double {
        switch self {
        case .integer(let v): Double(v)
        case .decimal(let d): Double(d.description) ?? .nan
        case .single(let f): Double(f)
        case .double(let d): d
        }
    }

    var asSingle: Float {
        switch self {
        case .integer(let v): Float(v)
        case .decimal(let d): Float(d.description) ?? .nan
        case .single(let f): f
        case .double(let d): Float(d)
        }
    }

    /// Integers and decimals exactly (only called for those).
    var asDecimal: DecimalValue {
        switch self {
        case .integer(let v): DecimalValue(v)
        case .decimal(let d): d
        case .single(let f): DecimalValue("\(f)") ?? DecimalValue(0)
        case .double(let d): DecimalValue("\(d)") ?? DecimalValue(0)
        }
    }

    static func compare(_ a: Number, _ b: Number) throws -> Int {
        switch promotion(a, b) {
        case .double:
            return try floating(a.asDouble, b.asDouble)
        case .single:
            // Single, as the spec says; refused where Double would order them otherwise.
            let inSingle = try floating(a.asSingle, b.asSingle)
            let inDouble = try floating(a.asDouble, b.asDouble)
            guard inSingle == inDouble else {
                throw OracleRefusal("comparing \(a) with \(b), which Single and Double precision order differently")
            }
            return inSingle
        case .decimal:
            return OracleEvaluator.order(a.asDecimal, b.asDecimal)
        case .integer:
            guard case .integer(let x) = a, case .integer(let y) = b else { return 0 }
            return OracleEvaluator.order(x, y)
        }
    }

    static func floating<F: BinaryFloatingPoint>(_ a: F, _ b: F) throws -> Int {
        guard !a.isNaN, !b.isNaN else { throw OracleRefusal("comparing NaN") }
        return a < b ? -1 : (a == b ? 0 : 1)
    }
}

/// A decimal as an integer and a scale (`-12.5` is -125 and 1), for exact `add`, `sub` and
/// `mul`; decimals of more than 18 digits are refused.
struct Scaled {
    var mantissa: Int64
    var scale: Int

    init(mantissa: Int64, scale: Int) {
        self.mantissa = mantissa
        self.scale = scale
    }

    init(_ d: DecimalValue) throws {
        let text = d.description
        let negative = text.hasPrefix("-")
        let body = negative ? String(text.dropFirst()) : text
        let parts = body.split(separator: ".", omittingEmptySubsequences: false)
        let digits = parts.joined()
        guard digits.count <= 18, let magnitude = Int64(digits) else {
            throw OracleRefusal("decimal arithmetic on \(text) (more than 18 digits)")
        }
        mantissa = negative ? -magnitude : magnitude
        scale = parts.count > 1 ? parts[1].count : 0
    }

    var negated: Scaled { Scaled(mantissa: -mantissa, scale: scale) }

    /// The mantissa at a larger scale.
    func rescaled(to newScale: Int) throws -> Int64 {
        var m = mantissa
        for _ in scale..<max(scale, newScale) {
            let (next, overflow) = m.multipliedReportingOverflow(by: 10)
            guard !overflow else { throw OracleRefusal("decimal arithmetic beyond 18 digits") }
            m = next
        }
        return m
    }

    func adding(_ other: Scaled) throws -> Scaled {
        let common = max(scale, other.scale)
        let (sum, overflow) = try rescaled(to: common).addingReportingOverflow(other.rescaled(to: common))
        guard !overflow else { throw OracleRefusal("decimal arithmetic beyond 18 digits") }
        return Scaled(mantissa: sum, scale: common)
    }

    func multiplied(by other: Scaled) throws -> Scaled {
        let (product, overflow) = mantissa.multipliedReportingOverflow(by: other.mantissa)
        guard !overflow else { throw OracleRefusal("decimal arithmetic beyond 18 digits") }
        return Scaled(mantissa: product, scale: scale + other.scale)
    }

    var value: DecimalValue {
        get throws {
            var digits = String(mantissa.magnitude)
            if scale > 0 {
                if digits.count <= scale { digits = String(repeating: "0", count: scale + 1 - digits.count) + digits }
                let split = digits.index(digits.endIndex, offsetBy: -scale)
                digits = String(digits[..<split]) + "." + String(digits[split...])
            }
            guard let result = DecimalValue((mantissa < 0 ? "-" : "") + digits) else {
                throw OracleRefusal("the decimal \(mantissa)e-\(scale)")
            }
            return result
        }
    }
}
