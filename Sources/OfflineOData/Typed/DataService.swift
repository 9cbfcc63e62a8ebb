import Foundation
public import ODataCore
import ODataStore

/// The typed API over any request handler (the offline provider, the online provider, the
/// router): reads with typed queries into the types `oodata generate` writes, typed writes,
/// change sets, function and action calls, and live queries.
///
/// ```swift
/// let service = try await DataService(provider)      // an open OfflineODataProvider
/// let partners = try await service.fetch(
///     SalesService.businessPartners.query
///         .filter { $0.address.country == "US" && $0.companyName.starts(with: "A") }
///         .orderBy(\.companyName)
///         .top(20)
///         .expand(\.salesOrders))
/// ```
///
/// Every request is the OData request a person would write for the service's version, sent
/// through the handler's `execute`/`read`; so a typed request behaves offline exactly as the
/// same URL does. Every failure is a ``DataServiceError``.
public struct DataService: Sendable {
    /// Where requests go.
    public let handler: any ODataRequestHandler
    /// The service's OData version: decides URL literals, PATCH or MERGE, link syntax.
    public let version: ODataVersion
    /// Signals writes made through this service, for live queries over handlers that do not
    /// report store changes themselves (the online provider).
    let writes = WriteSignals()

    /// A service over `handler`, which speaks `version`.
    public init(handler: any ODataRequestHandler, version: ODataVersion) {
        self.handler = handler
        self.version = version
    }

    /// A service over an open offline provider.
    public init(_ provider: OfflineODataProvider) async throws(DataServiceError) {
        do {
            self.init(handler: provider, version: try await provider.model.version)
        } catch {
            throw DataServiceError.wrap(error, "DataService")
        }
    }

    /// A service over an online provider (reads the backend's `$metadata` once).
    public init(_ provider: OnlineODataProvider) async throws(DataServiceError) {
        do {
            self.init(handler: provider, version: try await provider.model().version)
        } catch {
            throw DataServiceError.wrap(error, "DataService")
        }
    }

    /// A service over a router (its offline provider must be open).
    public init(_ router: ODataRouter) async throws(DataServiceError) {
        do {
            self.init(handler: router, version: try await router.offline.model.version)
        } catch {
            throw DataServiceError.wrap(error, "DataService")
        }
    }

    // MARK: Reads

    /// The URL of `query` for this service.
    public func url<E>(of query: TypedQuery<E>) throws(DataServiceError) -> String {
        do {
            return try query.url(for: version)
        } catch {
            throw DataServiceError.wrap(error, "query of \(E.odataTypeName)")
        }
    }

    /// Every entity `query` reads (following the backend's next links).
    public func fetch<E>(_ query: TypedQuery<E>) async throws(DataServiceError) -> [E] {
        try await fetchPage(query, followingNextLinks: true).entities
    }

    /// Entities of `type` from its entity set: `fetch(Product.self, where: { $0.price > 100 },
    /// orderBy: { $0.name.ascending }, top: 20)`.
    public func fetch<E: ODataEntity>(
        _ type: E.Type, where condition: ((E.Fields) -> QueryFilter)? = nil,
        orderBy order: ((E.Fields) -> TypedOrder)? = nil, top: Int? = nil, skip: Int? = nil
    ) async throws(DataServiceError) -> [E] {
        var query = try Self.query(of: E.self)
        if let condition { query = query.filter(condition) }
        if let order { query = query.orderBy(order) }
        if let top { query = query.top(top) }
        if let skip { query = query.skip(skip) }
        return try await fetch(query)
    }

    /// One page of `query`: its entities, the total count when the query asks for it
    /// (`withCount()`), and the next link when the backend pages (all
    /// pages when `followingNextLinks`).
    public func fetchPage<E>(
        _ query: TypedQuery<E>, followingNextLinks: Bool = false
    ) async throws(DataServiceError) -> (entities: [E], count: Int64?, nextLink: String?) {
        let url = try self.url(of: query)
        var next: String? = url
        var entities: [E] = []
        var count: Int64?
        var pages = 0
        var seen: Set<String> = []
        while let page = next {
            pages += 1
            guard seen.insert(page).inserted else {
                throw DataServiceError(.unexpectedResponse, "GET \(url): the next link \(page) repeats an earlier page")
            }
            guard pages <= 100_000 else {
                throw DataServiceError(.unexpectedResponse, "GET \(url): more than 100000 pages")
            }
            let result: QueryResult
            do {
                result = try await handler.read(page)
            } catch {
                throw DataServiceError.wrap(error, "GET \(page)")
            }
            switch result {
            case .collection(let collection):
                entities.reserveCapacity(entities.count + collection.entities.count)
                do {
                    for index in collection.entities.indices {
                        entities.append(try E(entity: collection.entities[index]))
                    }
                } catch {
                    throw DataServiceError.wrap(error, "GET \(page)")
                }
                if count == nil { count = collection.count }
                next = collection.nextLink
            case .entity(let entity):
                if let entity {
                    do {
                        entities.append(try E(entity: entity))
                    } catch {
                        throw DataServiceError.wrap(error, "GET \(page)")
                    }
                }
                next = nil
            default:
                throw DataServiceError(.unexpectedResponse, "GET \(page) did not answer with entities")
            }
            if !followingNextLinks { break }
        }
        return (entities, count, next)
    }

