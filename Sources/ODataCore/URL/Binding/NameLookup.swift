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
    /// Whether entities of `type` are media entities (a stream `$value` addresses).
    func isMediaEntity(_ type: String?) -> Bool
    /// Throws when a key predicate does not fit the key of entity type `type`: a missing, extra,
    /// repeated or wrongly typed part. `input` is the URL, for the error's position.
    func checkKey(_ parts: [KeyValue], of type: String?, input: String) throws(BindingError)
    /// Throws like ``checkKey(_:of:input:)`` for a key after the navigation property
    /// `navigation` of `sourceType`, whose referential constraints may supply key parts
    /// (`SalesOrders('SO0')/Items(10)`); returns the parts with every name given.
    func checkKey(_ parts: [KeyValue], of type: String?, afterNavigation navigation: String, of sourceType: String?,
                  input: String) throws(BindingError) -> [KeyValue]
    /// Throws when the arguments in a function's parentheses fit none of its overloads: an
    /// unknown, repeated, missing (not nullable) or wrongly typed parameter. `isImport` says
    /// `name` is a function import at the root.
    func checkArguments(_ arguments: [NamedArgument], ofFunction name: String, isImport: Bool,
                        input: String, offset: Int) throws(BindingError)
    /// ``checkArguments(_:ofFunction:isImport:input:offset:)`` where parameter aliases
    /// (`F(P=@p)?@p=5`) are checked by their values.
    func checkArguments(_ arguments: [NamedArgument], ofFunction name: String, isImport: Bool,
                        aliases: [String: CommonExpression], input: String, offset: Int) throws(BindingError)
}

extension NameLookup {
    /// Lookups without key definitions accept every key predicate.
    public func checkKey(_ parts: [KeyValue], of type: String?, input: String) throws(BindingError) {}
    /// Lookups without type definitions take every entity for a media entity.
    public func isMediaEntity(_ type: String?) -> Bool { true }
    /// Lookups without key definitions accept every key predicate.
    public func checkKey(_ parts: [KeyValue], of type: String?, afterNavigation navigation: String, of sourceType: String?,
                         input: String) throws(BindingError) -> [KeyValue] { parts }
    /// Lookups without operation signatures accept every argument list.
    public func checkArguments(_ arguments: [NamedArgument], ofFunction name: String, isImport: Bool,
                               input: String, offset: Int) throws(BindingError) {}
    /// Without alias support of its own, a lookup checks the arguments as they are written.
    public func checkArguments(_ arguments: [NamedArgument], ofFunction name: String, isImport: Bool,
                               aliases: [String: CommonExpression], input: String, offset: Int) throws(BindingError) {
        try checkArguments(arguments, ofFunction: name, isImport: isImport, input: input, offset: offset)
    }
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

    public func checkKey(_ parts: [KeyValue], of type: String?, input: String) throws(BindingError) {
        // Keys with aliases (parts that are paths into complex properties) are left to the store.
        guard let type, let entity = entityType(type), !key(of: entity).contains(where: { $0.alias != nil }) else { return }
        _ = try keyValues(parts, of: entity, input: input, skipUnknownAliases: true)
    }

    public func checkKey(_ parts: [KeyValue], of type: String?, afterNavigation navigation: String, of sourceType: String?,
                         input: String) throws(BindingError) -> [KeyValue] {
        guard let type, let entity = entityType(type) else { return parts }
        let keyNames = key(of: entity)
        guard !keyNames.contains(where: { $0.alias != nil }) else { return parts }
        let implied = keyPropertiesImplied(byNavigation: navigation, of: sourceType)
        _ = try keyValues(parts, of: entity, input: input, skipUnknownAliases: true, implied: implied)
        let open = keyNames.map(\.name).filter { !implied.contains($0) }
        if parts.count == 1, parts[0].name == nil, keyNames.count > 1, open.count == 1 {
            return [KeyValue(name: open[0], value: parts[0].value)]
        }
        return parts
    }

    /// The key properties of the navigation's target that its partner's referential constraints
    /// tie to the source entity's properties (OData 4.01 Part 2, key predicates after a
    /// navigation). V2 has no shortened key predicates: none.
    func keyPropertiesImplied(byNavigation name: String, of sourceType: String?) -> Set<String> {
        guard !version.isLegacy, let sourceType, let nav = navigationProperty(name, ofStructuredType: sourceType),
              let target = entityType(nav.type.name) else { return [] }
        let partner = nav.partner.flatMap { navigationProperty($0, ofStructuredType: target.qualifiedName) }
            ?? entityTypeChain(target).flatMap(\.navigationProperties).first { $0.partner == name }
        guard let partner else { return [] }
        let keyNames = Set(key(of: target).map(\.name))
        return Set(partner.referentialConstraints.map(\.property).filter { keyNames.contains($0) })
    }

    public func checkArguments(_ arguments: [NamedArgument], ofFunction name: String, isImport: Bool,
                               input: String, offset: Int) throws(BindingError) {
        try checkArguments(arguments, ofFunction: name, isImport: isImport, aliases: [:], input: input, offset: offset)
    }

