import Foundation
public import ODataCore
public import ODataStore

/// The answer of a provider (offline, online or the router) to a request string.
public struct ODataResponse: Sendable {
    /// HTTP status (offline: 200, 201, 204, 404, as the backend would answer).
    public var status: Int
    /// The response body in the service's JSON format.
    public var body: [UInt8]
    /// The same answer as a model value, for reads, creates and operation results.
    public var result: QueryResult?
    /// Response headers (online answers; offline ones have none).
    public var headers: [String: String] = [:]

    /// Creates a value from its parts.
    public init(status: Int, body: [UInt8], result: QueryResult?, headers: [String: String] = [:]) {
        self.status = status
        self.body = body
        self.result = result
        self.headers = headers
    }
}

/// The offline provider's answer (the same type as every provider's).
public typealias OfflineODataResponse = ODataResponse

/// The request API that the offline provider, the online provider and the router share, so an
/// app can hold any of them.
public protocol ODataRequestHandler: Sendable {
    /// Runs an OData request string: method, URL relative to the service root (or absolute),
    /// headers and body.
    func execute(method: String, url: String, headers: [String: String], body: [UInt8], options: OfflineODataRequestOptions) async throws -> ODataResponse
    /// Reads a URL as a model value.
    func read(_ url: String) async throws -> QueryResult
}

extension OfflineODataProvider: ODataRequestHandler {}

extension OfflineODataProvider {
    // MARK: Reads

    /// Reads from the local store with the full query language. Nothing reaches the network;
    /// what the defining queries do not cover reads as empty (or nil for one entity).
    public func read(_ url: String) async throws -> QueryResult {
        try await readLocally(url).result
    }

    /// A local read, with the content type when it is a media stream.
    func readLocally(_ url: String) async throws -> (result: QueryResult, contentType: String?) {
        let store = try openStore()
        let model = store.model
        var url = try await rewriteLocalKeys(url, store: store)
        switch try await mediaStream(url, store: store) {
        case .stream(let contentType, let body)?: return (.value(.primitive(.binary(Data(body)))), contentType)
        case .missing?: return (.entity(nil), nil)
        case nil: break
        }
        if let affected = try await affectedEntityURL(url, store: store) { url = affected }
        let (_, resolved) = try Keys.resolve(url, model: model, what: "read request")
        for segment in resolved.path.segments {
            switch segment.kind {
            case .functionImport(let name, _), .function(let name, _):
                throw OfflineODataError(.notSupportedOffline, "\(name) is a function; functions run on the backend only, not offline")
            case .actionImport(let name), .action(let name):
                throw OfflineODataError(.notSupportedOffline, "\(name) is an action; actions run on the backend only, not offline")
            default: continue
            }
        }
        if case .entitySet(let set)? = resolved.path.segments.first?.kind, !LocalSchema.systemSets.contains(set) {
            if !(try coveredSets(model: model)).contains(set) {
                let isSingle = resolved.path.segments.count > 1 && resolved.path.segments.allSatisfy {
                    if case .key = $0.kind { return true }
                    if case .entitySet = $0.kind { return true }
                    return false
                }
                return (isSingle ? .entity(nil) : .collection(EntityCollection()), nil)
            }
        }
        do {
            let result = try await store.query(url, pageSize: parameters.pageSize)
            return (try await annotateMedia(result, entitySet: Self.targetEntitySet(of: resolved.path.segments, model: model), store: store), nil)
        } catch let error as OfflineODataError {
            throw error
        } catch {
            throw OfflineODataError(.invalidRequest, "The read request \(url) failed: \(error)")
        }
    }

    /// The entity set a resolved resource path ends in (through navigation properties); nil
    /// when it names none.
    static func targetEntitySet(of segments: [PathSegment], model: Model) -> String? {
        var set: String?
        for segment in segments {
            switch segment.kind {
            case .entitySet(let name): set = name
            case .navigation(let name): set = set.flatMap { model.targetEntitySet(from: $0, navigationPath: name)?.name }
            case .key, .typeCast: continue
            default: return nil
            }
        }
        return set
    }

    /// Entity sets the defining queries fill (computed once per set of queries).
    func coveredSets(model: Model) throws -> Set<String> {
        if let cached = coveredSetsCache { return cached }
        let covered = try definingQueries.reduce(into: Set<String>()) { $0.formUnion(try Self.coveredSets(of: $1.query, model: model)) }
        coveredSetsCache = covered
        return covered
    }

