import Crypto
import Foundation
import ODataCore
import ODataStore

/// A change of the backend's `$metadata`, found by a download and taken by the store (SPEC §14).
///
/// Every download reads `$metadata` first: conditionally when the backend gave an ETag, and
/// compared by its SHA-256 otherwise. When it changed, ``Model/changes(since:)`` says how:
/// - **additive** (and neutral) changes migrate the store in place, in one transaction: new
///   tables and columns, the new model, and the delta links of the defining queries whose
///   types gained properties forgotten, so that the download that follows reads them in full.
///   The queue is untouched.
/// - **breaking** changes build a new store beside the old one (`<store>-migrating`): a full
///   download with the new model, then the old queue, kept state, key map, ErrorArchive and
///   EventLog carried over and every queued request replayed onto the new store in order.
///   A request that no longer fits is archived with `MetadataChanged`, its dependants with
///   `DependencyFailed`. Then the new file replaces the old one with one `rename`.
///
/// A marker file (`<store>-migration`) exists from before the new store is made until after
/// the rename: an open that finds it removes what is left of the new store. So a `kill -9`
/// leaves the old store with its whole queue (before the rename) or the new store with the
/// replayed queue (after it). Local writes wait while the queue is carried over.
struct MetadataMigration: Sendable {
    /// The `$metadata` a download fetched, when it differs from the store's.
    struct Fetched: Sendable {
        var hash: String
        var etag: String?
        /// The backend's model with the provider's own entity sets.
        var model: Model
        var changes: [ModelChange]
        var isBreaking: Bool { changes.contains { $0.kind == .breaking } }
    }

    /// The steps of a download whose `$metadata` changed additively.
    static let additivePlan: [OfflineODataProgressStep] = [.loadingMetadata, .buildingEntityStore] + Downloader.plan
    /// The steps of a download whose `$metadata` changed in a way that needs a new store.
    static let breakingPlan: [OfflineODataProgressStep] = [
        .loadingMetadata, .creatingBootStrapDatabase, .creatingRequestQueueDatabase, .processingDefiningQueries,
        .receivingDataFromServer, .buildingEntityStore, .analyzingReceivedData, .reapplyingChanges,
    ]

