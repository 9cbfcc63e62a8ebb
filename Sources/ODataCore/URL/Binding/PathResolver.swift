/// Resolves a syntactic ``ResourcePath`` against a ``NameLookup``: classifies every name,
/// checks that each segment may follow the previous one, and computes the shape addressed.
public struct PathResolver: Sendable {
    public var lookup: any NameLookup
    /// The request's parameter aliases, whose values keys and function parameters are checked by;
    /// a key alias without a value here is refused (`invalidKey`).
    public var aliases: [String: CommonExpression]
    /// Whether a key after a navigation may leave out the parts a referential constraint
    /// supplies (V4 and later; V2 needs every key part).
    public var allowsShortenedKeys = true

    /// Creates a value from its parts.
    public init(lookup: any NameLookup, aliases: [String: CommonExpression] = [:]) {
        self.lookup = lookup
        self.aliases = aliases
    }

    /// The resolved path and the shape of what it addresses.
    public struct Resolution: Sendable, Hashable {
        public var path: ResourcePath
        public var shape: ResourceShape
    }

    /// Resolves `path`; `input` is the URL the path came from (for error positions).
    public func resolve(_ path: ResourcePath, input: String) throws(BindingError) -> Resolution {
        var segments: [PathSegment] = []
        var shape: ResourceShape = .none
        var finished = false
        var lastWasCast = false
        var canHaveKey = false
        /// The navigation just followed and the type it started from.
        var lastNavigation: (name: String, sourceType: String?)?
        func fail(_ code: BindingError.Code, _ message: String, _ segment: PathSegment) -> BindingError {
            BindingError(code, message, input: input, offset: segment.offset)
        }
        var index = 0
        let inputSegments = path.segments
        /// Named parts of a following key group are really function arguments.
        func takeArguments(after position: Int) -> [NamedArgument]? {
            guard position + 1 < inputSegments.count, case .key(let parts) = inputSegments[position + 1].kind,
                  parts.allSatisfy({ $0.name != nil }) else { return nil }
            return parts.map { NamedArgument(name: $0.name ?? "", value: $0.value) }
        }
        while index < inputSegments.count {
            let segment = inputSegments[index]
            defer { index += 1 }
            if finished {
                throw fail(.invalidSegment, "Nothing may follow the previous segment", segment)
            }
            var resolved = segment
            let wasCast = lastWasCast
            lastWasCast = false
            let hadKey = canHaveKey
            canHaveKey = false
            let navigation = lastNavigation
            lastNavigation = nil
            if case .query = segment.kind {
                guard index > 0 else { throw fail(.invalidSegment, "$query needs a resource before it", segment) }
                segments.append(resolved)
                finished = true
                continue
            }
            if index == 0 {
                switch segment.kind {
                case .metadata, .batch:
                    finished = true
                    shape = .none
                case .entity, .all:
                    // A cast may follow: `$all/Ns.Customer`, `$entity/Ns.Customer`.
                    shape = segment.kind == .all ? .entityCollection(type: nil) : .entity(type: nil)
                case .crossjoin(let names):
                    for name in names {
                        guard case .entitySet = lookup.root(name) else {
                            throw fail(.unknownName, "\(name) is not an entity set", segment)
                        }
                    }
                    shape = .entityCollection(type: nil)
                case .unresolved(let name):
                    switch lookup.root(name) {
                    case .entitySet(let type)?:
                        resolved.kind = .entitySet(name)
                        shape = .entityCollection(type: type)
                        canHaveKey = true
                    case .singleton(let type)?:
                        resolved.kind = .singleton(name)
                        shape = .entity(type: type)
                    case .actionImport(let returns)?:
                        resolved.kind = .actionImport(name)
                        shape = returns
                        finished = true
                    case .functionImport(let returns)?:
                        // Parameters may be in parentheses or, in 4.01, all passed as aliases.
                        if let arguments = takeArguments(after: index) {
                            try lookup.checkArguments(arguments, ofFunction: name, isImport: true, aliases: aliases, input: input,
                                                      offset: inputSegments[index + 1].offset)
                            index += 1
                            resolved.kind = .functionImport(name, arguments)
                        } else {
                            resolved.kind = .functionImport(name, [])
                        }
                        shape = returns
                        canHaveKey = returns.isCollection
                    case nil:
                        throw fail(.unknownName, "\(name) is not an entity set, singleton or operation import", segment)
                    }
                case .functionImport(let name, _):
                    guard case .functionImport(let returns)? = lookup.root(name) else {
                        throw fail(.unknownName, "\(name) is not a function import", segment)
                    }
                    shape = returns
                    canHaveKey = returns.isCollection
                case .typeCast(let name), .function(let name, _):
                    throw fail(.invalidSegment, "\(name) cannot start a path: operations at the root need an import", segment)
                default:
                    throw fail(.invalidSegment, "This segment cannot start a path", segment)
                }
                segments.append(resolved)
                continue
            }
            switch segment.kind {
            case .key(let parts):
                guard hadKey, case .entityCollection(let type) = shape else {
                    throw fail(.invalidKey, "A key may only follow an entity collection", segment)
                }
                // An alias is checked by its value, as the value written in place would be; a key
                // alias the query gives no literal value is a client error (issue 55, item 8).
                var valued: [KeyValue] = []
                for part in parts {
                    guard case .alias(let name) = part.value.node else {
                        valued.append(part)
                        continue
                    }
                    guard let value = aliases[name] else {
                        throw fail(
                            .invalidKey, "The key alias @\(name) has no value: give it in the query (@\(name)=…)",
                            segment)
                    }
                    guard case .literal = value.node else {
                        throw fail(.invalidKey, "The key alias @\(name) must have a literal value", segment)
                    }
                    valued.append(KeyValue(name: part.name, value: CommonExpression(value.node, at: part.value.offset)))
                }
                if let navigation, allowsShortenedKeys {
                    // A referential constraint of the partner may supply key parts (V4).
                    resolved.kind = .key(try lookup.checkKey(valued, of: type, afterNavigation: navigation.name,
                                                             of: navigation.sourceType, input: input))
                } else if navigation != nil || { if case .entitySet? = segments.last?.kind { true } else { false } }() {
                    try lookup.checkKey(valued, of: type, input: input)
                }
                shape = .entity(type: type)
            case .keySegment(let text):
                try resolveKeySegment(text, &resolved, &shape, segment, fail)
            case .count:
                guard shape.isCollection else { throw fail(.invalidSegment, "$count needs a collection", segment) }
                shape = .primitive(type: "Edm.Int32")
                finished = true
            case .value:
                switch shape {
                case .primitive: break
                case .entity(let type):
                    guard lookup.isMediaEntity(type) else {
                        throw fail(.invalidSegment, "\(type ?? "The entity") is not a media entity: it has no stream for $value", segment)
                    }
                default: throw fail(.invalidSegment, "$value needs a primitive property or a media entity", segment)
                }
                shape = .stream
                finished = true
            case .ref:
                switch shape {
                case .entity, .entityCollection: break
                default: throw fail(.invalidSegment, "$ref needs entities", segment)
                }
                finished = true
            case .each, .filter:
                guard shape.isCollection else { throw fail(.invalidSegment, "This segment needs a collection", segment) }
            case .unresolved(let name):
                if case .entityCollection(let type) = shape, lookup.acceptsKeySegment(name, of: type) {
                    resolved.kind = .keySegment(name)
                    shape = .entity(type: type)
                } else if isStructured(shape), let member = lookup.member(name, of: shape.typeName) {
                    switch member {
                    case .property(let memberShape):
                        resolved.kind = .property(name)
                        shape = memberShape
                    case .navigation(let memberShape):
                        resolved.kind = .navigation(name)
                        lastNavigation = (name, shape.typeName)
                        shape = memberShape
                        canHaveKey = memberShape.isCollection
                    }
                } else if let kind = lookup.qualified(name, on: shape) {
                    // 4.01: names in the default namespace may be used unqualified.
                    try applyQualified(kind, name, wasCast, hadKey, &resolved, &shape, &finished, &lastWasCast, &canHaveKey, segment, fail)
                    if case .function = kind, let arguments = takeArguments(after: index) {
                        try lookup.checkArguments(arguments, ofFunction: name, isImport: false, aliases: aliases, input: input,
                                                  offset: inputSegments[index + 1].offset)
                        index += 1
                        resolved.kind = .function(name, arguments)
                    }
                } else if !isStructured(shape) {
                    throw fail(.invalidSegment, "\(name) cannot follow a value that has no members", segment)
                } else {
                    throw fail(.unknownName, "\(name) is not a property or navigation property here", segment)
                }
            case .typeCast(let name):
                guard let kind = lookup.qualified(name, on: shape) else {
                    throw fail(.unknownName, "\(name) is not a type or a bound operation here", segment)
                }
                try applyQualified(kind, name, wasCast, hadKey, &resolved, &shape, &finished, &lastWasCast, &canHaveKey, segment, fail)
                if case .function = kind, let arguments = takeArguments(after: index) {
                    try lookup.checkArguments(arguments, ofFunction: name, isImport: false, aliases: aliases, input: input,
                                              offset: inputSegments[index + 1].offset)
                    index += 1
                    resolved.kind = .function(name, arguments)
                }
            case .function(let name, let arguments), .functionImport(let name, let arguments):
                guard case .function(let returns, _)? = lookup.qualified(name, on: shape) else {
                    if case .functionImport = segment.kind {
                        throw fail(.invalidSegment, "Function import \(name) may only appear at the service root", segment)
                    }
                    throw fail(.unknownName, "\(name) is not a bound function here", segment)
                }
                try lookup.checkArguments(arguments, ofFunction: name, isImport: { if case .functionImport = segment.kind { true } else { false } }(),
                                          aliases: aliases, input: input, offset: segment.offset)
                resolved.kind = .function(name, arguments)
                shape = returns
                canHaveKey = returns.isCollection
            default:
                throw fail(.invalidSegment, "This segment may only start a path", segment)
            }
            segments.append(resolved)
        }
        return Resolution(path: ResourcePath(segments: segments), shape: shape)
    }

