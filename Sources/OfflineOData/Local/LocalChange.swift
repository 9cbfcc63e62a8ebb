import Foundation
import ODataCore
import ODataStore

/// Where a modification points.
struct WriteTarget: Sendable {
    var entitySet: String
    var key: [String: PrimitiveValue]?
    var navigation: String?
    /// `Set(k)/Nav(k2)/$ref` or `$id=`: the linked entity.
    var navigationKey: [String: PrimitiveValue]?
    var isRef = false
    /// `Set(key)/$value`: the media stream of a media entity.
    var isValue = false
}

/// One local modification before it is applied.
struct LocalChange: Sendable {
    var method: String
    var url: String
    var body: [UInt8]
    var headers: [String: String] = [:]
    var target: WriteTarget
    var options: OfflineODataRequestOptions
    var entity: Entity?
    var linkTarget: (String, [String: PrimitiveValue])?
    /// `@odata.bind` links of the body, resolved: navigation property, entity set, key.
    var binds: [(navigation: String, entitySet: String, key: [String: PrimitiveValue])] = []
    /// The content type of a media change (`PUT Set(key)/$value`, or the create of a media
    /// entity from its stream); nil for JSON requests. The body is then the stream.
    var mediaType: String?

    init(method: String, url: String, body: [UInt8], target: WriteTarget, options: OfflineODataRequestOptions) {
        self.method = method
        self.url = url
        self.body = body
        self.target = target
        self.options = options
    }
}

/// Reading request strings and queued requests as local changes (no I/O).
extension LocalChange {
    static func parseTarget(_ url: String, model: Model, serviceRoot: String) throws -> WriteTarget {
        // `Set(key)` with a single-property key, the URL of most changes: read without the URL
        // parser and path resolver, to the same values (``Model/simpleEntityKey(_:)``). Every
        // other form, and the system sets, take the full path below.
        if let simple = model.simpleEntityKey(url), !LocalSchema.systemSets.contains(simple.entitySet) {
            var target = WriteTarget(entitySet: simple.entitySet)
            target.key = simple.key
            return target
        }
        return try parseTargetFully(url, model: model, serviceRoot: serviceRoot)
    }

    /// ``parseTarget(_:model:serviceRoot:)`` through the URL parser and path resolver.
    static func parseTargetFully(_ url: String, model: Model, serviceRoot: String) throws -> WriteTarget {
        let (parsed, resolved) = try Keys.resolve(url, model: model, what: "request URL")
        guard case .entitySet(let set)? = resolved.path.segments.first?.kind else {
            if case .functionImport(let name, _)? = resolved.path.segments.first?.kind {
                throw OfflineODataError(
                    .notSupportedOffline, "\(name) is a function import; it runs on the backend only, not offline")
            }
            if case .actionImport(let name)? = resolved.path.segments.first?.kind {
                throw OfflineODataError(
                    .notSupportedOffline, "\(name) is an action import; it runs on the backend only, not offline")
            }
            throw OfflineODataError(.invalidRequest, "\(url): a modification needs an entity set")
        }
        guard !LocalSchema.systemSets.contains(set) || set == LocalSchema.errorArchive else {
            throw OfflineODataError(.invalidRequest, "\(set) is read-only")
        }
        var target = WriteTarget(entitySet: set)
        var navigationSet: String?
        for segment in resolved.path.segments.dropFirst() {
            switch segment.kind {
            case .key(let parts):
                if let navigationSet {
                    target.navigationKey = try Keys.values(
                        parts, entitySet: navigationSet, model: model, query: parsed.query)
                } else {
                    target.key = try Keys.values(parts, entitySet: set, model: model, query: parsed.query)
                }
            case .navigation(let name):
                guard target.key != nil, target.navigation == nil else {
                    throw OfflineODataError(.invalidRequest, "\(url): only one navigation after a key can be modified")
                }
                target.navigation = name
                navigationSet = model.targetEntitySet(from: set, navigationPath: name)?.name
            case .ref: target.isRef = true
            case .value:
                guard target.key != nil, target.navigation == nil else {
                    throw OfflineODataError(
                        .invalidRequest,
                        "\(url): only the media stream of one entity (Set(key)/$value) can be modified offline")
                }
                target.isValue = true
            case .typeCast: continue
            case .action(let name), .function(let name, _):
                throw OfflineODataError(
                    .notSupportedOffline,
                    "\(name) is bound to an entity; operations run on the backend only, not offline")
            default:
                throw OfflineODataError(.invalidRequest, "\(url): this path cannot be modified offline")
            }
        }
        if target.isRef, target.navigationKey == nil, let id = parsed.query.id, let navigationSet,
            let (set, key) = Keys.parse(id, model: model, serviceRoot: serviceRoot), set == navigationSet
        {
            target.navigationKey = key
        }
        return target
    }

