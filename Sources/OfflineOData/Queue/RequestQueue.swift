import Foundation
import ODataCore
import ODataStore

/// The persistent request queue and the state kept for undo, seen through one write
/// transaction of the store.
///
/// It owns the `oo_queue` rows (enqueue, load, remove; the RequestQueue and ErrorArchive
/// entity sets are views over them), the key map of created entities the backend re-keyed
/// (`oo_key_map`), and the state each changed entity had before its local changes
/// (`oo_original`, `oo_stream_original`, or the queue row of its first request), which undo,
/// ErrorArchive deletion and reverts go back to. The queue algorithms stay pure functions
/// over ``QueueEntry`` values (``QueueAlgorithms``); this type loads their input and writes
/// their result. Upload, download and local writes all reach the queue through it.
struct RequestQueue {
    let writer: StoreWriter
    let model: Model
    let serviceRoot: String

    init(_ writer: StoreWriter, model: Model, serviceRoot: String) {
        self.writer = writer
        self.model = model
        self.serviceRoot = serviceRoot
    }

    /// Local writes in the same transaction (rebuilding an entity applies its requests again).
    var local: LocalExecutor { LocalExecutor(writer, model: model, serviceRoot: serviceRoot) }

    // MARK: Queue rows

    func enqueue(_ request: QueuedRequest) throws {
        let headers = request.headersJSON
        func text(_ value: String?) -> DatabaseValue { value.map { .text($0) } ?? .null }
        _ = try writer.connection.execute(
            """
            INSERT INTO oo_queue (method, url, body, headers, entity_set, entity_key, is_create, local_key, transaction_id, custom_tag,
              upload_category, remove_after_upload, unmodifiable, repeat_id, cascade, original_existed, original, media_type, nested, status,
              owner)
              VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', (\(LocalSchema.currentOwner)))
            """,
            [
                .text(request.method), .text(request.url), .blob(request.body), .text(headers), text(request.entitySet),
                text(request.entityKey),
                .integer(request.isCreate ? 1 : 0), .integer(request.localKey ? 1 : 0),
                text(request.options.transactionID), text(request.options.customTag),
                text(request.options.uploadCategory), .integer(request.options.removeAfterUpload ? 1 : 0),
                .integer(request.options.unmodifiableRequest ? 1 : 0), text(request.repeatID),
                request.cascade.isEmpty
                    ? .null : .text(JSONValue.array(request.cascade.map { .string($0) }).serialized),
                request.original.map { .integer($0.existed ? 1 : 0) } ?? .null,
                request.original?.body.map { .blob($0) } ?? .null,
                text(request.mediaType),
                request.nested.isEmpty ? .null : .text(JSONValue.array(request.nested.map(\.json)).serialized),
            ])
    }

    /// Loads queued requests with the given status, in order.
    static func load(_ connection: Connection, status: String) throws -> [QueuedRequest] {
        try load(connection, statuses: [status])
    }

