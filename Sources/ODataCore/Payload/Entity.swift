/// Control information of an entity (`@odata.id`, `@odata.etag`, links, media).
public struct ControlInformation: Sendable, Hashable {
    public var context: String?
    public var id: String?
    public var etag: String?
    public var editLink: String?
    public var readLink: String?
    public var mediaReadLink: String?
    public var mediaEditLink: String?
    public var mediaETag: String?
    public var mediaContentType: String?
    /// Creates a value from its parts.
    public init() {}

    /// True when nothing is set.
    public var isEmpty: Bool { self == ControlInformation() }
}

/// An instance annotation (`@Ns.Term` on an entity, `Prop@Ns.Term` on a property).
public struct InstanceAnnotation: Sendable, Hashable {
    /// The annotated property, or nil for the entity or collection itself.
    public var property: String?
    /// Term with optional `#qualifier`.
    public var term: String
    public var value: JSONValue
    /// Creates a value from its parts.
    public init(property: String?, term: String, value: JSONValue) {
        self.property = property
        self.term = term
        self.value = value
    }
}

/// A navigation property in a payload: links, an inline (expanded) value, or a bind.
public struct NavigationValue: Sendable, Hashable {
    public var name: String
    public var navigationLink: String?
    public var associationLink: String?
    /// `@odata.bind` (V4) or `__metadata.uri` links (V2): the ids of entities to link to.
    public var bind: [String]?
    /// Whether `bind` is for a collection (written as a JSON array even with one link).
    public var bindIsCollection = false
    /// The expanded value.
    public var inline: Inline?
    /// `Nav@odata.count` for an expanded collection.
    public var count: Int64?
    /// `Nav@odata.nextLink` for an expanded collection.
    public var nextLink: String?

    /// An expanded navigation value.
    public indirect enum Inline: Sendable, Hashable {
        /// A single entity, or null.
        case entity(Entity?)
        case collection(EntityCollection)
    }

    /// Creates a value from its parts.
    public init(name: String) { self.name = name }
}

/// An entity as read from or written to a payload.
public struct Entity: Sendable, Hashable {
    /// Qualified type name, from `@odata.type`/`__metadata.type` or the model.
    public var typeName: String?
    /// Structural properties with typed values, in payload order.
    public var properties: [NamedValue]
    public var navigation: [NavigationValue]
    public var control: ControlInformation
    public var annotations: [InstanceAnnotation]

    /// Creates a value from its parts.
    public init(typeName: String? = nil, properties: [NamedValue] = [], navigation: [NavigationValue] = [],
                control: ControlInformation = ControlInformation(), annotations: [InstanceAnnotation] = []) {
        self.typeName = typeName
        self.properties = properties
        self.navigation = navigation
        self.control = control
        self.annotations = annotations
    }

    /// The value of a structural property.
    public subscript(name: String) -> Value? {
        get { properties.first { $0.name == name }?.value }
        set {
            if let index = properties.firstIndex(where: { $0.name == name }) {
                if let newValue { properties[index].value = newValue } else { properties.remove(at: index) }
            } else if let newValue {
                properties.append(NamedValue(name: name, value: newValue))
            }
        }
    }

    /// A navigation property by name.
    public func navigation(_ name: String) -> NavigationValue? { navigation.first { $0.name == name } }
}

/// An entity removed from a delta (4.0 `$deletedEntity`, 4.01 `@removed`, V2 deleted entries).
public struct DeletedEntity: Sendable, Hashable {
    /// The id (V4) or `uri` (V2) of the removed entity.
    public var id: String?
    /// `deleted` or `changed` (no longer matches the query).
    public var reason: String?
    /// Key (and other) properties sent with the removal (4.01).
    public var properties: [NamedValue]
    public var context: String?
    /// Creates a value from its parts.
    public init(id: String?, reason: String? = nil, properties: [NamedValue] = [], context: String? = nil) {
        self.id = id
        self.reason = reason
        self.properties = properties
        self.context = context
    }
}

/// An added or removed link in a delta (`$link`, `$deletedLink`).
public struct DeltaLinkChange: Sendable, Hashable {
    public var source: String
    public var relationship: String
    public var target: String
    public var context: String?
    /// Creates a value from its parts.
    public init(source: String, relationship: String, target: String, context: String? = nil) {
        self.source = source
        self.relationship = relationship
        self.target = target
        self.context = context
    }
}

/// A collection of entities with its paging and delta information.
public struct EntityCollection: Sendable, Hashable {
    public var context: String?
    public var count: Int64?
    public var nextLink: String?
    public var deltaLink: String?
    public var entities: [Entity]
    /// Removed entities (deltas).
    public var deleted: [DeletedEntity]
    public var addedLinks: [DeltaLinkChange]
    public var removedLinks: [DeltaLinkChange]
    public var annotations: [InstanceAnnotation]
    /// Entity references (`@odata.id` only), for `$ref` responses.
    public var references: [String]

    /// Creates a value from its parts.
    public init(context: String? = nil, count: Int64? = nil, nextLink: String? = nil, deltaLink: String? = nil, entities: [Entity] = [],
                deleted: [DeletedEntity] = [], addedLinks: [DeltaLinkChange] = [], removedLinks: [DeltaLinkChange] = [],
                annotations: [InstanceAnnotation] = [], references: [String] = []) {
        self.context = context
        self.count = count
        self.nextLink = nextLink
        self.deltaLink = deltaLink
        self.entities = entities
        self.deleted = deleted
        self.addedLinks = addedLinks
        self.removedLinks = removedLinks
        self.annotations = annotations
        self.references = references
    }
}

/// How much control information a V4 JSON payload carries (`odata.metadata=…`).
public enum MetadataLevel: String, Sendable, Hashable {
    case none, minimal, full
}

/// Options for reading and writing V4 JSON.
public struct JSONFormat: Sendable, Hashable {
    public var metadata: MetadataLevel
    /// `IEEE754Compatible=true`: Int64 and Decimal are written as strings.
    public var ieee754Compatible: Bool
    /// Creates a value from its parts.
    public init(metadata: MetadataLevel = .minimal, ieee754Compatible: Bool = false) {
        self.metadata = metadata
        self.ieee754Compatible = ieee754Compatible
    }
}
