import Foundation

/// One node of a typed `$filter` or `$orderby` expression, rendered as URL text for a version.
/// Opaque: built by the operators and functions on ``ODataOperand``.
public struct ExpressionNode: Sendable, Hashable {
    indirect enum Kind: Sendable, Hashable {
        case path(String)
        case literal(Value)
        case binary(String, ExpressionNode, ExpressionNode)
        case not(ExpressionNode)
        case negate(ExpressionNode)
        /// A function with the same name and argument order in V2 and V4.
        case call(String, [ExpressionNode])
        /// `contains(a,b)` (V4), `substringof(b,a)` (V2).
        case contains(ExpressionNode, ExpressionNode)
        /// `path/any(d:…)`, `path/all(d:…)`, `path/any()`.
        case lambda(String, path: String, variable: String, body: ExpressionNode?)
        /// `a in (b,c)` (V4.01), `(a eq b or a eq c)` before.
        case within(ExpressionNode, [ExpressionNode])
        case constant(Bool)
        /// `Path/$count` (V4).
        case count(String)
    }

    let kind: Kind

    static func path(_ path: String) -> ExpressionNode { ExpressionNode(kind: .path(path)) }
    static func literal(_ value: Value) -> ExpressionNode { ExpressionNode(kind: .literal(value)) }
    static func binary(_ op: String, _ lhs: ExpressionNode, _ rhs: ExpressionNode) -> ExpressionNode {
        ExpressionNode(kind: .binary(op, lhs, rhs))
    }
    static func not(_ node: ExpressionNode) -> ExpressionNode { ExpressionNode(kind: .not(node)) }
    static func negate(_ node: ExpressionNode) -> ExpressionNode { ExpressionNode(kind: .negate(node)) }
    static func call(_ name: String, _ arguments: [ExpressionNode]) -> ExpressionNode {
        ExpressionNode(kind: .call(name, arguments))
    }
    static func contains(_ text: ExpressionNode, _ part: ExpressionNode) -> ExpressionNode {
        ExpressionNode(kind: .contains(text, part))
    }
    static func lambda(_ kind: String, path: String, variable: String, body: ExpressionNode?) -> ExpressionNode {
        ExpressionNode(kind: .lambda(kind, path: path, variable: variable, body: body))
    }
    static func within(_ node: ExpressionNode, _ values: [ExpressionNode]) -> ExpressionNode {
        ExpressionNode(kind: .within(node, values))
    }
    static func constant(_ value: Bool) -> ExpressionNode { ExpressionNode(kind: .constant(value)) }
    static func count(_ path: String) -> ExpressionNode { ExpressionNode(kind: .count(path)) }

    /// Binding strength of the node's outermost operator (OData ABNF, §5.1.1.16 of part 2).
    var precedence: Int {
        switch kind {
        case .binary(let op, _, _):
            switch op {
            case "or": 1
            case "and": 2
            case "eq", "ne": 3
            case "lt", "le", "gt", "ge": 4
            case "add", "sub": 5
            // `has` and `in` are primary operators (4.01 Part 2, §5.1.1.16): tighter than unary.
            case "has": 8
            default: 6  // mul, div, mod
            }
        case .within: 8
        case .not, .negate: 7
        default: 8
        }
    }

    /// A `has` or an `in` (4.01) node.
    var isHasOrIn: Bool {
        switch kind {
        case .binary("has", _, _), .within: true
        default: false
        }
    }

