/// A small JSON tree for describing parsed requests (what `oodata url` prints).
public indirect enum TreeJSON: Sendable, Hashable {
    case object([(String, TreeJSON)])
    case array([TreeJSON])
    case string(String)
    case int(Int)
    case bool(Bool)
    case null

    public static func == (a: TreeJSON, b: TreeJSON) -> Bool { a.serialized() == b.serialized() }
    public func hash(into hasher: inout Hasher) { hasher.combine(serialized()) }

    /// JSON text, indented by two spaces when `pretty`.
    public func serialized(pretty: Bool = false, indent: Int = 0) -> String {
        let pad = pretty ? String(repeating: "  ", count: indent + 1) : ""
        let close = pretty ? String(repeating: "  ", count: indent) : ""
        let newline = pretty ? "\n" : ""
        switch self {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .int(let i): return String(i)
        case .string(let s): return Literal.jsonString(s)
        case .array(let items):
            if items.isEmpty { return "[]" }
            return "[" + newline + items.map { pad + $0.serialized(pretty: pretty, indent: indent + 1) }.joined(separator: "," + newline) + newline + close + "]"
        case .object(let members):
            if members.isEmpty { return "{}" }
            let separator = pretty ? ": " : ":"
            return "{" + newline + members.map { pad + Literal.jsonString($0.0) + separator + $0.1.serialized(pretty: pretty, indent: indent + 1) }
                .joined(separator: "," + newline) + newline + close + "}"
        }
    }
}

extension ParsedURL {
    /// The request as a JSON tree: path segments, then every query option.
    public var json: TreeJSON {
        .object([("path", .array(path.segments.map(\.json))), ("query", query.json)])
    }
}

extension PathSegment {
    /// This value as a JSON tree (what the `oodata` inspect commands print).
    public var json: TreeJSON {
        func named(_ kind: String, _ extra: [(String, TreeJSON)] = []) -> TreeJSON { .object([("kind", .string(kind))] + extra) }
        switch kind {
        case .entitySet(let n): return named("entitySet", [("name", .string(n))])
        case .singleton(let n): return named("singleton", [("name", .string(n))])
        case .functionImport(let n, let args): return named("functionImport", [("name", .string(n)), ("arguments", argumentsJSON(args))])
        case .actionImport(let n): return named("actionImport", [("name", .string(n))])
        case .navigation(let n): return named("navigation", [("name", .string(n))])
        case .property(let n): return named("property", [("name", .string(n))])
        case .typeCast(let n): return named("typeCast", [("type", .string(n))])
        case .function(let n, let args): return named("function", [("name", .string(n)), ("arguments", argumentsJSON(args))])
        case .action(let n): return named("action", [("name", .string(n))])
        case .key(let parts): return named("key", [("values", keyJSON(parts))])
        case .keySegment(let text): return named("keySegment", [("value", .string(text))])
        case .count: return named("$count")
        case .value: return named("$value")
        case .ref: return named("$ref")
        case .each: return named("$each")
        case .query: return named("$query")
        case .index(let i): return named("index", [("index", .int(i))])
        case .filter(let e): return named("$filter", [("expression", e.json)])
        case .metadata: return named("$metadata")
        case .batch: return named("$batch")
        case .entity: return named("$entity")
        case .all: return named("$all")
        case .crossjoin(let names): return named("$crossjoin", [("entitySets", .array(names.map { .string($0) }))])
        case .unresolved(let n): return named("name", [("name", .string(n))])
        }
    }
}

func argumentsJSON(_ args: [NamedArgument]) -> TreeJSON {
    .object(args.map { ($0.name, $0.value.json) })
}

func keyJSON(_ parts: [KeyValue]) -> TreeJSON {
    .array(parts.map { part in
        .object((part.name.map { [("name", TreeJSON.string($0))] } ?? []) + [("value", part.value.json)])
    })
}

extension CommonExpression {
    /// The expression as a JSON tree.
    public var json: TreeJSON {
        switch node {
        case .literal(let value):
            var members: [(String, TreeJSON)] = [("kind", .string("literal"))]
            switch value {
            case .null: members.append(("type", .null))
            case .primitive(let p): members.append(("type", .string(p.type.rawValue)))
            case .enumeration(let e): members.append(("type", e.typeName.map { .string($0) } ?? .null))
            default: members.append(("type", .null))
            }
            members.append(("literal", .string(Literal.format(value))))
            return .object(members)
        case .alias(let name): return .object([("kind", .string("alias")), ("name", .string(name))])
        case .array(let items): return .object([("kind", .string("array")), ("items", .array(items.map(\.json)))])
        case .object(let members): return .object([("kind", .string("object")), ("members", .object(members.map { ($0.name, $0.value.json) }))])
        case .path(let path): return .object([("kind", .string("path")), ("root", rootJSON(path.root)), ("steps", .array(path.steps.map(stepJSON)))])
        case .unary(let op, let operand): return .object([("kind", .string("unary")), ("operator", .string(op.rawValue)), ("operand", operand.json)])
        case .binary(let op, let l, let r): return .object([("kind", .string("binary")), ("operator", .string(op.rawValue)), ("left", l.json), ("right", r.json)])
        case .list(let items): return .object([("kind", .string("list")), ("items", .array(items.map(\.json)))])
        case .call(let name, let args): return .object([("kind", .string("call")), ("function", .string(name)), ("arguments", .array(args.map(\.json)))])
        case .typeName(let name): return .object([("kind", .string("type")), ("name", .string(name))])
        case .caseOf(let branches):
            return .object([("kind", .string("case")), ("branches", .array(branches.map { .object([("condition", $0.condition.json), ("value", $0.value.json)]) }))])
        }
    }
}