    /// A queued request as a local change again (its local keys mapped to the backend's).
    static func replaying(
        _ request: QueuedRequest, model: Model, serviceRoot: String, keyMap: [String: String]
    ) throws -> LocalChange {
        var url = request.url
        for (local, server) in keyMap where url == local || url.hasPrefix(local + "/") {
            url = server + url.dropFirst(local.count)
        }
        let target = try parseTarget(url, model: model, serviceRoot: serviceRoot)
        var change = LocalChange(
            method: request.method, url: url, body: request.body, target: target, options: request.options)
        change.mediaType = request.mediaType
        if request.mediaType != nil {
            // A media change: the body is the stream; a media create starts with no values.
            if request.isCreate { change.entity = Entity() }
        } else if target.isRef {
            if request.method != "DELETE" {
                change.linkTarget = linkTarget(ofBody: request.body, model: model, serviceRoot: serviceRoot) {
                    keyMap[$0] ?? $0
                }
            }
        } else if request.method != "DELETE" {
            let entity = try Self.entity(
                fromBody: request.body, method: request.method, url: url, target: target, model: model)
            change.entity = entity
            change.binds = binds(of: entity, model: model, serviceRoot: serviceRoot) { keyMap[$0] ?? $0 }
        }
        return change
    }

    /// The entity a `$ref` body names (`@odata.id`, V2 `uri`), resolved to entity set and key;
    /// `mapped` turns a local reference into the backend's.
    static func linkTarget(
        ofBody body: [UInt8], model: Model, serviceRoot: String, mapped: (String) -> String
    ) -> (String, [String: PrimitiveValue])? {
        guard let json = try? JSONValue.parse(body),
            let id = json["@odata.id"]?.stringValue ?? json["uri"]?.stringValue,
            let (set, key) = Keys.parse(id, model: model, serviceRoot: serviceRoot)
        else { return nil }
        return Keys.parse(mapped(set + Keys.predicate(key, in: set, model: model)), model: model, serviceRoot: "")
    }

    /// The `@odata.bind` (V2: `__metadata.uri`) links of a body, resolved to entity set and
    /// key; `mapped` turns a local reference into the backend's.
    static func binds(
        of entity: Entity, model: Model, serviceRoot: String, mapped: (String) -> String
    ) -> [(navigation: String, entitySet: String, key: [String: PrimitiveValue])] {
        var result: [(navigation: String, entitySet: String, key: [String: PrimitiveValue])] = []
        for navigation in entity.navigation {
            for id in navigation.bind ?? [] {
                guard let (set, key) = Keys.parse(id, model: model, serviceRoot: serviceRoot) else { continue }
                let reference = mapped(set + Keys.predicate(key, in: set, model: model))
                guard let (mappedSet, mappedKey) = Keys.parse(reference, model: model, serviceRoot: "") else {
                    continue
                }
                result.append((navigation.name, mappedSet, mappedKey))
            }
        }
        return result
    }

    /// Reads the entity of a POST, PUT, PATCH or MERGE body.
    static func entity(
        fromBody body: [UInt8], method: String, url: String, target: WriteTarget, model: Model
    ) throws -> Entity {
        guard !body.isEmpty else { throw OfflineODataError(.invalidRequest, "\(method) \(url) needs a body") }
        let set =
            target.navigation.flatMap { model.targetEntitySet(from: target.entitySet, navigationPath: $0)?.name }
            ?? target.entitySet
        do {
            let entityType = model.entitySet(set)?.entityType
            let entity = try model.readEntity(body, entityType: entityType)
            if let problem = JSONTextCheck.problem(body) {
                throw OfflineODataError(
                    .invalidRequest, "The body of \(method) \(url) is not stored as sent: \(problem)")
            }
            // Refused before anything is queued: a value the backend would drop or refuse.
            if let entityType { try model.checkWritable(entity, as: entityType) }
            if method != "POST", target.navigation == nil, let key = target.key {
                try model.checkKeyUnchanged(entity, key: key)
            }
            return entity
        } catch let error as OfflineODataError {
            throw error
        } catch {
            throw OfflineODataError(
                .invalidRequest, "The body of \(method) \(url) is not a valid \(set) entity: \(error)")
        }
    }

    /// For a `$ref` request: `Set(key)` of the end whose foreign key (and so values and
    /// ETag) the link change alters on the backend, and whether it is the entity the URL
    /// names. Nil for other requests, for links kept apart from both ends (no constraint),
    /// and when that end is not named.
    static func linkHolder(
        of request: QueuedRequest, schema: StoreSchema, serviceRoot: String,
        keyMap: [String: String]
    ) -> (reference: String, isSource: Bool)? {
        let model = schema.model
        guard request.isLinkRequest,
            let change = try? replaying(request, model: model, serviceRoot: serviceRoot, keyMap: keyMap),
            change.target.isRef,
            let key = change.target.key, let navigation = change.target.navigation,
            let isSource = schema.linkChangesSource(change.target.entitySet, navigation: navigation)
        else { return nil }
        if isSource {
            return (change.target.entitySet + Keys.predicate(key, in: change.target.entitySet, model: model), true)
        }
        guard let (set, other) = linkedEntity(change, model: model) else { return nil }
        return (set + Keys.predicate(other, in: set, model: model), false)
    }

