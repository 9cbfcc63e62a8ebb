import Foundation
public import ODataCore
public import ODataStore

extension OfflineODataProvider: ODataRequestHandler {}

extension OfflineODataProvider {
    // MARK: Reads

    /// Reads from the local store with the full query language. Nothing reaches the network;
    /// what the defining queries do not cover reads as empty (or nil for one entity).
    public func read(_ url: String) async throws -> QueryResult {
        localReadCount += 1
        return try await readLocally(url).result
    }

    /// The entity sets a local read can find data in: those the defining queries fill (their
    /// own sets and the targets of their `$expand`s) and the provider's ErrorArchive,
    /// RequestQueue and EventLog. A read of any other set answers empty (SPEC §3), which a
    /// tool can point out. Needs an open store.
    public func readableEntitySets() throws -> Set<String> {
        try coveredSets(model: openStore().model).union(LocalSchema.systemSets)
    }

    /// Entity sets the defining queries fill (computed once per set of queries). A query that
    /// no longer binds to the backend's model (its set is gone, SPEC §14) fills nothing.
    func coveredSets(model: Model) throws -> Set<String> {
        if let cached = coveredSetsCache { return cached }
        let covered = definingQueries.reduce(into: Set<String>()) {
            $0.formUnion((try? DefiningQueries.coveredSets(of: $1.query, model: model)) ?? [])
        }
        coveredSetsCache = covered
        return covered
    }

    /// `Set(localKey)` → `Set(backendKey)`, loaded on first use and dropped after uploads.
    func keyMap(store: Store) async throws -> [String: String] {
        if let cached = keyMapCache { return cached }
        let map = try await store.read { reader in try RequestQueue.keyMap(reader.connection) }
        keyMapCache = map
        return map
    }

    /// A local read of `url`, with the content type when it is a media stream.
    func readLocally(_ url: String) async throws -> (result: QueryResult, contentType: String?) {
        try await waitWhileSwappingStores()
        return try await localReader(try openStore()).read(url)
    }

    /// The reader of the open store, with the provider's scope and key map.
    func localReader(_ store: Store) -> LocalReader {
        LocalReader(
            store: store, serviceRoot: serviceRoot, covered: { try await self.coveredSets(model: store.model) },
            keyMap: { try await self.keyMap(store: store) }, pageSize: parameters.pageSize)
    }

    /// A read link with a local temporary key keeps working after upload: it maps to the
    /// backend's key.
    func rewriteLocalKeys(_ url: String, store: Store) async throws -> String {
        try await localReader(store).rewriteLocalKeys(url)
    }

    // MARK: Request strings

    /// Runs an OData request string against the local store, as the app would send it online:
    /// GET reads; POST, PUT, PATCH, MERGE and DELETE change the store and are queued for upload.
    public func execute(
        method: String, url: String, headers: [String: String] = [:], body: [UInt8] = [],
        options: OfflineODataRequestOptions = OfflineODataRequestOptions()
    ) async throws -> OfflineODataResponse {
        try await reportingDiskFull {
            try await executeLocally(method: method, url: url, headers: headers, body: body, options: options)
        }
    }