    func render(_ version: ODataVersion) throws(QueryError) -> String {
        switch kind {
        case .path(let path): return path
        case .literal(let value): return QueryText.literal(value, version: version)
        case .constant(let value): return value ? "true" : "false"
        case .count(let path):
            if version.isLegacy { throw QueryError("\(path)/$count inside a filter needs OData V4") }
            return path + "/$count"
        case .binary(let op, let left, let right):
            if op == "has", version.isLegacy {
                throw QueryError("the 'has' operator needs OData V4")
            }
            let precedence = self.precedence
            // Left-associative: a right operand of the same strength needs parentheses.
            var lhs = try left.render(version)
            // `has` and `in` inside another operator keep their parentheses: 4.01 binds them
            // tightest, some 4.0 parsers bind `has` like a comparison.
            if left.precedence < precedence || (op != "has" && left.isHasOrIn) { lhs = "(" + lhs + ")" }
            var rhs = try right.render(version)
            let sameChain =
                (op == "and" || op == "or") && right.precedence == precedence
                && { if case .binary(op, _, _) = right.kind { return true } else { return false } }()
            // An atom (a path, a literal, a call) binds as tightly as `has` and needs none.
            let rightIsOperation: Bool
            switch right.kind {
            case .binary, .within: rightIsOperation = true
            default: rightIsOperation = false
            }
            if right.precedence < precedence || (right.precedence == precedence && rightIsOperation && !sameChain)
                || right.isHasOrIn
            {
                rhs = "(" + rhs + ")"
            }
            return lhs + " " + op + " " + rhs
        case .not(let operand):
            let text = try operand.render(version)
            return "not " + (operand.precedence < 7 || version.isLegacy ? "(" + text + ")" : text)
        case .negate(let operand):
            let text = try operand.render(version)
            return "-" + (operand.precedence < 7 ? "(" + text + ")" : text)
        case .call(let name, let arguments):
            return name + "("
                + (try arguments.map { (node) throws(QueryError) in try node.render(version) })
                .joined(separator: ",") + ")"
        case .contains(let text, let part):
            if version.isLegacy {
                return "substringof(" + (try part.render(version)) + "," + (try text.render(version)) + ")"
            }
            return "contains(" + (try text.render(version)) + "," + (try part.render(version)) + ")"
        case .lambda(let kind, let path, let variable, let body):
            if version.isLegacy { throw QueryError("\(path)/\(kind): lambda operators need OData V4") }
            guard let body else { return path + "/" + kind + "()" }
            return path + "/" + kind + "(" + variable + ":" + (try body.render(version)) + ")"
        case .within(let operand, let values):
            if version == .v401, !values.isEmpty {
                var left = try operand.render(version)
                if operand.precedence < 8 { left = "(" + left + ")" }
                return left + " in ("
                    + (try values.map { (node) throws(QueryError) in try node.render(version) })
                    .joined(separator: ",") + ")"
            }
            // Before 4.01: the same test as equalities.
            guard let first = values.first else { return "false" }
            let expanded = values.dropFirst().reduce(ExpressionNode.binary("eq", operand, first)) {
                .binary("or", $0, .binary("eq", operand, $1))
            }
            return "(" + (try expanded.render(version)) + ")"
        }
    }
}

/// A `$filter` condition built from the generated fields of a type:
/// `$0.country == "US" && $0.name.starts(with: "A")`.
public struct QueryFilter: Sendable, Hashable {
    let node: ExpressionNode

    init(_ node: ExpressionNode) { self.node = node }

    /// A condition that always holds (`true`).
    public static let always = QueryFilter(.constant(true))

    /// The condition as `$filter` text for `version`.
    public func text(for version: ODataVersion) throws(QueryError) -> String { try node.render(version) }

    /// Both conditions (`and`).
    public static func && (lhs: QueryFilter, rhs: QueryFilter) -> QueryFilter {
        QueryFilter(.binary("and", lhs.node, rhs.node))
    }
    /// Either condition (`or`).
    public static func || (lhs: QueryFilter, rhs: QueryFilter) -> QueryFilter {
        QueryFilter(.binary("or", lhs.node, rhs.node))
    }
    /// The opposite condition (`not`).
    public static prefix func ! (operand: QueryFilter) -> QueryFilter { QueryFilter(.not(operand.node)) }
}

/// A typed query that cannot be written for the service's version (a lambda in V2, say).
public struct QueryError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What cannot be expressed.
    public var message: String
    /// Creates a value from its parts.
    public init(_ message: String) { self.message = message }
    public var description: String { "query not expressible: \(message)" }
}

/// Anything with an OData value of a known Swift type inside a query: a property path, a
/// function result, a lambda variable.
public protocol ODataOperand: Sendable {
    /// The Swift type of the value (non-optional: nullable properties compare with `nil`).
    associatedtype OperandValue: ODataValueConvertible
    /// The expression.
    var expressionNode: ExpressionNode { get }
    /// The declared Edm type, where the Swift type stands for two (V2 `Edm.DateTime`).
    var edmType: PrimitiveType? { get }
}

/// A computed value inside a query: `$0.name.lowercased()`, `$0.price * 2`, `$0.date.year`.
public struct Operand<OperandValue: ODataValueConvertible>: ODataOperand {
    public let expressionNode: ExpressionNode
    public let edmType: PrimitiveType?
    init(_ node: ExpressionNode, _ type: PrimitiveType? = nil) {
        expressionNode = node
        edmType = type
    }
}

extension ODataOperand {
    func literal(_ value: OperandValue) -> ExpressionNode { .literal(value.odataValue(as: edmType)) }

    /// `self in (values…)`: V4.01's `in`, or equalities joined with `or` before.
    public func isIn(_ values: some Sequence<OperandValue>) -> QueryFilter {
        QueryFilter(.within(expressionNode, values.map { literal($0) }))
    }