    private func applyQualified(_ kind: QualifiedKind, _ name: String, _ wasCast: Bool, _ hadKey: Bool,
                                _ resolved: inout PathSegment, _ shape: inout ResourceShape, _ finished: inout Bool,
                                _ lastWasCast: inout Bool, _ canHaveKey: inout Bool, _ segment: PathSegment,
                                _ fail: (BindingError.Code, String, PathSegment) -> BindingError) throws(BindingError) {
        switch kind {
        case .typeCast(let type, let isComplex):
            guard !wasCast else { throw fail(.invalidSegment, "Two type casts in a row", segment) }
            switch shape {
            case .entityCollection where !isComplex: shape = .entityCollection(type: type)
            case .entity where !isComplex: shape = .entity(type: type)
            case .complex where isComplex: shape = .complex(type: type)
            case .complexCollection where isComplex: shape = .complexCollection(type: type)
            default: throw fail(.typeMismatch, "Cannot cast to \(name) here", segment)
            }
            resolved.kind = .typeCast(name)
            lastWasCast = true
            canHaveKey = hadKey
        case .action(let returns):
            resolved.kind = .action(name)
            shape = returns
            finished = true
        case .function(let returns, _):
            // 4.01 allows a function without parentheses when its parameters are aliases.
            resolved.kind = .function(name, [])
            shape = returns
            canHaveKey = returns.isCollection
        }
    }

    private func resolveKeySegment(_ text: String, _ resolved: inout PathSegment, _ shape: inout ResourceShape,
                                   _ segment: PathSegment,
                                   _ fail: (BindingError.Code, String, PathSegment) -> BindingError) throws(BindingError) {
        switch shape {
        case .entityCollection(let type) where lookup.acceptsKeySegment(text, of: type):
            shape = .entity(type: type)
        case .entity(let type) where type == nil && lookup.acceptsKeySegment(text, of: nil):
            // A further part of a compound key written as segments (`OrderItems/2001/1`).
            break
        case .primitiveCollection(let type), .complexCollection(let type):
            // An element of an ordered collection by index (4.01), negative from the end.
            guard let position = Int(text) else { throw fail(.invalidKey, "'\(text)' is not an index", segment) }
            resolved.kind = .index(position)
            if case .primitiveCollection = shape { shape = .primitive(type: type) } else { shape = .complex(type: type) }
        default:
            throw fail(.unknownName, "'\(text)' is not a member or key here", segment)
        }
    }

    private func isStructured(_ shape: ResourceShape) -> Bool {
        switch shape {
        case .entity, .complex: true
        default: false
        }
    }
}