    /// Loads queued requests with any of the given statuses, in order; with `ids` (at most 500),
    /// only those among them.
    static func load(_ connection: Connection, statuses: [String], ids: [Int64]? = nil) throws -> [QueuedRequest] {
        let only = ids.map { " AND id IN (" + $0.map { _ in "?" }.joined(separator: ", ") + ")" } ?? ""
        let rows = try connection.query(
            """
            SELECT id, method, url, body, headers, entity_set, entity_key, is_create, local_key, transaction_id, custom_tag, upload_category,
              remove_after_upload, unmodifiable, repeat_id, first_sent, cascade, status, media_type, nested, owner
              FROM oo_queue WHERE status IN (\(statuses.map { _ in "?" }.joined(separator: ", ")))\(only) ORDER BY id
            """, statuses.map { .text($0) } + (ids ?? []).map { .integer($0) })
        return rows.map { row in
            func text(_ index: Int) -> String? { if case .text(let value) = row[index] { return value }; return nil }
            var headers: [String: String] = [:]
            if let json = text(4), let parsed = try? JSONValue.parse(Array(json.utf8)) {
                for member in parsed.objectMembers ?? [] { headers[member.name] = member.value.stringValue }
            }
            var body: [UInt8] = []
            if case .blob(let bytes) = row[3] { body = bytes }
            var options = OfflineODataRequestOptions(
                transactionID: text(9), unmodifiableRequest: row[13] == .integer(1), customTag: text(10),
                uploadCategory: text(11), removeAfterUpload: row[12] == .integer(1))
            options.customHeaders = headers
            var request = QueuedRequest(
                method: text(1) ?? "GET", url: text(2) ?? "", body: body, headers: headers, options: options)
            if case .integer(let id) = row[0] { request.id = id }
            request.entitySet = text(5)
            request.entityKey = text(6)
            request.isCreate = row[7] == .integer(1)
            request.localKey = row[8] == .integer(1)
            request.repeatID = text(14)
            request.firstSent = text(15)
            if let json = text(16), let parsed = try? JSONValue.parse(Array(json.utf8)) {
                request.cascade = (parsed.arrayValue ?? []).compactMap(\.stringValue)
            }
            request.failed = text(17) == "failed"
            request.mediaType = text(18)
            if let json = text(19), let parsed = try? JSONValue.parse(Array(json.utf8)) {
                request.nested = (parsed.arrayValue ?? []).compactMap(NestedCreate.init)
            }
            request.owner = text(20)
            return request
        }
    }

    /// Local references (`Set(-1)`) of created entities the backend has re-keyed → the backend's.
    static func keyMap(_ connection: Connection) throws -> [String: String] {
        var map: [String: String] = [:]
        for row in try connection.query("SELECT entity_set, local_key, server_key FROM oo_key_map") {
            if case .text(let set) = row[0], case .text(let local) = row[1], case .text(let server) = row[2] {
                map[set + local] = set + server
            }
        }
        return map
    }

    /// Forgets the re-keyed local references no queued request (pending or failed) names any
    /// more: by its entity, in its URL, body, cascade or nested creates. Without this the key map grows with every
    /// create ever uploaded. Run after a download: until then an app may still read or change
    /// an uploaded entity by the local key it had.
    static func pruneKeyMap(_ connection: Connection) throws -> Int {
        // Other users' requests set aside (SPEC §16) keep what they name too.
        var tables = ["oo_queue"]
        if try !connection.query("SELECT 1 FROM sqlite_master WHERE name = 'oo_parked'").isEmpty {
            tables.append("oo_parked")
        }
        let unnamed = tables.map { table in
            """
            NOT EXISTS (
              SELECT 1 FROM \(table) q WHERE (q.entity_set = oo_key_map.entity_set AND q.entity_key = oo_key_map.local_key)
                OR instr(q.url, oo_key_map.entity_set || oo_key_map.local_key) > 0
                OR instr(CAST(q.body AS TEXT), oo_key_map.entity_set || oo_key_map.local_key) > 0
                OR instr(q.cascade, oo_key_map.entity_set || oo_key_map.local_key) > 0
                OR instr(q.nested, oo_key_map.entity_set || oo_key_map.local_key) > 0)
            """
        }
        return try connection.execute("DELETE FROM oo_key_map WHERE " + unnamed.joined(separator: " AND "), [])
    }

    /// Removes a queued request. The state it kept for its entity moves to `oo_original`, where
    /// the entity's later requests (or a revert) still find it; what no request needs any more
    /// is removed by the caller's clean-up.
    func remove(_ id: Int64) throws {
        _ = try writer.connection.execute("DELETE FROM oo_conflict WHERE request_id = ?", [.integer(id)])
        _ = try writer.connection.execute(
            """
            INSERT OR IGNORE INTO oo_original (entity_set, entity_key, existed, body)
              SELECT entity_set, entity_key, original_existed, original FROM oo_queue
              WHERE id = ? AND original_existed IS NOT NULL AND entity_set IS NOT NULL AND entity_key IS NOT NULL
            """, [.integer(id)])
        _ = try writer.connection.execute("DELETE FROM oo_queue WHERE id = ?", [.integer(id)])
    }