    public func checkArguments(_ arguments: [NamedArgument], ofFunction name: String, isImport: Bool,
                               aliases: [String: CommonExpression], input: String, offset: Int) throws(BindingError) {
        // The overloads and their non-binding parameters.
        var signatures: [[Parameter]] = []
        if isImport {
            guard let item = functionImport(name) else { return }
            if let function = item.function {
                signatures = functions(function).map(\.parameters)
            } else {
                signatures = [item.parameters]
            }
        } else {
            let qualifiedNames = name.contains(".") ? [name] : schemas.map { $0.namespace + "." + name }
            guard let found = qualifiedNames.lazy.map({ self.functions($0) }).first(where: { !$0.isEmpty }) else { return }
            signatures = found.map { $0.isBound ? Array($0.parameters.dropFirst()) : $0.parameters }
        }
        guard !signatures.isEmpty else { return }
        func fail(_ message: String) -> BindingError { BindingError(.invalidArguments, message, input: input, offset: offset) }
        var given: Set<String> = []
        for argument in arguments where !given.insert(argument.name).inserted {
            throw fail("\(name): the parameter \(argument.name) is given twice")
        }
        func describe(_ parameters: [Parameter]) -> String {
            parameters.isEmpty ? "it has no parameters"
                : "its parameters are " + parameters.map { "\($0.name) (\($0.type.name))" }.joined(separator: ", ")
        }
        // The overload whose names fit; otherwise the first problem of the closest overload.
        let names = given
        let candidates = signatures.filter { signature in names.isSubset(of: Set(signature.map(\.name))) }
        guard let signature = candidates.first(where: { signature in
            signature.allSatisfy { names.contains($0.name) || $0.mayBeOmitted }
        }) ?? candidates.first else {
            let closest = signatures.max { a, b in
                names.intersection(a.map(\.name)).count < names.intersection(b.map(\.name)).count
            } ?? []
            let unknown = arguments.first { argument in !closest.contains { $0.name == argument.name } }?.name ?? ""
            throw fail("\(name) has no parameter \(unknown); \(describe(closest))")
        }
        if let missing = signature.first(where: { !names.contains($0.name) && !$0.mayBeOmitted }) {
            throw fail("\(name) needs the parameter \(missing.name) (\(missing.type.name)); \(describe(signature))")
        }
        for argument in arguments {
            var node = argument.value.node
            if case .alias(let alias) = node, let value = aliases[alias] { node = value.node }
            guard let parameter = signature.first(where: { $0.name == argument.name }),
                  case .literal(let literal) = node, !parameter.type.isCollection else { continue }
            let typeName = typeDefinition(parameter.type.name)?.underlyingType ?? parameter.type.name
            if case .null = literal {
                guard parameter.facets.nullable else { throw fail("\(name): the parameter \(parameter.name) may not be null") }
                continue
            }
            if let primitive = PrimitiveType(rawValue: typeName) {
                guard case .primitive? = Literal.convertURLLiteral(literal, to: primitive) else {
                    throw fail("\(name): \(Literal.format(literal)) is not an \(primitive.rawValue) for \(parameter.name)")
                }
            } else if let enumType = enumType(typeName) {
                switch literal {
                case .enumeration(let value):
                    try checkEnumMembers(value, of: enumType, input: input, offset: argument.value.offset)
                case .primitive(.string(let text)) where version >= .v401:
                    // 4.01 lets an enum value be written as a plain string: `color='Red'`.
                    let members = text.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
                    try checkEnumMembers(EnumValue(typeName: nil, members: members), of: enumType, input: input, offset: argument.value.offset)
                default:
                    throw fail("\(name): \(Literal.format(literal)) is not a member of \(typeName) for \(parameter.name)")
                }
            }
        }
    }

    /// Throws when an enum literal names a member `type` does not have, or a flag combination of
    /// a type that is not `IsFlags`.
    public func checkEnumMembers(_ value: EnumValue, of type: EnumType, input: String, offset: Int) throws(BindingError) {
        let parts = value.members
        if parts.count > 1 && !type.isFlags {
            throw BindingError(.typeMismatch, "\(type.qualifiedName) is not a flags type: one member only", input: input,
                               offset: offset)
        }
        let names = type.members.map(\.name).joined(separator: ", ")
        for part in parts {
            if let number = Int64(part) {
                // A number names a member's value, or (flags) a combination of them.
                let known = type.members.contains { $0.value == number }
                let bits = type.members.reduce(Int64(0)) { $0 | $1.value }
                guard known || (type.isFlags && number >= 0 && number & ~bits == 0) else {
                    throw BindingError(
                        .unknownName,
                        "\(type.qualifiedName) has no member of value \(number)"
                            + (type.isFlags ? " nor a combination making it" : "") + "; its members are \(names)",
                        input: input, offset: offset)
                }
                continue
            }
            guard type.members.contains(where: { $0.name == part }) else {
                throw BindingError(.unknownName, "\(type.qualifiedName) has no member \(part); its members are \(names)",
                                   input: input, offset: offset)
            }
        }
    }

    public func isMediaEntity(_ type: String?) -> Bool {
        guard let type, let entity = entityType(type) else { return true }
        // A derived type may add the stream: a cast decides.
        return entityTypeChain(entity).contains { $0.hasStream }
            || schemas.flatMap(\.entityTypes).contains { $0.hasStream && isType($0.qualifiedName, derivedFrom: type) }
    }

    public func acceptsKeySegment(_ text: String, of type: String?) -> Bool {
        // Key-as-segment is allowed when the service says so (Capabilities.KeyAsSegmentSupported).
        schemas.contains { schema in
            schema.annotations.contains { $0.term.hasSuffix("KeyAsSegmentSupported") }
        }
    }
}