    /// The SHA-256 of a `$metadata` document, in hex.
    static func hash(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).map { byte in
            let text = String(byte, radix: 16)
            return byte < 16 ? "0" + text : text
        }.joined()
    }

    // MARK: Detection

    /// Reads `$metadata` and compares it with what the store follows; nil when nothing that
    /// matters changed (the new hash or ETag is then recorded).
    static func check(store: Store, on provider: isolated OfflineODataProvider) async throws -> Fetched? {
        let recorded = try await store.read { reader in try LocalSchema.metadataFingerprint(reader.connection) }
        var headers = ["Accept": "application/xml"]
        if recorded.hash != nil, let etag = recorded.etag { headers["If-None-Match"] = etag }
        let response = try await provider.send(
            method: "GET", url: try provider.withStreamParameters("$metadata"), headers: headers)
        if response.status == 304, recorded.hash != nil { return nil }
        guard response.status == 200 else {
            throw OfflineODataProvider.backendError(
                response, method: "GET", url: provider.absoluteURL("$metadata"))
        }
        let hash = Self.hash(response.body)
        let etag = response.headers["ETag"]
        if hash == recorded.hash {
            if etag != recorded.etag {
                try await store.write { writer in try LocalSchema.recordMetadata(writer, hash: hash, etag: etag) }
            }
            return nil
        }
        let backendModel: Model
        do {
            backendModel = try MetadataParser().parse(Data(response.body))
        } catch {
            throw OfflineODataError(
                .backend,
                "The backend's $metadata at \(provider.serviceRoot)$metadata is not valid: \(error); "
                    + "nothing was downloaded and the store is unchanged")
        }
        let model = try LocalSchema.extend(backendModel)
        var changes = model.changes(since: store.model)
        // Models are compared, not headers: a backend that negotiates its version (4.01 to one
        // request, 4.0 to the next) changes nothing. Only another protocol (V2 and V4) does.
        if backendModel.version.isLegacy != store.model.version.isLegacy {
            changes.insert(
                ModelChange(
                    .breaking, "$metadata",
                    "OData version changed from \(store.model.version) to \(backendModel.version)"),
                at: 0)
        }
        guard !changes.isEmpty else {
            try await store.write { writer in try LocalSchema.recordMetadata(writer, hash: hash, etag: etag) }
            return nil
        }
        return Fetched(hash: hash, etag: etag, model: model, changes: changes)
    }

    // MARK: Additive: in place

    /// Migrates `store` in place to an additive change (see the type's description); returns
    /// the store on the new model and what was done.
    static func migrateInPlace(
        _ fetched: Fetched, store: Store, queries: [OfflineODataDefiningQuery]
    ) async throws -> (Store, OfflineODataMetadataChange) {
        let model = fetched.model
        let grown = Set(fetched.changes.filter { $0.kind == .additive }.map { String($0.subject.prefix { $0 != "/" }) })
        var grownSets: Set<String> = []
        for container in model.entityContainers {
            for set in container.entitySets
            where !typesHeld(bySet: set.entityType, model: model).isDisjoint(with: grown) {
                grownSets.insert(set.name)
            }
        }
        let reRead = queries.filter { query in
            guard let covered = try? DefiningQueries.coveredSets(of: query.query, model: model) else { return false }
            return !covered.isDisjoint(with: grownSets)
        }.map(\.name)
        let hash = fetched.hash
        let etag = fetched.etag
        let migrated = try await store.migratingInPlace(to: model) { writer in
            try DefiningQueries.forgetDeltaLinks(named: reRead, writer)
            try LocalSchema.recordMetadata(writer, hash: hash, etag: etag)
        }
        let kind: OfflineODataMetadataChange.Kind =
            fetched.changes.contains { $0.kind == .additive } ? .additive : .neutral
        return (
            migrated,
            OfflineODataMetadataChange(kind: kind, changes: fetched.changes, reReadDefiningQueries: reRead)
        )
    }

    /// The entity type of a set, its base types and the complex types its properties hold (and
    /// theirs), by qualified name: what a change to any of them changes in the set's rows.
    static func typesHeld(bySet entityType: String, model: Model) -> Set<String> {
        var names: Set<String> = []
        var pending: [String] = []
        let entityTypes = model.schemas.flatMap(\.entityTypes)
        let complexTypes = model.schemas.flatMap(\.complexTypes)
        // The set's type with its base types, and the types derived from it (a set holds them).
        for type in entityTypes {
            let chain = model.entityTypeChain(type)
            guard chain.contains(where: { $0.qualifiedName == entityType }) else { continue }
            for link in chain where !names.contains(link.qualifiedName) {
                names.insert(link.qualifiedName)
                pending += link.properties.map(\.type.name)
            }
        }
        // The complex types their properties hold, with base and derived types, transitively.
        var seen: Set<String> = []
        while let next = pending.popLast() {
            guard model.complexType(next) != nil, seen.insert(next).inserted else { continue }
            for complex in complexTypes {
                let chain = model.complexTypeChain(complex)
                guard chain.contains(where: { $0.qualifiedName == next }) else { continue }
                for link in chain {
                    names.insert(link.qualifiedName)
                    pending += link.properties.map(\.type.name)
                }
            }
        }
        return names
    }

    // MARK: Breaking: a new store

    /// Builds the new store beside the old one, carries the queue over, and puts it in the old
    /// one's place (see the type's description). On return the provider has the new store open.
    static func rebuild(
        _ fetched: Fetched, old: Store, progress: ProgressReporter, on provider: isolated OfflineODataProvider
    ) async throws -> OfflineODataMetadataChange {
        let path = provider.parameters.storeFile
        let newPath = StoreFiles.migratingStore(path)
        let marker = StoreFiles.migrationMarker(path)
        let model = fetched.model
        var kept: [OfflineODataDefiningQuery] = []
        var leftOut: [String: String] = [:]
        for query in provider.definingQueries {
            if let problem = DefiningQueries.bindingProblem(of: query.query, model: model) {
                leftOut[query.name] = problem
            } else {
                kept.append(query)
            }
        }
        // Indexes the app declared on what the new model no longer has are left out too.
        var indexes = provider.parameters.indexes ?? [:]
        if let schema = try? StoreSchema(model: model) {
            for (set, paths) in indexes {
                let columns = Set(schema.table(forEntitySet: set)?.columns.map(\.name) ?? [])
                let fitting = paths.filter { path in !path.isEmpty && columns.contains(path.joined(separator: "/")) }
                if fitting.count != paths.count {
                    provider.logger.warning(
                        "An index the app declares no longer fits the backend's $metadata; the new store leaves it out",
                        metadata: ["entity-set": .string(set)])
                }
                indexes[set] = fitting.isEmpty ? nil : fitting
            }
        }
        StoreFiles.remove(newPath)
        guard FileManager.default.createFile(atPath: marker, contents: Data("breaking".utf8)) else {
            throw OfflineODataError(.store, "Cannot create \(marker) beside the store to migrate it")
        }
        let allQueries = provider.definingQueries
        let oldVersion = provider.serviceVersion
        provider.rebuildingStore = true
        defer { provider.rebuildingStore = false }
        func discard() {
            provider.definingQueries = allQueries
            provider.coveredSetsCache = nil
            provider.serviceVersion = oldVersion
            StoreFiles.remove(newPath)
            try? FileManager.default.removeItem(atPath: marker)
        }
        provider.report(progress, .creatingBootStrapDatabase)
        let fresh: Store
        do {
            provider.definingQueries = kept
            provider.coveredSetsCache = nil
            // The new store is filled in the new model's version (V2 and V4 read differently).
            provider.serviceVersion = model.version
            fresh = try await Downloader(serviceRoot: provider.serviceRoot, progress: progress).fillNewStore(
                at: newPath, model: model, key: provider.parameters.storeEncryptionKey, declaredIndexes: indexes,
                on: provider)
        } catch {
            discard()
            throw error
        }
        CrashPoint.reach("migration-filled")
        // From here until the new store is in place, local writes wait (they would go to the
        // old store after its queue was read).
        provider.migrating = true
        defer { provider.migrating = false }
        var failures: [OfflineODataFailedRequest] = []
        do {
            while provider.localWritesInFlight > 0 { try await Task.sleep(nanoseconds: 5_000_000) }
            provider.report(progress, .reapplyingChanges)
            let carried = try await old.read { reader in try CarriedState(reader) }
            let oldModel = old.model
            let root = provider.serviceRoot
            let hash = fetched.hash
            let etag = fetched.etag
            let builder = provider.parameters.enableTransactionBuilder
            let summary = OfflineODataMetadataChange(
                kind: .breaking, changes: fetched.changes, leftOutDefiningQueries: leftOut
            ).summary
            let time = OfflineODataProvider.timestamp()
            failures = try await fresh.write { writer in
                let failures = try carried.replay(
                    onto: writer, oldModel: oldModel, serviceRoot: root, transactionBuilder: builder)
                try LocalSchema.recordMetadata(writer, hash: hash, etag: etag)
                try LocalSchema.logEvent(writer, type: "MetadataChanged", details: summary, time: time)
                return failures
            }
            CrashPoint.reach("migration-carried")
            // Both files alone hold their stores: the old one may then lose its log files, and
            // the new one moves without them.
            try await checkpoint(fresh)
            fresh.close()
            try await checkpoint(old)
        } catch {
            fresh.close()
            discard()
            throw error
        }
        CrashPoint.reach("migration-checkpointed")
        // The old store closes without telling live queries: they read the new one next (local
        // reads wait for the swap).
        provider.swappingStores = true
        defer { provider.swappingStores = false }
        provider.store?.close()
        provider.store = nil
        provider.keyMapCache = nil
        provider.coveredSetsCache = nil
        let newLog = (try? FileManager.default.attributesOfItem(atPath: newPath + "-wal")[.size] as? Int) ?? 0
        guard newLog == 0 else {
            discard()
            try await provider.openExisting(path)
            throw OfflineODataError(
                .store, "The migrated store \(newPath) kept a write-ahead log after it was closed; it was discarded")
        }
        for suffix in ["-wal", "-shm"] {
            try? FileManager.default.removeItem(atPath: newPath + suffix)
            try? FileManager.default.removeItem(atPath: path + suffix)
        }
        CrashPoint.reach("migration-old-closed")
        guard rename(newPath, path) == 0 else {
            let reason = String(cString: strerror(errno))
            discard()
            try await provider.openExisting(path)
            throw OfflineODataError(.store, "The migrated store \(newPath) could not replace \(path): \(reason)")
        }
        CrashPoint.reach("migration-renamed")
        try? FileManager.default.removeItem(atPath: marker)
        let change = OfflineODataMetadataChange(
            kind: .breaking, changes: fetched.changes, leftOutDefiningQueries: leftOut,
            archivedRequests: failures.map(\.requestID))
        // The new store is in place whatever happens next: the app hears of its archive rows.
        for failure in failures { provider.emit(.requestFailed(failure)) }
        try await provider.openExisting(path)
        return change
    }

    /// Copies the write-ahead log of `store` into its file, retrying for a while when a reader
    /// holds it.
    private static func checkpoint(_ store: Store) async throws {
        var attempt = 0
        while true {
            do {
                try await store.checkpoint()
                return
            } catch let error as StoreError where error.code == .conflict && attempt < 40 {
                attempt += 1
                try await Task.sleep(nanoseconds: 50_000_000)
            }
        }
    }
}