    /// Keeps the downloaded state of an entity before its first local change (for undo and
    /// for reverting failed requests), in `oo_original`: for entities a request changes besides
    /// its own (deleted ones, cascades, link ends). An entity with queued or failed requests
    /// already has its state kept (in `oo_original` or in the queue row of its first request).
    ///
    /// Where the state of an entity is kept: ``keptState(_:predicate:writer:)``.
    func snapshot(_ entitySet: String, key: [String: PrimitiveValue]) throws {
        let predicate = Keys.predicate(key, in: entitySet, model: model)
        guard let state = try writer.reader.bookkeeping(in: entitySet, key: key), !state.pending, !state.inError,
            try !hasKeptState(entitySet, predicate: predicate),
            let entity = try writer.reader.entity(in: entitySet, rowid: state.rowid)
        else { return }
        _ = try writer.connection.execute(
            "INSERT INTO oo_original (entity_set, entity_key, existed, body) VALUES (?, ?, 1, ?)",
            [.text(entitySet), .text(predicate), .blob(V4JSONWriter().write(entity))])
    }

    /// A download found an entity with pending changes changed on the backend (`entity`), or
    /// gone there (nil): the state kept for it (where ``keptState(_:predicate:writer:)`` finds
    /// it) becomes the backend's, when the entity existed before its local changes.
    /// `created`: the backend took the entity's create, so its kept state changes even though
    /// it did not exist before.
    func refreshKeptState(_ entity: Entity?, in entitySet: String, predicate: String, created: Bool = false) throws {
        let existed: DatabaseValue = .integer(entity == nil ? 0 : 1)
        let body: DatabaseValue = entity.map { .blob(V4JSONWriter().write($0)) } ?? .null
        let condition = created ? "" : " AND existed = 1"
        let kept = try writer.connection.execute(
            "UPDATE oo_original SET existed = ?, body = ? WHERE entity_set = ? AND entity_key = ?" + condition,
            [existed, body, .text(entitySet), .text(predicate)])
        guard kept == 0, try !hasKeptState(entitySet, predicate: predicate) else { return }
        _ = try writer.connection.execute(
            """
            UPDATE oo_queue SET original_existed = ?, original = ? WHERE id = (SELECT id FROM oo_queue WHERE entity_set = ? AND entity_key = ?
              AND original_existed IS NOT NULL ORDER BY id LIMIT 1)
            """ + (created ? "" : " AND original_existed = 1"), [existed, body, .text(entitySet), .text(predicate)])
    }

    /// A request reached the backend while later requests of its entity wait (or failed; the
    /// caller checks): the state kept for their undo and revert becomes the entity's state on
    /// the backend after this request (its values merged or replaced, its new ETag, its stream;
    /// after a create, the backend's entity; after a delete, none). `server`: the entity the
    /// backend answered with, if any.
    /// A link change gave an entity a new ETag on the backend: the state kept for it (what an
    /// undo of its later local changes goes back to) takes the new ETag too.
    func renewKeptETag(_ etag: String, in entitySet: String, predicate: String) throws {
        guard let kept = try keptState(entitySet, predicate: predicate), kept.existed, let body = kept.body,
            var entity = try? V4JSONReader(model: model).readEntity(
                body, entityType: model.entitySet(entitySet)?.entityType)
        else { return }
        entity.control.etag = etag
        try refreshKeptState(entity, in: entitySet, predicate: predicate)
    }

