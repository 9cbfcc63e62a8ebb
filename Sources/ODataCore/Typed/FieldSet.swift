/// Where a set of fields sits inside a query: the path before it (`Address/`, `d/` inside a
/// lambda) and how many lambda variables are open around it.
public struct FieldPrefix: Sendable, Hashable {
    /// The path text that precedes every field of the set, ending with `/` unless empty.
    public let path: String
    /// How many `any`/`all` lambdas enclose the set (names the next lambda variable).
    public let lambdaDepth: Int

    /// The top of a query: no prefix.
    public static let root = FieldPrefix(path: "", lambdaDepth: 0)

    init(path: String, lambdaDepth: Int) {
        self.path = path
        self.lambdaDepth = lambdaDepth
    }

    /// The path of a member of the set: `prefix + name`.
    public func member(_ name: String) -> String { path + name }

    /// The prefix of a complex or navigation member's own fields: `prefix + name + "/"`.
    public func appending(_ name: String) -> FieldPrefix {
        FieldPrefix(path: path + name + "/", lambdaDepth: lambdaDepth)
    }

    /// The next lambda variable: `d`, then `d1`, `d2` inside nested lambdas.
    var nextVariable: String { lambdaDepth == 0 ? "d" : "d\(lambdaDepth)" }

    /// The prefix of a lambda variable's fields.
    func lambdaBody() -> FieldPrefix { FieldPrefix(path: nextVariable + "/", lambdaDepth: lambdaDepth + 1) }
}

/// The property paths of a generated structured type, for typed queries: generated code gives
/// each type a `Fields` struct with one member per property.
public protocol ODataFieldSet: Sendable {
    /// The fields under `prefix` (`.root` at the top of a query).
    init(prefix: FieldPrefix)
    /// Where the fields sit: selecting a complex property selects this path.
    var prefix: FieldPrefix { get }
}

/// A structural property inside a query: compare it, sort by it, select it.
public struct Field<OperandValue: ODataValueConvertible>: ODataOperand, Hashable {
    /// The property path, as written in the URL (`Address/City`).
    public let path: String
    public let edmType: PrimitiveType?

    /// A field for `path`; `type` is the declared Edm type where one Swift type stands for two.
    public init(_ path: String, type: PrimitiveType? = nil) {
        self.path = path
        self.edmType = type
    }

    public var expressionNode: ExpressionNode { .path(path) }
}

/// A collection-valued structural property (`Collection(Edm.String)`): `any`/`all` (V4).
public struct CollectionField<Element: ODataValueConvertible>: Sendable, Hashable {
    /// The property path.
    public let path: String
    let prefix: FieldPrefix
    let edmType: PrimitiveType?

    /// A field for `name` under `prefix`; `type` is the element's Edm type where it matters.
    public init(_ name: String, prefix: FieldPrefix, type: PrimitiveType? = nil) {
        self.path = prefix.member(name)
        self.prefix = prefix
        self.edmType = type
    }

    /// `Tags/any(d:…)`: some element matches.
    public func any(_ body: (Operand<Element>) -> QueryFilter) -> QueryFilter {
        let variable = prefix.nextVariable
        return QueryFilter(
            .lambda("any", path: path, variable: variable, body: body(Operand(.path(variable), edmType)).node))
    }

    /// `Tags/all(d:…)`: every element matches.
    public func all(_ body: (Operand<Element>) -> QueryFilter) -> QueryFilter {
        let variable = prefix.nextVariable
        return QueryFilter(
            .lambda("all", path: path, variable: variable, body: body(Operand(.path(variable), edmType)).node))
    }

    /// `Tags/any()`: the collection is not empty.
    public func isNotEmpty() -> QueryFilter { QueryFilter(.lambda("any", path: path, variable: "", body: nil)) }

    /// `Tags/$count`, to compare (V4).
    public var count: Operand<Int64> { Operand(.count(path)) }
}

/// A collection-valued complex property (`Collection(Ns.Address)`): `any`/`all` over the
/// members of its elements (V4): `$0.addressInfo.any { $0.city.name == "Boise" }` is
/// `AddressInfo/any(d:d/City/Name eq 'Boise')`.
public struct ComplexCollectionField<Element: ODataStructure>: Sendable, Hashable {
    /// The property path.
    public let path: String
    let prefix: FieldPrefix

