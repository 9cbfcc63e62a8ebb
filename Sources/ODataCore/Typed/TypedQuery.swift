/// The system query options of a typed query or of one `$expand` item.
public struct TypedQueryOptions: Sendable, Hashable {
    var filter: QueryFilter?
    var orderBy: [TypedOrder] = []
    var top: Int?
    var skip: Int?
    var select: [String] = []
    var expand: [TypedExpandItem] = []
    var count = false
    var search: String?

    /// No options.
    public init() {}

    var isEmpty: Bool { self == TypedQueryOptions() }

    /// Only the `$filter` and `$search` (for `/$count`).
    public var onlyFilter: TypedQueryOptions {
        var options = TypedQueryOptions()
        options.filter = filter
        options.search = search
        return options
    }

    /// The options as `name=value` pairs in the order a person writes them.
    func items(_ version: ODataVersion) throws(QueryError) -> [(String, String)] {
        var items: [(String, String)] = []
        if let filter { items.append(("$filter", try filter.text(for: version))) }
        var select = self.select
        var expandPaths: [String] = []
        if version.isLegacy {
            // V2 has no nested options: expanded paths and their selections flatten.
            var selections: [(String, [String])] = [("", select)]
            for item in expand { try item.flattenV2(prefix: "", into: &expandPaths, selections: &selections) }
            if selections.contains(where: { !$0.1.isEmpty }) {
                select = selections.flatMap { level in level.1.isEmpty ? [level.0.isEmpty ? "*" : level.0] : level.1 }
            }
        }
        if !select.isEmpty { items.append(("$select", select.joined(separator: ","))) }
        if version.isLegacy {
            if !expandPaths.isEmpty { items.append(("$expand", expandPaths.joined(separator: ","))) }
        } else if !expand.isEmpty {
            items.append(
                (
                    "$expand",
                    try expand.map { (item) throws(QueryError) in try item.renderV4(version) }
                        .joined(separator: ",")
                ))
        }
        if !orderBy.isEmpty {
            items.append(
                (
                    "$orderby",
                    try orderBy.map { (order) throws(QueryError) in try order.render(version) }
                        .joined(separator: ",")
                ))
        }
        if let top { items.append(("$top", String(top))) }
        if let skip { items.append(("$skip", String(skip))) }
        if count { items.append(version.isLegacy ? ("$inlinecount", "allpages") : ("$count", "true")) }
        if let search {
            if version.isLegacy { throw QueryError("$search needs OData V4") }
            items.append(("$search", QueryText.encodeReserved(search)))
        }
        return items
    }
}

/// One `$expand` item: a navigation path and its own options.
struct TypedExpandItem: Sendable, Hashable {
    var path: String
    var options: TypedQueryOptions

    func renderV4(_ version: ODataVersion) throws(QueryError) -> String {
        let nested = try options.items(version)
        guard !nested.isEmpty else { return path }
        return path + "(" + nested.map { $0.0 + "=" + $0.1 }.joined(separator: ";") + ")"
    }

    /// V2 has no nested options: expanded paths join `$expand`, and the levels' selections join
    /// the one `$select`. Once any level selects, every level must: a level with its own
    /// selection adds its paths; one without adds all of itself (`*` at the top, the
    /// navigation path below: `Items`).
    func flattenV2(
        prefix: String, into paths: inout [String], selections: inout [(String, [String])]
    )
        throws(QueryError)
    {
        let full = prefix + path
        var nested = options
        nested.select = []
        nested.expand = []
        guard nested.isEmpty else {
            throw QueryError("\(full): V2 cannot filter, sort, page or count inside $expand")
        }
        paths.append(full)
        selections.append((full, options.select.map { full + "/" + $0 }))
        for child in options.expand {
            try child.flattenV2(prefix: full + "/", into: &paths, selections: &selections)
        }
    }
}

/// The options builder shared by ``TypedQuery`` and ``TypedExpand``: each method returns a
/// changed copy.
public protocol TypedQueryBuilding: Sendable {
    /// The entity type the options apply to.
    associatedtype Entity: ODataEntity
    /// The options collected so far.
    var options: TypedQueryOptions { get set }
}

extension TypedQueryBuilding {
    private func with(_ change: (inout TypedQueryOptions) -> Void) -> Self {
        var copy = self
        change(&copy.options)
        return copy
    }