    func advanceKeptState(
        after request: QueuedRequest, etag: String?, server: Entity?, in entitySet: String, predicate: String
    ) throws {
        // A link request changes links, which the kept values do not hold; only the new ETag
        // its answer may bring (the create of the same batch, advanced here after it, would
        // otherwise put the create's older ETag back).
        if request.isLinkRequest {
            if let etag { try renewKeptETag(etag, in: entitySet, predicate: predicate) }
            return
        }
        guard let kept = try keptState(entitySet, predicate: predicate) else { return }
        let entityType = model.entitySet(entitySet)?.entityType
        if request.method == "DELETE" {
            try refreshKeptState(nil, in: entitySet, predicate: predicate)
            return
        }
        if request.isCreate {
            // The backend's answer; else the create's own values; else (a media create answered
            // without a body) the entity by its key alone: it exists now either way.
            var created = server
            if created == nil, request.mediaType == nil {
                created = try? model.readEntity(request.body, entityType: entityType)
            }
            if created == nil, let (_, key) = Keys.parse(entitySet + predicate, model: model, serviceRoot: "") {
                created = Entity(
                    properties: key.sorted { $0.key < $1.key }.map {
                        NamedValue(name: $0.key, value: .primitive($0.value))
                    })
            }
            guard var created else { return }
            if let etag { created.control.etag = etag }
            created.navigation = []
            try refreshKeptState(created, in: entitySet, predicate: predicate, created: true)
            return
        }
        guard kept.existed, let body = kept.body,
            var entity = try? V4JSONReader(model: model).readEntity(body, entityType: entityType)
        else { return }
        if request.mediaType != nil {
            // A new stream: it is the one to go back to now.
            try writeStream(
                entitySet, predicate: predicate, contentType: request.mediaType, body: request.body,
                table: "oo_stream_original")
        } else if let changed = server ?? (try? model.readEntity(request.body, entityType: entityType)) {
            let keys = Set(model.entityType(ofEntitySet: entitySet).map { model.key(of: $0).map(\.name) } ?? [])
            if request.method == "PUT" && server == nil {
                entity.properties.removeAll { !keys.contains($0.name) }
            }
            for property in changed.properties where !keys.contains(property.name) {
                entity.properties.removeAll { $0.name == property.name }
                entity.properties.append(property)
            }
        } else {
            return
        }
        if let etag = etag ?? server?.control.etag { entity.control.etag = etag }
        try refreshKeptState(entity, in: entitySet, predicate: predicate)
    }

    /// The ETag in the state an entity had before its local changes (`oo_original`, else the
    /// queue row of its earliest request that kept one). Nil: nothing kept, or no ETag.
    static func keptETag(
        _ connection: Connection, in entitySet: String, predicate: String, model: Model
    ) throws -> String? {
        try keptEntity(connection, in: entitySet, predicate: predicate, model: model)?.entity?.control.etag
    }

    /// The state an entity had before its local changes, as ``keptETag(_:in:predicate:model:)``
    /// finds it: whether it existed, and its values then. Nil: nothing kept.
    static func keptEntity(
        _ connection: Connection, in entitySet: String, predicate: String, model: Model
    ) throws -> (existed: Bool, entity: Entity?)? {
        let row =
            try connection.query(
                "SELECT existed, body FROM oo_original WHERE entity_set = ? AND entity_key = ?",
                [.text(entitySet), .text(predicate)]
            ).first
            ?? connection.query(
                """
                SELECT original_existed, original FROM oo_queue
                WHERE entity_set = ? AND entity_key = ? AND original_existed IS NOT NULL ORDER BY id LIMIT 1
                """, [.text(entitySet), .text(predicate)]
            ).first
        guard let row else { return nil }
        guard row[0] == .integer(1), case .blob(let body) = row[1] else { return (false, nil) }
        let type = model.entitySet(entitySet)?.entityType
        return (true, try? V4JSONReader(model: model).readEntity(body, entityType: type))
    }

    /// Whether `oo_original` keeps the state of an entity.
    func hasKeptState(_ entitySet: String, predicate: String) throws -> Bool {
        try !writer.connection.query(
            "SELECT 1 FROM oo_original WHERE entity_set = ? AND entity_key = ?", [.text(entitySet), .text(predicate)]
        ).isEmpty
    }