private func rootJSON(_ root: PathExpression.Root) -> TreeJSON {
    switch root {
    case .implicit: .null
    case .it: .string("$it")
    case .root: .string("$root")
    case .this: .string("$this")
    case .variable(let name): .string(name)
    case .alias(let name): .string("@" + name)
    }
}

private func stepJSON(_ step: PathExpression.Step) -> TreeJSON {
    switch step {
    case .member(let name): .object([("member", .string(name))])
    case .cast(let name): .object([("cast", .string(name))])
    case .key(let parts): .object([("key", keyJSON(parts))])
    case .count(let filter, let search):
        .object([("count", .object((filter.map { [("filter", $0.json)] } ?? []) + (search.map { [("search", $0.json)] } ?? [])))])
    case .function(let name, let args): .object([("function", .string(name)), ("arguments", argumentsJSON(args))])
    case .lambda(let kind, let variable, let predicate):
        .object([("lambda", .string(kind.rawValue)), ("variable", variable.map { .string($0) } ?? .null), ("predicate", predicate?.json ?? .null)])
    case .annotation(let term): .object([("annotation", .string(term))])
    case .filter(let e): .object([("filter", e.json)])
    }
}

extension SearchExpression {
    /// This value as a JSON tree (what the `oodata` inspect commands print).
    public var json: TreeJSON {
        switch self {
        case .term(let t): .object([("term", .string(t))])
        case .phrase(let p): .object([("phrase", .string(p))])
        case .not(let e): .object([("not", e.json)])
        case .and(let a, let b): .object([("and", .array([a.json, b.json]))])
        case .or(let a, let b): .object([("or", .array([a.json, b.json]))])
        }
    }
}

extension QueryOptions {
    /// Every option that is set, as a JSON tree.
    public var json: TreeJSON {
        var members: [(String, TreeJSON)] = []
        if let filter { members.append(("$filter", filter.json)) }
        if let orderBy {
            members.append(("$orderby", .array(orderBy.map { .object([("expression", $0.expression.json), ("descending", .bool($0.descending))]) })))
        }
        if let top { members.append(("$top", .int(top))) }
        if let skip { members.append(("$skip", .int(skip))) }
        if let count { members.append(("$count", .bool(count))) }
        if let inlineCount { members.append(("$inlinecount", .string(inlineCount.rawValue))) }
        if let select { members.append(("$select", .array(select.map(\.json)))) }
        if let expand { members.append(("$expand", .array(expand.map(\.json)))) }
        if let search { members.append(("$search", search.json)) }
        if let skipToken { members.append(("$skiptoken", .string(skipToken))) }
        if let deltaToken { members.append(("$deltatoken", .string(deltaToken))) }
        if let format { members.append(("$format", .string(format))) }
        if let compute { members.append(("$compute", .array(compute.map { .object([("expression", $0.expression.json), ("as", .string($0.alias))]) }))) }
        if let apply { members.append(("$apply", .string(apply))) }
        if let id { members.append(("$id", .string(id))) }
        if let index { members.append(("$index", .int(index))) }
        if let schemaVersion { members.append(("$schemaversion", .string(schemaVersion))) }
        if let levels {
            switch levels {
            case .count(let n): members.append(("$levels", .int(n)))
            case .max: members.append(("$levels", .string("max")))
            }
        }
        if !aliases.isEmpty {
            members.append(("aliases", .object(aliases.keys.sorted().map { ("@" + $0, aliases[$0]?.json ?? .null) })))
        }
        if !custom.isEmpty {
            members.append(("custom", .object(custom.map { ($0.name, $0.value.map { .string($0) } ?? .null) })))
        }
        return .object(members)
    }
}

extension SelectItem {
    /// This value as a JSON tree (what the `oodata` inspect commands print).
    public var json: TreeJSON {
        var members: [(String, TreeJSON)]
        switch kind {
        case .star: members = [("path", .string("*"))]
        case .allOperations(let ns): members = [("path", .string(ns + ".*"))]
        case .path(let segments): members = [("path", .array(segments.map { .string($0) }))]
        }
        if let options { members.append(("options", options.json)) }
        return .object(members)
    }
}

extension ExpandItem {
    /// This value as a JSON tree (what the `oodata` inspect commands print).
    public var json: TreeJSON {
        var members: [(String, TreeJSON)] = [("path", .array(path.map { .string($0) }))]
        if isRef { members.append(("$ref", .bool(true))) }
        if isCount { members.append(("$count", .bool(true))) }
        if let options { members.append(("options", options.json)) }
        return .object(members)
    }
}