    /// How many entities `query` reads (its `$filter` applies; paging does not).
    public func count<E>(_ query: TypedQuery<E>) async throws(DataServiceError) -> Int64 {
        var counting = TypedQuery<E>(path: query.path.appending("$count"))
        counting.options = query.options.onlyFilter
        let url = try self.url(of: counting)
        let result: QueryResult
        do {
            result = try await handler.read(url)
        } catch {
            throw DataServiceError.wrap(error, "GET \(url)")
        }
        switch result {
        case .count(let count): return count
        case .value(let value):
            if let number = (try? Int64(odataValue: value)) { return number }
        default: break
        }
        throw DataServiceError(.unexpectedResponse, "GET \(url) did not answer with a count")
    }

    /// The entity of `set` with `key`; nil when there is none (404, or not in the offline
    /// store).
    public func get<E>(_ set: TypedEntitySet<E>, key: E.Key) async throws(DataServiceError) -> E? {
        try await get(set.path(key))
    }

    /// The entity of `type`'s entity set with `key`; nil when there is none.
    public func get<E: ODataEntity>(_ type: E.Type, key: E.Key) async throws(DataServiceError) -> E? {
        try await get(TypedEntitySet<E>(try Self.entitySet(of: E.self)), key: key)
    }

    /// A singleton.
    public func get<E>(_ singleton: TypedSingleton<E>) async throws(DataServiceError) -> E? {
        try await get(singleton.path)
    }

    private func get<E: ODataEntity>(_ path: TypedPath) async throws(DataServiceError) -> E? {
        let url = path.text(for: version)
        let result: QueryResult
        do {
            result = try await handler.read(url)
        } catch {
            let wrapped = DataServiceError.wrap(error, "GET \(url)")
            if wrapped.code == .notFound { return nil }
            throw wrapped
        }
        guard case .entity(let entity) = result else {
            throw DataServiceError(.unexpectedResponse, "GET \(url) did not answer with one entity")
        }
        guard let entity else { return nil }
        do {
            return try E(entity: entity)
        } catch {
            throw DataServiceError.wrap(error, "GET \(url)")
        }
    }

    /// The entities a to-many navigation property of `entity` leads to:
    /// `fetch(\.items, of: order)`.
    public func fetch<E: ODataEntity, T>(
        _ navigation: KeyPath<E.Fields, ToMany<T>>, of entity: E, in set: TypedEntitySet<E>? = nil
    ) async throws(DataServiceError) -> [T] {
        let source = try Self.target(set)
        return try await fetch(source.related(navigation, of: entity.key))
    }

    /// The entity a to-one navigation property of `entity` leads to, or nil.
    public func fetch<E: ODataEntity, T>(
        _ navigation: KeyPath<E.Fields, ToOne<T>>, of entity: E, in set: TypedEntitySet<E>? = nil
    ) async throws(DataServiceError) -> T? {
        let source = try Self.target(set)
        let path = source.path(entity.key).appending(E.Fields(prefix: .root)[keyPath: navigation].path)
        return try await get(path)
    }

    // MARK: Writes

