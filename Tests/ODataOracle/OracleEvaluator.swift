import Foundation
public import ODataCore

/// A second evaluator of bound `$filter` and `$orderby` expressions, and of `$top`/`$skip`,
/// over entities in memory: written from OData 4.01 Part 2's rules, with no SQL, so that a
/// test can run the same request through the store and through this and compare.
///
/// The rules it follows (Part 2, 5.1.1):
/// - `eq`/`ne` treat null as a value; `gt`/`ge`/`lt`/`le` and `in` are false when an operand
///   is null; `and`/`or`/`not`/`has`, arithmetic and functions treat null as unknown;
/// - a row is in a `$filter`'s result when the expression is true (not null, not false);
/// - numbers compare by value across types; DateTimeOffsets by instant; strings by code point;
/// - `$orderby` puts nulls first when ascending; ties fall to the next item.
public struct OracleEvaluator: Sendable {
    public var model: Model
    /// The entities a navigation property of an entity leads to.
    public var related: @Sendable (_ entity: Entity, _ navigation: String) -> [Entity]

    /// Creates an evaluator over `model`; `related` follows navigation properties.
    public init(model: Model, related: @escaping @Sendable (Entity, String) -> [Entity]) {
        self.model = model
        self.related = related
    }

    /// The values names refer to while evaluating: the instance (`$this`), `$it`, lambda variables.
    struct Scope {
        var this: OracleValue
        var it: OracleValue
        var variables: [String: OracleValue] = [:]
    }

    /// The request's answer: rows that pass `filter`, sorted by `orderBy`, then `skip` and `top`.
    public func answer(
        rows: [Entity], filter: BoundExpression?, orderBy: [BoundRequest.BoundOrderBy], skip: Int?, top: Int?
    ) throws -> [Entity] {
        var kept: [(Entity, [OracleValue])] = []
        for row in rows {
            let scope = Scope(this: .entity(row), it: .entity(row))
            if let filter, try evaluate(filter, scope) != .boolean(true) { continue }
            kept.append((row, try orderBy.map { try evaluate($0.expression, scope) }))
        }
        var failure: (any Error)?
        kept.sort { a, b in
            for (index, item) in orderBy.enumerated() {
                do {
                    let order = try Self.sortOrder(a.1[index], b.1[index], model)
                    if order == 0 { continue }
                    return item.descending ? order > 0 : order < 0
                } catch {
                    failure = error
                    return false
                }
            }
            return false
        }
        if let failure { throw failure }
        let skipped = kept.dropFirst(skip ?? 0)
        return Array(skipped.prefix(top ?? Int.max)).map(\.0)
    }

    /// Evaluates `expression` on the entity `row`.
    public func evaluate(_ expression: BoundExpression, on row: Entity) throws -> OracleValue {
        try evaluate(expression, Scope(this: .entity(row), it: .entity(row)))
    }

    func evaluate(_ bound: BoundExpression, _ scope: Scope) throws -> OracleValue {
        switch bound.expression.node {
        case .literal(let value):
            return try OracleValue.from(value, model: model, declared: enumTypeName(bound.type))
        case .path(let path):
            return try evaluatePath(path, bound, scope)
        case .unary(.not, _):
            switch try evaluate(bound.operands[0], scope) {
            case .boolean(let b): return .boolean(!b)
            case .null: return .null
            case let other: throw OracleUnsupported("not of \(other)")
            }
        case .unary(.negate, _):
            switch try evaluate(bound.operands[0], scope) {
            case .integer(let i): return .integer(-i)
            case .double(let d): return .double(-d)
            case .decimal(let d): return .decimal(-d)
            case .null: return .null
            case let other: throw OracleUnsupported("negation of \(other)")
            }
        case .binary(let op, _, _):
            return try binary(op, bound.operands[0], bound.operands[1], scope)
        case .call(let name, _):
            return try call(name, bound, scope)
        case .caseOf:
            var index = 0
            while index + 1 < bound.operands.count {
                if try evaluate(bound.operands[index], scope) == .boolean(true) {
                    return try evaluate(bound.operands[index + 1], scope)
                }
                index += 2
            }
            return .null
        case .list(let items):
            return .collection(try items.indices.map { try evaluate(bound.operands[$0], scope) })
        case .alias, .array, .object, .typeName:
            throw OracleUnsupported("\(bound.expression.node)")
        }
    }

