extension Value {
    /// The value as a normalized JSON tree: primitives as `{"type", "value"}` with the value
    /// in its payload form, structures with their type and properties.
    public var normalizedJSON: TreeJSON {
        switch self {
        case .null: return .null
        case .primitive(let p):
            return .object([("type", .string(p.type.rawValue)), ("value", .string(Literal.payloadText(p)))])
        case .enumeration(let e):
            return .object([("type", e.typeName.map { .string($0) } ?? .null), ("value", .string(e.members.joined(separator: ",")))])
        case .collection(let items):
            return .array(items.map(\.normalizedJSON))
        case .complex(let s), .entity(let s):
            return .object([("type", s.typeName.map { .string($0) } ?? .null),
                            ("properties", .object(s.properties.map { ($0.name, $0.value.normalizedJSON) }))])
        }
    }
}

extension Entity {
    /// The entity as a normalized JSON tree: type, control information, typed properties,
    /// navigation and annotations.
    public var normalizedJSON: TreeJSON {
        var members: [(String, TreeJSON)] = [("type", typeName.map { .string($0) } ?? .null)]
        let c = control
        let controlPairs: [(String, String?)] = [
            ("context", c.context), ("id", c.id), ("etag", c.etag), ("editLink", c.editLink), ("readLink", c.readLink),
            ("mediaReadLink", c.mediaReadLink), ("mediaEditLink", c.mediaEditLink), ("mediaETag", c.mediaETag), ("mediaContentType", c.mediaContentType),
        ]
        let present = controlPairs.compactMap { pair in pair.1.map { (pair.0, TreeJSON.string($0)) } }
        if !present.isEmpty { members.append(("control", .object(present))) }
        members.append(("properties", .object(properties.map { ($0.name, $0.value.normalizedJSON) })))
        if !navigation.isEmpty {
            members.append(("navigation", .object(navigation.map { nav in
                var items: [(String, TreeJSON)] = []
                if let link = nav.navigationLink { items.append(("navigationLink", .string(link))) }
                if let link = nav.associationLink { items.append(("associationLink", .string(link))) }
                if let bind = nav.bind { items.append(("bind", .array(bind.map { .string($0) }))) }
                if let count = nav.count { items.append(("count", .int(Int(count)))) }
                switch nav.inline {
                case .entity(let inner)?: items.append(("inline", inner?.normalizedJSON ?? .null))
                case .collection(let inner)?: items.append(("inline", inner.normalizedJSON))
                case nil: break
                }
                return (nav.name, .object(items))
            })))
        }
        if !annotations.isEmpty {
            members.append(("annotations", .array(annotations.map { annotation in
                .object([("property", annotation.property.map { .string($0) } ?? .null), ("term", .string(annotation.term)),
                         ("value", .string(annotation.value.serialized))])
            })))
        }
        return .object(members)
    }
}

extension EntityCollection {
    /// The collection as a normalized JSON tree.
    public var normalizedJSON: TreeJSON {
        var members: [(String, TreeJSON)] = []
        if let context { members.append(("context", .string(context))) }
        if let count { members.append(("count", .int(Int(count)))) }
        if let nextLink { members.append(("nextLink", .string(nextLink))) }
        if let deltaLink { members.append(("deltaLink", .string(deltaLink))) }
        members.append(("entities", .array(entities.map(\.normalizedJSON))))
        if !deleted.isEmpty {
            members.append(("deleted", .array(deleted.map { .object([("id", $0.id.map { .string($0) } ?? .null), ("reason", $0.reason.map { .string($0) } ?? .null)]) })))
        }
        if !references.isEmpty { members.append(("references", .array(references.map { .string($0) }))) }
        let links = addedLinks.map { ("added", $0) } + removedLinks.map { ("removed", $0) }
        if !links.isEmpty {
            members.append(("links", .array(links.map { kind, link in
                .object([("change", .string(kind)), ("source", .string(link.source)), ("relationship", .string(link.relationship)), ("target", .string(link.target))])
            })))
        }
        return .object(members)
    }
}

extension MultipartBatch {
    /// A summary: parts, change sets, and each operation's method or status, URL and Content-ID.
    public var summaryJSON: TreeJSON {
        func operationJSON(_ operation: BatchOperation) -> TreeJSON {
            var members: [(String, TreeJSON)] = []
            switch operation.message.startLine {
            case .request(let method, let url, _):
                members += [("kind", .string("request")), ("method", .string(method)), ("url", .string(url))]
            case .response(_, let status, let reason):
                members += [("kind", .string("response")), ("status", .int(status)), ("reason", .string(reason))]
                if let location = operation.message.headers["Location"] { members.append(("location", .string(location))) }
            }
            members.append(("contentID", operation.contentID.map { .string($0) } ?? .null))
            members.append(("bodyBytes", .int(operation.message.body.count)))
            return .object(members)
        }
        let parts: [TreeJSON] = parts.map { part in
            switch part {
            case .operation(let operation): return operationJSON(operation)
            case .changeSet(let set):
                return .object([("kind", .string("changeSet")), ("boundary", .string(set.boundary)), ("operations", .array(set.operations.map(operationJSON)))])
            }
        }
        let changeSets = self.parts.filter { if case .changeSet = $0 { return true }; return false }.count
        return .object([("boundary", .string(boundary)), ("parts", .int(self.parts.count)), ("changeSets", .int(changeSets)),
                        ("operations", .int(operations.count)), ("items", .array(parts))])
    }
}