    /// Creates `entity` (with its navigation values: a deep insert) and returns it as the
    /// service answered: with the backend's or a local temporary key, defaults and ETag.
    ///
    /// With `keyGeneratedByBackend`, the key properties are left out of the request, so the
    /// backend assigns the key (offline: a local temporary key until the upload brings the
    /// backend's); the key values of `entity` are then placeholders.
    @discardableResult
    public func create<E: ODataEntity>(
        _ entity: E, in set: TypedEntitySet<E>? = nil, keyGeneratedByBackend: Bool = false,
        headers: [String: String] = [:]
    ) async throws(DataServiceError) -> E {
        let target = try Self.target(set).name
        let body = Self.createBody(entity, keyGeneratedByBackend: keyGeneratedByBackend)
        let response = try await send("POST", target, headers: headers, body: version.requestBody(body))
        guard case .entity(let created?)? = response.result else {
            // No entity in the answer (`Prefer: return=minimal`): read it from its Location.
            if let location = response.headers.first(where: { $0.key.lowercased() == "location" })?.value,
                case .entity(let read?)? = try? await handler.read(location)
            {
                do {
                    return try E(entity: read)
                } catch {
                    throw DataServiceError.wrap(error, "GET \(location)")
                }
            }
            guard !keyGeneratedByBackend else {
                throw DataServiceError(
                    .unexpectedResponse,
                    "POST \(target) answered \(response.status) without the created entity or its Location: its key is unknown"
                )
            }
            return entity
        }
        do {
            return try E(entity: created)
        } catch {
            throw DataServiceError.wrap(error, "POST \(target)")
        }
    }

    /// Sends the properties in which `entity` differs from `original` (PATCH in V4, MERGE in
    /// V2), with `If-Match` when the original has an ETag. Nothing is sent when nothing changed.
    ///
    /// Returns `entity` with the ETag the service answered (`ETag` header or the answered
    /// entity), so that the next update of it does not fail with 412. Offline, the store keeps
    /// the backend's ETag until the upload, and the returned ETag is the original's.
    /// Navigation properties are not updated this way: use `link`
    /// and `unlink`; a changed navigation value is refused.
    @discardableResult
    public func update<E: ODataEntity>(
        _ entity: E, from original: E, in set: TypedEntitySet<E>? = nil, headers: [String: String] = [:]
    ) async throws(DataServiceError) -> E {
        var updated = entity
        updated.odataETag = original.odataETag
        guard let request = try Self.updateRequest(entity, from: original, in: set, version: version) else {
            return updated
        }
        let response = try await send(
            request.method, request.url, headers: request.headers.merging(headers) { $1 }, body: request.body)
        if let etag = response.headers.first(where: { $0.key.lowercased() == "etag" })?.value {
            updated.odataETag = etag
        } else if case .entity(let answered?)? = response.result, let etag = answered.control.etag {
            updated.odataETag = etag
        }
        return updated
    }

    /// Reads the entity with `key`, lets `change` modify it, and sends what changed; returns
    /// the entity as changed. Throws `notFound` when there is no such entity.
    @discardableResult
    public func update<E: ODataEntity>(
        _ set: TypedEntitySet<E>, key: E.Key, _ change: (inout E) throws -> Void
    ) async throws(DataServiceError) -> E {
        guard let original = try await get(set, key: key) else {
            throw DataServiceError(
                .notFound, "\(set.name)\(key.predicate(version: version)) does not exist", httpStatus: 404)
        }
        var changed = original
        do {
            try change(&changed)
        } catch {
            throw DataServiceError.wrap(error, "update of \(set.name)")
        }
        return try await update(changed, from: original, in: set)
    }

    /// Replaces every property of `entity` (PUT).
    public func replace<E: ODataEntity>(
        _ entity: E, in set: TypedEntitySet<E>? = nil, headers: [String: String] = [:]
    ) async throws(DataServiceError) {
        let target = try Self.target(set)
        var body = entity.entity()
        body.control = ControlInformation()
        _ = try await send(
            "PUT", target.path(entity.key).text(for: version),
            headers: Self.ifMatch(entity.odataETag).merging(headers) { $1 },
            body: version.requestBody(body))
    }

    /// Deletes `entity`, with `If-Match` when it has an ETag.
    public func delete<E: ODataEntity>(
        _ entity: E, in set: TypedEntitySet<E>? = nil, headers: [String: String] = [:]
    ) async throws(DataServiceError) {
        let target = try Self.target(set)
        _ = try await send(
            "DELETE", target.path(entity.key).text(for: version),
            headers: Self.ifMatch(entity.odataETag).merging(headers) { $1 }, body: [])
    }

    /// Deletes the entity of `set` with `key`.
    public func delete<E>(_ set: TypedEntitySet<E>, key: E.Key) async throws(DataServiceError) {
        _ = try await send("DELETE", set.path(key).text(for: version), headers: [:], body: [])
    }