    /// The state of an entity before its local changes: `oo_original` if it has one, else the
    /// queue row of its earliest request that kept one. Nil: nothing kept.
    func keptState(_ entitySet: String, predicate: String) throws -> Original? {
        let rows = try writer.connection.query(
            "SELECT existed, body FROM oo_original WHERE entity_set = ? AND entity_key = ?",
            [.text(entitySet), .text(predicate)])
        let row =
            try rows.first
            ?? writer.connection.query(
                """
                SELECT original_existed, original FROM oo_queue WHERE entity_set = ? AND entity_key = ? AND original_existed IS NOT NULL ORDER BY id LIMIT 1
                """, [.text(entitySet), .text(predicate)]
            ).first
        guard let row else { return nil }
        var body: [UInt8]?
        if case .blob(let bytes) = row[1] { body = bytes }
        return Original(existed: row[0] == .integer(1), body: body)
    }

    /// Removes queued requests (and their RequestQueue and ErrorArchive rows), then rebuilds
    /// the local state of every entity they changed (and of `also`): back to the downloaded
    /// state, with the requests that stay applied again on top.
    func removeRequests(
        _ ids: Set<Int64>, entries: [QueueEntry], also: Set<String> = [], keyMap: [String: String]
    ) throws {
        var affected = also
        for entry in entries where ids.contains(entry.id) {
            affected.formUnion(entry.changed)
            try remove(entry.id)
            try writer.delete(from: LocalSchema.errorArchive, key: ["RequestID": .int64(entry.id)])
        }
        let remaining = entries.filter { !ids.contains($0.id) }
        try rebuild(affected, remaining: remaining, keyMap: keyMap)
    }

    /// Puts entities back into their downloaded state (a locally created one disappears, a
    /// deleted one comes back) and applies the `remaining` requests that change them again.
    func rebuild(_ entities: Set<String>, remaining: [QueueEntry], keyMap: [String: String]) throws {
        // A deep insert's entities go back and come again together: rebuilding its parent or
        // one of its nested entities rebuilds them all (the create is applied once, whole).
        var entities = entities
        var grew = true
        while grew {
            grew = false
            for entry in remaining where entry.kind == .create && !entry.nested.isEmpty {
                let group = Set(entry.nested + [entry.entity].compactMap { $0 })
                if !group.isDisjoint(with: entities), !group.isSubset(of: entities) {
                    entities.formUnion(group)
                    grew = true
                }
            }
        }
        // Parents before children: a deleted parent comes back before its cascaded children.
        for reference in entities.sorted() {
            guard let (set, key) = Keys.parse(reference, model: model, serviceRoot: "") else { continue }
            let predicate = Keys.predicate(key, in: set, model: model)
            guard let original = try keptState(set, predicate: predicate) else { continue }
            let exists = try writer.rowid(in: set, key: key) != nil
            if original.existed, let bytes = original.body {
                let entity = try V4JSONReader(model: model).readEntity(
                    bytes, entityType: model.entitySet(set)?.entityType)
                if exists {
                    try writer.update(entity, in: set, replace: true)
                } else {
                    try writer.insert(entity, into: set)
                }
                try writer.setState(
                    in: set, key: key, isLocal: false, pending: false, inError: false, etag: .some(entity.control.etag),
                    localID: .some(nil))
            } else if exists {
                try writer.delete(from: set, key: key)
            }
            try restoreStream(set, predicate: predicate, existed: original.existed)
        }
        for entry in remaining where !entry.changed.isDisjoint(with: entities) {
            // A request that cannot be applied any more (its parent is gone) changes nothing.
            if let change = try? LocalChange.replaying(
                entry.request, model: model, serviceRoot: serviceRoot, keyMap: keyMap)
            {
                _ = try? writer.connection.savepoint {
                    try local.apply(change, repeatable: false, replaying: entry.request)
                }
            }
        }
        // Whether each entity still has pending and failed requests, in one pass over the queue
        // (asking the queue per entity made bringing back a large queue quadratic).
        var still: [String: (pending: Bool, failed: Bool)] = [:]
        for entry in remaining {
            for reference in entry.changed where entities.contains(reference) {
                var flags = still[reference] ?? (false, false)
                if entry.request.failed { flags.failed = true } else { flags.pending = true }
                still[reference] = flags
            }
        }
        for reference in entities {
            guard let (set, key) = Keys.parse(reference, model: model, serviceRoot: "") else { continue }
            let predicate = Keys.predicate(key, in: set, model: model)
            if let flags = still[reference] {
                try writer.setState(in: set, key: key, isLocal: true, pending: flags.pending, inError: flags.failed)
            } else {
                try forgetKeptState(set, predicate: predicate)
                try writer.setState(in: set, key: key, isLocal: false, pending: false, inError: false)
            }
        }
    }

