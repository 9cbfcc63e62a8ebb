/// A request bound to a model: the resolved path and the typed query options.
public struct BoundRequest: Sendable, Hashable {
    public var path: PathResolver.Resolution
    /// The structured type the query options apply to (the path's element type), if any.
    public var elementType: String?
    public var filter: BoundExpression?
    public var orderBy: [BoundOrderBy]
    public var compute: [BoundExpression]
    public var expand: [BoundExpand]

    /// One bound `$orderby` item.
    public struct BoundOrderBy: Sendable, Hashable {
        public var expression: BoundExpression
        public var descending: Bool
    }

    /// One bound `$expand` item with its target type and nested options.
    public struct BoundExpand: Sendable, Hashable {
        public var item: ExpandItem
        /// The entity type the navigation leads to (nil for `*`).
        public var targetType: String?
        public var isCollection: Bool
        public var filter: BoundExpression?
        public var orderBy: [BoundOrderBy]
        public var expand: [BoundExpand]

        /// Creates a value from its parts.
        public init(item: ExpandItem, targetType: String?, isCollection: Bool, filter: BoundExpression?, orderBy: [BoundOrderBy], expand: [BoundExpand]) {
            self.item = item
            self.targetType = targetType
            self.isCollection = isCollection
            self.filter = filter
            self.orderBy = orderBy
            self.expand = expand
        }
    }
}

/// Binds a ``ParsedURL`` to a ``Model``.
public struct RequestBinder: Sendable {
    public var model: Model
    /// The protocol version the request is written in, when it differs from the model's (the
    /// reference server serves one model at a V4 and a V2 root): V2 has no shortened key
    /// predicates after a navigation.
    public var version: ODataVersion?
    /// The most `$orderby` items a request may have.
    public static let maxOrderByItems = 100

    /// Creates a value from its parts.
    public init(model: Model, version: ODataVersion? = nil) {
        self.model = model
        self.version = version
    }

    private func resolver(_ url: ParsedURL) -> PathResolver {
        var resolver = PathResolver(lookup: model, aliases: url.query.aliases)
        resolver.allowsShortenedKeys = !(version ?? model.version).isLegacy
        return resolver
    }

    /// Resolves the path and binds every query option that refers to the model.
    public func bind(_ url: ParsedURL, input: String) throws(BindingError) -> BoundRequest {
        var resolution = try resolver(url).resolve(url.path, input: input)
        try bindLegacyParameters(url, &resolution, input: input)
        // Options of `/$count` and `/$ref` apply to the collection before them.
        var optionsShape = resolution.shape
        if let last = url.path.segments.last, last.kind == .count || last.kind == .ref, url.path.segments.count > 1 {
            optionsShape = try resolver(url).resolve(ResourcePath(segments: Array(url.path.segments.dropLast())), input: input).shape
        }
        let elementType = optionsShape.typeName.flatMap { name -> String? in
            model.entityType(name) != nil || model.complexType(name) != nil ? name : nil
        }
        var request = BoundRequest(path: resolution, elementType: elementType, filter: nil, orderBy: [], compute: [], expand: [])
        var binder = ExpressionBinder(model: model, aliases: typedAliases(url, resolution))
        let parser = URLParser(version: model.version)
        func text(_ name: String) -> String { parser.optionText(name, in: input) ?? "$" + name }
        guard let type = elementType else {
            if url.query.filter != nil || url.query.orderBy != nil || url.query.expand != nil {
                throw BindingError(.invalidSegment, "Query options need a resource with structured values", input: input, offset: 0)
            }
            return request
        }
        // `$compute` first: its aliases are properties for the other options.
        request.compute = try (url.query.compute ?? []).map { (item) throws(BindingError) in
            try binder.bind(item.expression, itType: type, input: text("compute"))
        }
        for (item, bound) in zip(url.query.compute ?? [], request.compute) { binder.computed[item.alias] = bound.type }
        request.filter = try url.query.filter.map { (f) throws(BindingError) in try binder.bindFilter(f, itType: type, input: text("filter")) }
        request.orderBy = try bindOrderBy(url.query.orderBy ?? [], binder, type, input: text("orderby"))
        try checkSelect(url.query.select ?? [], type, computed: Set(binder.computed.keys))
        request.expand = try bindExpand(url.query.expand ?? [], binder, type, resourceType: type)
        return request
    }