    /// Sorts ascending by this value.
    public var ascending: TypedOrder { TypedOrder(node: expressionNode, descending: false) }
    /// Sorts descending by this value.
    public var descending: TypedOrder { TypedOrder(node: expressionNode, descending: true) }
}

/// One `$orderby` item.
public struct TypedOrder: Sendable, Hashable {
    let node: ExpressionNode
    let descending: Bool

    func render(_ version: ODataVersion) throws(QueryError) -> String {
        try node.render(version) + (descending ? " desc" : "")
    }
}

// MARK: Comparison

private func compare<O: ODataOperand>(_ op: String, _ lhs: O, _ rhs: O.OperandValue) -> QueryFilter {
    QueryFilter(.binary(op, lhs.expressionNode, lhs.literal(rhs)))
}

private func compare<L: ODataOperand, R: ODataOperand>(_ op: String, _ lhs: L, _ rhs: R) -> QueryFilter
where L.OperandValue == R.OperandValue {
    QueryFilter(.binary(op, lhs.expressionNode, rhs.expressionNode))
}

/// `eq` with a value.
public func == <O: ODataOperand>(lhs: O, rhs: O.OperandValue) -> QueryFilter { compare("eq", lhs, rhs) }
/// `ne` with a value.
public func != <O: ODataOperand>(lhs: O, rhs: O.OperandValue) -> QueryFilter { compare("ne", lhs, rhs) }
/// `lt` with a value.
public func < <O: ODataOperand>(lhs: O, rhs: O.OperandValue) -> QueryFilter { compare("lt", lhs, rhs) }
/// `le` with a value.
public func <= <O: ODataOperand>(lhs: O, rhs: O.OperandValue) -> QueryFilter { compare("le", lhs, rhs) }
/// `gt` with a value.
public func > <O: ODataOperand>(lhs: O, rhs: O.OperandValue) -> QueryFilter { compare("gt", lhs, rhs) }
/// `ge` with a value.
public func >= <O: ODataOperand>(lhs: O, rhs: O.OperandValue) -> QueryFilter { compare("ge", lhs, rhs) }

/// `eq` with another value of the query.
public func == <L: ODataOperand, R: ODataOperand>(lhs: L, rhs: R) -> QueryFilter
where L.OperandValue == R.OperandValue { compare("eq", lhs, rhs) }
/// `ne` with another value of the query.
public func != <L: ODataOperand, R: ODataOperand>(lhs: L, rhs: R) -> QueryFilter
where L.OperandValue == R.OperandValue { compare("ne", lhs, rhs) }
/// `lt` with another value of the query.
public func < <L: ODataOperand, R: ODataOperand>(lhs: L, rhs: R) -> QueryFilter
where L.OperandValue == R.OperandValue { compare("lt", lhs, rhs) }
/// `le` with another value of the query.
public func <= <L: ODataOperand, R: ODataOperand>(lhs: L, rhs: R) -> QueryFilter
where L.OperandValue == R.OperandValue { compare("le", lhs, rhs) }
/// `gt` with another value of the query.
public func > <L: ODataOperand, R: ODataOperand>(lhs: L, rhs: R) -> QueryFilter
where L.OperandValue == R.OperandValue { compare("gt", lhs, rhs) }
/// `ge` with another value of the query.
public func >= <L: ODataOperand, R: ODataOperand>(lhs: L, rhs: R) -> QueryFilter
where L.OperandValue == R.OperandValue { compare("ge", lhs, rhs) }

/// `eq null`: `$0.email == nil`.
public func == <O: ODataOperand>(lhs: O, rhs: _OptionalNilComparisonType) -> QueryFilter {
    QueryFilter(.binary("eq", lhs.expressionNode, .literal(.null)))
}
/// `ne null`: `$0.email != nil`.
public func != <O: ODataOperand>(lhs: O, rhs: _OptionalNilComparisonType) -> QueryFilter {
    QueryFilter(.binary("ne", lhs.expressionNode, .literal(.null)))
}
/// `eq` with an optional value: nil compares with `null`.
public func == <O: ODataOperand>(lhs: O, rhs: O.OperandValue?) -> QueryFilter {
    QueryFilter(.binary("eq", lhs.expressionNode, rhs.map { lhs.literal($0) } ?? .literal(.null)))
}
/// `ne` with an optional value: nil compares with `null`.
public func != <O: ODataOperand>(lhs: O, rhs: O.OperandValue?) -> QueryFilter {
    QueryFilter(.binary("ne", lhs.expressionNode, rhs.map { lhs.literal($0) } ?? .literal(.null)))
}

// MARK: Booleans

