/// The shape of what a path segment addresses.
public enum ResourceShape: Sendable, Hashable {
    case entityCollection(type: String?)
    case entity(type: String?)
    case complexCollection(type: String?)
    case complex(type: String?)
    case primitiveCollection(type: String?)
    case primitive(type: String?)
    case stream
    /// An action or function without a result, or a result that cannot be composed further.
    case none

    /// True for the three collection shapes.
    package var isCollection: Bool {
        switch self {
        case .entityCollection, .complexCollection, .primitiveCollection: true
        default: false
        }
    }

    var typeName: String? {
        switch self {
        case .entityCollection(let t), .entity(let t), .complexCollection(let t), .complex(let t),
             .primitiveCollection(let t), .primitive(let t): t
        default: nil
        }
    }
}

/// What a name at the start of a resource path denotes.
public enum RootKind: Sendable, Hashable {
    case entitySet(type: String?)
    case singleton(type: String?)
    case functionImport(returns: ResourceShape)
    case actionImport(returns: ResourceShape)
}

/// What a simple name after a structured value denotes.
public enum MemberKind: Sendable, Hashable {
    case property(ResourceShape)
    case navigation(ResourceShape)
}

/// What a qualified name after a resource denotes.
public enum QualifiedKind: Sendable, Hashable {
    /// A cast to an entity type (or complex type, per `isComplex`).
    case typeCast(type: String, isComplex: Bool)
    case function(returns: ResourceShape, isComposable: Bool)
    case action(returns: ResourceShape)
}

/// Classifies names while a resource path is resolved. ``Model`` implements it from CSDL;
/// tests may implement it from plain name lists.
public protocol NameLookup: Sendable {
    /// A name at the service root.
    func root(_ name: String) -> RootKind?
    /// A member of a structured type (`type` nil when unknown).
    func member(_ name: String, of type: String?) -> MemberKind?
    /// A qualified name applied to a resource of `shape`.
    func qualified(_ name: String, on shape: ResourceShape) -> QualifiedKind?
    /// Whether a bare segment after a collection may be read as its key (key-as-segment).
    func acceptsKeySegment(_ text: String, of type: String?) -> Bool
}

extension Model: NameLookup {
    private func shape(of reference: TypeReference) -> ResourceShape {
        let name = reference.name
        let kind = typeKind(name)
        switch kind {
        case .entity: return reference.isCollection ? .entityCollection(type: name) : .entity(type: name)
        case .complex: return reference.isCollection ? .complexCollection(type: name) : .complex(type: name)
        case .primitive(.stream): return .stream
        default: return reference.isCollection ? .primitiveCollection(type: name) : .primitive(type: name)
        }
    }

    public func root(_ name: String) -> RootKind? {
        if let set = entitySet(name) { return .entitySet(type: set.entityType) }
        if let singleton = singleton(name) { return .singleton(type: singleton.type) }
        if let item = functionImport(name) {
            if let returnType = item.returnType { return .functionImport(returns: shape(of: returnType)) }
            if let function = item.function, let op = functions(function).first {
                return .functionImport(returns: op.returnType.map { shape(of: $0) } ?? .none)
            }
            return .functionImport(returns: .none)
        }
        if let item = actionImport(name) {
            let op = actions(item.action).first
            return .actionImport(returns: op?.returnType.map { shape(of: $0) } ?? .none)
        }
        return nil
    }

    public func member(_ name: String, of type: String?) -> MemberKind? {
        guard let type else { return nil }
        if let property = property(name, ofStructuredType: type) { return .property(shape(of: property.type)) }
        if let nav = navigationProperty(name, ofStructuredType: type) { return .navigation(shape(of: nav.type)) }
        return nil
    }

    public func qualified(_ name: String, on shape: ResourceShape) -> QualifiedKind? {
        if !name.contains(".") {
            // 4.01: an unqualified name refers to the default (first) namespace that has it.
            for schema in schemas {
                if let kind = qualified(schema.namespace + "." + name, on: shape) { return kind }
            }
            return nil
        }
        if let entity = entityType(name) {
            if let current = shape.typeName, !isType(entity.qualifiedName, derivedFrom: current), !isType(current, derivedFrom: entity.qualifiedName) {
                return nil
            }
            return .typeCast(type: entity.qualifiedName, isComplex: false)
        }
        if let complex = complexType(name) {
            return .typeCast(type: complex.qualifiedName, isComplex: true)
        }
        let bindingMatches: (Operation) -> Bool = { op in
            guard op.isBound, let binding = op.bindingParameterType else { return false }
            guard let current = shape.typeName else { return true }
            return binding.isCollection == shape.isCollection && (self.isType(current, derivedFrom: binding.name) || binding.name == "Edm.EntityType")
        }
        if let op = functions(name).first(where: bindingMatches) {
            return .function(returns: op.returnType.map { self.shape(of: $0) } ?? .none, isComposable: op.isComposable)
        }
        if let op = actions(name).first(where: bindingMatches) {
            return .action(returns: op.returnType.map { self.shape(of: $0) } ?? .none)
        }
        return nil
    }

    public func acceptsKeySegment(_ text: String, of type: String?) -> Bool {
        // Key-as-segment is allowed when the service says so (Capabilities.KeyAsSegmentSupported).
        schemas.contains { schema in
            schema.annotations.contains { $0.term.hasSuffix("KeyAsSegmentSupported") }
        }
    }
}
