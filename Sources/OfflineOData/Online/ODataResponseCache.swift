import Foundation
public import ODataCore
import ODataStore

/// The cache state of a local entry (SPEC §10).
public enum ODataCacheState: String, Sendable {
    /// Made on the device; the backend does not have it yet.
    case created
    /// A server entry changed on the device.
    case updated
    /// A server entry deleted on the device.
    case deleted
}

/// One cached entry: the entity, and for a local entry its state.
public struct ODataCachedEntry: Sendable, Equatable {
    /// `Set(key)`, the entry's identity across server and local entries.
    public var entryID: String
    /// The entry's values (for a local delete, the last values known).
    public var entity: Entity
    /// Whether the entry was made on the device (not yet confirmed by the backend).
    public var isLocal: Bool
    /// For a local entry: created, updated or deleted.
    public var state: ODataCacheState?
}

/// Online responses kept for offline use, the older API of SPEC §10. Each online GET is merged
/// under its URL ("URL key"); deltas update it incrementally. Local entries (made on the device)
/// are kept beside the server entries until the request that carried them succeeds. The
/// service and metadata documents can be kept per URL key too.
///
/// Persistent in a store file (encrypted with a key) or in memory only.
public actor ODataResponseCache {
    /// Where the cache keeps its data.
    public enum Storage: Sendable {
        /// Gone when the cache is.
        case memory
        /// A store file, SQLCipher-encrypted when `key` is given.
        case file(path: String, key: String?)
    }

    /// How ``mergeEntries(_:forURLKey:entitySet:mode:)`` treats a feed.
    public enum MergeMode: Sendable {
        /// The feed is everything under the URL key: earlier server entries go.
        case replace
        /// The feed is a delta: its entities are added or updated, its removals applied.
        case incremental
        /// Incremental when the URL key has a delta token, replace otherwise.
        case automatic
    }

    private let connection: Connection
    private let model: Model

    /// Opens (or creates) a cache for entities of `model`.
    public init(storage: Storage, model: Model) throws {
        switch storage {
        case .memory:
            var options = Connection.Options()
            options.walMode = false
            connection = try Connection(path: ":memory:", options: options)
        case .file(let path, let key):
            connection = try Connection(path: path, options: Connection.Options(key: key))
        }
        self.model = model
        try connection.execute("""
            CREATE TABLE IF NOT EXISTS cache_server (url_key TEXT NOT NULL, entry_id TEXT NOT NULL, entity_set TEXT NOT NULL, position INTEGER NOT NULL,
              body BLOB NOT NULL, PRIMARY KEY (url_key, entry_id))
            """)
        try connection.execute("""
            CREATE TABLE IF NOT EXISTS cache_local (entry_id TEXT PRIMARY KEY, entity_set TEXT NOT NULL, url_key TEXT, state TEXT NOT NULL,
              body BLOB NOT NULL, seq INTEGER NOT NULL)
            """)
        try connection.execute("CREATE INDEX IF NOT EXISTS cache_server_entry ON cache_server (entry_id)")
        try connection.execute("CREATE TABLE IF NOT EXISTS cache_keys (url_key TEXT PRIMARY KEY, delta_token TEXT, service_document BLOB, metadata_document BLOB)")
    }

    // MARK: Server entries

    /// Merges a feed received for `urlKey` (an online GET of `entitySet`). The feed's delta
    /// link becomes the key's delta token.
    public func mergeEntries(_ feed: EntityCollection, forURLKey urlKey: String, entitySet: String, mode: MergeMode = .automatic) throws {
        let incremental: Bool
        switch mode {
        case .replace: incremental = false
        case .incremental: incremental = true
        case .automatic: incremental = try deltaToken(forURLKey: urlKey) != nil
        }
        try connection.transaction {
            if !incremental { _ = try connection.execute("DELETE FROM cache_server WHERE url_key = ?", [.text(urlKey)]) }
            var position = try connection.query("SELECT coalesce(max(position), 0) FROM cache_server WHERE url_key = ?", [.text(urlKey)])
                .first.flatMap { row -> Int64? in if case .integer(let n) = row[0] { return n }; return nil } ?? 0
            for entity in feed.entities {
                guard let id = entryID(of: entity, in: entitySet) else {
                    throw OfflineODataError(.invalidRequest, "An entity of \(entitySet) in the feed for \(urlKey) has no key")
                }
                position += 1
                var stored = entity
                stored.navigation = []
                let existing = try connection.query("SELECT position FROM cache_server WHERE url_key = ? AND entry_id = ?", [.text(urlKey), .text(id)])
                let keep: DatabaseValue = existing.first?.first ?? .integer(position)
                _ = try connection.execute("INSERT OR REPLACE INTO cache_server (url_key, entry_id, entity_set, position, body) VALUES (?, ?, ?, ?, ?)",
                                           [.text(urlKey), .text(id), .text(entitySet), keep, .blob(V4JSONWriter().write(stored))])
            }
            for removed in feed.deleted {
                guard let id = entryID(of: removed, in: entitySet) else { continue }
                _ = try connection.execute("DELETE FROM cache_server WHERE url_key = ? AND entry_id = ?", [.text(urlKey), .text(id)])
            }
            if let link = feed.deltaLink {
                _ = try connection.execute("INSERT OR IGNORE INTO cache_keys (url_key) VALUES (?)", [.text(urlKey)])
                _ = try connection.execute("UPDATE cache_keys SET delta_token = ? WHERE url_key = ?", [.text(link), .text(urlKey)])
            }
        }
    }

    /// The server entries of a URL key, in the order they arrived.
    public func serverEntries(forURLKey urlKey: String) throws -> [Entity] {
        try connection.query("SELECT entity_set, body FROM cache_server WHERE url_key = ? ORDER BY position", [.text(urlKey)]).map(decode)
    }

    /// The delta link kept for a URL key.
    public func deltaToken(forURLKey urlKey: String) throws -> String? {
        if case .text(let token)? = try connection.query("SELECT delta_token FROM cache_keys WHERE url_key = ?", [.text(urlKey)]).first?.first { return token }
        return nil
    }

    /// Drops a URL key's server entries, its delta token and its documents.
    public func clearCache(forURLKey urlKey: String) throws {
        try connection.transaction {
            _ = try connection.execute("DELETE FROM cache_server WHERE url_key = ?", [.text(urlKey)])
            _ = try connection.execute("DELETE FROM cache_keys WHERE url_key = ?", [.text(urlKey)])
        }
    }

    // MARK: Local entries

    /// Adds an entity created on the device; returns its entry ID.
    @discardableResult
    public func addLocalEntry(_ entity: Entity, entitySet: String, urlKey: String? = nil) throws -> String {
        guard let id = entryID(of: entity, in: entitySet) else { throw OfflineODataError(.invalidRequest, "The new \(entitySet) entity has no key") }
        try putLocal(id, entity: entity, entitySet: entitySet, urlKey: urlKey, state: .created)
        return id
    }

    /// Records a change made on the device; an entry created locally stays `created`.
    @discardableResult
    public func updateLocalEntry(_ entity: Entity, entitySet: String, urlKey: String? = nil) throws -> String {
        guard let id = entryID(of: entity, in: entitySet) else { throw OfflineODataError(.invalidRequest, "The \(entitySet) entity has no key") }
        let state: ODataCacheState = try localState(id) == .created ? .created : .updated
        try putLocal(id, entity: entity, entitySet: entitySet, urlKey: urlKey, state: state)
        return id
    }

    /// Records a delete made on the device; an entry created locally simply goes.
    public func deleteLocalEntry(entryID id: String) throws {
        if try localState(id) == .created {
            _ = try connection.execute("DELETE FROM cache_local WHERE entry_id = ?", [.text(id)])
            return
        }
        let server = try connection.query("SELECT entity_set, body, url_key FROM cache_server WHERE entry_id = ? LIMIT 1", [.text(id)]).first
        let local = try connection.query("SELECT entity_set, body, url_key FROM cache_local WHERE entry_id = ?", [.text(id)]).first
        guard let row = local ?? server, case .text(let set) = row[0] else {
            throw OfflineODataError(.invalidRequest, "No cached entry \(id)")
        }
        let entity = try decode(row)
        var urlKey: String?
        if case .text(let key) = row[2] { urlKey = key }
        try putLocal(id, entity: entity, entitySet: set, urlKey: urlKey, state: .deleted)
    }

    /// The local entry with an entry ID (`Set(key)`).
    public func localEntry(forEntryID id: String) throws -> ODataCachedEntry? {
        try localEntries(where: "entry_id = ?", [.text(id)]).first
    }

    /// Every local entry, oldest change first.
    public func localEntries() throws -> [ODataCachedEntry] {
        try localEntries(where: "1", [])
    }

    private func localEntries(where condition: String, _ arguments: [DatabaseValue]) throws -> [ODataCachedEntry] {
        try connection.query("SELECT entry_id, entity_set, body, state FROM cache_local WHERE \(condition) ORDER BY seq", arguments).map { row in
            guard case .text(let id) = row[0], case .text(let state) = row[3], let cacheState = ODataCacheState(rawValue: state) else {
                throw OfflineODataError(.store, "A local cache entry is damaged (no id or an unknown state)")
            }
            return ODataCachedEntry(entryID: id, entity: try decode(Array(row[1...2])), isLocal: true, state: cacheState)
        }
    }

    /// Server entries of a URL key with the local changes on top: updated entries replaced,
    /// deleted ones left out, local creates for that key added at the end.
    public func mergedEntries(forURLKey urlKey: String) throws -> [ODataCachedEntry] {
        var result: [ODataCachedEntry] = []
        var seen: Set<String> = []
        for row in try connection.query("SELECT entry_id, entity_set, body FROM cache_server WHERE url_key = ? ORDER BY position", [.text(urlKey)]) {
            guard case .text(let id) = row[0] else { continue }
            seen.insert(id)
            if let local = try localEntry(forEntryID: id) {
                if local.state != .deleted { result.append(local) }
            } else {
                result.append(ODataCachedEntry(entryID: id, entity: try decode(Array(row[1...2])), isLocal: false, state: nil))
            }
        }
        let created = try localEntries(where: "state = 'created' AND url_key = ?", [.text(urlKey)])
        return result + created.filter { !seen.contains($0.entryID) }
    }

    /// The request that carried these local entries succeeded: they are cleared (the backend's
    /// copy arrives with the next merge).
    public func requestSucceeded(carrying entryIDs: [String]) throws {
        try connection.transaction {
            for id in entryIDs { _ = try connection.execute("DELETE FROM cache_local WHERE entry_id = ?", [.text(id)]) }
        }
    }

    /// A batch came back: the local entries of every part that succeeded (status below 400)
    /// are cleared; those of failed parts stay.
    public func batchCompleted(_ parts: [(entryIDs: [String], status: Int)]) throws {
        try requestSucceeded(carrying: parts.filter { $0.status < 400 }.flatMap(\.entryIDs))
    }

    // MARK: Documents

    /// Keeps the service document received for a URL key.
    public func storeServiceDocument(_ document: [UInt8], forURLKey urlKey: String) throws {
        try storeDocument("service_document", document, urlKey)
    }

    /// The service document kept for a URL key.
    public func serviceDocument(forURLKey urlKey: String) throws -> [UInt8]? { try document("service_document", urlKey) }

    /// Keeps the metadata document received for a URL key.
    public func storeMetadataDocument(_ document: [UInt8], forURLKey urlKey: String) throws {
        try storeDocument("metadata_document", document, urlKey)
    }

    /// The metadata document kept for a URL key.
    public func metadataDocument(forURLKey urlKey: String) throws -> [UInt8]? { try document("metadata_document", urlKey) }

    // MARK: Helpers

    private func storeDocument(_ column: String, _ document: [UInt8], _ urlKey: String) throws {
        _ = try connection.execute("INSERT OR IGNORE INTO cache_keys (url_key) VALUES (?)", [.text(urlKey)])
        _ = try connection.execute("UPDATE cache_keys SET \(column) = ? WHERE url_key = ?", [.blob(document), .text(urlKey)])
    }

    private func document(_ column: String, _ urlKey: String) throws -> [UInt8]? {
        if case .blob(let bytes)? = try connection.query("SELECT \(column) FROM cache_keys WHERE url_key = ?", [.text(urlKey)]).first?.first { return bytes }
        return nil
    }

    private func putLocal(_ id: String, entity: Entity, entitySet: String, urlKey: String?, state: ODataCacheState) throws {
        var stored = entity
        stored.navigation = []
        let seq = try connection.query("SELECT coalesce(max(seq), 0) + 1 FROM cache_local").first?.first ?? .integer(1)
        _ = try connection.execute("INSERT OR REPLACE INTO cache_local (entry_id, entity_set, url_key, state, body, seq) VALUES (?, ?, ?, ?, ?, ?)",
                                   [.text(id), .text(entitySet), urlKey.map { .text($0) } ?? .null, .text(state.rawValue), .blob(V4JSONWriter().write(stored)), seq])
    }

    private func localState(_ id: String) throws -> ODataCacheState? {
        if case .text(let state)? = try connection.query("SELECT state FROM cache_local WHERE entry_id = ?", [.text(id)]).first?.first {
            return ODataCacheState(rawValue: state)
        }
        return nil
    }

    /// `[entity_set, body]` → the entity; a damaged row is an error, not a missing entry.
    private func decode(_ row: [DatabaseValue]) throws -> Entity {
        guard row.count >= 2, case .text(let set) = row[0], case .blob(let body) = row[1] else {
            throw OfflineODataError(.store, "A cache entry is damaged (no entity set or body)")
        }
        do {
            return try V4JSONReader(model: model).readEntity(body, entityType: model.entitySet(set)?.entityType)
        } catch {
            throw OfflineODataError(.store, "A cached \(set) entry cannot be read: \(error)")
        }
    }

    private func entryID(of entity: Entity, in entitySet: String) -> String? {
        Keys.key(of: entity, in: entitySet, model: model).map { entitySet + Keys.predicate($0, in: entitySet, model: model) }
    }

    private func entryID(of removed: DeletedEntity, in entitySet: String) -> String? {
        if let id = entryID(of: Entity(properties: removed.properties), in: entitySet) { return id }
        // The removal's id, relative (`Set(key)`) or absolute (its last path segment names it).
        guard let id = removed.id, let last = id.split(separator: "/").last,
              let (set, key) = Keys.parse(String(last), model: model, serviceRoot: "") else { return nil }
        return set + Keys.predicate(key, in: set, model: model)
    }
}