extension ODataOperand where OperandValue == Bool {
    /// A Boolean property or function result as a condition: `$0.isActive.isTrue` is
    /// `IsActive eq true`.
    public var isTrue: QueryFilter { QueryFilter(.binary("eq", expressionNode, .constant(true))) }
    /// `IsActive eq false`.
    public var isFalse: QueryFilter { QueryFilter(.binary("eq", expressionNode, .constant(false))) }
}

// MARK: Strings

extension ODataOperand where OperandValue == String {
    /// `contains(Name,'x')` (V4), `substringof('x',Name)` (V2).
    public func contains(_ part: String) -> QueryFilter { QueryFilter(.contains(expressionNode, literal(part))) }
    /// `startswith(Name,'x')`.
    public func starts(with prefix: String) -> QueryFilter {
        QueryFilter(.call("startswith", [expressionNode, literal(prefix)]))
    }
    /// `endswith(Name,'x')`.
    public func ends(with suffix: String) -> QueryFilter {
        QueryFilter(.call("endswith", [expressionNode, literal(suffix)]))
    }
    /// `tolower(Name)`.
    public func lowercased() -> Operand<String> { Operand(.call("tolower", [expressionNode])) }
    /// `toupper(Name)`.
    public func uppercased() -> Operand<String> { Operand(.call("toupper", [expressionNode])) }
    /// `trim(Name)`.
    public func trimmed() -> Operand<String> { Operand(.call("trim", [expressionNode])) }
    /// `length(Name)`.
    public var length: Operand<Int32> { Operand(.call("length", [expressionNode])) }
    /// `indexof(Name,'x')`: zero-based, -1 when absent.
    public func index(of part: String) -> Operand<Int32> {
        Operand(.call("indexof", [expressionNode, literal(part)]))
    }
    /// `substring(Name,start)` or `substring(Name,start,length)`.
    public func substring(from start: Int32, length: Int32? = nil) -> Operand<String> {
        let arguments: [ExpressionNode] =
            [expressionNode, .literal(.primitive(.int32(start)))]
            + (length.map { [.literal(.primitive(.int32($0)))] } ?? [])
        return Operand(.call("substring", arguments))
    }
    /// `concat(Name,'x')`.
    public func appending(_ suffix: String) -> Operand<String> {
        Operand(.call("concat", [expressionNode, literal(suffix)]))
    }
}

// MARK: Numbers

/// The Swift types of numeric Edm types, for arithmetic inside queries.
public protocol ODataNumeric: ODataValueConvertible {}
extension UInt8: ODataNumeric {}
extension Int8: ODataNumeric {}
extension Int16: ODataNumeric {}
extension Int32: ODataNumeric {}
extension Int64: ODataNumeric {}
extension Float: ODataNumeric {}
extension Double: ODataNumeric {}
extension DecimalValue: ODataNumeric {}

private func arithmetic<O: ODataOperand>(_ op: String, _ lhs: O, _ rhs: O.OperandValue) -> Operand<O.OperandValue> {
    Operand(.binary(op, lhs.expressionNode, lhs.literal(rhs)), lhs.edmType)
}

/// `add`.
public func + <O: ODataOperand>(lhs: O, rhs: O.OperandValue) -> Operand<O.OperandValue>
where O.OperandValue: ODataNumeric {
    arithmetic("add", lhs, rhs)
}
/// `sub`.
public func - <O: ODataOperand>(lhs: O, rhs: O.OperandValue) -> Operand<O.OperandValue>
where O.OperandValue: ODataNumeric {
    arithmetic("sub", lhs, rhs)
}
/// `mul`.
public func * <O: ODataOperand>(lhs: O, rhs: O.OperandValue) -> Operand<O.OperandValue>
where O.OperandValue: ODataNumeric {
    arithmetic("mul", lhs, rhs)
}
/// `div`.
public func / <O: ODataOperand>(lhs: O, rhs: O.OperandValue) -> Operand<O.OperandValue>
where O.OperandValue: ODataNumeric {
    arithmetic("div", lhs, rhs)
}
/// `mod`.
public func % <O: ODataOperand>(lhs: O, rhs: O.OperandValue) -> Operand<O.OperandValue>
where O.OperandValue: ODataNumeric {
    arithmetic("mod", lhs, rhs)
}
/// `add` of two values of the query.
public func + <L: ODataOperand, R: ODataOperand>(lhs: L, rhs: R) -> Operand<L.OperandValue>
where L.OperandValue == R.OperandValue, L.OperandValue: ODataNumeric {
    Operand(.binary("add", lhs.expressionNode, rhs.expressionNode), lhs.edmType)
}
/// `sub` of two values of the query.
public func - <L: ODataOperand, R: ODataOperand>(lhs: L, rhs: R) -> Operand<L.OperandValue>
where L.OperandValue == R.OperandValue, L.OperandValue: ODataNumeric {
    Operand(.binary("sub", lhs.expressionNode, rhs.expressionNode), lhs.edmType)
}
/// `mul` of two values of the query.
public func * <L: ODataOperand, R: ODataOperand>(lhs: L, rhs: R) -> Operand<L.OperandValue>
where L.OperandValue == R.OperandValue, L.OperandValue: ODataNumeric {
    Operand(.binary("mul", lhs.expressionNode, rhs.expressionNode), lhs.edmType)
}
/// Negation: `-Price`.
public prefix func - <O: ODataOperand>(operand: O) -> Operand<O.OperandValue> where O.OperandValue: ODataNumeric {
    Operand(.negate(operand.expressionNode), operand.edmType)
}

