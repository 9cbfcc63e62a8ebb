/// A parsed OData request URL (relative to the service root): resource path plus query options.
public struct ParsedURL: Sendable, Hashable {
    public var path: ResourcePath
    public var query: QueryOptions
    /// Creates a value from its parts.
    public init(path: ResourcePath, query: QueryOptions) {
        self.path = path
        self.query = query
    }
}

/// The resource path: a list of segments, each classified as far as syntax (or, once resolved,
/// the model) allows.
public struct ResourcePath: Sendable, Hashable {
    public var segments: [PathSegment]
    /// Creates a value from its parts.
    public init(segments: [PathSegment]) { self.segments = segments }
}

/// One segment of a resource path.
public struct PathSegment: Sendable, Hashable {
    public var kind: Kind
    /// UTF-8 offset of the segment in the URL as given.
    public var offset: Int
    /// Creates a value from its parts.
    public init(_ kind: Kind, offset: Int) {
        self.kind = kind
        self.offset = offset
    }

    /// Segment kinds. `unresolved` names what syntax alone cannot classify; resolving the path
    /// against a model replaces it with a concrete kind.
    public enum Kind: Sendable, Hashable {
        case entitySet(String)
        case singleton(String)
        case functionImport(String, [NamedArgument])
        case actionImport(String)
        case navigation(String)
        case property(String)
        case typeCast(String)
        /// A bound function with its arguments.
        case function(String, [NamedArgument])
        /// A bound action.
        case action(String)
        /// A key predicate (after an entity set, a collection navigation or a function result).
        case key([KeyValue])
        /// A key written as a path segment (key-as-segment).
        case keySegment(String)
        case count
        case value
        case ref
        case each
        /// 4.01 `$query`: the request's query options are in the body.
        case query
        /// An element of an ordered collection by index (4.01 `Addresses/0`).
        case index(Int)
        /// 4.01 `$filter(expr)` path segment.
        case filter(CommonExpression)
        case metadata
        case batch
        case entity
        case all
        case crossjoin([String])
        /// A simple name syntax cannot classify (entity set, singleton, property, navigation).
        case unresolved(String)
    }
}

/// How `$inlinecount` (V2) asks for a count.
public enum InlineCount: String, Sendable, Hashable, Codable {
    case allPages = "allpages"
    case none
}

/// One `$orderby` item.
public struct OrderByItem: Sendable, Hashable {
    public var expression: CommonExpression
    public var descending: Bool
    /// Creates a value from its parts.
    public init(expression: CommonExpression, descending: Bool) {
        self.expression = expression
        self.descending = descending
    }
}

/// One `$select` item.
public struct SelectItem: Sendable, Hashable {
    /// The kinds this type distinguishes.
    public enum Kind: Sendable, Hashable {
        /// `*`
        case star
        /// `Ns.*`: all operations in a schema.
        case allOperations(String)
        /// A path of members and type casts, e.g. `Address/City` or `Ns.Vip/Discount`.
        case path([String])
    }
    public var kind: Kind
    /// Nested options (4.01): `$select=Addresses($filter=…;$top=2)`.
    public var options: QueryOptions?
    /// Creates a value from its parts.
    public init(kind: Kind, options: QueryOptions? = nil) {
        self.kind = kind
        self.options = options
    }
}

/// `$levels` in an expand.
public enum ExpandLevels: Sendable, Hashable {
    case count(Int)
    case max
}

/// One `$expand` item.
public struct ExpandItem: Sendable, Hashable {
    /// The path to the navigation property: complex members, casts, then the navigation
    /// property (and an optional cast after it). `["*"]` for `*`, `["$value"]` for `$value`.
    public var path: [String]
    public var isRef: Bool
    public var isCount: Bool
    public var options: QueryOptions?
    /// Creates a value from its parts.
    public init(path: [String], isRef: Bool = false, isCount: Bool = false, options: QueryOptions? = nil) {
        self.path = path
        self.isRef = isRef
        self.isCount = isCount
        self.options = options
    }
}

/// One `$compute` item: `expression as alias`.
public struct ComputeItem: Sendable, Hashable {
    public var expression: CommonExpression
    public var alias: String
    /// Creates a value from its parts.
    public init(expression: CommonExpression, alias: String) {
        self.expression = expression
        self.alias = alias
    }
}

/// A custom query option, kept as decoded text.
public struct CustomOption: Sendable, Hashable {
    public var name: String
    public var value: String?
    /// Creates a value from its parts.
    public init(name: String, value: String?) {
        self.name = name
        self.value = value
    }
}

/// The query options of a request (or of an expand/select item).
public struct QueryOptions: Sendable, Hashable {
    public var filter: CommonExpression?
    public var orderBy: [OrderByItem]?
    public var top: Int?
    public var skip: Int?
    public var count: Bool?
    public var inlineCount: InlineCount?
    public var select: [SelectItem]?
    public var expand: [ExpandItem]?
    public var search: SearchExpression?
    public var skipToken: String?
    /// `$deltatoken` (V4) or `!deltatoken` (V2).
    public var deltaToken: String?
    public var format: String?
    public var compute: [ComputeItem]?
    /// `$apply`, kept as text (the aggregation extension is not parsed).
    public var apply: String?
    public var id: String?
    public var index: Int?
    public var schemaVersion: String?
    public var levels: ExpandLevels?
    /// Parameter aliases: `@p=…`.
    public var aliases: [String: CommonExpression] = [:]
    public var custom: [CustomOption] = []
    /// Creates a value from its parts.
    public init() {}

    /// True when no option is set.
    public var isEmpty: Bool { self == QueryOptions() }
}