    /// Adds a `$filter` condition; a second call joins it with `and`.
    public func filter(_ condition: (Entity.Fields) -> QueryFilter) -> Self {
        let added = condition(Entity.Fields(prefix: .root))
        return with { $0.filter = $0.filter.map { $0 && added } ?? added }
    }

    /// Adds a `$orderby` item: `.orderBy { $0.name.descending }`.
    public func orderBy(_ order: (Entity.Fields) -> TypedOrder) -> Self {
        let added = order(Entity.Fields(prefix: .root))
        return with { $0.orderBy.append(added) }
    }

    /// Adds a `$orderby` item for a field: `.orderBy(\.name, descending: true)`.
    public func orderBy<V>(_ field: KeyPath<Entity.Fields, Field<V>>, descending: Bool = false) -> Self {
        let path = Entity.Fields(prefix: .root)[keyPath: field]
        return with { $0.orderBy.append(descending ? path.descending : path.ascending) }
    }

    /// `$top`.
    public func top(_ count: Int) -> Self { with { $0.top = count } }
    /// `$skip`.
    public func skip(_ count: Int) -> Self { with { $0.skip = count } }
    /// Asks for the total count (`$count=true`, V2 `$inlinecount=allpages`).
    public func withCount() -> Self { with { $0.count = true } }
    /// `$search` (V4).
    public func search(_ text: String) -> Self { with { $0.search = text } }

    /// `$select` of fields, collection fields or complex properties: `.select(\.name, \.address)`.
    /// Non-nullable properties that are not selected cannot be read into the generated type.
    public func select(_ fields: PartialKeyPath<Entity.Fields>...) -> Self {
        let root = Entity.Fields(prefix: .root)
        let paths = fields.compactMap { keyPath -> String? in
            let member = root[keyPath: keyPath]
            if let selectable = member as? any ODataSelectable { return selectable.selectPath }
            if let set = member as? any ODataFieldSet { return String(set.prefix.path.dropLast()) }
            return nil
        }
        return with { $0.select += paths }
    }

    /// `$expand` of a to-many navigation property, with its own options (V4) or nested
    /// expands (V2 and V4): `.expand(\.items) { $0.orderBy(\.itemNo).top(5) }`.
    public func expand<T>(
        _ navigation: KeyPath<Entity.Fields, ToMany<T>>, _ nested: (TypedExpand<T>) -> TypedExpand<T> = { $0 }
    ) -> Self {
        let path = Entity.Fields(prefix: .root)[keyPath: navigation].path
        let options = nested(TypedExpand<T>()).options
        return with { $0.expand.append(TypedExpandItem(path: path, options: options)) }
    }

    /// `$expand` of a to-one navigation property, with its own options.
    public func expand<T>(
        _ navigation: KeyPath<Entity.Fields, ToOne<T>>, _ nested: (TypedExpand<T>) -> TypedExpand<T> = { $0 }
    ) -> Self {
        let path = Entity.Fields(prefix: .root)[keyPath: navigation].path
        let options = nested(TypedExpand<T>()).options
        return with { $0.expand.append(TypedExpandItem(path: path, options: options)) }
    }
}

/// The options of one expanded navigation property.
public struct TypedExpand<Entity: ODataEntity>: TypedQueryBuilding {
    public var options = TypedQueryOptions()
    /// No options.
    public init() {}
}

/// A typed read of entities: a resource path (an entity set, a navigation from one entity, a
/// type cast) and its options. It compiles to the URL a person would write for the service's
/// version, so it runs against the offline store and the backend alike.
///
/// ```swift
/// let query = TypedQuery<Customer>()
///     .filter { $0.country == "US" && $0.name.starts(with: "A") }
///     .orderBy(\.name, descending: true)
///     .top(20)
///     .expand(\.orders)
/// // Customers?$filter=Country eq 'US' and startswith(Name,'A')&$expand=Orders&$orderby=Name desc&$top=20
/// ```
public struct TypedQuery<Entity: ODataEntity>: TypedQueryBuilding, Hashable {
    /// The resource path: `Customers`, `Customers('ALFKI')/Orders`, `People/Ns.Employee`.
    public let path: TypedPath
    public var options = TypedQueryOptions()