    /// A field for `name` under `prefix`.
    public init(_ name: String, prefix: FieldPrefix) {
        self.path = prefix.member(name)
        self.prefix = prefix
    }

    /// `AddressInfo/any(d:…)`: some element matches.
    public func any(_ body: (Element.Fields) -> QueryFilter) -> QueryFilter {
        QueryFilter(
            .lambda(
                "any", path: path, variable: prefix.nextVariable,
                body: body(Element.Fields(prefix: prefix.lambdaBody())).node))
    }

    /// `AddressInfo/all(d:…)`: every element matches.
    public func all(_ body: (Element.Fields) -> QueryFilter) -> QueryFilter {
        QueryFilter(
            .lambda(
                "all", path: path, variable: prefix.nextVariable,
                body: body(Element.Fields(prefix: prefix.lambdaBody())).node))
    }

    /// `AddressInfo/any()`: the collection is not empty.
    public func isNotEmpty() -> QueryFilter { QueryFilter(.lambda("any", path: path, variable: "", body: nil)) }

    /// `AddressInfo/$count`, to compare (V4).
    public var count: Operand<Int64> { Operand(.count(path)) }
}

extension ComplexCollectionField: ODataSelectable {
    public var selectPath: String { path }
}

/// A navigation property to one entity: expand it, or reach into its fields
/// (`$0.customer.country == "US"` is `Customer/Country eq 'US'`).
@dynamicMemberLookup
public struct ToOne<Target: ODataEntity>: Sendable, Hashable {
    /// The navigation path.
    public let path: String
    let prefix: FieldPrefix

    /// A navigation property `name` under `prefix`.
    public init(_ name: String, prefix: FieldPrefix) {
        self.path = prefix.member(name)
        self.prefix = prefix.appending(name)
    }

    /// The fields of the target type, under this path.
    public subscript<T>(dynamicMember member: KeyPath<Target.Fields, T>) -> T {
        Target.Fields(prefix: prefix)[keyPath: member]
    }

    /// `Customer eq null`: the entity has no related entity.
    public var isNil: QueryFilter { QueryFilter(.binary("eq", .path(path), .literal(.null))) }

    /// `Customer eq null`: `$0.customer == nil`.
    public static func == (lhs: ToOne, rhs: _OptionalNilComparisonType) -> QueryFilter { lhs.isNil }

    /// `Customer ne null`: `$0.customer != nil`.
    public static func != (lhs: ToOne, rhs: _OptionalNilComparisonType) -> QueryFilter {
        QueryFilter(.binary("ne", .path(lhs.path), .literal(.null)))
    }
}

/// A navigation property to many entities: expand it, or test its entities with `any`/`all` (V4).
public struct ToMany<Target: ODataEntity>: Sendable, Hashable {
    /// The navigation path.
    public let path: String
    let prefix: FieldPrefix

    /// A navigation property `name` under `prefix`.
    public init(_ name: String, prefix: FieldPrefix) {
        self.path = prefix.member(name)
        self.prefix = prefix
    }

    /// `Orders/any(d:…)`: some related entity matches.
    public func any(_ body: (Target.Fields) -> QueryFilter) -> QueryFilter {
        QueryFilter(
            .lambda(
                "any", path: path, variable: prefix.nextVariable,
                body: body(Target.Fields(prefix: prefix.lambdaBody())).node))
    }

    /// `Orders/all(d:…)`: every related entity matches.
    public func all(_ body: (Target.Fields) -> QueryFilter) -> QueryFilter {
        QueryFilter(
            .lambda(
                "all", path: path, variable: prefix.nextVariable,
                body: body(Target.Fields(prefix: prefix.lambdaBody())).node))
    }

    /// `Orders/any()`: there is a related entity.
    public func isNotEmpty() -> QueryFilter { QueryFilter(.lambda("any", path: path, variable: "", body: nil)) }

    /// `Orders/$count`, to compare (V4).
    public var count: Operand<Int64> { Operand(.count(path)) }
}

/// Anything `select` takes: a field, a collection field, a complex property's fields.
public protocol ODataSelectable {
    /// The path to select.
    var selectPath: String { get }
}

extension Field: ODataSelectable {
    public var selectPath: String { path }
}

extension CollectionField: ODataSelectable {
    public var selectPath: String { path }
}