    // MARK: Kept state and streams

    /// Forgets the state kept for an entity's local changes (its values and its stream): no
    /// request needs it any more.
    func forgetKeptState(_ entitySet: String, predicate: String) throws {
        _ = try writer.connection.execute(
            "DELETE FROM oo_original WHERE entity_set = ? AND entity_key = ?", [.text(entitySet), .text(predicate)])
        _ = try writer.connection.execute(
            "DELETE FROM oo_stream_original WHERE entity_set = ? AND entity_key = ?",
            [.text(entitySet), .text(predicate)])
    }

    /// Keeps the stream an entity has before its first local media change (none: a NULL
    /// body), for undo and for reverting a failed request. A stream kept already stays.
    func keepStream(_ entitySet: String, predicate: String) throws {
        _ = try writer.connection.execute(
            """
            INSERT OR IGNORE INTO oo_stream_original (entity_set, entity_key, content_type, body)
              VALUES (?1, ?2, (SELECT content_type FROM oo_streams WHERE entity_set = ?1 AND entity_key = ?2),
                      (SELECT body FROM oo_streams WHERE entity_set = ?1 AND entity_key = ?2))
            """, [.text(entitySet), .text(predicate)])
    }

    /// Puts back the stream an entity had before its local changes: the kept one, or none when
    /// the entity was created locally (`existed` false). Requests that stay are applied again
    /// afterwards by the caller.
    func restoreStream(_ entitySet: String, predicate: String, existed: Bool) throws {
        let kept = try writer.connection.query(
            "SELECT content_type, body FROM oo_stream_original WHERE entity_set = ? AND entity_key = ?",
            [.text(entitySet), .text(predicate)]
        ).first
        if let kept, case .blob(let body) = kept[1] {
            var contentType: String?
            if case .text(let type) = kept[0] { contentType = type }
            try writeStream(entitySet, predicate: predicate, contentType: contentType, body: body)
        } else if kept != nil || !existed {
            _ = try writer.connection.execute(
                "DELETE FROM oo_streams WHERE entity_set = ? AND entity_key = ?", [.text(entitySet), .text(predicate)])
        }
    }

    /// Stores the media stream of an entity in the store (`oo_streams`), or as the stream kept
    /// for its undo (`oo_stream_original`).
    func writeStream(
        _ entitySet: String, predicate: String, contentType: String?, body: [UInt8], table: String = "oo_streams"
    ) throws {
        _ = try writer.connection.execute(
            "INSERT OR REPLACE INTO \(table) (entity_set, entity_key, content_type, body) VALUES (?, ?, ?, ?)",
            [.text(entitySet), .text(predicate), contentType.map { .text($0) } ?? .null, .blob(body)])
    }

