import Foundation
import ODataCore
import ODataStore

extension OfflineODataProvider {
    /// Fetches the media stream of every entity of `page` when its defining query retrieves
    /// streams (`automaticallyRetrievesStreams`) and its type has one (from its media read link
    /// when that is on the service, else from `Set(key)/$value`), into `oo_streams`, or with
    /// `staged` into `oo_stream_staging` for a download not yet applied. One stream is in
    /// memory at a time; an entity without a stream (404, 204) has none stored.
    func fetchStreams(of page: FetchedQuery, staged: Bool, store: Store) async throws {
        let table = staged ? "oo_stream_staging" : "oo_streams"
        let model = store.model
        guard definingQueries.first(where: { $0.name == page.name })?.automaticallyRetrievesStreams == true,
              model.entityType(ofEntitySet: page.entitySet)?.hasStream == true else { return }
        let set = page.entitySet
        for entity in page.entities {
            guard let key = Keys.key(of: entity, in: set, model: model) else { continue }
            let predicate = Keys.predicate(key, in: set, model: model)
            // A read link to another host is not followed: the provider's headers and cookies
            // (credentials) go to the service only.
            let link = entity.control.mediaReadLink.flatMap { $0.contains("://") && !$0.hasPrefix(serviceRoot) ? nil : $0 }
            let url = link ?? (set + predicate + "/$value")
            let response = try await send(method: "GET", url: url, headers: ["Accept": "*/*"])
            if response.status == 404 || response.status == 204 {
                try await store.write { writer in
                    if staged {
                        // Applied with the pages: the stream kept so far goes.
                        _ = try writer.connection.execute("INSERT OR REPLACE INTO oo_stream_staging (entity_set, entity_key, body) VALUES (?, ?, NULL)",
                                                          [.text(set), .text(predicate)])
                    } else {
                        _ = try writer.connection.execute("DELETE FROM oo_streams WHERE entity_set = ? AND entity_key = ?", [.text(set), .text(predicate)])
                    }
                }
                continue
            }
            guard response.status < 300 else { throw Self.backendError(response, method: "GET", url: url) }
            let contentType = response.headers["Content-Type"] ?? entity.control.mediaContentType
            let body = response.body
            try await store.write { writer in
                _ = try writer.connection.execute("INSERT OR REPLACE INTO \(table) (entity_set, entity_key, content_type, body) VALUES (?, ?, ?, ?)",
                                                  [.text(set), .text(predicate), contentType.map { .text($0) } ?? .null, .blob(body)])
            }
        }
    }

    /// Removes the streams of entities that are no longer in the store.
    static func removeOrphanStreams(writer: StoreWriter, model: Model) throws {
        for row in try writer.connection.query("SELECT entity_set, entity_key FROM oo_streams") {
            guard case .text(let set) = row[0], case .text(let predicate) = row[1] else { continue }
            if let (_, key) = Keys.parse(set + predicate, model: model, serviceRoot: ""), try writer.rowid(in: set, key: key) != nil { continue }
            _ = try writer.connection.execute("DELETE FROM oo_streams WHERE entity_set = ? AND entity_key = ?", [.text(set), .text(predicate)])
        }
    }

    /// Media entities read from the store carry their stored stream's content type and read
    /// link (`@odata.mediaContentType`, `@odata.mediaReadLink` = `Set(key)/$value`), also
    /// inside `$expand`; those without a stored stream carry neither.
    func annotateMedia(_ result: QueryResult, entitySet: String?, store: Store) async throws -> QueryResult {
        let model = store.model
        guard let entitySet else { return result }
        var entities: [Entity]
        switch result {
        case .collection(let collection): entities = collection.entities
        case .entity(let entity?): entities = [entity]
        default: return result
        }
        // Only media sets the answer holds (itself, or inside `$expand`) are looked up.
        var mediaSets: Set<String> = []
        for entity in entities { Self.collectMediaSets(entity, in: entitySet, model: model, into: &mediaSets) }
        guard !mediaSets.isEmpty else { return result }
        let sets = mediaSets.sorted()
        // `Set(key)` → content type of every stored stream of those sets.
        let types = try await store.read { reader -> [String: String] in
            var types: [String: String] = [:]
            let rows = try reader.connection.query("SELECT entity_set, entity_key, content_type FROM oo_streams WHERE entity_set IN (\(sets.map { _ in "?" }.joined(separator: ", ")))",
                                                   sets.map { .text($0) })
            for row in rows {
                guard case .text(let set) = row[0], case .text(let key) = row[1] else { continue }
                if case .text(let type) = row[2] { types[set + key] = type } else { types[set + key] = "application/octet-stream" }
            }
            return types
        }
        guard !types.isEmpty else { return result }
        for index in entities.indices { Self.annotate(&entities[index], in: entitySet, types: types, model: model) }
        switch result {
        case .collection(var collection):
            collection.entities = entities
            return .collection(collection)
        default:
            return .entity(entities.first)
        }
    }

