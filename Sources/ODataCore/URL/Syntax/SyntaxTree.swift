/// A parsed expression from `$filter`, `$orderby`, `$compute`, an alias value or a key.
///
/// `offset` is the UTF-8 offset of the expression in the decoded option text it came from.
public struct CommonExpression: Sendable, Hashable {
    public var node: Node
    public var offset: Int
    /// Creates a value from its parts.
    public init(_ node: Node, at offset: Int) {
        self.node = node
        self.offset = offset
    }

    /// The height of the tree (a leaf is 1), found without recursion, so that a tree too
    /// high for recursive readers can be refused safely.
    public static func height(of expression: CommonExpression) -> Int {
        var highest = 0
        var stack: [(CommonExpression, Int)] = [(expression, 1)]
        while let (current, level) = stack.popLast() {
            highest = max(highest, level)
            for child in current.children { stack.append((child, level + 1)) }
        }
        return highest
    }

    /// The expressions directly inside this one.
    var children: [CommonExpression] {
        switch node {
        case .literal, .alias, .typeName: return []
        case .array(let items), .list(let items), .call(_, let items): return items
        case .object(let members): return members.map(\.value)
        case .unary(_, let operand): return [operand]
        case .binary(_, let left, let right): return [left, right]
        case .caseOf(let branches): return branches.flatMap { [$0.condition, $0.value] }
        case .path(let path):
            return path.steps.flatMap { step -> [CommonExpression] in
                switch step {
                case .count(let filter, _): return filter.map { [$0] } ?? []
                case .function(_, let arguments): return arguments.map(\.value)
                case .lambda(_, _, let predicate): return predicate.map { [$0] } ?? []
                case .filter(let condition): return [condition]
                case .key(let parts): return parts.map(\.value)
                case .member, .cast, .annotation: return []
                }
            }
        }
    }

    /// The kinds of expression.
    public indirect enum Node: Sendable, Hashable {
        /// A primitive, enum or null literal.
        case literal(Value)
        /// A parameter alias, `@p`.
        case alias(String)
        /// A JSON-style array written in the URL (4.01): `[1,2]`, `["a",Name]`.
        case array([CommonExpression])
        /// A JSON-style object written in the URL (4.01): `{"Name":"x","Price":Price add 1}`.
        case object([Member])
        /// A member path, possibly starting at `$it`, `$root` or a lambda variable.
        case path(PathExpression)
        case unary(UnaryOperator, CommonExpression)
        case binary(BinaryOperator, CommonExpression, CommonExpression)
        /// A parenthesized list of literals, the right side of `in`.
        case list([CommonExpression])
        /// A canonical function call (`contains`, `year`, `geo.distance`, `substringof`, …).
        case call(String, [CommonExpression])
        /// A qualified type name as the argument of `isof` or `cast`.
        case typeName(String)
        /// A 4.01 `case(condition:value, …)` expression.
        case caseOf([CaseBranch])
    }

    /// One member of an object literal.
    public struct Member: Sendable, Hashable {
        public var name: String
        public var value: CommonExpression
    }

    /// One `condition:value` pair of `case`.
    public struct CaseBranch: Sendable, Hashable {
        public var condition: CommonExpression
        public var value: CommonExpression
    }
}

/// Unary operators.
public enum UnaryOperator: String, Sendable, Hashable, Codable {
    case not
    case negate = "-"
}

/// Binary operators, by precedence group.
public enum BinaryOperator: String, Sendable, Hashable, Codable, CaseIterable {
    case or, and
    case eq, ne
    case gt, ge, lt, le
    case add, sub
    case mul, div, divby, mod
    case has, `in`

    /// Higher binds tighter.
    var precedence: Int {
        switch self {
        case .or: 1
        case .and: 2
        case .eq, .ne: 3
        case .gt, .ge, .lt, .le: 4
        case .add, .sub: 5
        case .mul, .div, .divby, .mod: 6
        case .has, .in: 8
        }
    }

    public var isComparison: Bool { [.eq, .ne, .gt, .ge, .lt, .le].contains(self) }
    public var isLogical: Bool { self == .and || self == .or }
    public var isArithmetic: Bool { [.add, .sub, .mul, .div, .divby, .mod].contains(self) }
}

/// A member path inside an expression: `Address/City`, `$it/Name`, `o/Items/$count`,
/// `Orders/any(o:o/Amount gt 5)`, `Model.VipCustomer/Discount`.
public struct PathExpression: Sendable, Hashable {
    /// Where the path starts.
    public enum Root: Sendable, Hashable {
        /// The current instance, implicitly.
        case implicit
        case it
        case root
        case this
        /// A lambda variable in scope.
        case variable(String)
        /// A parameter alias or an annotation at the start of a path (`@a/Street`,
        /// `@Core.Messages/any(…)`); binding decides which.
        case alias(String)
    }

    /// One step of the path.
    public enum Step: Sendable, Hashable {
        /// A property or navigation property.
        case member(String)
        /// A type cast to a qualified type.
        case cast(String)
        /// A key predicate after a collection-valued navigation (4.01).
        case key([KeyValue])
        /// `$count`, with optional `$filter`/`$search` (4.01).
        case count(filter: CommonExpression?, search: SearchExpression?)
        /// A bound function with named arguments.
        case function(String, [NamedArgument])
        /// `any` or `all`.
        case lambda(LambdaKind, variable: String?, predicate: CommonExpression?)
        /// An annotation, `@Ns.Term` (with an optional `#qualifier`).
        case annotation(String)
        /// A 4.01 `$filter(…)` step that filters a collection.
        case filter(CommonExpression)
    }

    /// The kinds this type distinguishes.
    public enum LambdaKind: String, Sendable, Hashable, Codable { case any, all }

    public var root: Root
    public var steps: [Step]
    /// Creates a value from its parts.
    public init(root: Root, steps: [Step]) {
        self.root = root
        self.steps = steps
    }
}

/// A named function argument, or a named key part.
public struct NamedArgument: Sendable, Hashable {
    public var name: String
    public var value: CommonExpression
    /// Creates a value from its parts.
    public init(name: String, value: CommonExpression) {
        self.name = name
        self.value = value
    }
}

/// One part of a key predicate: named (`ID=1`) or positional (`(1)`, name nil).
public struct KeyValue: Sendable, Hashable {
    public var name: String?
    public var value: CommonExpression
    /// Creates a value from its parts.
    public init(name: String?, value: CommonExpression) {
        self.name = name
        self.value = value
    }
}

/// A `$search` expression.
public indirect enum SearchExpression: Sendable, Hashable {
    case term(String)
    case phrase(String)
    case not(SearchExpression)
    case and(SearchExpression, SearchExpression)
    case or(SearchExpression, SearchExpression)
}