/// What a store keeps beside its entities and carries over to a store built for a new model:
/// the queue, the state kept for undo, the key map, the streams kept before media changes,
/// the ErrorArchive, the EventLog, and the next local key.
struct CarriedState: Sendable {
    struct Table: Sendable {
        var name: String
        var columns: [String]
        var rows: [[DatabaseValue]]
    }

    var tables: [Table] = []
    /// `oo_meta` rows the new store takes from the old one (the next local key, the times of the
    /// last upload and download, …): all but those that describe the new store itself.
    var meta: [(key: DatabaseValue, value: DatabaseValue)] = []
    static let ownMeta: Set<String> = ["serviceRoot", "filling", "metadataHash", "metadataETag"]

    init(_ reader: StoreReader) throws {
        let connection = reader.connection
        // With the requests of other users set aside on a shared device (SPEC §16).
        var names = [
            "oo_queue", "oo_original", "oo_key_map", "oo_stream_original", "oo_conflict", "oo_parked",
            "oo_parked_archive", "oo_parked_conflict", "oo_parked_original", "oo_parked_stream_original",
        ]
        for set in [LocalSchema.errorArchive, LocalSchema.eventLog] {
            if let table = reader.schema.table(forEntitySet: set) { names.append(table.name) }
        }
        for name in names {
            let columns = try connection.query("PRAGMA table_info(\(StoreSchema.quote(name)))").compactMap { row in
                if row.count > 1, case .text(let column) = row[1] { return column }
                return nil
            }
            guard !columns.isEmpty else { continue }
            let rows = try connection.query(
                "SELECT \(columns.map(StoreSchema.quote).joined(separator: ", ")) FROM \(StoreSchema.quote(name))")
            tables.append(Table(name: name, columns: columns, rows: rows))
        }
        for row in try connection.query("SELECT key, value FROM oo_meta") where row.count == 2 {
            guard case .text(let key) = row[0], !Self.ownMeta.contains(key) else { continue }
            meta.append((row[0], row[1]))
        }
    }

