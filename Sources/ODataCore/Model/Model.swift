/// The OData protocol version a metadata document or request speaks.
public enum ODataVersion: String, Sendable, Hashable, Codable, Comparable {
    /// OData V2 (EDMX 1.0, `DataServiceVersion` 1.0/2.0).
    case v2 = "2.0"
    /// OData V3 (EDMX 1.0, `DataServiceVersion` 3.0).
    case v3 = "3.0"
    /// OData V4.0.
    case v4 = "4.0"
    /// OData V4.01.
    case v401 = "4.01"

    /// True for V2 and V3, which share the EDMX 1.0 format and the V2 URL syntax.
    public var isLegacy: Bool { self == .v2 || self == .v3 }

    /// The URL grammar a service of this version is spoken to with: V4.0 services are parsed
    /// with the V4.01 grammar (a superset), V2 and V3 with the V2 grammar.
    public var grammar: ODataVersion { self == .v4 ? .v401 : self }

    private var rank: Int {
        switch self {
        case .v2: 0
        case .v3: 1
        case .v4: 2
        case .v401: 3
        }
    }

    public static func < (lhs: ODataVersion, rhs: ODataVersion) -> Bool { lhs.rank < rhs.rank }
}

/// A complete service model parsed from one or more `$metadata` documents.
///
/// All type names inside the model are namespace-qualified (aliases are resolved at parse
/// time), so lookups take `Namespace.Name`.
public struct Model: Sendable, Hashable, Codable {
    private enum CodingKeys: String, CodingKey { case version, schemas, references, warnings }