    /// A created entity took the backend's key: its stream and kept stream follow.
    func rekeyStreams(_ entitySet: String, from localPredicate: String, to serverPredicate: String) throws {
        for table in ["oo_streams", "oo_stream_original"] {
            _ = try writer.connection.execute(
                "DELETE FROM \(table) WHERE entity_set = ? AND entity_key = ?",
                [.text(entitySet), .text(serverPredicate)])
            _ = try writer.connection.execute(
                "UPDATE \(table) SET entity_key = ? WHERE entity_set = ? AND entity_key = ?",
                [.text(serverPredicate), .text(entitySet), .text(localPredicate)])
        }
    }

    /// `Set(key)` of every entity with pending requests or failed ones still in the
    /// ErrorArchive, and of what their deletes cascaded to: an entity among them that is not in
    /// the store was deleted locally.
    /// `after`: only requests queued after the one with that id.
    static func locallyChanged(_ connection: Connection, after: Int64 = 0) throws -> Set<String> {
        var references: Set<String> = []
        for row in try connection.query(
            "SELECT entity_set, entity_key, cascade FROM oo_queue WHERE status IN ('pending', 'failed') AND id > ?",
            [.integer(after)])
        {
            if case .text(let set) = row[0], case .text(let key) = row[1] { references.insert(set + key) }
            if case .text(let json) = row[2], let parsed = try? JSONValue.parse(Array(json.utf8)) {
                references.formUnion((parsed.arrayValue ?? []).compactMap(\.stringValue))
            }
        }
        return references
    }

    // MARK: Queue entries and what changes them

    /// The key map and the queued requests with any of `statuses`, analysed (in queue order).
    func entries(
        statuses: [String] = ["pending", "failed"]
    ) throws -> (entries: [QueueEntry], keyMap: [String: String]) {
        let keyMap = try Self.keyMap(writer.connection)
        let requests = try Self.load(writer.connection, statuses: statuses)
        return (QueueEntry.analyse(requests, model: model, serviceRoot: serviceRoot, keyMap: keyMap), keyMap)
    }

    /// The pending requests to upload (only those of `categories`, when given), analysed.
    static func pendingEntries(
        _ connection: Connection, model: Model, serviceRoot: String, categories: [String]?
    ) throws -> [QueueEntry] {
        var queue = try load(connection, status: "pending")
        if let categories { queue = queue.filter { $0.options.uploadCategory.map(categories.contains) ?? false } }
        return QueueEntry.analyse(queue, model: model, serviceRoot: serviceRoot, keyMap: try keyMap(connection))
    }

    /// Entities of requests still in the ErrorArchive → the first such request: later requests
    /// on them wait until the app resolves the failure (SPEC §7).
    static func failedEntities(_ connection: Connection, model: Model, serviceRoot: String) throws -> [String: Int64] {
        let failed = QueueEntry.analyse(
            try load(connection, status: "failed"), model: model, serviceRoot: serviceRoot,
            keyMap: try keyMap(connection))
        var map: [String: Int64] = [:]
        for entry in failed {
            for reference in entry.produced where map[reference] == nil { map[reference] = entry.id }
        }
        return map
    }

    /// Undoes every pending change of `entities` (`Set(key)`, local keys allowed): their
    /// requests go, with every later request that depends on them, and the entities go back
    /// to their downloaded state.
    func undo(_ entities: [String]) throws {
        let (entries, keyMap) = try entries()
        let targets = Set(entities.map { keyMap[$0] ?? $0 })
        let roots = Set(entries.filter { !$0.changed.isDisjoint(with: targets) }.map(\.id))
        let removed = QueueAlgorithms.dependants(of: roots, in: entries)
        try removeRequests(removed, entries: entries, also: targets, keyMap: keyMap)
    }

