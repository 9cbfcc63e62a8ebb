import Foundation
import ODataCore

/// Keys, key predicates and request URLs.
enum Keys {
    /// Parses a request URL relative to the service root and resolves its path against the
    /// model; a failure names the request (`what`) and the reason.
    static func resolve(_ url: String, model: Model, what: String) throws -> (ParsedURL, PathResolver.Resolution) {
        let version: ODataVersion = model.version.grammar
        do {
            let parsed = try URLParser(version: version).parse(url)
            let resolver = PathResolver(lookup: model, aliases: parsed.query.aliases)
            return (parsed, try resolver.resolve(parsed.path, input: url))
        } catch {
            throw OfflineODataError(.invalidRequest, "The \(what) \(url) is not valid: \(error)")
        }
    }

    /// The key of `entity` as stored in `entitySet`.
    static func key(of entity: Entity, in entitySet: String, model: Model) -> [String: PrimitiveValue]? {
        guard let type = model.entityType(ofEntitySet: entitySet) else { return nil }
        var key: [String: PrimitiveValue] = [:]
        for ref in model.key(of: type) {
            guard case .primitive(let value)? = entity[ref.name] else { return nil }
            key[ref.name] = value
        }
        return key
    }

    /// `('A')` or `(K1='A',K2=2)`, in key order.
    static func predicate(_ key: [String: PrimitiveValue], in entitySet: String, model: Model) -> String {
        let version: ODataVersion = model.version.isLegacy ? model.version : .v4
        let names = model.entityType(ofEntitySet: entitySet).map { model.key(of: $0).map(\.name) } ?? key.keys.sorted()
        if names.count == 1, let value = key[names[0]] {
            return "(" + Literal.format(.primitive(value), version: version) + ")"
        }
        return "("
            + names.compactMap { name in key[name].map { "\(name)=" + Literal.format(.primitive($0), version: version) }
            }.joined(separator: ",") + ")"
    }

    /// A URL below the service root, relative to it (query kept): an absolute URL under
    /// `serviceRoot`, or under another spelling of its host (`localhost` for `127.0.0.1`: the
    /// paths are compared), loses the root; a relative one stays. Nil for an absolute URL
    /// outside the root.
    static func relativeToRoot(_ url: String, serviceRoot: String) -> String? {
        var relative = url
        if !serviceRoot.isEmpty, relative.hasPrefix(serviceRoot) {
            relative = String(relative.dropFirst(serviceRoot.count))
        } else if relative.firstByteRange(of: "://") != nil {
            guard let parsed = URL(string: relative), let rootPath = URL(string: serviceRoot)?.path, !rootPath.isEmpty
            else { return nil }
            relative = parsed.path + (parsed.query.map { "?" + $0 } ?? "")
            guard relative.hasPrefix(rootPath) else { return nil }
            relative = String(relative.dropFirst(rootPath.count))
        }
        if relative.hasPrefix("/") { relative.removeFirst() }
        return relative
    }

    /// `Set(key)` (relative, or absolute under `serviceRoot`) → entity set and key.
    static func parse(_ path: String, model: Model, serviceRoot: String) -> (String, [String: PrimitiveValue])? {
        guard let relative = relativeToRoot(path, serviceRoot: serviceRoot) else { return nil }
        if let simple = model.simpleEntityKey(relative) { return (simple.entitySet, simple.key) }
        return parseFully(relative, model: model)
    }

    /// ``parse(_:model:serviceRoot:)`` through the URL parser and path resolver, for a path
    /// relative to the service root.
    static func parseFully(_ relative: String, model: Model) -> (String, [String: PrimitiveValue])? {
        let version: ODataVersion = model.version.grammar
        guard let parsed = try? URLParser(version: version).parse(relative),
            let resolved = try? PathResolver(lookup: model, aliases: parsed.query.aliases)
                .resolve(parsed.path, input: relative),
            resolved.path.segments.count == 2, case .entitySet(let set) = resolved.path.segments[0].kind,
            case .key(let parts) = resolved.path.segments[1].kind,
            let key = try? values(parts, entitySet: set, model: model, query: parsed.query)
        else { return nil }
        return (set, key)
    }

    /// Key values from a parsed key predicate.
    static func values(
        _ parts: [KeyValue], entitySet: String, model: Model, query: QueryOptions
    ) throws -> [String: PrimitiveValue] {
        do {
            return try model.keyValues(parts, ofEntitySet: entitySet, aliases: query.aliases)
        } catch {
            throw OfflineODataError(.invalidRequest, error.message)
        }
    }
}