    /// Adds `target` to a to-many navigation property of `entity` (`POST …/Nav/$ref`, V2
    /// `…/$links/Nav`).
    public func link<E: ODataEntity, T>(
        _ entity: E, _ navigation: KeyPath<E.Fields, ToMany<T>>, to target: T, in set: TypedEntitySet<E>? = nil,
        targetSet: TypedEntitySet<T>? = nil
    ) async throws(DataServiceError) {
        let request = try Self.linkRequest(
            "POST", entity, E.Fields(prefix: .root)[keyPath: navigation].path, target, set, targetSet, version: version)
        _ = try await send(request.method, request.url, headers: request.headers, body: request.body)
    }

    /// Sets a to-one navigation property of `entity` to `target` (`PUT …/Nav/$ref`).
    public func link<E: ODataEntity, T>(
        _ entity: E, _ navigation: KeyPath<E.Fields, ToOne<T>>, to target: T, in set: TypedEntitySet<E>? = nil,
        targetSet: TypedEntitySet<T>? = nil
    ) async throws(DataServiceError) {
        let request = try Self.linkRequest(
            "PUT", entity, E.Fields(prefix: .root)[keyPath: navigation].path, target, set, targetSet, version: version)
        _ = try await send(request.method, request.url, headers: request.headers, body: request.body)
    }

    /// Removes `target` from a to-many navigation property of `entity`.
    public func unlink<E: ODataEntity, T>(
        _ entity: E, _ navigation: KeyPath<E.Fields, ToMany<T>>, from target: T, in set: TypedEntitySet<E>? = nil
    ) async throws(DataServiceError) {
        let source = try Self.target(set)
        let name = E.Fields(prefix: .root)[keyPath: navigation].path
        let entityPath = source.path(entity.key).text(for: version)
        let targetKey = target.key.predicate(version: version)
        let url =
            version.isLegacy ? "\(entityPath)/$links/\(name)\(targetKey)" : "\(entityPath)/\(name)\(targetKey)/$ref"
        _ = try await send("DELETE", url, headers: [:], body: [])
    }

    /// Clears a to-one navigation property of `entity`.
    public func unlink<E: ODataEntity, T>(
        _ entity: E, _ navigation: KeyPath<E.Fields, ToOne<T>>, in set: TypedEntitySet<E>? = nil
    ) async throws(DataServiceError) {
        let source = try Self.target(set)
        let name = E.Fields(prefix: .root)[keyPath: navigation].path
        let entityPath = source.path(entity.key).text(for: version)
        _ = try await send(
            "DELETE", version.isLegacy ? "\(entityPath)/$links/\(name)" : "\(entityPath)/\(name)/$ref", headers: [:],
            body: [])
    }

    // MARK: Operations

    /// Calls a function or action import. Operations run on the backend: sent to the offline
    /// provider, the call fails with ``DataServiceError/Code/onlineOnly``.
    public func call<R>(_ operation: OperationCall<R>) async throws(DataServiceError) -> R {
        let request = operation.request(for: version)
        if handler is OfflineODataProvider {
            throw DataServiceError(
                .onlineOnly,
                "\(request.method) \(request.url): \(operation.kind.rawValue) imports run on the backend; "
                    + "the offline store cannot run them (use the online provider or the router)")
        }
        let response = try await send(request.method, request.url, headers: [:], body: request.body)
        let output: OperationOutput
        switch response.result {
        case .collection(let collection)?: output = .collection(collection)
        case .entity(let entity)?: output = .entity(entity)
        case .value(let value)?: output = .value(value)
        case .count(let count)?: output = .value(.primitive(.int64(count)))
        case .references, nil: output = .none
        }
        do {
            return try operation.result(output)
        } catch {
            throw DataServiceError.wrap(error, "\(request.method) \(request.url)")
        }
    }

    // MARK: Sending

    /// Sends one request; throws for an answer of 400 or more.
    func send(
        _ method: String, _ url: String, headers: [String: String], body: [UInt8]
    ) async throws(DataServiceError) -> ODataResponse {
        var fields = headers
        if !body.isEmpty, !fields.keys.contains(where: { $0.lowercased() == "content-type" }) {
            fields["Content-Type"] = "application/json"
        }
        let response: ODataResponse
        do {
            response = try await handler.execute(
                method: method, url: url, headers: fields, body: body, options: OfflineODataRequestOptions())
        } catch {
            throw DataServiceError.wrap(error, "\(method) \(url)")
        }
        if response.status >= 400 {
            let backend = try? ODataError.parse(response.body, httpStatus: response.status)
            throw DataServiceError.wrap(
                backend
                    ?? ODataError(
                        code: "HTTP\(response.status)", message: "the service answered \(response.status)",
                        httpStatus: response.status), "\(method) \(url)")
        }
        // Writes to the offline store reach live queries as store changes; only the others are
        // signalled here (once per write, so an observation re-reads once).
        if method != "GET", !(handler is OfflineODataProvider) {
            if let router = handler as? ODataRouter, await router.destination(for: url) == .offline {
                return response
            }
            await writes.signal()
        }
        return response
    }