    /// The media entity sets of an entity and its expanded children.
    static func collectMediaSets(_ entity: Entity, in entitySet: String, model: Model, into sets: inout Set<String>) {
        if model.entityType(ofEntitySet: entitySet)?.hasStream == true { sets.insert(entitySet) }
        for navigation in entity.navigation {
            guard let inline = navigation.inline, let target = model.targetEntitySet(from: entitySet, navigationPath: navigation.name)?.name else { continue }
            switch inline {
            case .entity(let child?): collectMediaSets(child, in: target, model: model, into: &sets)
            case .collection(let children): for child in children.entities { collectMediaSets(child, in: target, model: model, into: &sets) }
            case .entity(nil): continue
            }
        }
    }

    /// Annotates one entity and its expanded children.
    static func annotate(_ entity: inout Entity, in entitySet: String, types: [String: String], model: Model) {
        if model.entityType(ofEntitySet: entitySet)?.hasStream == true, let key = Keys.key(of: entity, in: entitySet, model: model) {
            let reference = entitySet + Keys.predicate(key, in: entitySet, model: model)
            if let type = types[reference] {
                entity.control.mediaContentType = type
                entity.control.mediaReadLink = reference + "/$value"
            }
        }
        for index in entity.navigation.indices {
            guard let inline = entity.navigation[index].inline,
                  let target = model.targetEntitySet(from: entitySet, navigationPath: entity.navigation[index].name)?.name else { continue }
            switch inline {
            case .entity(var child?):
                annotate(&child, in: target, types: types, model: model)
                entity.navigation[index].inline = .entity(child)
            case .collection(var children):
                for i in children.entities.indices { annotate(&children.entities[i], in: target, types: types, model: model) }
                entity.navigation[index].inline = .collection(children)
            case .entity(nil):
                continue
            }
        }
    }

    // MARK: Local media changes

    /// Stores the media stream of an entity in the store (`oo_streams`), or as the stream kept
    /// for its undo (`oo_stream_original`).
    static func writeStream(_ entitySet: String, predicate: String, contentType: String?, body: [UInt8], table: String = "oo_streams",
                            writer: StoreWriter) throws {
        _ = try writer.connection.execute("INSERT OR REPLACE INTO \(table) (entity_set, entity_key, content_type, body) VALUES (?, ?, ?, ?)",
                                          [.text(entitySet), .text(predicate), contentType.map { .text($0) } ?? .null, .blob(body)])
    }

    /// Keeps the stream an entity has before its first local media change (none: a NULL
    /// body), for undo and for reverting a failed request. A stream kept already stays.
    static func keepStream(_ entitySet: String, predicate: String, writer: StoreWriter) throws {
        _ = try writer.connection.execute("""
            INSERT OR IGNORE INTO oo_stream_original (entity_set, entity_key, content_type, body)
              VALUES (?1, ?2, (SELECT content_type FROM oo_streams WHERE entity_set = ?1 AND entity_key = ?2),
                      (SELECT body FROM oo_streams WHERE entity_set = ?1 AND entity_key = ?2))
            """, [.text(entitySet), .text(predicate)])
    }