    /// Decodes a model encoded by `encode(to:)`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(version: try container.decode(ODataVersion.self, forKey: .version),
                  schemas: try container.decode([Schema].self, forKey: .schemas),
                  references: try container.decode([Reference].self, forKey: .references))
        warnings = try container.decodeIfPresent([String].self, forKey: .warnings) ?? []
    }

    /// The version of the document the model was read from.
    public var version: ODataVersion
    /// Schemas in document order.
    public var schemas: [Schema]
    /// Documents referenced with `edmx:Reference`.
    public var references: [Reference]
    /// Problems the lenient parser tolerated (strict mode turns each into an error).
    public var warnings: [String] = []

    /// Creates a value from its parts.
    public init(version: ODataVersion, schemas: [Schema] = [], references: [Reference] = []) {
        self.version = version
        self.schemas = schemas
        self.references = references
        rebuildIndex()
    }

    // MARK: Index

    private var entityTypeIndex: [String: EntityType] = [:]
    private var complexTypeIndex: [String: ComplexType] = [:]
    private var enumTypeIndex: [String: EnumType] = [:]
    private var typeDefinitionIndex: [String: TypeDefinition] = [:]
    private var functionIndex: [String: [Operation]] = [:]
    private var actionIndex: [String: [Operation]] = [:]
    private var termIndex: [String: Term] = [:]

    /// Recomputes the lookup tables; call after mutating `schemas` directly.
    public mutating func rebuildIndex() {
        entityTypeIndex = [:]
        complexTypeIndex = [:]
        enumTypeIndex = [:]
        typeDefinitionIndex = [:]
        functionIndex = [:]
        actionIndex = [:]
        termIndex = [:]
        for schema in schemas {
            for type in schema.entityTypes { entityTypeIndex[type.qualifiedName] = type }
            for type in schema.complexTypes { complexTypeIndex[type.qualifiedName] = type }
            for type in schema.enumTypes { enumTypeIndex[type.qualifiedName] = type }
            for type in schema.typeDefinitions { typeDefinitionIndex[type.qualifiedName] = type }
            for op in schema.functions { functionIndex[op.qualifiedName, default: []].append(op) }
            for op in schema.actions { actionIndex[op.qualifiedName, default: []].append(op) }
            for term in schema.terms { termIndex[term.qualifiedName] = term }
        }
    }

    // MARK: Lookups

    /// The entity type with this qualified name.
    public func entityType(_ qualifiedName: String) -> EntityType? { entityTypeIndex[qualifiedName] }
    /// The complex type with this qualified name.
    public func complexType(_ qualifiedName: String) -> ComplexType? { complexTypeIndex[qualifiedName] }
    /// The enum type with this qualified name.
    public func enumType(_ qualifiedName: String) -> EnumType? { enumTypeIndex[qualifiedName] }
    /// The type definition with this qualified name.
    public func typeDefinition(_ qualifiedName: String) -> TypeDefinition? { typeDefinitionIndex[qualifiedName] }
    /// Every overload of the function with this qualified name.
    public func functions(_ qualifiedName: String) -> [Operation] { functionIndex[qualifiedName] ?? [] }
    /// Every overload of the action with this qualified name.
    public func actions(_ qualifiedName: String) -> [Operation] { actionIndex[qualifiedName] ?? [] }
    /// The vocabulary term with this qualified name, if defined in the model.
    public func term(_ qualifiedName: String) -> Term? { termIndex[qualifiedName] }

    /// What kind of type a qualified name denotes, or nil if the model does not know it.
    public func typeKind(_ qualifiedName: String) -> TypeKind? {
        if let primitive = PrimitiveType(qualifiedName: qualifiedName) { return .primitive(primitive) }
        if entityTypeIndex[qualifiedName] != nil { return .entity }
        if complexTypeIndex[qualifiedName] != nil { return .complex }
        if enumTypeIndex[qualifiedName] != nil { return .enumeration }
        if let definition = typeDefinitionIndex[qualifiedName] {
            return .typeDefinition(underlying: definition.underlyingType)
        }
        if qualifiedName == "Edm.Untyped" { return .untyped }
        if ["Edm.EntityType", "Edm.ComplexType", "Edm.PrimitiveType", "Edm.AnnotationPath",
            "Edm.PropertyPath", "Edm.NavigationPropertyPath", "Edm.AnyPropertyPath",
            "Edm.ModelElementPath", "Edm.AnyPropertyPath"].contains(qualifiedName) {
            return .abstract
        }
        return nil
    }

    /// The first (usually only) entity container.
    public var entityContainer: EntityContainer? {
        schemas.lazy.compactMap(\.entityContainer).first
    }

    /// Every entity container in the model.
    public var entityContainers: [EntityContainer] { schemas.compactMap(\.entityContainer) }

    /// The first match of `find` across the entity containers, in document order.
    private func firstInContainers<T>(_ find: (EntityContainer) -> T?) -> T? {
        for container in entityContainers {
            if let found = find(container) { return found }
        }
        return nil
    }

    /// The entity set with this name.
    public func entitySet(_ name: String) -> EntitySet? {
        firstInContainers { $0.entitySets.first { $0.name == name } }
    }

    /// The singleton with this name.
    public func singleton(_ name: String) -> Singleton? {
        firstInContainers { $0.singletons.first { $0.name == name } }
    }

    /// The function import with this name.
    public func functionImport(_ name: String) -> FunctionImport? {
        firstInContainers { $0.functionImports.first { $0.name == name } }
    }

    /// The action import with this name.
    public func actionImport(_ name: String) -> ActionImport? {
        firstInContainers { $0.actionImports.first { $0.name == name } }
    }

    /// The entity type of an entity set, by the set's name.
    public func entityType(ofEntitySet name: String) -> EntityType? {
        entitySet(name).flatMap { entityType($0.entityType) }
    }

    /// The base-type chain of an entity type, starting with the type itself.
    public func entityTypeChain(_ type: EntityType) -> [EntityType] {
        // Most types have no base type: no set of visited names to hash.
        guard type.baseType != nil else { return [type] }
        var chain = [type]
        var seen: Set<String> = [type.qualifiedName]
        var current = type
        while let base = current.baseType, let next = entityType(base), !seen.contains(base) {
            chain.append(next)
            seen.insert(base)
            current = next
        }
        return chain
    }

    /// The base-type chain of a complex type, starting with the type itself.
    public func complexTypeChain(_ type: ComplexType) -> [ComplexType] {
        // Most types have no base type: no set of visited names to hash.
        guard type.baseType != nil else { return [type] }
        var chain = [type]
        var seen: Set<String> = [type.qualifiedName]
        var current = type
        while let base = current.baseType, let next = complexType(base), !seen.contains(base) {
            chain.append(next)
            seen.insert(base)
            current = next
        }
        return chain
    }

    /// The key of an entity type, inherited from the nearest base type that declares one.
    public func key(of type: EntityType) -> [PropertyRef] {
        entityTypeChain(type).first(where: { !$0.key.isEmpty })?.key ?? []
    }

    /// All structural properties of a structured type, base type first.
    public func allProperties(ofStructuredType qualifiedName: String) -> [Property] {
        if let entity = entityType(qualifiedName) {
            return entityTypeChain(entity).reversed().flatMap(\.properties)
        }
        if let complex = complexType(qualifiedName) {
            return complexTypeChain(complex).reversed().flatMap(\.properties)
        }
        return []
    }

    /// All navigation properties of a structured type, base type first.
    public func allNavigationProperties(ofStructuredType qualifiedName: String) -> [NavigationProperty] {
        if let entity = entityType(qualifiedName) {
            return entityTypeChain(entity).reversed().flatMap(\.navigationProperties)
        }
        if let complex = complexType(qualifiedName) {
            return complexTypeChain(complex).reversed().flatMap(\.navigationProperties)
        }
        return []
    }

    /// The structural property with this name on a structured type or its base types: the
    /// first match in the order of ``allProperties(ofStructuredType:)``, found without building
    /// that list (a lookup per key value of every request and row).
    public func property(_ name: String, ofStructuredType qualifiedName: String) -> Property? {
        firstInChain(
            of: qualifiedName, { $0.properties.first { $0.name == name } }, { $0.properties.first { $0.name == name } })
    }

    /// The navigation property with this name on a structured type or its base types (the
    /// first match in the order of ``allNavigationProperties(ofStructuredType:)``).
    public func navigationProperty(_ name: String, ofStructuredType qualifiedName: String) -> NavigationProperty? {
        firstInChain(
            of: qualifiedName, { $0.navigationProperties.first { $0.name == name } },
            { $0.navigationProperties.first { $0.name == name } })
    }

    /// What `entity` (or `complex`) finds first on an entity (or complex) type's chain, base
    /// type first.
    private func firstInChain<Member>(
        of qualifiedName: String, _ entity: (EntityType) -> Member?, _ complex: (ComplexType) -> Member?
    ) -> Member? {
        if let type = entityType(qualifiedName) {
            return entityTypeChain(type).reversed().lazy.compactMap(entity).first
        }
        if let type = complexType(qualifiedName) {
            return complexTypeChain(type).reversed().lazy.compactMap(complex).first
        }
        return nil
    }

    /// True if `derived` is `base` or inherits from it (entity or complex types).
    public func isType(_ derived: String, derivedFrom base: String) -> Bool {
        if derived == base { return true }
        if let entity = entityType(derived) {
            return entityTypeChain(entity).contains { $0.qualifiedName == base }
        }
        if let complex = complexType(derived) {
            return complexTypeChain(complex).contains { $0.qualifiedName == base }
        }
        return false
    }

    /// The entity set that a navigation property of an entity set leads to, following the
    /// set's navigation property bindings (V2 association sets are resolved into the same
    /// bindings). `path` is the binding path, usually just the navigation property name.
    public func targetEntitySet(from entitySetName: String, navigationPath path: String) -> EntitySet? {
        guard let set = entitySet(entitySetName) else { return nil }
        guard let binding = set.navigationPropertyBindings.first(where: { bindingPath($0.path, matches: path) }) else {
            return nil
        }
        return resolveBindingTarget(binding.target)
    }

    private func bindingPath(_ bindingPath: String, matches path: String) -> Bool {
        if bindingPath == path { return true }
        // A binding path may include a type cast segment: `Ns.Derived/Nav`.
        let parts = bindingPath.split(separator: "/")
        return parts.last.map(String.init) == path && parts.count == 2 && parts[0].contains(".")
    }

    /// Resolves a binding target (`SetName`, `Container/SetName` or `Ns.Container/SetName`).
    public func resolveBindingTarget(_ target: String) -> EntitySet? {
        let parts = target.split(separator: "/").map(String.init)
        if parts.count == 1 { return entitySet(parts[0]) }
        if parts.count == 2 {
            let containerName = parts[0]
            for container in entityContainers
            where container.name == containerName || container.qualifiedName == containerName {
                if let set = container.entitySets.first(where: { $0.name == parts[1] }) { return set }
            }
        }
        return nil
    }

    /// All annotations in the model whose target is `target` (inline and external).
    public func annotations(forTarget target: String) -> [Annotation] {
        schemas.flatMap { $0.annotations.filter { $0.target == target } }
    }
}