    /// The request's aliases, those passed to a function import's primitive parameter typed as
    /// that parameter (`Cheap(max=@p)?$filter=Price gt @p&@p=5`: `@p` is the Edm.Decimal 5 in
    /// `$filter` too, as in the function), so that one alias has one type in the whole request.
    private func typedAliases(_ url: ParsedURL, _ resolution: PathResolver.Resolution) -> [String: CommonExpression] {
        var aliases = url.query.aliases
        guard let first = resolution.path.segments.first, case .functionImport(let name, let given) = first.kind,
            let item = model.functionImport(name)
        else { return aliases }
        let parameters = item.function.flatMap { model.functions($0).first?.parameters } ?? item.parameters
        for argument in given {
            guard case .alias(let alias) = argument.value.node, let expression = aliases[alias],
                case .literal(let value) = expression.node, value != .null,
                let parameter = parameters.first(where: { $0.name == argument.name }), !parameter.type.isCollection,
                let type = PrimitiveType(qualifiedName: parameter.type.name),
                let converted = Literal.convert(value, to: type)
            else { continue }
            aliases[alias] = CommonExpression(.literal(converted), at: expression.offset)
        }
        return aliases
    }

    /// V2 passes a function import's parameters as query options (`GetByCategory?ID='C1'`):
    /// those named like its parameters are parsed as V2 literals, checked against the
    /// parameters' types as arguments in parentheses are, and become the segment's arguments.
    private func bindLegacyParameters(_ url: ParsedURL, _ resolution: inout PathResolver.Resolution, input: String)
        throws(BindingError)
    {
        guard (version ?? model.version).isLegacy, let first = resolution.path.segments.first,
            case .functionImport(let name, let given) = first.kind, given.isEmpty,
            let item = model.functionImport(name)
        else { return }
        let parameters = item.function.flatMap { model.functions($0).first?.parameters } ?? item.parameters
        var arguments: [NamedArgument] = []
        for option in url.query.custom where parameters.contains(where: { $0.name == option.name }) {
            guard let text = option.value else { continue }
            do {
                let value = try Literal.parse(text, version: .v2)
                arguments.append(NamedArgument(name: option.name, value: CommonExpression(.literal(value), at: 0)))
            } catch {
                throw BindingError(
                    .invalidArguments, "\(name): the parameter \(option.name)=\(text) is not a V2 literal: \(error.message)",
                    input: input, offset: 0)
            }
        }
        try model.checkArguments(arguments, ofFunction: name, isImport: true, input: input, offset: 0)
        resolution.path.segments[0].kind = .functionImport(name, arguments)
    }

    private func bindOrderBy(_ items: [OrderByItem], _ binder: ExpressionBinder, _ type: String, resourceType: String? = nil,
                             input: String = "$orderby") throws(BindingError) -> [BoundRequest.BoundOrderBy] {
        // SQLite orders by at most 2,000 terms; far fewer make sense.
        guard items.count <= Self.maxOrderByItems else {
            throw BindingError(.unsupported, "$orderby has \(items.count) items; at most \(Self.maxOrderByItems) are accepted",
                               input: input, offset: 0)
        }
        var result: [BoundRequest.BoundOrderBy] = []
        for item in items {
            let bound = try binder.bind(item.expression, itType: resourceType ?? type, thisType: type, input: input)
            if case .collection = bound.type {
                throw BindingError(.typeMismatch, "$orderby needs a single value, not \(bound.type)", input: "$orderby", offset: item.expression.offset)
            }
            result.append(.init(expression: bound, descending: item.descending))
        }
        return result
    }

    private func checkSelect(_ items: [SelectItem], _ type: String, computed: Set<String> = []) throws(BindingError) {
        for item in items {
            guard case .path(let segments) = item.kind else { continue }
            if segments.count == 1, let only = segments.first, computed.contains(only) { continue }
            var current: String? = type
            for segment in segments {
                guard let owner = current else { break }
                if segment.hasPrefix("@") || segment.contains("(") { current = nil; continue }
                if segment.contains(".") {
                    if model.typeKind(segment) != nil { current = segment; continue }
                    if !model.functions(segment).isEmpty || !model.actions(segment).isEmpty { current = nil; continue }
                    throw BindingError(.unknownName, "\(segment) is not a type or operation", input: "$select", offset: 0)
                }
                if let property = model.property(segment, ofStructuredType: owner) {
                    current = property.type.name
                } else if let nav = model.navigationProperty(segment, ofStructuredType: owner) {
                    current = nav.type.name
                } else if isOpen(owner) {
                    current = nil
                } else {
                    throw BindingError(.unknownName, "\(owner) has no property \(segment)", input: "$select", offset: 0)
                }
            }
        }
    }