    /// Puts back the stream an entity had before its local changes: the kept one, or none when
    /// the entity was created locally (`existed` false). Requests that stay are applied again
    /// afterwards by the caller.
    static func restoreStream(_ entitySet: String, predicate: String, existed: Bool, writer: StoreWriter) throws {
        let kept = try writer.connection.query("SELECT content_type, body FROM oo_stream_original WHERE entity_set = ? AND entity_key = ?",
                                               [.text(entitySet), .text(predicate)]).first
        if let kept, case .blob(let body) = kept[1] {
            var contentType: String?
            if case .text(let type) = kept[0] { contentType = type }
            try writeStream(entitySet, predicate: predicate, contentType: contentType, body: body, writer: writer)
        } else if kept != nil || !existed {
            _ = try writer.connection.execute("DELETE FROM oo_streams WHERE entity_set = ? AND entity_key = ?", [.text(entitySet), .text(predicate)])
        }
    }

    /// Forgets the state kept for an entity's local changes (its values and its stream): no
    /// request needs it any more.
    static func forgetKeptState(_ entitySet: String, predicate: String, writer: StoreWriter) throws {
        _ = try writer.connection.execute("DELETE FROM oo_original WHERE entity_set = ? AND entity_key = ?", [.text(entitySet), .text(predicate)])
        _ = try writer.connection.execute("DELETE FROM oo_stream_original WHERE entity_set = ? AND entity_key = ?", [.text(entitySet), .text(predicate)])
    }

    /// A created entity took the backend's key: its stream and kept stream follow.
    static func rekeyStreams(_ entitySet: String, from localPredicate: String, to serverPredicate: String, writer: StoreWriter) throws {
        for table in ["oo_streams", "oo_stream_original"] {
            _ = try writer.connection.execute("DELETE FROM \(table) WHERE entity_set = ? AND entity_key = ?", [.text(entitySet), .text(serverPredicate)])
            _ = try writer.connection.execute("UPDATE \(table) SET entity_key = ? WHERE entity_set = ? AND entity_key = ?",
                                              [.text(serverPredicate), .text(entitySet), .text(localPredicate)])
        }
    }

    /// The value of a header, whatever the case of its name.
    static func header(_ name: String, in headers: [String: String]) -> String? {
        headers.first { $0.key.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    /// Whether a content type is JSON (the body is an entity, not a media stream).
    static func isJSON(_ contentType: String) -> Bool {
        contentType.trimmingCharacters(in: .whitespaces).lowercased().hasPrefix("application/json")
    }

    /// `Set(key)/$value` of a media entity: its stored stream. Nil when `url` does not name a
    /// media stream; `.missing` when the entity is not in the store.
    func mediaStream(_ url: String, store: Store) async throws -> MediaStream? {
        let path = url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? url
        guard path.hasSuffix("/$value") else { return nil }
        let model = store.model
        let entityURL = String(path.dropLast("/$value".count))
        guard let (set, key) = Keys.parse(entityURL, model: model, serviceRoot: serviceRoot),
              model.entityType(ofEntitySet: set)?.hasStream == true else { return nil }
        let predicate = Keys.predicate(key, in: set, model: model)
        let found = try await store.read { reader -> (exists: Bool, row: [DatabaseValue]?) in
            guard try reader.bookkeeping(in: set, key: key) != nil else { return (false, nil) }
            return (true, try reader.connection.query("SELECT content_type, body FROM oo_streams WHERE entity_set = ? AND entity_key = ?",
                                                      [.text(set), .text(predicate)]).first)
        }
        guard found.exists else { return .missing }
        guard let row = found.row, case .blob(let body) = row[1] else {
            throw OfflineODataError(.notSupportedOffline, "The media stream of \(set)\(predicate) is not in the offline store: its defining query does not retrieve streams (automaticallyRetrievesStreams), or the backend had none")
        }
        var contentType = "application/octet-stream"
        if case .text(let type) = row[0] { contentType = type }
        return .stream(contentType: contentType, body: body)
    }

    /// A media stream read from the store.
    enum MediaStream: Sendable {
        case missing
        case stream(contentType: String, body: [UInt8])
    }
}