/// What kind of type a name denotes.
public enum TypeKind: Sendable, Hashable {
    case primitive(PrimitiveType)
    case entity
    case complex
    case enumeration
    case typeDefinition(underlying: String)
    case untyped
    /// An abstract Edm type such as `Edm.EntityType` or a path type used by vocabularies.
    case abstract
}

/// An `edmx:Reference` with its `edmx:Include`s.
public struct Reference: Sendable, Hashable, Codable {
    public var uri: String
    public var includes: [Include]
    /// Creates a value from its parts.
    public init(uri: String, includes: [Include]) {
        self.uri = uri
        self.includes = includes
    }

    /// One included namespace, with its optional alias.
    public struct Include: Sendable, Hashable, Codable {
        public var namespace: String
        public var alias: String?
        /// Creates a value from its parts.
        public init(namespace: String, alias: String?) {
            self.namespace = namespace
            self.alias = alias
        }
    }
}

/// A `Schema` element.
public struct Schema: Sendable, Hashable, Codable {
    public var namespace: String
    public var alias: String?
    public var entityTypes: [EntityType] = []
    public var complexTypes: [ComplexType] = []
    public var enumTypes: [EnumType] = []
    public var typeDefinitions: [TypeDefinition] = []
    public var functions: [Operation] = []
    public var actions: [Operation] = []
    public var terms: [Term] = []
    public var entityContainer: EntityContainer?
    /// Annotations defined in this schema, inline and in `Annotations` blocks, with their targets.
    public var annotations: [Annotation] = []
    /// V2 associations as they were declared (already resolved into navigation properties).
    public var associations: [Association] = []