    /// The payload of a create: the entity with its navigation values, without control
    /// information, and without its key when the backend generates it.
    static func createBody<E: ODataEntity>(_ entity: E, keyGeneratedByBackend: Bool) -> Entity {
        var body = entity.entity(includingNavigation: true)
        body.control = ControlInformation()
        if keyGeneratedByBackend {
            let keyNames = Set(entity.key.keyValues.map(\.name))
            body.properties.removeAll { keyNames.contains($0.name) }
        }
        return body
    }

    static func ifMatch(_ etag: String?) -> [String: String] {
        etag.map { ["If-Match": $0] } ?? [:]
    }

    static func entitySet<E: ODataEntity>(of type: E.Type) throws(DataServiceError) -> String {
        guard let name = E.defaultEntitySetName else {
            throw DataServiceError(
                .missingEntitySet, "\(E.odataTypeName) is in no single entity set: pass the entity set")
        }
        return name
    }

    static func target<E: ODataEntity>(_ set: TypedEntitySet<E>?) throws(DataServiceError) -> TypedEntitySet<E> {
        if let set { return set }
        return TypedEntitySet<E>(try entitySet(of: E.self))
    }

    static func query<E: ODataEntity>(of type: E.Type) throws(DataServiceError) -> TypedQuery<E> {
        TypedQuery<E>(path: TypedPath(try entitySet(of: E.self)))
    }

    /// The PATCH (V4) or MERGE (V2) of what changed, or nil when nothing did.
    static func updateRequest<E: ODataEntity>(
        _ entity: E, from original: E, in set: TypedEntitySet<E>?, version: ODataVersion
    ) throws(DataServiceError) -> (method: String, url: String, headers: [String: String], body: [UInt8])? {
        let target = try target(set)
        guard entity.key == original.key else {
            throw DataServiceError(
                .invalidValue, "\(target.name): an update cannot change the key; create a new entity instead")
        }
        if entity.entity(includingNavigation: true).navigation != original.entity(includingNavigation: true).navigation
        {
            throw DataServiceError(
                .invalidValue,
                "\(target.name): an update does not change navigation properties; use link or unlink")
        }
        let before = original.entity().properties
        let keyNames = Set(entity.key.keyValues.map(\.name))
        var changed: [NamedValue] = []
        for property in entity.entity().properties where !keyNames.contains(property.name) {
            if before.first(where: { $0.name == property.name })?.value != property.value { changed.append(property) }
        }
        guard !changed.isEmpty else { return nil }
        let body = Entity(properties: changed)
        let bytes = version.requestBody(body)
        return (
            version.isLegacy ? "MERGE" : "PATCH", target.path(entity.key).text(for: version),
            ifMatch(original.odataETag).merging(["Content-Type": "application/json"]) { $1 }, bytes
        )
    }

    static func linkRequest<E: ODataEntity, T: ODataEntity>(
        _ method: String, _ entity: E, _ navigation: String, _ target: T, _ set: TypedEntitySet<E>?,
        _ targetSet: TypedEntitySet<T>?, version: ODataVersion
    ) throws(DataServiceError) -> (method: String, url: String, headers: [String: String], body: [UInt8]) {
        let source = try Self.target(set)
        let destination = try Self.target(targetSet)
        let entityPath = source.path(entity.key).text(for: version)
        let targetPath = destination.path(target.key).text(for: version)
        let url = version.isLegacy ? "\(entityPath)/$links/\(navigation)" : "\(entityPath)/\(navigation)/$ref"
        let body = JSONValue.object([.init(version.isLegacy ? "uri" : "@odata.id", .string(targetPath))]).serialized
        return (method, url, ["Content-Type": "application/json"], Array(body.utf8))
    }
}

/// Tells live queries of one ``DataService`` about its own writes (used where the handler
/// does not report store changes: the online provider).
actor WriteSignals {
    private var continuations: [UUID: AsyncStream<Void>.Continuation] = [:]

    func signal() {
        for continuation in continuations.values { continuation.yield(()) }
    }

    func subscribe() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let id = UUID()
        continuations[id] = continuation
        continuation.onTermination = { [weak self] _ in Task { await self?.remove(id) } }
        return stream
    }

    private func remove(_ id: UUID) { continuations[id] = nil }

    var count: Int { continuations.count }
}