    /// `ErrorArchive(n)/AffectedEntity…` and `RequestQueue(n)/AffectedEntity…` → the entity's own URL.
    func affectedEntityURL(_ url: String, store: Store) async throws -> String? {
        for set in [LocalSchema.errorArchive, LocalSchema.requestQueue] {
            guard url.hasPrefix(set + "(") else { continue }
            let rest = url.dropFirst(set.count + 1)
            guard let close = rest.firstIndex(of: ")"), let id = Int64(rest[rest.startIndex..<close]) else { continue }
            let tail = rest[rest.index(after: close)...]
            guard tail.hasPrefix("/AffectedEntity") else { continue }
            let after = String(tail.dropFirst("/AffectedEntity".count))
            let target = try await store.read { reader -> String? in
                let rows = try reader.connection.query("SELECT entity_set, entity_key FROM oo_queue WHERE id = ?", [.integer(id)])
                guard let row = rows.first, case .text(let set) = row[0], case .text(let key) = row[1] else { return nil }
                return set + key
            }
            guard let target else { throw OfflineODataError(.invalidRequest, "\(set)(\(id)) has no affected entity") }
            return try await rewriteLocalKeys(target, store: store) + after
        }
        return nil
    }

    /// A read link with a local temporary key keeps working after upload: it maps to the
    /// backend's key.
    func rewriteLocalKeys(_ url: String, store: Store) async throws -> String {
        guard let open = url.firstIndex(of: "("), let close = url[open...].firstIndex(of: ")") else { return url }
        let map: [String: String]
        if let cached = keyMapCache {
            map = cached
        } else {
            map = try await store.read { reader -> [String: String] in
                var map: [String: String] = [:]
                for row in try reader.connection.query("SELECT entity_set, local_key, server_key FROM oo_key_map") {
                    if case .text(let set) = row[0], case .text(let local) = row[1], case .text(let server) = row[2] { map[set + local] = server }
                }
                return map
            }
            keyMapCache = map
        }
        guard !map.isEmpty, let server = map[String(url[url.startIndex...close])] else { return url }
        return String(url[url.startIndex..<open]) + server + url[url.index(after: close)...]
    }

    // MARK: Request strings

    /// Runs an OData request string against the local store, as the app would send it online:
    /// GET reads; POST, PUT, PATCH, MERGE and DELETE change the store and are queued for upload.
    public func execute(method: String, url: String, headers: [String: String] = [:], body: [UInt8] = [],
                        options: OfflineODataRequestOptions = OfflineODataRequestOptions()) async throws -> OfflineODataResponse {
        let store = try openStore()
        let model = store.model
        let verb = method.uppercased()
        if verb == "GET" {
            let (result, contentType) = try await readLocally(url)
            // A media entity's `$value`: the stream itself, with its content type.
            if let contentType, case .value(.primitive(.binary(let bytes))) = result {
                return OfflineODataResponse(status: 200, body: Array(bytes), result: result, headers: ["Content-Type": contentType])
            }
            return OfflineODataResponse(status: result == .entity(nil) ? 404 : 200, body: Self.encode(result, model: model), result: result)
        }
        guard ["POST", "PUT", "PATCH", "MERGE", "DELETE"].contains(verb) else {
            throw OfflineODataError(.invalidRequest, "\(method) is not an OData method")
        }
        if url == "$batch" || url.hasSuffix("/$batch") {
            guard verb == "POST" else { throw OfflineODataError(.invalidRequest, "\(method) $batch: a batch is sent with POST") }
            return try await executeBatch(headers: headers, body: body, options: options)
        }
        // A local key that the backend has replaced still names the entity.
        let url = try await rewriteLocalKeys(url, store: store)
        var change = try Self.makeChange(method: verb, url: url, headers: headers, body: body, options: options, model: model,
                                         serviceRoot: serviceRoot, keyMap: [:])
        // Entities the body links to may carry local keys the backend has replaced: only then
        // is the key map read and the change made again with it.
        if change.target.isRef || !change.binds.isEmpty {
            let keyMap = try await store.read { reader in try Self.keyMap(reader.connection) }
            if !keyMap.isEmpty {
                change = try Self.makeChange(method: verb, url: url, headers: headers, body: body, options: options, model: model,
                                             serviceRoot: serviceRoot, keyMap: keyMap)
            }
        }
        let result = try await apply(change, store: store)
        return OfflineODataResponse(status: result == nil ? 204 : 201, body: result.map { Self.encode(.entity($0), model: model) } ?? [],
                                    result: result.map { .entity($0) })
    }