    /// Creates a value from its parts.
    public init(namespace: String, alias: String? = nil) {
        self.namespace = namespace
        self.alias = alias
    }
}

/// A reference to a key property, possibly through a complex property path, with an alias.
public struct PropertyRef: Sendable, Hashable, Codable {
    /// The property path, e.g. `ID` or `Address/Street`.
    public var name: String
    /// The key alias (required when `name` is a path).
    public var alias: String?
    /// Creates a value from its parts.
    public init(name: String, alias: String? = nil) {
        self.name = name
        self.alias = alias
    }
    /// The name that identifies this key part in a key predicate.
    public var keyName: String { alias ?? name }
}

/// A type reference: a qualified type name, possibly a collection.
public struct TypeReference: Sendable, Hashable, Codable, CustomStringConvertible {
    /// Qualified name of the element type, e.g. `Edm.String` or `Ns.Customer`.
    public var name: String
    public var isCollection: Bool
    /// Creates a value from its parts.
    public init(name: String, isCollection: Bool = false) {
        self.name = name
        self.isCollection = isCollection
    }
    public var description: String { isCollection ? "Collection(\(name))" : name }

    /// Parses `Collection(Ns.T)` or `Ns.T`.
    public init?(parsing text: String) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.hasPrefix("Collection(") && trimmed.hasSuffix(")") {
            let inner = String(trimmed.dropFirst("Collection(".count).dropLast())
            guard !inner.isEmpty, !inner.contains("(") else { return nil }
            self.init(name: inner, isCollection: true)
        } else {
            guard !trimmed.isEmpty, !trimmed.contains("("), !trimmed.contains(")") else { return nil }
            self.init(name: trimmed, isCollection: false)
        }
    }
}

/// Facets that refine a primitive type.
public struct Facets: Sendable, Hashable, Codable {
    public var nullable: Bool = true
    /// `MaxLength`; `nil` when absent. `max` is represented as `Int.max`.
    public var maxLength: Int?
    public var precision: Int?
    /// `Scale`: a number, or `variable`/`floating` as `nil` with `scaleIsVariable`.
    public var scale: Int?
    public var scaleIsVariable: Bool = false
    /// `Scale="floating"` (4.01): a decimal floating-point number of `Precision` significant
    /// digits; ``scaleIsVariable`` is true as well.
    public var scaleIsFloating: Bool {
        get { floating == true }
        set { floating = newValue ? true : nil }
    }
    // Optional so that models stored before it was kept still decode.
    var floating: Bool?
    public var srid: String?
    public var unicode: Bool?
    public var defaultValue: String?
    /// Creates a value from its parts.
    public init() {}
}

/// A structural property.
public struct Property: Sendable, Hashable, Codable {
    public var name: String
    public var type: TypeReference
    public var facets: Facets
    /// V2 `ConcurrencyMode="Fixed"`: the property takes part in optimistic concurrency.
    public var concurrencyFixed: Bool = false
    /// Creates a value from its parts.
    public init(name: String, type: TypeReference, facets: Facets = Facets()) {
        self.name = name
        self.type = type
        self.facets = facets
    }
    public var nullable: Bool { facets.nullable }
}

/// What happens to related entities when an entity is deleted.
public enum OnDeleteAction: String, Sendable, Hashable, Codable {
    case none = "None"
    case cascade = "Cascade"
    case setNull = "SetNull"
    case setDefault = "SetDefault"
}