    /// A query of an entity set; nil takes the type's only entity set.
    public init(entitySet: String? = nil) throws(QueryError) {
        guard let set = entitySet ?? Entity.defaultEntitySetName else {
            throw QueryError("\(Entity.odataTypeName) is in no single entity set: name the entity set")
        }
        self.path = TypedPath(set)
    }

    /// A query of a resource path.
    public init(path: TypedPath) { self.path = path }

    /// The URL relative to the service root, in the syntax of `version`.
    public func url(for version: ODataVersion) throws(QueryError) -> String {
        if version.isLegacy, let cast = path.qualifiedNames.first {
            throw QueryError("\(cast): V2 has no type-cast or bound-operation segments")
        }
        let items = try options.items(version)
        let resource = path.text(for: version)
        guard !items.isEmpty else { return resource }
        return resource + "?" + items.map { $0.0 + "=" + $0.1 }.joined(separator: "&")
    }
}

/// The resource path of a typed request: names (entity sets, navigation properties, type
/// casts) and key predicates, which are written for the service's version.
public struct TypedPath: Sendable, Hashable {
    enum Segment: Sendable, Hashable {
        case name(String)
        case key([NamedValue])
    }

    var segments: [Segment]

    /// A path of one name: an entity set, a singleton.
    public init(_ name: String) { segments = [.name(name)] }

    /// The path followed by the key predicate of `key`: `Customers('ALFKI')`.
    public func appending<K: ODataEntityKey>(key: K) -> TypedPath {
        var copy = self
        copy.segments.append(.key(key.keyValues))
        return copy
    }

    /// The path followed by `/name`: a navigation property, a type cast, `$ref`, `$value`.
    public func appending(_ name: String) -> TypedPath {
        var copy = self
        copy.segments.append(.name(name))
        return copy
    }

    /// The segments that are qualified names (type casts).
    var qualifiedNames: [String] {
        segments.compactMap { if case .name(let name) = $0, name.contains(".") { return name } else { return nil } }
    }

    /// Whether the path ends with a key predicate (one entity).
    public var endsWithKey: Bool {
        if case .key? = segments.last { return true }
        return false
    }

    /// The entity set (or singleton) the path starts with.
    public var firstName: String {
        if case .name(let name)? = segments.first { return name }
        return ""
    }

    /// The path as URL text for `version`.
    public func text(for version: ODataVersion) -> String {
        var text = ""
        for segment in segments {
            switch segment {
            case .name(let name):
                if !text.isEmpty { text += "/" }
                text += name
            case .key(let values):
                text += KeyText(values: values).predicate(version: version)
            }
        }
        return text
    }
}

/// A key given as name/value pairs.
struct KeyText: ODataEntityKey {
    var values: [NamedValue]
    var keyValues: [NamedValue] { values }
}

/// An entity set of a generated service: the start of typed queries and writes.
public struct TypedEntitySet<Entity: ODataEntity>: Sendable, Hashable {
    /// The entity set's name.
    public let name: String

    /// The entity set `name`.
    public init(_ name: String) { self.name = name }

    /// A query of every entity of the set.
    public var query: TypedQuery<Entity> { TypedQuery(path: TypedPath(name)) }

    /// The path of one entity: `Customers('ALFKI')`.
    public func path(_ key: Entity.Key) -> TypedPath { TypedPath(name).appending(key: key) }

    /// A query of the entities a to-many navigation property of one entity leads to:
    /// `SalesOrders('1')/Items`.
    public func related<Target>(
        _ navigation: KeyPath<Entity.Fields, ToMany<Target>>, of key: Entity.Key
    ) -> TypedQuery<Target> {
        TypedQuery(path: path(key).appending(Entity.Fields(prefix: .root)[keyPath: navigation].path))
    }

    /// A query of the set's entities of a derived type: `People/Ns.Employee`.
    public func cast<Derived: ODataEntity>(to type: Derived.Type) -> TypedQuery<Derived> {
        TypedQuery(path: TypedPath(name).appending(Derived.odataTypeName))
    }
}

/// A singleton of a generated service.
public struct TypedSingleton<Entity: ODataEntity>: Sendable, Hashable {
    /// The singleton's name.
    public let name: String

    /// The singleton `name`.
    public init(_ name: String) { self.name = name }

    /// The singleton's path.
    public var path: TypedPath { TypedPath(name) }
}