    /// Writes the carried state into a store just filled for a new model, then replays every
    /// queued request in order onto the downloaded rows. Returns the requests archived because
    /// they no longer fit (and their dependants), in queue order.
    ///
    /// Requests uploaded together as one change set (a transaction) stay together: when one of
    /// them no longer fits, all of them are archived (the others as depending on it), as an
    /// upload never sends part of a change set.
    func replay(
        onto writer: StoreWriter, oldModel: Model, serviceRoot: String, transactionBuilder: Bool
    ) throws -> [OfflineODataFailedRequest] {
        let model = writer.schema.model
        let connection = writer.connection
        // The new store's EventLog has its fill; the old one's history comes instead.
        if let log = writer.schema.table(forEntitySet: LocalSchema.eventLog) {
            _ = try connection.execute("DELETE FROM \(StoreSchema.quote(log.name))")
        }
        for table in tables where !table.rows.isEmpty {
            if table.name.hasPrefix("oo_parked") {
                try connection.execute(
                    "CREATE TABLE IF NOT EXISTS \(StoreSchema.quote(table.name)) ("
                        + table.columns.map(StoreSchema.quote).joined(separator: ", ") + ")")
            }
            let present = Set(
                try connection.query("PRAGMA table_info(\(StoreSchema.quote(table.name)))").compactMap { row in
                    if row.count > 1, case .text(let column) = row[1] { return column }
                    return nil
                })
            let indexes = table.columns.indices.filter { present.contains(table.columns[$0]) }
            let sql =
                "INSERT INTO \(StoreSchema.quote(table.name)) ("
                + indexes.map { StoreSchema.quote(table.columns[$0]) }.joined(separator: ", ") + ") VALUES ("
                + indexes.map { _ in "?" }.joined(separator: ", ") + ")"
            for row in table.rows { _ = try connection.execute(sql, indexes.map { row[$0] }) }
        }
        for (key, value) in meta {
            _ = try connection.execute("INSERT OR REPLACE INTO oo_meta (key, value) VALUES (?, ?)", [key, value])
        }
        let queue = RequestQueue(writer, model: model, serviceRoot: serviceRoot)
        // The state kept for each changed entity becomes the backend's, as a download makes it:
        // the rows just downloaded (gone when the new store has no such entity).
        var keptFor: Set<String> = []
        for row in try connection.query(
            "SELECT entity_set, entity_key FROM oo_original UNION SELECT entity_set, entity_key FROM oo_queue "
                + "WHERE original_existed IS NOT NULL AND entity_set IS NOT NULL")
        {
            guard case .text(let set) = row[0], case .text(let predicate) = row[1] else { continue }
            keptFor.insert(set + predicate)
        }
        for reference in keptFor.sorted() {
            guard let (set, key) = Keys.parse(reference, model: model, serviceRoot: ""),
                model.entitySet(set) != nil
            else { continue }
            let predicate = Keys.predicate(key, in: set, model: model)
            let entity = try writer.rowid(in: set, key: key).flatMap { try writer.reader.entity(in: set, rowid: $0) }
            try queue.refreshKeptState(entity, in: set, predicate: predicate)
        }
        let keyMap = try RequestQueue.keyMap(connection)
        let requests = try RequestQueue.load(connection, statuses: ["pending", "failed"])
        var problems: [Int64: String] = [:]
        for request in requests where !request.failed {
            if let problem = Self.problem(
                of: request, model: model, oldModel: oldModel, serviceRoot: serviceRoot, keyMap: keyMap)
            {
                problems[request.id] = problem
            }
        }
        var entries = QueueEntry.analyse(requests, model: model, serviceRoot: serviceRoot, keyMap: keyMap)
        var position: [Int64: Int] = [:]
        for (index, entry) in entries.enumerated() { position[entry.id] = index }
        // Why each request is archived: its own problem, or the request it depends on.
        var archived: [Int64: (code: String, status: Int, message: String)] = [:]
        var failedEntities: [String: Int64] = [:]
        let units = QueueAlgorithms.units(entries.filter { !$0.request.failed }, builder: transactionBuilder)
        for unit in units {
            var cause: Int64?
            for entry in unit {
                if let problem = problems[entry.id] {
                    archived[entry.id] = (
                        "MetadataChanged", 0,
                        "The backend's $metadata changed and this request no longer fits it: \(problem)"
                    )
                    cause = cause ?? entry.id
                } else if let failedID = entry.touched.lazy.compactMap({ failedEntities[$0] }).first {
                    archived[entry.id] = (
                        "DependencyFailed", 424,
                        "Not sent: it depends on request \(failedID), which no longer fits the backend's $metadata"
                    )
                    cause = cause ?? failedID
                }
            }
            guard let cause else { continue }
            // The rest of the change set goes with it.
            for entry in unit where archived[entry.id] == nil {
                archived[entry.id] = (
                    "DependencyFailed", 424,
                    "Not sent: it is in one change set with request \(cause), which no longer fits the backend's "
                        + "$metadata"
                )
            }
            for entry in unit {
                for reference in entry.produced { failedEntities[reference] = failedEntities[reference] ?? entry.id }
            }
        }
        var failures: [OfflineODataFailedRequest] = []
        for entry in entries {
            guard let (code, status, message) = archived[entry.id], let index = position[entry.id] else { continue }
            entries[index].request.failed = true
            _ = try connection.execute("UPDATE oo_queue SET status = 'failed' WHERE id = ?", [.integer(entry.id)])
            let request = entry.request
            let body =
                request.body.isEmpty || request.mediaType != nil ? nil : String(decoding: request.body, as: UTF8.self)
            let failure = OfflineODataFailedRequest(
                httpStatus: status, requestID: request.id, customTag: request.options.customTag, code: code,
                message: message, innerError: nil, method: request.method, url: request.url, body: body)
            try LocalSchema.archive(failure, domain: "OfflineOData", writer)
            failures.append(failure)
        }
        // Every changed entity goes back to its downloaded state, with the requests applied
        // again on top (a request that cannot be applied any more changes nothing).
        var affected: Set<String> = []
        for entry in entries {
            for reference in entry.changed {
                guard let (set, _) = Keys.parse(reference, model: model, serviceRoot: ""), model.entitySet(set) != nil
                else { continue }
                affected.insert(reference)
            }
        }
        try queue.rebuild(affected, remaining: entries, keyMap: keyMap)
        return failures
    }

