/// Resolves a syntactic ``ResourcePath`` against a ``NameLookup``: classifies every name,
/// checks that each segment may follow the previous one, and computes the shape addressed.
public struct PathResolver: Sendable {
    public var lookup: any NameLookup

    public init(lookup: any NameLookup) { self.lookup = lookup }

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
        func fail(_ code: BindingError.Code, _ message: String, _ segment: PathSegment) -> BindingError {
            BindingError(code, message, input: input, offset: segment.offset)
        }
        for (index, segment) in path.segments.enumerated() {
            if finished {
                throw fail(.invalidSegment, "Nothing may follow the previous segment", segment)
            }
            var resolved = segment
            let wasCast = lastWasCast
            lastWasCast = false
            let hadKey = canHaveKey
            canHaveKey = false
            if index == 0 {
                switch segment.kind {
                case .metadata, .batch, .entity, .all:
                    finished = true
                    shape = .none
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
                    case .functionImport?:
                        throw fail(.invalidSegment, "Function import \(name) needs parentheses", segment)
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
            case .key:
                guard hadKey, case .entityCollection(let type) = shape else {
                    throw fail(.invalidKey, "A key may only follow an entity collection", segment)
                }
                shape = .entity(type: type)
            case .keySegment(let text):
                guard case .entityCollection(let type) = shape, lookup.acceptsKeySegment(text, of: type) else {
                    throw fail(.unknownName, "'\(text)' is not a member here", segment)
                }
                shape = .entity(type: type)
            case .count:
                guard shape.isCollection else { throw fail(.invalidSegment, "$count needs a collection", segment) }
                shape = .primitive(type: "Edm.Int32")
                finished = true
            case .value:
                switch shape {
                case .primitive, .entity: break
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
                canHaveKey = false
            case .unresolved(let name):
                guard isStructured(shape) else {
                    throw fail(.invalidSegment, "\(name) cannot follow a value that has no members", segment)
                }
                if let member = lookup.member(name, of: shape.typeName) {
                    switch member {
                    case .property(let memberShape):
                        resolved.kind = .property(name)
                        shape = memberShape
                    case .navigation(let memberShape):
                        resolved.kind = .navigation(name)
                        shape = memberShape
                        canHaveKey = memberShape.isCollection
                    }
                } else if case .entityCollection(let type) = shape, lookup.acceptsKeySegment(name, of: type) {
                    resolved.kind = .keySegment(name)
                    shape = .entity(type: type)
                } else {
                    throw fail(.unknownName, "\(name) is not a property or navigation property here", segment)
                }
            case .typeCast(let name):
                switch lookup.qualified(name, on: shape) {
                case .typeCast(let type, let isComplex)?:
                    guard !wasCast else { throw fail(.invalidSegment, "Two type casts in a row", segment) }
                    switch shape {
                    case .entityCollection where !isComplex: shape = .entityCollection(type: type)
                    case .entity where !isComplex: shape = .entity(type: type)
                    case .complex where isComplex: shape = .complex(type: type)
                    case .complexCollection where isComplex: shape = .complexCollection(type: type)
                    default: throw fail(.typeMismatch, "Cannot cast to \(name) here", segment)
                    }
                    lastWasCast = true
                    canHaveKey = hadKey
                case .action(let returns)?:
                    resolved.kind = .action(name)
                    shape = returns
                    finished = true
                case .function?:
                    throw fail(.invalidSegment, "Function \(name) needs parentheses", segment)
                case nil:
                    throw fail(.unknownName, "\(name) is not a type or a bound operation here", segment)
                }
            case .function(let name, _):
                guard case .function(let returns, _)? = lookup.qualified(name, on: shape) else {
                    throw fail(.unknownName, "\(name) is not a bound function here", segment)
                }
                shape = returns
                canHaveKey = returns.isCollection
            case .functionImport(let name, _):
                throw fail(.invalidSegment, "Function import \(name) may only appear at the service root", segment)
            default:
                throw fail(.invalidSegment, "This segment may only start a path", segment)
            }
            segments.append(resolved)
        }
        return Resolution(path: ResourcePath(segments: segments), shape: shape)
    }

    private func isStructured(_ shape: ResourceShape) -> Bool {
        switch shape {
        case .entity, .complex: true
        default: false
        }
    }
}