/// One pair of a referential constraint: `property` (on the source) refers to
/// `referencedProperty` (on the target).
public struct ReferentialConstraint: Sendable, Hashable, Codable {
    public var property: String
    public var referencedProperty: String
    /// Creates a value from its parts.
    public init(property: String, referencedProperty: String) {
        self.property = property
        self.referencedProperty = referencedProperty
    }
}

/// A navigation property; V2 associations are resolved into this shape.
public struct NavigationProperty: Sendable, Hashable, Codable {
    public var name: String
    /// Target entity type; `isCollection` for to-many.
    public var type: TypeReference
    public var nullable: Bool = true
    public var partner: String?
    public var containsTarget: Bool = false
    public var referentialConstraints: [ReferentialConstraint] = []
    public var onDelete: OnDeleteAction?
    /// V2 only: the association and roles this property was resolved from.
    public var relationship: String?
    public var fromRole: String?
    public var toRole: String?
    /// Creates a value from its parts.
    public init(name: String, type: TypeReference) {
        self.name = name
        self.type = type
    }
}

/// An entity type.
public struct EntityType: Sendable, Hashable, Codable {
    public var namespace: String
    public var name: String
    public var key: [PropertyRef] = []
    public var baseType: String?
    public var isAbstract = false
    public var isOpenType = false
    public var hasStream = false
    public var properties: [Property] = []
    public var navigationProperties: [NavigationProperty] = []
    /// Creates a value from its parts.
    public init(namespace: String, name: String) {
        self.namespace = namespace
        self.name = name
    }
    public var qualifiedName: String { "\(namespace).\(name)" }
}

/// A complex type.
public struct ComplexType: Sendable, Hashable, Codable {
    public var namespace: String
    public var name: String
    public var baseType: String?
    public var isAbstract = false
    public var isOpenType = false
    public var properties: [Property] = []
    public var navigationProperties: [NavigationProperty] = []
    /// Creates a value from its parts.
    public init(namespace: String, name: String) {
        self.namespace = namespace
        self.name = name
    }
    public var qualifiedName: String { "\(namespace).\(name)" }
}

/// An enum type.
public struct EnumType: Sendable, Hashable, Codable {
    public var namespace: String
    public var name: String
    public var underlyingType: PrimitiveType = .int32
    public var isFlags = false
    public var members: [Member] = []
    /// Creates a value from its parts.
    public init(namespace: String, name: String) {
        self.namespace = namespace
        self.name = name
    }
    public var qualifiedName: String { "\(namespace).\(name)" }

    /// One named member and its value.
    public struct Member: Sendable, Hashable, Codable {
        public var name: String
        public var value: Int64
        /// Creates a value from its parts.
        public init(name: String, value: Int64) {
            self.name = name
            self.value = value
        }
    }

    /// The member with this name.
    public func member(named name: String) -> Member? { members.first { $0.name == name } }
}

/// A type definition over a primitive type.
public struct TypeDefinition: Sendable, Hashable, Codable {
    public var namespace: String
    public var name: String
    public var underlyingType: String
    public var facets: Facets
    /// Creates a value from its parts.
    public init(namespace: String, name: String, underlyingType: String, facets: Facets = Facets()) {
        self.namespace = namespace
        self.name = name
        self.underlyingType = underlyingType
        self.facets = facets
    }
    public var qualifiedName: String { "\(namespace).\(name)" }
}

/// A vocabulary term.
public struct Term: Sendable, Hashable, Codable {
    public var namespace: String
    public var name: String
    public var type: TypeReference
    public var appliesTo: [String] = []
    public var baseTerm: String?
    public var defaultValue: String?
    /// Creates a value from its parts.
    public init(namespace: String, name: String, type: TypeReference) {
        self.namespace = namespace
        self.name = name
        self.type = type
    }
    public var qualifiedName: String { "\(namespace).\(name)" }
}

/// An operation parameter.
public struct Parameter: Sendable, Hashable, Codable {
    public var name: String
    public var type: TypeReference
    public var facets: Facets
    /// V2 `Mode` (`In`, `Out`, `InOut`), or ``optionalMode`` for a V4.01 parameter annotated
    /// `Core.OptionalParameter`.
    public var mode: String?
    /// The ``mode`` of a parameter the caller may leave out (`Core.OptionalParameter`).
    public static let optionalMode = "Optional"
    /// Whether a call may leave the parameter out: it is optional or nullable.
    public var mayBeOmitted: Bool { mode == Self.optionalMode || facets.nullable }
    /// Creates a value from its parts.
    public init(name: String, type: TypeReference, facets: Facets = Facets()) {
        self.name = name
        self.type = type
        self.facets = facets
    }
}