extension ODataOperand where OperandValue: ODataNumeric {
    /// `round(Price)`.
    public func rounded() -> Operand<OperandValue> { Operand(.call("round", [expressionNode]), edmType) }
    /// `floor(Price)`.
    public func floor() -> Operand<OperandValue> { Operand(.call("floor", [expressionNode]), edmType) }
    /// `ceiling(Price)`.
    public func ceiling() -> Operand<OperandValue> { Operand(.call("ceiling", [expressionNode]), edmType) }
}

// MARK: Dates and times

/// Swift types with a calendar date: `year`, `month` and `day` inside queries.
public protocol ODataHasDate: ODataValueConvertible {}
/// Swift types with a time of day: `hour`, `minute` and `second` inside queries.
public protocol ODataHasTime: ODataValueConvertible {}
extension DateValue: ODataHasDate {}
extension DateTimeOffsetValue: ODataHasDate, ODataHasTime {}
extension TimeOfDayValue: ODataHasTime {}

extension ODataOperand where OperandValue: ODataHasDate {
    /// `year(Date)`.
    public var year: Operand<Int32> { Operand(.call("year", [expressionNode])) }
    /// `month(Date)`.
    public var month: Operand<Int32> { Operand(.call("month", [expressionNode])) }
    /// `day(Date)`.
    public var day: Operand<Int32> { Operand(.call("day", [expressionNode])) }
}

extension ODataOperand where OperandValue: ODataHasTime {
    /// `hour(Time)`.
    public var hour: Operand<Int32> { Operand(.call("hour", [expressionNode])) }
    /// `minute(Time)`.
    public var minute: Operand<Int32> { Operand(.call("minute", [expressionNode])) }
    /// `second(Time)`.
    public var second: Operand<Int32> { Operand(.call("second", [expressionNode])) }
}

// MARK: Enums

extension ODataOperand where OperandValue: ODataEnumeration {
    /// `Flags has Ns.Type'Member'` (V4 only).
    public func has(_ flags: OperandValue) -> QueryFilter {
        QueryFilter(.binary("has", expressionNode, literal(flags)))
    }
}

// MARK: Literals

/// How typed queries write values and options into URL text.
public enum QueryText {
    /// A value as a literal inside a resource path (a key predicate, a function's
    /// parameters): also `?` and `/`, which would end the path segment, are percent-encoded.
    public static func pathLiteral(_ value: Value, version: ODataVersion) -> String {
        let text = literal(value, version: version)
        guard text.utf8.contains(where: { $0 == 0x3F || $0 == 0x2F }) else { return text }
        return text.replacingOccurrences(of: "?", with: "%3F").replacingOccurrences(of: "/", with: "%2F")
    }

    /// A value as a URL literal of `version`, with the characters that would end a query
    /// option early (`%`, `&`, `#`, `+`) percent-encoded; spaces stay as they are.
    public static func literal(_ value: Value, version: ODataVersion) -> String {
        encodeReserved(Literal.format(value, version: version))
    }

    /// `text` with `%`, `&`, `#` and `+` percent-encoded: inside a query option they would end
    /// it, start a fragment or read as a space.
    static func encodeReserved(_ text: String) -> String {
        guard text.utf8.contains(where: { $0 == 0x25 || $0 == 0x26 || $0 == 0x23 || $0 == 0x2B }) else { return text }
        var result = ""
        result.reserveCapacity(text.utf8.count + 8)
        for character in text.unicodeScalars {
            switch character {
            case "%": result += "%25"
            case "&": result += "%26"
            case "#": result += "%23"
            case "+": result += "%2B"
            default: result.unicodeScalars.append(character)
            }
        }
        return result
    }
}
