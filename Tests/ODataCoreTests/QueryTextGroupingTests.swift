import Foundation
import Testing
@testable import ODataCore

/// Issue 34, item 26: the typed query writer keeps parentheses wherever the grouping matters.
/// Every pair of binary operators, nested left and right, and the unary operators over each:
/// the URL text it writes must parse back (with our URL parser) to the same tree.
@Suite struct QueryTextGroupingTests {
    static let operators = ["or", "and", "eq", "ne", "lt", "le", "gt", "ge", "add", "sub", "mul", "div", "mod", "has"]
    static let flag = ExpressionNode.literal(.enumeration(EnumValue(typeName: "NS.Color", members: ["Red"])))

    /// The tree with every operation in parentheses, from the writer's nodes.
    static func grouped(_ node: ExpressionNode) -> String {
        switch node.kind {
        case .path(let path): return path
        case .literal(let value): return Literal.format(value)
        case .binary(let op, _, _) where op == "and" || op == "or":
            // `and` and `or` are associative: a chain is one group, however it nests.
            return "(" + chain(node, op).map(grouped).joined(separator: " \(op) ") + ")"
        case .binary(let op, let left, let right): return "(\(grouped(left)) \(op) \(grouped(right)))"
        case .not(let operand): return "(not \(grouped(operand)))"
        case .negate(let operand): return "(- \(grouped(operand)))"
        default: return "?"
        }
    }

    /// The same from the parser's tree.
    static func grouped(_ expression: CommonExpression) -> String {
        switch expression.node {
        case .path(let path):
            if path.steps.count == 1, case .member(let name) = path.steps[0] { return name }
            return "?path"
        case .literal(let value): return Literal.format(value)
        case .binary(let op, _, _) where op == .and || op == .or:
            return "(" + chain(expression, op).map(grouped).joined(separator: " \(op.rawValue) ") + ")"
        case .binary(let op, let left, let right): return "(\(grouped(left)) \(op.rawValue) \(grouped(right)))"
        case .unary(.not, let operand): return "(not \(grouped(operand)))"
        case .unary(.negate, let operand): return "(- \(grouped(operand)))"
        default: return "?"
        }
    }

    /// The operands of a chain of one associative operator, in order.
    static func chain(_ node: ExpressionNode, _ op: String) -> [ExpressionNode] {
        guard case .binary(op, let left, let right) = node.kind else { return [node] }
        return chain(left, op) + chain(right, op)
    }

    static func chain(_ expression: CommonExpression, _ op: BinaryOperator) -> [CommonExpression] {
        guard case .binary(op, let left, let right) = expression.node else { return [expression] }
        return chain(left, op) + chain(right, op)
    }

    /// Writes `node` for `version`, parses it back and compares the groupings.
    static func roundTrip(_ node: ExpressionNode, _ version: ODataVersion) throws -> (written: String, read: String) {
        let text = try node.render(version)
        let parsed = try URLParser(version: version).parse("S?$filter=" + text)
        return (grouped(node), parsed.query.filter.map(grouped) ?? "none")
    }

    @Test(arguments: [ODataVersion.v4, .v401])
    func everyOperatorPairKeepsItsGrouping(version: ODataVersion) throws {
        let a = ExpressionNode.path("A"), b = ExpressionNode.path("B"), c = ExpressionNode.path("C")
        var checked = 0
        for outer in Self.operators {
            for inner in Self.operators {
                // `has` takes an enum value on its right, nothing else.
                let leftNested = ExpressionNode.binary(
                    outer, .binary(inner, a, inner == "has" ? Self.flag : b), outer == "has" ? Self.flag : c)
                var trees = [leftNested]
                if outer != "has" {
                    trees.append(.binary(outer, a, .binary(inner, b, inner == "has" ? Self.flag : c)))
                }
                for tree in trees {
                    let (written, read) = try Self.roundTrip(tree, version)
                    let text = try tree.render(version)
                    #expect(written == read, "\(text) reads back as \(read), not \(written)")
                    checked += 1
                }
            }
            let single = ExpressionNode.binary(outer, a, outer == "has" ? Self.flag : b)
            for tree in [ExpressionNode.not(single), .negate(single), .binary(outer == "has" ? "eq" : outer, .negate(a), b)] {
                let (written, read) = try Self.roundTrip(tree, version)
                let text = try tree.render(version)
                #expect(written == read, "\(text) reads back as \(read), not \(written)")
                checked += 1
            }
        }
        #expect(checked == 14 * 14 * 2 - 14 + 14 * 3)
    }

    /// `in` (4.01) binds tighter than arithmetic: its left side keeps its parentheses.
    @Test func inKeepsTheGroupingOfItsLeftSide() throws {
        let sum = ExpressionNode.binary("add", .path("A"), .path("B"))
        let text = try ExpressionNode.within(sum, [.literal(.primitive(.int32(1))), .literal(.primitive(.int32(2)))]).render(.v401)
        #expect(text == "(A add B) in (1,2)")
        let parsed = try URLParser(version: .v401).parse("S?$filter=" + text)
        guard case .binary(.in, let left, _)? = parsed.query.filter?.node else {
            Issue.record("not an in: \(String(describing: parsed.query.filter))")
            return
        }
        #expect(Self.grouped(left) == "(A add B)")
    }
}