    func enumTypeName(_ type: ExpressionType) -> String? {
        if case .enumeration(let name) = type { return name }
        return nil
    }

    // MARK: Paths

    func evaluatePath(_ path: PathExpression, _ bound: BoundExpression, _ scope: Scope) throws -> OracleValue {
        var current: OracleValue
        switch path.root {
        case .implicit, .this: current = scope.this
        case .it: current = scope.it
        case .variable(let name):
            guard let value = scope.variables[name] else { throw OracleUnsupported("variable \(name)") }
            current = value
        case .root, .alias: throw OracleUnsupported("paths from $root or an alias")
        }
        var operandIndex = 0
        for (index, step) in bound.steps.enumerated() {
            switch step.kind {
            case .property, .dynamicProperty:
                current = try member(step.name, of: current, declared: step.type)
            case .cast:
                // A cast to a derived type: the instance when it is one, else null (5.1.1.15).
                if case .entity(let entity) = current, let type = entity.typeName,
                    model.isType(type, derivedFrom: step.name)
                {
                    continue
                }
                current = .null
            case .navigation:
                guard case .entity(let entity) = current else {
                    current = .null
                    continue
                }
                let targets = related(entity, step.name)
                if case .collection = step.type {
                    current = .collection(targets.map { .entity($0) })
                } else {
                    current = targets.first.map { .entity($0) } ?? .null
                }
            case .count:
                guard case .collection(let items) = current else {
                    current = .null
                    continue
                }
                if case .count(let filter?, _) = path.steps[index], filter == bound.operands[operandIndex].expression {
                    let predicate = bound.operands[operandIndex]
                    operandIndex += 1
                    var kept = 0
                    for item in items {
                        var inner = scope
                        inner.this = item
                        if try evaluate(predicate, inner) == .boolean(true) { kept += 1 }
                    }
                    current = .integer(Int64(kept))
                } else {
                    current = .integer(Int64(items.count))
                }
            case .any, .all:
                let items: [OracleValue]
                switch current {
                case .collection(let values): items = values
                case .null: items = []
                default: throw OracleUnsupported("a lambda over \(current)")
                }
                guard case .lambda(_, let variable, let predicate) = path.steps[index] else {
                    throw OracleUnsupported("a lambda step without its syntax")
                }
                guard predicate != nil else {
                    // `any()` without a predicate: the collection is not empty.
                    current = .boolean(!items.isEmpty)
                    continue
                }
                let body = bound.operands[operandIndex]
                operandIndex += 1
                current = try lambda(step.kind == .any, items, variable, body, scope)
            default:
                throw OracleUnsupported("the path step \(step.kind)")
            }
        }
        return current
    }

    /// `any` is true when the predicate holds (is true) for some member, `all` when it holds for
    /// every member (Part 2, 5.1.1.13): a member for which it is null does not hold, so `all`
    /// over it is false. (The spec does not say this for null; the oracle first answered null,
    /// three-valued, and was changed to the reading of "holds".)
    func lambda(
        _ isAny: Bool, _ items: [OracleValue], _ variable: String?, _ body: BoundExpression, _ scope: Scope
    ) throws -> OracleValue {
        for item in items {
            var inner = scope
            if let variable { inner.variables[variable] = item }
            let value = try evaluate(body, inner)
            switch value {
            case .boolean, .null: break
            default: throw OracleUnsupported("a lambda predicate giving \(value)")
            }
            let holds = value == .boolean(true)
            if holds == isAny { return .boolean(isAny) }
        }
        return .boolean(!isAny)
    }

    func member(_ name: String, of value: OracleValue, declared: ExpressionType) throws -> OracleValue {
        let found: Value?
        switch value {
        case .entity(let entity): found = entity[name]
        case .complex(let structured): found = structured[name]
        case .null: return .null
        default: throw OracleUnsupported("\(name) of \(value)")
        }
        guard let found else { return .null }
        var enumName: String?
        switch declared {
        case .enumeration(let n): enumName = n
        case .collection(.enumeration(let n)): enumName = n
        default: break
        }
        return try OracleValue.from(found, model: model, declared: enumName)
    }
}
