/// The type of a bound expression.
public indirect enum ExpressionType: Sendable, Hashable, CustomStringConvertible {
    case primitive(PrimitiveType)
    case enumeration(String)
    case complex(String)
    case entity(String)
    case collection(ExpressionType)
    /// The `null` literal: compatible with every type.
    case null
    /// A dynamic property of an open type, an alias without a value, an annotation: not known
    /// until run time.
    case untyped

    public var description: String {
        switch self {
        case .primitive(let p): p.rawValue
        case .enumeration(let name), .complex(let name), .entity(let name): name
        case .collection(let element): "Collection(\(element))"
        case .null: "null"
        case .untyped: "Edm.Untyped"
        }
    }

    /// True for Boolean, null and untyped (which may be Boolean at run time).
    var canBeBoolean: Bool {
        switch self {
        case .primitive(.boolean), .null, .untyped: true
        default: false
        }
    }

    var primitive: PrimitiveType? {
        if case .primitive(let p) = self { return p }
        return nil
    }

    var isLoose: Bool { self == .null || self == .untyped }
}

/// An expression with its type, and, for paths, each step resolved against the model.
public struct BoundExpression: Sendable, Hashable {
    public var expression: CommonExpression
    public var type: ExpressionType
    /// Bound operands in source order (binary sides, call arguments, list items, lambda
    /// predicates, case branches as condition/value pairs).
    public var operands: [BoundExpression]
    /// For a path: the steps with the type each one yields.
    public var steps: [BoundStep]

    /// Creates a value from its parts.
    public init(expression: CommonExpression, type: ExpressionType, operands: [BoundExpression] = [], steps: [BoundStep] = []) {
        self.expression = expression
        self.type = type
        self.operands = operands
        self.steps = steps
    }
}

/// One resolved step of a path expression.
public struct BoundStep: Sendable, Hashable {
    /// The kinds this type distinguishes.
    public enum Kind: Sendable, Hashable {
        case property
        case navigation
        case dynamicProperty
        case cast
        case count
        case key
        case function
        case any
        case all
        case filter
        case annotation
        /// The entity set named after `$root/`.
        case entitySet
    }
    public var kind: Kind
    public var name: String
    /// The type after this step.
    public var type: ExpressionType
    /// Creates a value from its parts.
    public init(kind: Kind, name: String, type: ExpressionType) {
        self.kind = kind
        self.name = name
        self.type = type
    }
}