    /// Cancels the pending requests `ids` (nil: all) with every request that depends on them;
    /// returns how many went. One that is not pending is an error, and nothing goes.
    func cancel(_ ids: [Int64]?) throws -> Int {
        let (entries, keyMap) = try entries()
        let pending = Set(entries.filter { !$0.request.failed }.map(\.id))
        let roots: Set<Int64>
        if let ids {
            let unknown = ids.filter { !pending.contains($0) }
            guard unknown.isEmpty else {
                throw OfflineODataError(
                    .invalidRequest,
                    "No pending request \(unknown.map(String.init).joined(separator: ", ")) in the RequestQueue "
                        + "(failed requests are deleted through the ErrorArchive); nothing was cancelled")
            }
            roots = Set(ids)
        } else {
            roots = pending
        }
        guard !roots.isEmpty else { return 0 }
        let removed = QueueAlgorithms.dependants(of: roots, in: entries)
        try removeRequests(removed, entries: entries, keyMap: keyMap)
        return removed.count
    }

    /// Deleting from the ErrorArchive (SPEC §7). By default any row clears the whole archive:
    /// every failed request goes and the local changes they made are reverted (unsent requests
    /// stay and are applied again on top). `individual`: only the row's request goes, with
    /// every later request, sent or unsent, that depends on it. A row that is not in the
    /// archive (a request that only waits included) is an `invalidRequest` error in both modes.
    func deleteFromErrorArchive(requestID: Int64?, individual: Bool) throws {
        let (entries, keyMap) = try entries()
        if let requestID, !entries.contains(where: { $0.id == requestID && $0.request.failed }) {
            throw OfflineODataError(.invalidRequest, "ErrorArchive(\(requestID)) does not exist")
        }
        let removed: Set<Int64>
        if individual, let requestID {
            removed = QueueAlgorithms.dependants(of: [requestID], in: entries)
        } else {
            removed = Set(entries.filter(\.request.failed).map(\.id))
        }
        try removeRequests(removed, entries: entries, keyMap: keyMap)
    }

    /// Writes a queue algorithm's result: removed requests leave the queue and the
    /// RequestQueue, combined ones get their new method, URL, body and tag. An entity no
    /// request changes any more loses its pending state.
    func persist(_ rewrite: QueueRewrite, before entries: [QueueEntry]) throws {
        var affected: Set<String> = []
        for entry in entries where rewrite.removed.contains(entry.id) {
            affected.formUnion(entry.changed)
            try remove(entry.id)
        }
        for (id, request) in rewrite.changed.sorted(by: { $0.key < $1.key }) {
            let cascade: DatabaseValue =
                request.cascade.isEmpty
                ? .null
                : .text(JSONValue.array(request.cascade.map { .string($0) }).serialized)
            _ = try writer.connection.execute(
                """
                UPDATE oo_queue SET method = ?, url = ?, body = ?, custom_tag = ?, cascade = ?, headers = ?, media_type = ? WHERE id = ?
                """,
                [
                    .text(request.method), .text(request.url), .blob(request.body),
                    request.options.customTag.map { .text($0) } ?? .null,
                    cascade, .text(request.headersJSON), request.mediaType.map { .text($0) } ?? .null, .integer(id),
                ])
        }
        guard !affected.isEmpty else { return }
        let left = try self.entries().entries
        for reference in affected where !left.contains(where: { $0.changed.contains(reference) }) {
            guard let (set, key) = Keys.parse(reference, model: model, serviceRoot: "") else { continue }
            try forgetKeptState(set, predicate: Keys.predicate(key, in: set, model: model))
            try writer.setState(in: set, key: key, isLocal: false, pending: false, inError: false)
        }
    }

    /// The time each request of a batch was first sent: the recorded one, or `now` for a
    /// request sent for the first time (recorded here, so that a resend carries the same).
    func markFirstSent(_ requests: [QueuedRequest], now: String) throws -> [Int64: String] {
        var times: [Int64: String] = [:]
        for request in requests {
            if let time = request.firstSent { times[request.id] = time; continue }
            _ = try writer.connection.execute(
                "UPDATE oo_queue SET first_sent = ? WHERE id = ?", [.text(now), .integer(request.id)])
            times[request.id] = now
        }
        return times
    }
}