    /// A store write that failed because the disk is full, as ``OfflineODataError/Code/diskFull``
    /// naming the store (SQLite rolled the write back: nothing was made or queued).
    func reportingDiskFull<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as DatabaseError where Self.isDiskFull(error) {
            throw OfflineODataError(
                .diskFull,
                "The disk that holds the store \(parameters.storeFile) is full: the change was not made and nothing "
                    + "was queued; reads, the RequestQueue and the ErrorArchive still work. Free space and try again")
        }
    }

    /// Runs a local write (anything that changes the store or the queue outside an upload or
    /// download). While a migration to a changed `$metadata` carries the queue over to a new
    /// store, it waits (it would go to the old store after its queue was read); the migration in
    /// turn waits for the writes running. The parts of a local `$batch` run inside their batch's
    /// turn (a task-local flag), so they never wait for a migration that waits for their batch.
    func gatedLocalWrite<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        if LocalWriteTurn.held { return try await body() }
        while migrating { try await Task.sleep(nanoseconds: 5_000_000) }
        localWritesInFlight += 1
        defer { localWritesInFlight -= 1 }
        return try await LocalWriteTurn.$held.withValue(true) { try await body() }
    }

    /// Waits while a breaking migration swaps the old store for the new one (the store is
    /// closed for that moment).
    func waitWhileSwappingStores() async throws {
        while swappingStores { try await Task.sleep(nanoseconds: 5_000_000) }
    }

    /// SQLITE_FULL (13), with or without an extended code.
    static func isDiskFull(_ error: DatabaseError) -> Bool { error.resultCode & 0xff == 13 }

    private func executeLocally(
        method: String, url: String, headers: [String: String], body: [UInt8],
        options: OfflineODataRequestOptions
    ) async throws -> OfflineODataResponse {
        if method.uppercased() != "GET" {
            return try await gatedLocalWrite {
                try await executeWrite(method: method, url: url, headers: headers, body: body, options: options)
            }
        }
        try await waitWhileSwappingStores()
        let store = try openStore()
        let model = store.model
        let (result, contentType) = try await readLocally(url)
        // A media entity's `$value`: the stream itself, with its content type.
        if let contentType, case .value(.primitive(.binary(let bytes))) = result {
            return OfflineODataResponse(
                status: 200, body: Array(bytes), result: result, headers: ["Content-Type": contentType])
        }
        return OfflineODataResponse(
            status: result == .entity(nil) ? 404 : 200, body: Self.encode(result, model: model), result: result)
    }

    /// A local write (or a `$batch` of them) through ``gatedLocalWrite(_:)``.
    private func executeWrite(
        method: String, url: String, headers: [String: String], body: [UInt8],
        options: OfflineODataRequestOptions
    ) async throws -> OfflineODataResponse {
        let store = try openStore()
        let model = store.model
        let verb = method.uppercased()
        guard ["POST", "PUT", "PATCH", "MERGE", "DELETE"].contains(verb) else {
            throw OfflineODataError(.invalidRequest, "\(method) is not an OData method")
        }
        if url == "$batch" || url.hasSuffix("/$batch") {
            guard verb == "POST" else {
                throw OfflineODataError(.invalidRequest, "\(method) $batch: a batch is sent with POST")
            }
            let response = try await executeBatch(headers: headers, body: body, options: options)
            // A batch may touch any set (its parts are not resolved again here).
            publishChange(OfflineODataStoreChange(origin: .localWrite, entitySets: nil))
            return response
        }
        // A local key that the backend has replaced still names the entity.
        let url = try await rewriteLocalKeys(url, store: store)
        var change = try LocalChange.makeChange(
            method: verb, url: url, headers: headers, body: body, options: options, model: model,
            serviceRoot: serviceRoot, keyMap: [:])
        // Entities the body links to may carry local keys the backend has replaced: only then
        // is the key map read and the change made again with it.
        if change.target.isRef || !change.binds.isEmpty {
            let keyMap = try await store.read { reader in try RequestQueue.keyMap(reader.connection) }
            if !keyMap.isEmpty {
                change = try LocalChange.makeChange(
                    method: verb, url: url, headers: headers, body: body, options: options, model: model,
                    serviceRoot: serviceRoot, keyMap: keyMap)
            }
        }
        let result = try await apply(change, store: store)
        // The written sets are worked out (a parse of the URL) only when someone observes.
        let archive = change.target.entitySet == LocalSchema.errorArchive
        publishChange(
            OfflineODataStoreChange(
                origin: archive ? .undo : .localWrite,
                entitySets: archive || changeSubscribers.isEmpty
                    ? nil : writtenSets(method: verb, url: url, model: model)))
        return OfflineODataResponse(
            status: result == nil ? 204 : 201, body: result.map { Self.encode(.entity($0), model: model) } ?? [],
            result: result.map { .entity($0) })
    }

    static func encode(_ result: QueryResult, model: Model) -> [UInt8] {
        let legacy = model.version.isLegacy
        switch result {
        case .collection(let collection):
            return legacy ? V2JSONWriter().write(collection) : V4JSONWriter().write(collection)
        case .entity(let entity?): return legacy ? V2JSONWriter().write(entity) : V4JSONWriter().write(entity)
        case .entity(nil): return []
        case .value(let value): return V4JSONWriter().writeValue(value)
        case .count(let count): return Array("\(count)".utf8)
        case .references(let ids):
            return Array(
                JSONValue.object([.init("value", .array(ids.map { .object([.init("@odata.id", .string($0))]) }))])
                    .serialized.utf8)
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
    public func createEntity(
        _ entity: Entity, in entitySet: String, options: OfflineODataRequestOptions = OfflineODataRequestOptions()
    ) async throws -> Entity {
        let model = try openStore().model
        let response = try await execute(
            method: "POST", url: entitySet, body: Self.requestBody(entity, model: model), options: options)
        guard case .entity(let created?)? = response.result else {
            throw OfflineODataError(.store, "The created entity could not be read back")
        }
        return created
    }

    /// Updates an entity: merge (PATCH) by default, replace (PUT) when `replace` is true.
    public func updateEntity(
        _ entity: Entity, in entitySet: String, replace: Bool = false,
        options: OfflineODataRequestOptions = OfflineODataRequestOptions()
    ) async throws {
        let model = try openStore().model
        guard let key = Keys.key(of: entity, in: entitySet, model: model) else {
            throw OfflineODataError(.invalidRequest, "The entity has no key for \(entitySet)")
        }
        var body = entity
        body.properties.removeAll { key[$0.name] != nil }
        _ = try await execute(
            method: replace ? "PUT" : (model.version.isLegacy ? "MERGE" : "PATCH"),
            url: entitySet + Keys.predicate(key, in: entitySet, model: model),
            body: Self.requestBody(body, model: model), options: options)
    }

    /// Deletes an entity by key.
    public func deleteEntity(
        in entitySet: String, key: [String: PrimitiveValue],
        options: OfflineODataRequestOptions = OfflineODataRequestOptions()
    ) async throws {
        let model = try openStore().model
        _ = try await execute(
            method: "DELETE", url: entitySet + Keys.predicate(key, in: entitySet, model: model), options: options)
    }

    /// Links `key` of `entitySet` through `navigation` to another entity.
    public func createLink(
        from entitySet: String, key: [String: PrimitiveValue], navigation: String, to targetSet: String,
        targetKey: [String: PrimitiveValue], options: OfflineODataRequestOptions = OfflineODataRequestOptions()
    ) async throws {
        let model = try openStore().model
        let body = JSONValue.object([
            .init("@odata.id", .string(targetSet + Keys.predicate(targetKey, in: targetSet, model: model)))
        ]).serialized
        _ = try await execute(
            method: "POST", url: entitySet + Keys.predicate(key, in: entitySet, model: model) + "/\(navigation)/$ref",
            body: Array(body.utf8), options: options)
    }

    /// Removes a link created by ``createLink(from:key:navigation:to:targetKey:options:)``.
    public func deleteLink(
        from entitySet: String, key: [String: PrimitiveValue], navigation: String, to targetSet: String,
        targetKey: [String: PrimitiveValue], options: OfflineODataRequestOptions = OfflineODataRequestOptions()
    ) async throws {
        let model = try openStore().model
        _ = try await execute(
            method: "DELETE",
            url: entitySet + Keys.predicate(key, in: entitySet, model: model) + "/\(navigation)"
                + Keys.predicate(targetKey, in: targetSet, model: model) + "/$ref", options: options)
    }

    /// Creates a media entity from its stream (`POST Set` with the media as the body), with a
    /// local temporary key until the upload brings the backend's. `slug` goes to the backend
    /// as the `Slug` header (RFC 5023), percent-encoded. Set the entity's properties with a
    /// later ``updateEntity(_:in:replace:options:)``: it is sent after the create.
    @discardableResult
    public func createMediaEntity(
        in entitySet: String, contentType: String, body: [UInt8], slug: String? = nil,
        options: OfflineODataRequestOptions = OfflineODataRequestOptions()
    ) async throws -> Entity {
        guard !LocalChange.isJSON(contentType) else {
            throw OfflineODataError(
                .invalidRequest,
                "A media stream of \(entitySet) cannot have the content type \(contentType): that is an entity")
        }
        var headers = ["Content-Type": contentType]
        if let slug { headers["Slug"] = slug.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? slug }
        let response = try await execute(method: "POST", url: entitySet, headers: headers, body: body, options: options)
        guard case .entity(let created?)? = response.result else {
            throw OfflineODataError(.store, "The created media entity could not be read back")
        }
        return created
    }

    /// Replaces the media stream of a media entity (`PUT Set(key)/$value`).
    public func updateMediaStream(
        in entitySet: String, key: [String: PrimitiveValue], contentType: String, body: [UInt8],
        options: OfflineODataRequestOptions = OfflineODataRequestOptions()
    ) async throws {
        let model = try openStore().model
        _ = try await execute(
            method: "PUT", url: entitySet + Keys.predicate(key, in: entitySet, model: model) + "/$value",
            headers: ["Content-Type": contentType], body: body, options: options)
    }

    /// The media stream of a media entity from the store, with its content type; nil when the
    /// entity is not in the store. A stream that was not retrieved is an error that says so.
    public func readMediaStream(
        in entitySet: String, key: [String: PrimitiveValue]
    ) async throws -> (contentType: String, body: [UInt8])? {
        let store = try openStore()
        let url = try await rewriteLocalKeys(
            entitySet + Keys.predicate(key, in: entitySet, model: store.model) + "/$value", store: store)
        switch try await localReader(store).mediaStream(url) {
        case .stream(let contentType, let body)?: return (contentType, body)
        case .missing?: return nil
        case nil: throw OfflineODataError(.invalidRequest, "\(entitySet) entities have no media stream")
        }
    }

    static func requestBody(_ entity: Entity, model: Model) -> [UInt8] {
        model.version.requestBody(entity)
    }
}

/// Whether the current task runs inside a local write's turn (see `gatedLocalWrite`).
enum LocalWriteTurn {
    @TaskLocal static var held = false
}