/// A function or an action (one overload).
public struct Operation: Sendable, Hashable, Codable {
    /// The kinds this type distinguishes.
    public enum Kind: String, Sendable, Hashable, Codable { case function, action }
    public var kind: Kind
    public var namespace: String
    public var name: String
    public var isBound = false
    public var isComposable = false
    public var entitySetPath: String?
    public var parameters: [Parameter] = []
    public var returnType: TypeReference?
    public var returnNullable = true
    /// Creates a value from its parts.
    public init(kind: Kind, namespace: String, name: String) {
        self.kind = kind
        self.namespace = namespace
        self.name = name
    }
    public var qualifiedName: String { "\(namespace).\(name)" }
    /// The binding parameter's type for a bound operation.
    public var bindingParameterType: TypeReference? { isBound ? parameters.first?.type : nil }
}

/// An entity container.
public struct EntityContainer: Sendable, Hashable, Codable {
    public var namespace: String
    public var name: String
    public var extends: String?
    public var isDefault = true
    public var entitySets: [EntitySet] = []
    public var singletons: [Singleton] = []
    public var functionImports: [FunctionImport] = []
    public var actionImports: [ActionImport] = []
    /// Creates a value from its parts.
    public init(namespace: String, name: String) {
        self.namespace = namespace
        self.name = name
    }
    public var qualifiedName: String { "\(namespace).\(name)" }
}

/// A navigation property binding: the set that a navigation path leads to.
public struct NavigationPropertyBinding: Sendable, Hashable, Codable {
    public var path: String
    public var target: String
    /// Creates a value from its parts.
    public init(path: String, target: String) {
        self.path = path
        self.target = target
    }
}

/// An entity set.
public struct EntitySet: Sendable, Hashable, Codable {
    public var name: String
    public var entityType: String
    public var includeInServiceDocument = true
    public var navigationPropertyBindings: [NavigationPropertyBinding] = []
    /// Creates a value from its parts.
    public init(name: String, entityType: String) {
        self.name = name
        self.entityType = entityType
    }
}

/// A singleton.
public struct Singleton: Sendable, Hashable, Codable {
    public var name: String
    public var type: String
    public var navigationPropertyBindings: [NavigationPropertyBinding] = []
    /// Creates a value from its parts.
    public init(name: String, type: String) {
        self.name = name
        self.type = type
    }
}

/// A function import (V4) or a V2/V3 `FunctionImport`.
public struct FunctionImport: Sendable, Hashable, Codable {
    public var name: String
    /// Qualified name of the function (V4); for V2 the import itself describes the signature.
    public var function: String?
    public var entitySet: String?
    public var includeInServiceDocument = false
    /// V2: the HTTP method (`m:HttpMethod`), `GET` when absent.
    public var httpMethod: String?
    /// V2: the import's own parameters and return type.
    public var parameters: [Parameter] = []
    public var returnType: TypeReference?
    /// Creates a value from its parts.
    public init(name: String) { self.name = name }
}

/// An action import.
public struct ActionImport: Sendable, Hashable, Codable {
    public var name: String
    public var action: String
    public var entitySet: String?
    /// Creates a value from its parts.
    public init(name: String, action: String) {
        self.name = name
        self.action = action
    }
}

/// A V2 association, kept for reference after it was resolved into navigation properties.
public struct Association: Sendable, Hashable, Codable {
    public var namespace: String
    public var name: String
    public var ends: [End]
    public var principalRole: String?
    public var dependentRole: String?
    public var constraints: [ReferentialConstraint] = []
    /// Creates a value from its parts.
    public init(namespace: String, name: String, ends: [End]) {
        self.namespace = namespace
        self.name = name
        self.ends = ends
    }
    public var qualifiedName: String { "\(namespace).\(name)" }

    /// One association end.
    public struct End: Sendable, Hashable, Codable {
        public var role: String
        public var type: String
        /// `1`, `0..1` or `*`.
        public var multiplicity: String
        public var onDelete: OnDeleteAction?
        /// Creates a value from its parts.
        public init(role: String, type: String, multiplicity: String) {
            self.role = role
            self.type = type
            self.multiplicity = multiplicity
        }
    }
}