    /// Why a queued request does not fit `model` (its set, key, a property or a value), or nil.
    /// A create, or a PUT that replaces the entity, must also give every property that `model`
    /// requires and `oldModel` did not (a non-nullable property added): it was made without it.
    static func problem(
        of request: QueuedRequest, model: Model, oldModel: Model, serviceRoot: String, keyMap: [String: String]
    ) -> String? {
        if let set = request.entitySet, model.entitySet(set) == nil {
            return "the entity set \(set) is no longer in the backend's $metadata"
        }
        do {
            let change = try LocalChange.replaying(request, model: model, serviceRoot: serviceRoot, keyMap: keyMap)
            if let entity = change.entity, request.mediaType == nil, request.method != "DELETE" {
                let set =
                    change.target.navigation.flatMap {
                        model.targetEntitySet(from: change.target.entitySet, navigationPath: $0)?.name
                    } ?? change.target.entitySet
                if let type = model.entityType(ofEntitySet: set) {
                    try model.checkWritable(entity, as: type.qualifiedName)
                    if request.method == "POST" || request.method == "PUT" {
                        let before = Set(
                            oldModel.entityType(type.qualifiedName).map { old in
                                oldModel.entityTypeChain(old).flatMap(\.properties).map(\.name)
                            } ?? [])
                        let required = model.entityTypeChain(type).flatMap(\.properties).filter { property in
                            !property.nullable && !before.contains(property.name) && property.facets.defaultValue == nil
                        }
                        if let missing = required.first(where: { entity[$0.name] == nil }) {
                            return "\(type.qualifiedName)/\(missing.name) is now required (not nullable) and the "
                                + "request does not give it"
                        }
                    }
                }
            }
            return nil
        } catch let error as OfflineODataError {
            return error.message
        } catch {
            return "\(error)"
        }
    }
}