    /// A request string as a local change: its target, entity, links and media type. `url` has
    /// its replaced local keys mapped already; `keyMap` maps the local keys in the body.
    static func makeChange(method verb: String, url: String, headers: [String: String], body: [UInt8], options: OfflineODataRequestOptions,
                           model: Model, serviceRoot: String, keyMap: [String: String]) throws -> LocalChange {
        let target = try parseTarget(url, model: model, serviceRoot: serviceRoot)
        var change = LocalChange(method: verb, url: url, body: body, target: target, options: options)
        change.headers = headers.merging(options.customHeaders) { _, new in new }
        let contentType = Self.header("Content-Type", in: change.headers)
        let createdSet = target.navigation.flatMap { model.targetEntitySet(from: target.entitySet, navigationPath: $0)?.name } ?? target.entitySet
        if target.isValue {
            // `PUT Set(key)/$value`: the body is the entity's new media stream.
            guard verb == "PUT" else {
                throw OfflineODataError(.invalidRequest, "\(verb) \(url): a media stream is replaced with PUT; to remove it, delete the media entity")
            }
            change.mediaType = Self.mediaRequestHeaders(&change.headers, contentType: contentType)
        } else if verb == "POST", !target.isRef, let contentType, !Self.isJSON(contentType), model.entityType(ofEntitySet: createdSet)?.hasStream == true {
            // A media entity created from its stream: no values yet but a local key; the app
            // sets its properties with a later update (sent after the create).
            change.mediaType = Self.mediaRequestHeaders(&change.headers, contentType: contentType)
            change.entity = Entity()
        } else if verb == "POST" || verb == "PUT" || verb == "PATCH" || verb == "MERGE", !target.isRef {
            let entity = try Self.entity(fromBody: body, method: verb, url: url, target: target, model: model)
            change.entity = entity
            if entity.navigation.contains(where: { $0.bind != nil }) {
                change.binds = Self.binds(of: entity, model: model, serviceRoot: serviceRoot) { keyMap[$0] ?? $0 }
            }
        }
        if target.isRef, verb != "DELETE" {
            guard let linked = Self.linkTarget(ofBody: body, model: model, serviceRoot: serviceRoot, mapped: { keyMap[$0] ?? $0 }) else {
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

    static func encode(_ result: QueryResult, model: Model) -> [UInt8] {
        let legacy = model.version.isLegacy
        switch result {
        case .collection(let collection): return legacy ? V2JSONWriter().write(collection) : V4JSONWriter().write(collection)
        case .entity(let entity?): return legacy ? V2JSONWriter().write(entity) : V4JSONWriter().write(entity)
        case .entity(nil): return []
        case .value(let value): return V4JSONWriter().writeValue(value)
        case .count(let count): return Array("\(count)".utf8)
        case .references(let ids): return Array(JSONValue.object([.init("value", .array(ids.map { .object([.init("@odata.id", .string($0))]) }))]).serialized.utf8)
        }
    }

    // MARK: Typed API

    /// Reads entities (or one entity) by URL.
    public func readEntities(_ url: String) async throws -> [Entity] {
        switch try await read(url) {
        case .collection(let collection): return collection.entities
        case .entity(let entity): return entity.map { [$0] } ?? []
        default: throw OfflineODataError(.invalidRequest, "\(url) does not read entities")
        }
    }

    /// Creates an entity (with inline children: a deep insert); returns it with its key, a
    /// local temporary one when the backend generates keys.
    @discardableResult
    public func createEntity(_ entity: Entity, in entitySet: String, options: OfflineODataRequestOptions = OfflineODataRequestOptions()) async throws -> Entity {
        let model = try openStore().model
        let response = try await execute(method: "POST", url: entitySet, body: Self.requestBody(entity, model: model), options: options)
        guard case .entity(let created?)? = response.result else { throw OfflineODataError(.store, "The created entity could not be read back") }
        return created
    }

    /// Updates an entity: merge (PATCH) by default, replace (PUT) when `replace` is true.
    public func updateEntity(_ entity: Entity, in entitySet: String, replace: Bool = false,
                             options: OfflineODataRequestOptions = OfflineODataRequestOptions()) async throws {
        let model = try openStore().model
        guard let key = Keys.key(of: entity, in: entitySet, model: model) else {
            throw OfflineODataError(.invalidRequest, "The entity has no key for \(entitySet)")
        }
        var body = entity
        body.properties.removeAll { key[$0.name] != nil }
        _ = try await execute(method: replace ? "PUT" : (model.version.isLegacy ? "MERGE" : "PATCH"),
                              url: entitySet + Keys.predicate(key, in: entitySet, model: model), body: Self.requestBody(body, model: model), options: options)
    }

    /// Deletes an entity by key.
    public func deleteEntity(in entitySet: String, key: [String: PrimitiveValue], options: OfflineODataRequestOptions = OfflineODataRequestOptions()) async throws {
        let model = try openStore().model
        _ = try await execute(method: "DELETE", url: entitySet + Keys.predicate(key, in: entitySet, model: model), options: options)
    }

    /// Links `key` of `entitySet` through `navigation` to another entity.
    public func createLink(from entitySet: String, key: [String: PrimitiveValue], navigation: String, to targetSet: String,
                           targetKey: [String: PrimitiveValue], options: OfflineODataRequestOptions = OfflineODataRequestOptions()) async throws {
        let model = try openStore().model
        let body = JSONValue.object([.init("@odata.id", .string(targetSet + Keys.predicate(targetKey, in: targetSet, model: model)))]).serialized
        _ = try await execute(method: "POST", url: entitySet + Keys.predicate(key, in: entitySet, model: model) + "/\(navigation)/$ref",
                              body: Array(body.utf8), options: options)
    }

    /// Removes a link created by ``createLink(from:key:navigation:to:targetKey:options:)``.
    public func deleteLink(from entitySet: String, key: [String: PrimitiveValue], navigation: String, to targetSet: String,
                           targetKey: [String: PrimitiveValue], options: OfflineODataRequestOptions = OfflineODataRequestOptions()) async throws {
        let model = try openStore().model
        _ = try await execute(method: "DELETE", url: entitySet + Keys.predicate(key, in: entitySet, model: model) + "/\(navigation)"
                              + Keys.predicate(targetKey, in: targetSet, model: model) + "/$ref", options: options)
    }

    /// Creates a media entity from its stream (`POST Set` with the media as the body), with a
    /// local temporary key until the upload brings the backend's. `slug` goes to the backend
    /// as the `Slug` header (RFC 5023), percent-encoded. Set the entity's properties with a
    /// later ``updateEntity(_:in:replace:options:)``: it is sent after the create.
    @discardableResult
    public func createMediaEntity(in entitySet: String, contentType: String, body: [UInt8], slug: String? = nil,
                                  options: OfflineODataRequestOptions = OfflineODataRequestOptions()) async throws -> Entity {
        guard !Self.isJSON(contentType) else {
            throw OfflineODataError(.invalidRequest, "A media stream of \(entitySet) cannot have the content type \(contentType): that is an entity")
        }
        var headers = ["Content-Type": contentType]
        if let slug { headers["Slug"] = slug.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? slug }
        let response = try await execute(method: "POST", url: entitySet, headers: headers, body: body, options: options)
        guard case .entity(let created?)? = response.result else { throw OfflineODataError(.store, "The created media entity could not be read back") }
        return created
    }

    /// Replaces the media stream of a media entity (`PUT Set(key)/$value`).
    public func updateMediaStream(in entitySet: String, key: [String: PrimitiveValue], contentType: String, body: [UInt8],
                                  options: OfflineODataRequestOptions = OfflineODataRequestOptions()) async throws {
        let model = try openStore().model
        _ = try await execute(method: "PUT", url: entitySet + Keys.predicate(key, in: entitySet, model: model) + "/$value",
                              headers: ["Content-Type": contentType], body: body, options: options)
    }

    /// The media stream of a media entity from the store, with its content type; nil when the
    /// entity is not in the store. A stream that was not retrieved is an error that says so.
    public func readMediaStream(in entitySet: String, key: [String: PrimitiveValue]) async throws -> (contentType: String, body: [UInt8])? {
        let store = try openStore()
        let url = try await rewriteLocalKeys(entitySet + Keys.predicate(key, in: entitySet, model: store.model) + "/$value", store: store)
        switch try await mediaStream(url, store: store) {
        case .stream(let contentType, let body)?: return (contentType, body)
        case .missing?: return nil
        case nil: throw OfflineODataError(.invalidRequest, "\(entitySet) entities have no media stream")
        }
    }

    static func requestBody(_ entity: Entity, model: Model) -> [UInt8] {
        model.version.isLegacy ? V2JSONWriter().writeRequestBody(entity) : V4JSONWriter().write(entity)
    }
}