    /// Binds `$expand` items of `type`; `resourceType` is the type of what the request addresses,
    /// which `$it` means in nested options at every level.
    private func bindExpand(_ items: [ExpandItem], _ binder: ExpressionBinder, _ type: String,
                            resourceType: String) throws(BindingError) -> [BoundRequest.BoundExpand] {
        var result: [BoundRequest.BoundExpand] = []
        for item in items {
            if item.path == ["*"] || item.path == ["$value"] || item.path.first?.hasPrefix("@") == true {
                result.append(.init(item: item, targetType: nil, isCollection: false, filter: nil, orderBy: [], expand: []))
                continue
            }
            var owner = type
            var target: NavigationProperty?
            for segment in item.path {
                if segment.contains(".") {
                    guard model.typeKind(segment) != nil else {
                        throw BindingError(.unknownName, "\(segment) is not a type", input: "$expand", offset: 0)
                    }
                    owner = segment
                    continue
                }
                if let nav = model.navigationProperty(segment, ofStructuredType: owner) {
                    target = nav
                    owner = nav.type.name
                } else if let property = model.property(segment, ofStructuredType: owner), model.complexType(property.type.name) != nil {
                    owner = property.type.name
                } else {
                    throw BindingError(.unknownName, "\(owner) has no navigation property \(segment)", input: "$expand", offset: 0)
                }
            }
            guard let nav = target else {
                throw BindingError(.invalidSegment, "\(item.path.joined(separator: "/")) does not end in a navigation property", input: "$expand", offset: 0)
            }
            let options = item.options ?? QueryOptions()
            if options.levels != nil {
                // $levels repeats the expand on what it reaches: the path must lead on from there.
                var again: String? = owner
                for segment in item.path where !segment.contains(".") {
                    guard let from = again else { break }
                    again = model.navigationProperty(segment, ofStructuredType: from)?.type.name
                        ?? model.property(segment, ofStructuredType: from).map(\.type.name)
                }
                guard again != nil else {
                    let path = item.path.joined(separator: "/")
                    throw BindingError(.invalidSegment, "$levels needs a navigation that can be followed again from its "
                                       + "target: \(path) leads to \(owner), which has no \(path)", input: "$expand", offset: 0)
                }
            }
            let nestedBinder = ExpressionBinder(model: model, aliases: binder.aliases.merging(options.aliases) { $1 })
            var bound = BoundRequest.BoundExpand(item: item, targetType: owner, isCollection: nav.type.isCollection, filter: nil, orderBy: [], expand: [])
            bound.filter = try options.filter.map { (f) throws(BindingError) in
                try nestedBinder.bindFilter(f, itType: resourceType, thisType: owner, input: "$filter")
            }
            bound.orderBy = try bindOrderBy(options.orderBy ?? [], nestedBinder, owner, resourceType: resourceType)
            try checkSelect(options.select ?? [], owner)
            bound.expand = try bindExpand(options.expand ?? [], nestedBinder, owner, resourceType: resourceType)
            result.append(bound)
        }
        return result
    }

    private func isOpen(_ name: String) -> Bool { model.isOpen(name) }
}

extension BoundRequest {
    /// The bound request as a JSON tree: resolved path, addressed shape, and typed options.
    public var json: TreeJSON {
        var members: [(String, TreeJSON)] = [
            ("path", .array(path.path.segments.map(\.json))),
            ("shape", .string(String(describing: path.shape))),
            ("elementType", elementType.map { .string($0) } ?? .null),
        ]
        if let filter { members.append(("$filter", filter.json)) }
        if !orderBy.isEmpty {
            members.append(("$orderby", .array(orderBy.map { .object([("expression", $0.expression.json), ("descending", .bool($0.descending))]) })))
        }
        if !expand.isEmpty { members.append(("$expand", .array(expand.map(\.json)))) }
        return .object(members)
    }
}

extension BoundRequest.BoundExpand {
    /// This value as a JSON tree (what the `oodata` inspect commands print).
    public var json: TreeJSON {
        var members: [(String, TreeJSON)] = [
            ("path", .array(item.path.map { .string($0) })),
            ("targetType", targetType.map { .string($0) } ?? .null),
            ("isCollection", .bool(isCollection)),
        ]
        if let filter { members.append(("$filter", filter.json)) }
        if !expand.isEmpty { members.append(("$expand", .array(expand.map(\.json)))) }
        return .object(members)
    }
}

extension BoundExpression {
    /// The bound tree: each node with its type, paths with their resolved steps.
    public var json: TreeJSON {
        var members: [(String, TreeJSON)] = [("type", .string(type.description))]
        switch expression.node {
        case .binary(let op, _, _): members.append(("operator", .string(op.rawValue)))
        case .unary(let op, _): members.append(("operator", .string(op.rawValue)))
        case .call(let name, _): members.append(("function", .string(name)))
        case .literal(let value): members.append(("literal", .string(Literal.format(value))))
        default: break
        }
        if !steps.isEmpty {
            members.append(("steps", .array(steps.map { .object([("kind", .string(String(describing: $0.kind))), ("name", .string($0.name)), ("type", .string($0.type.description))]) })))
        }
        if !operands.isEmpty { members.append(("operands", .array(operands.map(\.json)))) }
        return .object(members)
    }
}