    /// The other end of a `$ref` request.
    static func linkedEntity(_ change: LocalChange, model: Model) -> (String, [String: PrimitiveValue])? {
        if let linkTarget = change.linkTarget { return linkTarget }
        guard let key = change.target.navigationKey, let navigation = change.target.navigation,
            let set = model.targetEntitySet(from: change.target.entitySet, navigationPath: navigation)?.name
        else { return nil }
        return (set, key)
    }

    /// `url` with the key of its first segment written as the queue and the key map write keys
    /// (`Contacts(-1L)` for V2's `Contacts(-1)`, `Orders(1)` for `Orders(OrderID=1)`): a queued
    /// request is later matched by text against Content-ID references and replaced local keys.
    static func canonicalKey(in url: String, target: WriteTarget, model: Model) -> String {
        guard let key = target.key, url.hasPrefix(target.entitySet + "(") else { return url }
        // The closing parenthesis of the key, outside quoted strings ('' is a quote inside one).
        var quoted = false
        var close: String.Index?
        for index in url.indices.dropFirst(target.entitySet.count + 1) {
            if url[index] == "'" { quoted.toggle() }
            if url[index] == ")" && !quoted {
                close = index
                break
            }
        }
        guard let close else { return url }
        return target.entitySet + Keys.predicate(key, in: target.entitySet, model: model)
            + url[url.index(after: close)...]
    }

    /// A request string as a local change: its target, entity, links and media type. `url` has
    /// its replaced local keys mapped already; `keyMap` maps the local keys in the body.
    static func makeChange(
        method verb: String, url: String, headers: [String: String], body: [UInt8], options: OfflineODataRequestOptions,
        model: Model, serviceRoot: String, keyMap: [String: String]
    ) throws -> LocalChange {
        let target = try parseTarget(url, model: model, serviceRoot: serviceRoot)
        let url = canonicalKey(in: url, target: target, model: model)
        var change = LocalChange(method: verb, url: url, body: body, target: target, options: options)
        change.headers = headers.merging(options.customHeaders) { _, new in new }
        let contentType = header("Content-Type", in: change.headers)
        let createdSet =
            target.navigation.flatMap { model.targetEntitySet(from: target.entitySet, navigationPath: $0)?.name }
            ?? target.entitySet
        if target.isValue {
            // `PUT Set(key)/$value`: the body is the entity's new media stream.
            guard verb == "PUT" else {
                throw OfflineODataError(
                    .invalidRequest,
                    "\(verb) \(url): a media stream is replaced with PUT; to remove it, delete the media entity")
            }
            change.mediaType = mediaRequestHeaders(&change.headers, contentType: contentType)
        } else if verb == "POST", !target.isRef, let contentType, !isJSON(contentType),
            model.entityType(ofEntitySet: createdSet)?.hasStream == true
        {
            // A media entity created from its stream: no values yet but a local key; the app
            // sets its properties with a later update (sent after the create).
            change.mediaType = mediaRequestHeaders(&change.headers, contentType: contentType)
            change.entity = Entity()
        } else if verb == "POST" || verb == "PUT" || verb == "PATCH" || verb == "MERGE", !target.isRef {
            let entity = try Self.entity(fromBody: body, method: verb, url: url, target: target, model: model)
            change.entity = entity
            if entity.navigation.contains(where: { $0.bind != nil }) {
                change.binds = binds(of: entity, model: model, serviceRoot: serviceRoot) { keyMap[$0] ?? $0 }
            }
        }
        if target.isRef, verb != "DELETE" {
            guard
                let linked = linkTarget(
                    ofBody: body, model: model, serviceRoot: serviceRoot, mapped: { keyMap[$0] ?? $0 })
            else {
                throw OfflineODataError(.invalidRequest, "\(verb) \(url): the body must name one entity with @odata.id")
            }
            change.linkTarget = linked
        }
        return change
    }

    /// Puts the content type of a media request under one name (`Content-Type`, however the
    /// app spelled it) and returns it; without one, the stream is `application/octet-stream`.
    static func mediaRequestHeaders(_ headers: inout [String: String], contentType: String?) -> String {
        var type = contentType?.trimmingCharacters(in: .whitespaces) ?? ""
        if type.isEmpty { type = "application/octet-stream" }
        headers = headers.filter { $0.key.caseInsensitiveCompare("Content-Type") != .orderedSame }
        headers["Content-Type"] = type
        return type
    }

    /// The value of a header, whatever the case of its name.
    static func header(_ name: String, in headers: [String: String]) -> String? {
        headers.first { $0.key.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    /// Whether a content type is JSON (the body is an entity, not a media stream).
    static func isJSON(_ contentType: String) -> Bool {
        contentType.trimmingCharacters(in: .whitespaces).lowercased().hasPrefix("application/json")
    }
}
