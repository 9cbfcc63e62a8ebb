import Foundation
public import ODataCore
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

extension OfflineODataProvider {
    func parseTarget(_ url: String, model: Model) throws -> WriteTarget {
        try Self.parseTarget(url, model: model, serviceRoot: serviceRoot)
    }

    static func parseTarget(_ url: String, model: Model, serviceRoot: String) throws -> WriteTarget {
        let (parsed, resolved) = try Keys.resolve(url, model: model, what: "request URL")
        guard case .entitySet(let set)? = resolved.path.segments.first?.kind else {
            if case .functionImport(let name, _)? = resolved.path.segments.first?.kind {
                throw OfflineODataError(.notSupportedOffline, "\(name) is a function import; it runs on the backend only, not offline")
            }
            if case .actionImport(let name)? = resolved.path.segments.first?.kind {
                throw OfflineODataError(.notSupportedOffline, "\(name) is an action import; it runs on the backend only, not offline")
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
                    target.navigationKey = try Keys.values(parts, entitySet: navigationSet, model: model, query: parsed.query)
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
                    throw OfflineODataError(.invalidRequest, "\(url): only the media stream of one entity (Set(key)/$value) can be modified offline")
                }
                target.isValue = true
            case .typeCast: continue
            case .action(let name), .function(let name, _):
                throw OfflineODataError(.notSupportedOffline, "\(name) is bound to an entity; operations run on the backend only, not offline")
            default:
                throw OfflineODataError(.invalidRequest, "\(url): this path cannot be modified offline")
            }
        }
        if target.isRef, target.navigationKey == nil, let id = parsed.query.id, let navigationSet,
           let (set, key) = Keys.parse(id, model: model, serviceRoot: serviceRoot), set == navigationSet {
            target.navigationKey = key
        }
        return target
    }

    /// Applies a modification to the store and appends it to the queue, in one transaction.
    func apply(_ change: LocalChange, store: Store) async throws -> Entity? {
        let model = store.model
        let repeatable = parameters.enableRepeatableRequests
        if change.target.entitySet == LocalSchema.errorArchive {
            guard change.method == "DELETE" else { throw OfflineODataError(.invalidRequest, "ErrorArchive rows can only be deleted") }
            var id: Int64?
            if case .int64(let value)? = change.target.key?["RequestID"] { id = value }
            try await deleteFromErrorArchive(requestID: id)
            return nil
        }
        do {
            // One local change is a short transaction: run it here rather than hop to the writer.
            return try await store.writeInline { writer in
                try Self.applyLocally(change, writer: writer, model: model, repeatable: repeatable)
            }
        } catch let error as OfflineODataError {
            throw error
        } catch {
            throw OfflineODataError(.store, "\(change.method) \(change.url) could not be applied locally: \(error)")
        }
    }

    /// Applies a change to the store and queues it. With `replaying`, the change is a queued
    /// request applied again while an entity's local state is rebuilt: no snapshot, nothing
    /// queued, and a create keeps its recorded key.
    @discardableResult
    static func applyLocally(_ change: LocalChange, writer: StoreWriter, model: Model, repeatable: Bool, replaying: QueuedRequest? = nil) throws -> Entity? {
        let target = change.target
        func snapshot(_ entitySet: String, key: [String: PrimitiveValue]) throws {
            if replaying == nil { try Self.snapshot(entitySet, key: key, writer: writer, model: model) }
        }
        // `@odata.bind` links of the body; a target outside the store is linked on the backend only.
        func bind(_ change: LocalChange, set: String, key: [String: PrimitiveValue]) throws {
            for bind in change.binds where try writer.rowid(in: bind.entitySet, key: bind.key) != nil {
                try snapshot(bind.entitySet, key: bind.key)
                try writer.link(set, key: key, navigation: bind.navigation, to: bind.key)
            }
        }
        var queued = QueuedRequest(method: change.method, url: change.url, body: change.body, headers: change.headers, options: change.options)
        queued.mediaType = change.mediaType
        queued.repeatID = repeatable ? GuidValue.random().description : nil
        var result: Entity?
        if target.isValue {
            guard let key = target.key, let mediaType = change.mediaType, change.method == "PUT" else {
                throw OfflineODataError(.invalidRequest, "\(change.method) \(change.url): a media stream is replaced with PUT and a body")
            }
            guard model.entityType(ofEntitySet: target.entitySet)?.hasStream == true else {
                throw OfflineODataError(.invalidRequest, "\(change.url): \(target.entitySet) entities have no media stream")
            }
            guard try writer.reader.bookkeeping(in: target.entitySet, key: key) != nil else {
                throw OfflineODataError(.invalidRequest, "\(change.method) \(change.url): the entity is not in the offline store")
            }
            let predicate = Keys.predicate(key, in: target.entitySet, model: model)
            try snapshot(target.entitySet, key: key)
            if replaying == nil { try keepStream(target.entitySet, predicate: predicate, writer: writer) }
            try writeStream(target.entitySet, predicate: predicate, contentType: mediaType, body: change.body, writer: writer)
            try writer.setState(in: target.entitySet, key: key, isLocal: true, pending: true)
            queued.entitySet = target.entitySet
            queued.entityKey = predicate
        } else if target.isRef {
            guard let key = target.key, let navigation = target.navigation else { throw OfflineODataError(.invalidRequest, "\(change.url): a $ref needs an entity and a navigation property") }
            try snapshot(target.entitySet, key: key)
            if let (otherSet, otherKey) = linkedEntity(change, model: model) { try snapshot(otherSet, key: otherKey) }
            if change.method == "DELETE" {
                if let other = target.navigationKey {
                    try writer.unlink(target.entitySet, key: key, navigation: navigation, from: other)
                } else {
                    // A single-valued navigation property names its one link without a key.
                    guard try !writer.isCollection(target.entitySet, navigation: navigation),
                          let otherSet = model.targetEntitySet(from: target.entitySet, navigationPath: navigation)?.name else {
                        throw OfflineODataError(.invalidRequest, "\(change.url): say which link of the collection to delete, with a key or $id")
                    }
                    for other in try writer.linkedKeys(target.entitySet, key: key, navigation: navigation) {
                        try snapshot(otherSet, key: other)
                        try writer.unlink(target.entitySet, key: key, navigation: navigation, from: other)
                    }
                }
            } else {
                guard let (_, other) = change.linkTarget else { throw OfflineODataError(.invalidRequest, "\(change.url): the body must name the entity to link") }
                try writer.link(target.entitySet, key: key, navigation: navigation, to: other)
            }
            try writer.setState(in: target.entitySet, key: key, isLocal: true, pending: true)
            queued.entitySet = target.entitySet
            queued.entityKey = Keys.predicate(key, in: target.entitySet, model: model)
        } else if change.method == "POST" {
            let set = target.navigation.flatMap { model.targetEntitySet(from: target.entitySet, navigationPath: $0)?.name } ?? target.entitySet
            guard target.key == nil || target.navigation != nil, var entity = change.entity else {
                throw OfflineODataError(.invalidRequest, "POST \(change.url) must name an entity set or a collection navigation property")
            }
            if let parentKey = target.key, let navigation = target.navigation {
                // `POST SalesOrders('SO2')/Items`: the new item's OrderID comes from its order.
                for (name, value) in try writer.reader.propertiesImplied(creatingThrough: navigation, of: target.entitySet, key: parentKey)
                where entity[name] == nil || entity[name] == .null {
                    entity[name] = .primitive(value)
                }
            }
            var localKey = false
            if let replaying, replaying.localKey, let recorded = replaying.entityKey, let (_, key) = Keys.parse(set + recorded, model: model, serviceRoot: "") {
                for (name, value) in key {
                    entity.properties.removeAll { $0.name == name }
                    entity.properties.append(NamedValue(name: name, value: .primitive(value)))
                }
                localKey = true
            }
            if let type = model.entityType(ofEntitySet: set) {
                for ref in model.key(of: type) where entity[ref.name] == nil || entity[ref.name] == .null {
                    guard let property = model.property(ref.name, ofStructuredType: type.qualifiedName),
                          let value = try nextLocalKey(PrimitiveType(rawValue: property.type.name), writer: writer) else {
                        throw OfflineODataError(.invalidRequest, "POST \(change.url): the key \(ref.name) is missing and no local key can be made for its type")
                    }
                    entity.properties.removeAll { $0.name == ref.name }
                    entity.properties.append(NamedValue(name: ref.name, value: .primitive(value)))
                    localKey = true
                }
            }
            guard let key = Keys.key(of: entity, in: set, model: model) else { throw OfflineODataError(.invalidRequest, "POST \(change.url): the entity has no key") }
            let predicate = Keys.predicate(key, in: set, model: model)
            if try writer.rowid(in: set, key: key) != nil {
                throw OfflineODataError(.invalidRequest, "POST \(change.url): \(set)\(predicate) exists already")
            }
            // A deep insert: nested entities without a key get local ones too, which the upload
            // replaces with the keys the backend gave them.
            var nested: [NestedCreate] = []
            try assignNestedKeys(&entity, set: set, path: "", parentIsLocal: localKey, recorded: replaying?.nested ?? [], into: &nested,
                                 writer: writer, model: model, url: change.url)
            for created in nested {
                guard let (nestedSet, nestedKey) = Keys.parse(created.entity, model: model, serviceRoot: "") else { continue }
                // A nested entity is new, as the top one is (linking an existing one is a bind).
                if try writer.rowid(in: nestedSet, key: nestedKey) != nil {
                    throw OfflineODataError(.invalidRequest, "POST \(change.url): the nested \(created.entity) exists already")
                }
                // It did not exist before: an undo, or the removal of a failed deep insert, takes it away.
                if replaying == nil {
                    _ = try writer.connection.execute("INSERT OR IGNORE INTO oo_original (entity_set, entity_key, existed, body) VALUES (?, ?, 0, NULL)",
                                                      [.text(nestedSet), .text(String(created.entity.dropFirst(nestedSet.count)))])
                }
            }
            try writer.insert(entity, into: set, bookkeeping: StoreWriter.Bookkeeping(isLocal: true, pending: true, localID: localKey ? predicate : nil))
            for created in nested where created.localKey {
                if let (nestedSet, nestedKey) = Keys.parse(created.entity, model: model, serviceRoot: "") {
                    try writer.setState(in: nestedSet, key: nestedKey, localID: .some(String(created.entity.dropFirst(nestedSet.count))))
                }
            }
            queued.nested = nested
            if let mediaType = change.mediaType {
                // A media entity created from its stream.
                try writeStream(set, predicate: predicate, contentType: mediaType, body: change.body, writer: writer)
            }
            if let parentKey = target.key, let navigation = target.navigation {
                // Created through `Parent(key)/Navigation`: linked to the parent.
                try writer.link(target.entitySet, key: parentKey, navigation: navigation, to: key)
            }
            try bind(change, set: set, key: key)
            // The entity did not exist before: its queue row says so (unless an earlier
            // request already keeps its state, e.g. it was deleted locally before).
            if replaying == nil, try !hasKeptState(set, predicate: predicate, writer: writer) {
                queued.original = Original(existed: false, body: nil)
            }
            queued.entitySet = set
            queued.entityKey = predicate
            queued.isCreate = true
            queued.localKey = localKey
            result = try writer.reader.entity(in: set, key: key)
        } else {
            guard let key = target.key, target.navigation == nil else {
                throw OfflineODataError(.invalidRequest, "\(change.method) \(change.url) must name one entity")
            }
            guard let state = try writer.reader.bookkeeping(in: target.entitySet, key: key) else {
                throw OfflineODataError(.invalidRequest, "\(change.method) \(change.url): the entity is not in the offline store")
            }
            if change.method == "DELETE" {
                try snapshot(target.entitySet, key: key)
                // What the delete cascades to is recorded (for undo and SPEC §6.2) and kept.
                for (set, childKey) in try writer.cascade(from: target.entitySet, key: key) {
                    try snapshot(set, key: childKey)
                    queued.cascade.append(set + Keys.predicate(childKey, in: set, model: model))
                }
                try writer.delete(from: target.entitySet, key: key)
            } else {
                guard var entity = change.entity else { throw OfflineODataError(.invalidRequest, "\(change.method) \(change.url) needs a body") }
                for (name, value) in key {
                    entity.properties.removeAll { $0.name == name }
                    entity.properties.append(NamedValue(name: name, value: .primitive(value)))
                }
                entity.control.etag = nil
                // The first change of a downloaded entity keeps its downloaded state in its own
                // queue row: the commit then writes no page beyond the entity's and the queue's.
                if replaying == nil, !state.pending, !state.inError,
                   try !hasKeptState(target.entitySet, predicate: Keys.predicate(key, in: target.entitySet, model: model), writer: writer),
                   let downloaded = try writer.reader.entity(in: target.entitySet, rowid: state.rowid) {
                    queued.original = Original(existed: true, body: V4JSONWriter().write(downloaded))
                }
                try writer.update(entity, in: target.entitySet, rowid: state.rowid, replace: change.method == "PUT", markLocalPending: true)
                try bind(change, set: target.entitySet, key: key)
            }
            queued.entitySet = target.entitySet
            queued.entityKey = Keys.predicate(key, in: target.entitySet, model: model)
        }
        if replaying == nil {
            try refuseNestedLocalKeyInSameTransaction(queued, change: change, writer: writer, model: model)
            try enqueue(queued, writer: writer)
        }
        return result
    }

    /// A change set cannot name an entity that a deep insert in it creates with a local key:
    /// no `Content-ID` names a nested entity, so its key is known only after the upload.
    static func refuseNestedLocalKeyInSameTransaction(_ request: QueuedRequest, change: LocalChange, writer: StoreWriter, model: Model) throws {
        guard let transaction = request.options.transactionID, !request.isCreate else { return }
        var named: [String] = []
        if let set = request.entitySet, let key = request.entityKey { named.append(set + key) }
        if change.target.isRef, let (set, key) = linkedEntity(change, model: model) { named.append(set + Keys.predicate(key, in: set, model: model)) }
        for reference in named {
            // Only an entity with a local key can be one (a cheap lookup spares the queue scan).
            guard let (set, key) = Keys.parse(reference, model: model, serviceRoot: ""),
                  try writer.reader.bookkeeping(in: set, key: key)?.localID != nil else { continue }
            let marker = NestedCreate(path: "", entity: reference, localKey: true).json["entity"]?.serialized ?? ""
            let rows = try writer.connection.query("""
                SELECT id FROM oo_queue WHERE transaction_id = ? AND status = 'pending' AND nested LIKE ? ESCAPE '\\' LIMIT 1
                """, [.text(transaction), .text("%\"entity\":" + likeEscaped(marker) + ",\"localKey\":true%")])
            if case .integer(let id)? = rows.first?.first {
                throw OfflineODataError(.invalidRequest, "\(request.method) \(request.url): \(reference) is created with a local key by the deep "
                                        + "insert of request \(id) in the same transaction \(transaction); its key is known only after the "
                                        + "upload, so change it in the deep insert's body or in another transaction")
            }
        }
    }

    /// `text` with LIKE's wildcards escaped by a backslash.
    static func likeEscaped(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%").replacingOccurrences(of: "_", with: "\\_")
    }

    /// For a `$ref` request: `Set(key)` of the end whose foreign key (and so values and
    /// ETag) the link change alters on the backend, and whether it is the entity the URL
    /// names. Nil for other requests, for links kept apart from both ends (no constraint),
    /// and when that end is not named.
    static func linkHolder(of request: QueuedRequest, schema: StoreSchema, serviceRoot: String,
                           keyMap: [String: String]) -> (reference: String, isSource: Bool)? {
        let model = schema.model
        guard request.url.contains("$ref") || request.url.contains("$links"),
              let change = try? localChange(from: request, model: model, serviceRoot: serviceRoot, keyMap: keyMap), change.target.isRef,
              let key = change.target.key, let navigation = change.target.navigation,
              let isSource = schema.linkChangesSource(change.target.entitySet, navigation: navigation) else { return nil }
        if isSource { return (change.target.entitySet + Keys.predicate(key, in: change.target.entitySet, model: model), true) }
        guard let (set, other) = linkedEntity(change, model: model) else { return nil }
        return (set + Keys.predicate(other, in: set, model: model), false)
    }

    /// The other end of a `$ref` request.
    static func linkedEntity(_ change: LocalChange, model: Model) -> (String, [String: PrimitiveValue])? {
        if let linkTarget = change.linkTarget { return linkTarget }
        guard let key = change.target.navigationKey, let navigation = change.target.navigation,
              let set = model.targetEntitySet(from: change.target.entitySet, navigationPath: navigation)?.name else { return nil }
        return (set, key)
    }

    /// Keeps the downloaded state of an entity before its first local change (for undo and
    /// for reverting failed requests), in `oo_original`: for entities a request changes besides
    /// its own (deleted ones, cascades, link ends). An entity with queued or failed requests
    /// already has its state kept (in `oo_original` or in the queue row of its first request).
    ///
    /// Where the state of an entity is kept: ``keptState(_:predicate:writer:)``.
    static func snapshot(_ entitySet: String, key: [String: PrimitiveValue], writer: StoreWriter, model: Model) throws {
        let predicate = Keys.predicate(key, in: entitySet, model: model)
        guard let state = try writer.reader.bookkeeping(in: entitySet, key: key), !state.pending, !state.inError,
              try !hasKeptState(entitySet, predicate: predicate, writer: writer),
              let entity = try writer.reader.entity(in: entitySet, rowid: state.rowid) else { return }
        _ = try writer.connection.execute("INSERT INTO oo_original (entity_set, entity_key, existed, body) VALUES (?, ?, 1, ?)",
                                          [.text(entitySet), .text(predicate), .blob(V4JSONWriter().write(entity))])
    }

    /// A download found an entity with pending changes changed on the backend (`entity`), or
    /// gone there (nil): the state kept for it (where ``keptState(_:predicate:writer:)`` finds
    /// it) becomes the backend's, when the entity existed before its local changes.
    /// `created`: the backend took the entity's create, so its kept state changes even though
    /// it did not exist before.
    static func refreshKeptState(_ entity: Entity?, in entitySet: String, predicate: String, writer: StoreWriter, created: Bool = false) throws {
        let existed: DatabaseValue = .integer(entity == nil ? 0 : 1)
        let body: DatabaseValue = entity.map { .blob(V4JSONWriter().write($0)) } ?? .null
        let condition = created ? "" : " AND existed = 1"
        let kept = try writer.connection.execute("UPDATE oo_original SET existed = ?, body = ? WHERE entity_set = ? AND entity_key = ?" + condition,
                                                 [existed, body, .text(entitySet), .text(predicate)])
        guard kept == 0, try !hasKeptState(entitySet, predicate: predicate, writer: writer) else { return }
        _ = try writer.connection.execute("""
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
    static func renewKeptETag(_ etag: String, in entitySet: String, predicate: String, writer: StoreWriter, model: Model) throws {
        guard let kept = try keptState(entitySet, predicate: predicate, writer: writer), kept.existed, let body = kept.body,
              var entity = try? V4JSONReader(model: model).readEntity(body, entityType: model.entitySet(entitySet)?.entityType) else { return }
        entity.control.etag = etag
        try refreshKeptState(entity, in: entitySet, predicate: predicate, writer: writer)
    }

    static func advanceKeptState(after request: QueuedRequest, etag: String?, server: Entity?, in entitySet: String, predicate: String,
                                 writer: StoreWriter, model: Model) throws {
        // A link request changes links, which the kept values do not hold.
        let path = request.url.split(separator: "?", maxSplits: 1).first.map(String.init) ?? request.url
        guard !path.hasSuffix("/$ref"), let kept = try keptState(entitySet, predicate: predicate, writer: writer) else { return }
        let entityType = model.entitySet(entitySet)?.entityType
        if request.method == "DELETE" {
            try refreshKeptState(nil, in: entitySet, predicate: predicate, writer: writer)
            return
        }
        if request.isCreate {
            // The backend's answer; else the create's own values; else (a media create answered
            // without a body) the entity by its key alone: it exists now either way.
            var created = server
            if created == nil, request.mediaType == nil { created = try? model.readEntity(request.body, entityType: entityType) }
            if created == nil, let (_, key) = Keys.parse(entitySet + predicate, model: model, serviceRoot: "") {
                created = Entity(properties: key.sorted { $0.key < $1.key }.map { NamedValue(name: $0.key, value: .primitive($0.value)) })
            }
            guard var created else { return }
            if let etag { created.control.etag = etag }
            created.navigation = []
            try refreshKeptState(created, in: entitySet, predicate: predicate, writer: writer, created: true)
            return
        }
        guard kept.existed, let body = kept.body, var entity = try? V4JSONReader(model: model).readEntity(body, entityType: entityType) else { return }
        if request.mediaType != nil {
            // A new stream: it is the one to go back to now.
            try writeStream(entitySet, predicate: predicate, contentType: request.mediaType, body: request.body, table: "oo_stream_original", writer: writer)
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
        try refreshKeptState(entity, in: entitySet, predicate: predicate, writer: writer)
    }

    /// Whether `oo_original` keeps the state of an entity.
    static func hasKeptState(_ entitySet: String, predicate: String, writer: StoreWriter) throws -> Bool {
        try !writer.connection.query("SELECT 1 FROM oo_original WHERE entity_set = ? AND entity_key = ?", [.text(entitySet), .text(predicate)]).isEmpty
    }

    /// The state of an entity before its local changes: `oo_original` if it has one, else the
    /// queue row of its earliest request that kept one. Nil: nothing kept.
    static func keptState(_ entitySet: String, predicate: String, writer: StoreWriter) throws -> Original? {
        let rows = try writer.connection.query("SELECT existed, body FROM oo_original WHERE entity_set = ? AND entity_key = ?", [.text(entitySet), .text(predicate)])
        let row = try rows.first ?? writer.connection.query("""
            SELECT original_existed, original FROM oo_queue WHERE entity_set = ? AND entity_key = ? AND original_existed IS NOT NULL ORDER BY id LIMIT 1
            """, [.text(entitySet), .text(predicate)]).first
        guard let row else { return nil }
        var body: [UInt8]?
        if case .blob(let bytes) = row[1] { body = bytes }
        return Original(existed: row[0] == .integer(1), body: body)
    }

    /// Removes a queued request. The state it kept for its entity moves to `oo_original`, where
    /// the entity's later requests (or a revert) still find it; what no request needs any more
    /// is removed by the caller's clean-up.
    static func removeQueued(_ id: Int64, writer: StoreWriter) throws {
        _ = try writer.connection.execute("""
            INSERT OR IGNORE INTO oo_original (entity_set, entity_key, existed, body)
              SELECT entity_set, entity_key, original_existed, original FROM oo_queue
              WHERE id = ? AND original_existed IS NOT NULL AND entity_set IS NOT NULL AND entity_key IS NOT NULL
            """, [.integer(id)])
        _ = try writer.connection.execute("DELETE FROM oo_queue WHERE id = ?", [.integer(id)])
    }

    /// Fills in the keys of the nested entities of a deep insert (at any depth): the parent's
    /// side of a foreign key, then a local temporary key for each part still missing (the one
    /// recorded at `path` when a queued create is applied again). `created` gets every nested
    /// entity, in document order.
    static func assignNestedKeys(_ entity: inout Entity, set: String, path: String, parentIsLocal: Bool, recorded: [NestedCreate],
                                 into created: inout [NestedCreate], writer: StoreWriter, model: Model, url: String, depth: Int = 0) throws {
        guard depth < 32 else { throw OfflineODataError(.invalidRequest, "POST \(url): a deep insert nested deeper than 32 levels") }
        for index in entity.navigation.indices {
            let name = entity.navigation[index].name
            guard let inline = entity.navigation[index].inline, let target = model.targetEntitySet(from: set, navigationPath: name)?.name,
                  let type = model.entityType(ofEntitySet: target) else { continue }
            let implied = writer.schema.propertiesImplied(creatingThrough: name, of: set, parent: entity)
            func prepare(_ child: inout Entity, _ childPath: String) throws {
                var local = false
                let keyNames = Set(model.key(of: type).map(\.name))
                for (property, value) in implied where child[property] == nil || child[property] == .null {
                    child[property] = .primitive(value)
                    // A key part taken from a parent with a local key is local too (an item of a new order).
                    if parentIsLocal && keyNames.contains(property) { local = true }
                }
                if let earlier = recorded.first(where: { $0.path == childPath && $0.localKey }),
                   let (_, key) = Keys.parse(earlier.entity, model: model, serviceRoot: "") {
                    for (property, value) in key { child[property] = .primitive(value) }
                    local = true
                }
                for ref in model.key(of: type) where child[ref.name] == nil || child[ref.name] == .null {
                    guard let property = model.property(ref.name, ofStructuredType: type.qualifiedName),
                          let value = try nextLocalKey(PrimitiveType(rawValue: property.type.name), writer: writer) else {
                        throw OfflineODataError(.invalidRequest, "POST \(url): the key \(ref.name) of the nested \(target) entity at \(childPath) "
                                                + "is missing and no local key can be made for its type")
                    }
                    child[ref.name] = .primitive(value)
                    local = true
                }
                guard let key = Keys.key(of: child, in: target, model: model) else {
                    throw OfflineODataError(.invalidRequest, "POST \(url): the nested \(target) entity at \(childPath) has no key")
                }
                created.append(NestedCreate(path: childPath, entity: target + Keys.predicate(key, in: target, model: model), localKey: local))
                try assignNestedKeys(&child, set: target, path: childPath + "/", parentIsLocal: local, recorded: recorded, into: &created,
                                     writer: writer, model: model, url: url, depth: depth + 1)
            }
            switch inline {
            case .entity(var child?):
                try prepare(&child, path + name)
                entity.navigation[index].inline = .entity(child)
            case .collection(var children):
                for item in children.entities.indices { try prepare(&children.entities[item], "\(path)\(name)/\(item)") }
                entity.navigation[index].inline = .collection(children)
            case .entity(nil):
                break
            }
        }
    }

    /// A local temporary key value: negative numbers for integers, `LOCAL~n` for strings, a
    /// random GUID for GUIDs.
    static func nextLocalKey(_ type: PrimitiveType?, writer: StoreWriter) throws -> PrimitiveValue? {
        let rows = try writer.connection.query("SELECT value FROM oo_meta WHERE key = 'nextLocalKey'")
        var next: Int64 = 1
        if case .text(let text)? = rows.first?.first, let value = Int64(text) { next = value }
        _ = try writer.connection.execute("UPDATE oo_meta SET value = ? WHERE key = 'nextLocalKey'", [.text("\(next + 1)")])
        switch type {
        case .int64?: return .int64(-next)
        case .int32?: return .int32(Int32(truncatingIfNeeded: -next))
        case .int16?: return .int16(Int16(truncatingIfNeeded: -next))
        case .string?: return .string("LOCAL~\(next)")
        case .guid?: return .guid(GuidValue(UUID()))
        default: return nil
        }
    }
}

/// The state of an entity before its local changes: it did not exist (a local create), or its
/// downloaded values as a JSON entity.
struct Original: Sendable {
    var existed: Bool
    var body: [UInt8]?
}

/// A nested entity created by a deep insert: where it is in the body (`Contacts/0`,
/// `Items/1/Notes/0`, `Manager` for a single one), its `Set(key)`, and whether that key is a
/// local temporary one that the backend replaces.
struct NestedCreate: Sendable, Hashable {
    var path: String
    var entity: String
    var localKey: Bool

    var json: JSONValue {
        .object([.init("path", .string(path)), .init("entity", .string(entity)), .init("localKey", .bool(localKey))])
    }

    init(path: String, entity: String, localKey: Bool) {
        self.path = path
        self.entity = entity
        self.localKey = localKey
    }

    init?(_ json: JSONValue) {
        guard let path = json["path"]?.stringValue, let entity = json["entity"]?.stringValue else { return nil }
        self.init(path: path, entity: entity, localKey: json["localKey"] == .bool(true))
    }
}

/// A request in the queue.
struct QueuedRequest: Sendable {
    var id: Int64 = 0
    var method: String
    var url: String
    var body: [UInt8]
    var headers: [String: String]
    var options: OfflineODataRequestOptions
    var entitySet: String?
    var entityKey: String?
    var isCreate = false
    var localKey = false
    var repeatID: String?
    var firstSent: String?
    /// `Set(key)` of the entities a delete removed through `OnDelete` cascades.
    var cascade: [String] = []
    /// Sent and rejected (or not sent because a request it depends on was): in the ErrorArchive.
    var failed = false
    /// The content type of a media request (the body is a stream); nil for JSON.
    var mediaType: String?
    /// For a deep insert: the nested entities it creates.
    var nested: [NestedCreate] = []
    /// The state of its entity before this request, when this is the entity's first change
    /// (written with the request; not loaded with the queue).
    var original: Original?

    /// The headers as stored in the queue: a JSON object, names sorted.
    var headersJSON: String {
        JSONValue.object(headers.sorted { $0.key < $1.key }.map { .init($0.key, .string($0.value)) }).serialized
    }

    init(method: String, url: String, body: [UInt8], headers: [String: String], options: OfflineODataRequestOptions) {
        self.method = method
        self.url = url
        self.body = body
        self.headers = headers
        self.options = options
    }
}

extension OfflineODataProvider {
    static func enqueue(_ request: QueuedRequest, writer: StoreWriter) throws {
        let headers = request.headersJSON
        func text(_ value: String?) -> DatabaseValue { value.map { .text($0) } ?? .null }
        _ = try writer.connection.execute("""
            INSERT INTO oo_queue (method, url, body, headers, entity_set, entity_key, is_create, local_key, transaction_id, custom_tag,
              upload_category, remove_after_upload, unmodifiable, repeat_id, cascade, original_existed, original, media_type, nested, status)
              VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending')
            """, [.text(request.method), .text(request.url), .blob(request.body), .text(headers), text(request.entitySet), text(request.entityKey),
                  .integer(request.isCreate ? 1 : 0), .integer(request.localKey ? 1 : 0), text(request.options.transactionID), text(request.options.customTag),
                  text(request.options.uploadCategory), .integer(request.options.removeAfterUpload ? 1 : 0),
                  .integer(request.options.unmodifiableRequest ? 1 : 0), text(request.repeatID),
                  request.cascade.isEmpty ? .null : .text(JSONValue.array(request.cascade.map { .string($0) }).serialized),
                  request.original.map { .integer($0.existed ? 1 : 0) } ?? .null, request.original?.body.map { .blob($0) } ?? .null,
                  text(request.mediaType),
                  request.nested.isEmpty ? .null : .text(JSONValue.array(request.nested.map(\.json)).serialized)])
    }

    /// Loads queued requests with the given status, in order.
    static func loadQueue(_ connection: Connection, status: String) throws -> [QueuedRequest] {
        try loadQueue(connection, statuses: [status])
    }

    /// Loads queued requests with any of the given statuses, in order.
    static func loadQueue(_ connection: Connection, statuses: [String]) throws -> [QueuedRequest] {
        try loadQueue(connection, statuses: statuses, ids: nil)
    }

    /// Loads the queued requests among `ids` (at most 500) with any of the given statuses, in order.
    static func loadQueue(_ connection: Connection, statuses: [String], ids: [Int64]?) throws -> [QueuedRequest] {
        let only = ids.map { " AND id IN (" + $0.map { _ in "?" }.joined(separator: ", ") + ")" } ?? ""
        let rows = try connection.query("""
            SELECT id, method, url, body, headers, entity_set, entity_key, is_create, local_key, transaction_id, custom_tag, upload_category,
              remove_after_upload, unmodifiable, repeat_id, first_sent, cascade, status, media_type, nested
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
            var options = OfflineODataRequestOptions(transactionID: text(9), unmodifiableRequest: row[13] == .integer(1), customTag: text(10),
                                                     uploadCategory: text(11), removeAfterUpload: row[12] == .integer(1))
            options.customHeaders = headers
            var request = QueuedRequest(method: text(1) ?? "GET", url: text(2) ?? "", body: body, headers: headers, options: options)
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
            return request
        }
    }

    // MARK: Undo

    /// Undoes every pending change of one entity: an updated entity returns to its downloaded
    /// state, a created one disappears, a deleted one comes back; its queued requests go, and
    /// so do later requests that depend on them (a child created under it, a link to it).
    public func undoPendingChanges(for entitySet: String, key: [String: PrimitiveValue]) async throws {
        try await undoPendingChanges(for: [(entitySet, key)])
    }

    /// Undoes the pending changes of several entities at once (see
    /// ``undoPendingChanges(for:key:)``).
    public func undoPendingChanges(for entities: [(entitySet: String, key: [String: PrimitiveValue])]) async throws {
        let store = try openStore()
        let model = store.model
        let root = serviceRoot
        try await store.write { writer in
            let keyMap = try Self.keyMap(writer.connection)
            let targets = Set(entities.map { reference in
                let text = reference.entitySet + Keys.predicate(reference.key, in: reference.entitySet, model: model)
                return keyMap[text] ?? text
            })
            let entries = QueueEntry.analyse(try Self.loadQueue(writer.connection, statuses: ["pending", "failed"]), model: model, serviceRoot: root, keyMap: keyMap)
            let roots = Set(entries.filter { !$0.changed.isDisjoint(with: targets) }.map(\.id))
            let removed = QueueAlgorithms.dependants(of: roots, in: entries)
            try Self.removeRequests(removed, entries: entries, also: targets, writer: writer, model: model, serviceRoot: root, keyMap: keyMap)
        }
        keyMapCache = nil
    }

    /// Deleting from the ErrorArchive (SPEC §7). By default any row clears the whole archive:
    /// every failed request goes and the local changes they made are reverted (unsent requests
    /// stay and are applied again on top). With `enableIndividualErrorArchiveDeletion`, only
    /// the row's request goes, with every later request, sent or unsent, that depends on it. A
    /// row that is not in the archive is an `invalidRequest` error in both modes.
    func deleteFromErrorArchive(requestID: Int64?) async throws {
        let store = try openStore()
        let model = store.model
        let root = serviceRoot
        let individual = parameters.enableIndividualErrorArchiveDeletion
        try await store.write { writer in
            let keyMap = try Self.keyMap(writer.connection)
            let entries = QueueEntry.analyse(try Self.loadQueue(writer.connection, statuses: ["pending", "failed"]), model: model, serviceRoot: root, keyMap: keyMap)
            if let requestID, !entries.contains(where: { $0.id == requestID && $0.request.failed }) {
                throw OfflineODataError(.invalidRequest, "ErrorArchive(\(requestID)) does not exist")
            }
            let removed: Set<Int64>
            if individual, let requestID {
                removed = QueueAlgorithms.dependants(of: [requestID], in: entries)
            } else {
                removed = Set(entries.filter(\.request.failed).map(\.id))
            }
            try Self.removeRequests(removed, entries: entries, writer: writer, model: model, serviceRoot: root, keyMap: keyMap)
        }
    }

    /// Local references (`Set(-1)`) of created entities the backend has re-keyed → the backend's.
    static func keyMap(_ connection: Connection) throws -> [String: String] {
        var map: [String: String] = [:]
        for row in try connection.query("SELECT entity_set, local_key, server_key FROM oo_key_map") {
            if case .text(let set) = row[0], case .text(let local) = row[1], case .text(let server) = row[2] { map[set + local] = set + server }
        }
        return map
    }

    /// Removes queued requests (and their RequestQueue and ErrorArchive rows), then rebuilds
    /// the local state of every entity they changed (and of `also`): back to the downloaded
    /// state, with the requests that stay applied again on top.
    static func removeRequests(_ ids: Set<Int64>, entries: [QueueEntry], also: Set<String> = [], writer: StoreWriter, model: Model,
                               serviceRoot: String, keyMap: [String: String]) throws {
        var affected = also
        for entry in entries where ids.contains(entry.id) {
            affected.formUnion(entry.changed)
            try removeQueued(entry.id, writer: writer)
            try writer.delete(from: LocalSchema.errorArchive, key: ["RequestID": .int64(entry.id)])
        }
        let remaining = entries.filter { !ids.contains($0.id) }
        try rebuild(affected, remaining: remaining, writer: writer, model: model, serviceRoot: serviceRoot, keyMap: keyMap)
    }

    /// Puts entities back into their downloaded state (a locally created one disappears, a
    /// deleted one comes back) and applies the `remaining` requests that change them again.
    static func rebuild(_ entities: Set<String>, remaining: [QueueEntry], writer: StoreWriter, model: Model, serviceRoot: String,
                        keyMap: [String: String]) throws {
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
            guard let original = try keptState(set, predicate: predicate, writer: writer) else { continue }
            let exists = try writer.rowid(in: set, key: key) != nil
            if original.existed, let bytes = original.body {
                let entity = try V4JSONReader(model: model).readEntity(bytes, entityType: model.entitySet(set)?.entityType)
                if exists { try writer.update(entity, in: set, replace: true) } else { try writer.insert(entity, into: set) }
                try writer.setState(in: set, key: key, isLocal: false, pending: false, inError: false, etag: .some(entity.control.etag), localID: .some(nil))
            } else if exists {
                try writer.delete(from: set, key: key)
            }
            try restoreStream(set, predicate: predicate, existed: original.existed, writer: writer)
        }
        for entry in remaining where !entry.changed.isDisjoint(with: entities) {
            // A request that cannot be applied any more (its parent is gone) changes nothing.
            if let change = try? localChange(from: entry.request, model: model, serviceRoot: serviceRoot, keyMap: keyMap) {
                _ = try? writer.connection.savepoint { try applyLocally(change, writer: writer, model: model, repeatable: false, replaying: entry.request) }
            }
        }
        for reference in entities {
            guard let (set, key) = Keys.parse(reference, model: model, serviceRoot: "") else { continue }
            let predicate = Keys.predicate(key, in: set, model: model)
            let own = remaining.filter { $0.changed.contains(reference) }
            if own.isEmpty {
                try forgetKeptState(set, predicate: predicate, writer: writer)
                try writer.setState(in: set, key: key, isLocal: false, pending: false, inError: false)
            } else {
                try writer.setState(in: set, key: key, isLocal: true, pending: own.contains { !$0.request.failed }, inError: own.contains { $0.request.failed })
            }
        }
    }

    /// A queued request as a local change again (its local keys mapped to the backend's).
    static func localChange(from request: QueuedRequest, model: Model, serviceRoot: String, keyMap: [String: String]) throws -> LocalChange {
        var url = request.url
        for (local, server) in keyMap where url == local || url.hasPrefix(local + "/") {
            url = server + url.dropFirst(local.count)
        }
        let target = try parseTarget(url, model: model, serviceRoot: serviceRoot)
        var change = LocalChange(method: request.method, url: url, body: request.body, target: target, options: request.options)
        change.mediaType = request.mediaType
        if request.mediaType != nil {
            // A media change: the body is the stream; a media create starts with no values.
            if request.isCreate { change.entity = Entity() }
        } else if target.isRef {
            if request.method != "DELETE" {
                change.linkTarget = linkTarget(ofBody: request.body, model: model, serviceRoot: serviceRoot) { keyMap[$0] ?? $0 }
            }
        } else if request.method != "DELETE" {
            let entity = try entity(fromBody: request.body, method: request.method, url: url, target: target, model: model)
            change.entity = entity
            change.binds = binds(of: entity, model: model, serviceRoot: serviceRoot) { keyMap[$0] ?? $0 }
        }
        return change
    }

    /// The entity a `$ref` body names (`@odata.id`, V2 `uri`), resolved to entity set and key;
    /// `mapped` turns a local reference into the backend's.
    static func linkTarget(ofBody body: [UInt8], model: Model, serviceRoot: String, mapped: (String) -> String) -> (String, [String: PrimitiveValue])? {
        guard let json = try? JSONValue.parse(body), let id = json["@odata.id"]?.stringValue ?? json["uri"]?.stringValue,
              let (set, key) = Keys.parse(id, model: model, serviceRoot: serviceRoot) else { return nil }
        return Keys.parse(mapped(set + Keys.predicate(key, in: set, model: model)), model: model, serviceRoot: "")
    }

    /// The `@odata.bind` (V2: `__metadata.uri`) links of a body, resolved to entity set and
    /// key; `mapped` turns a local reference into the backend's.
    static func binds(of entity: Entity, model: Model, serviceRoot: String, mapped: (String) -> String) -> [(navigation: String, entitySet: String, key: [String: PrimitiveValue])] {
        var result: [(navigation: String, entitySet: String, key: [String: PrimitiveValue])] = []
        for navigation in entity.navigation {
            for id in navigation.bind ?? [] {
                guard let (set, key) = Keys.parse(id, model: model, serviceRoot: serviceRoot) else { continue }
                let reference = mapped(set + Keys.predicate(key, in: set, model: model))
                guard let (mappedSet, mappedKey) = Keys.parse(reference, model: model, serviceRoot: "") else { continue }
                result.append((navigation.name, mappedSet, mappedKey))
            }
        }
        return result
    }

    /// Reads the entity of a POST, PUT, PATCH or MERGE body.
    static func entity(fromBody body: [UInt8], method: String, url: String, target: WriteTarget, model: Model) throws -> Entity {
        guard !body.isEmpty else { throw OfflineODataError(.invalidRequest, "\(method) \(url) needs a body") }
        let set = target.navigation.flatMap { model.targetEntitySet(from: target.entitySet, navigationPath: $0)?.name } ?? target.entitySet
        do {
            let entityType = model.entitySet(set)?.entityType
            let entity = try model.readEntity(body, entityType: entityType)
            if let problem = JSONTextCheck.problem(body) {
                throw OfflineODataError(.invalidRequest, "The body of \(method) \(url) is not stored as sent: \(problem)")
            }
            // Refused before anything is queued: a value the backend would drop or refuse.
            if let entityType { try model.checkWritable(entity, as: entityType) }
            if method != "POST", target.navigation == nil, let key = target.key { try model.checkKeyUnchanged(entity, key: key) }
            return entity
        } catch let error as OfflineODataError {
            throw error
        } catch {
            throw OfflineODataError(.invalidRequest, "The body of \(method) \(url) is not a valid \(set) entity: \(error)")
        }
    }
}

extension OfflineODataProvider {
    /// Undoes the pending changes of the entity a URL such as `Customers('C1')` names (it may
    /// be deleted locally).
    public func undoPendingChanges(forURL url: String) async throws {
        let store = try openStore()
        let mapped = try await rewriteLocalKeys(url, store: store)
        guard let (set, key) = Keys.parse(mapped, model: store.model, serviceRoot: serviceRoot) else {
            throw OfflineODataError(.invalidRequest, "\(url) does not name one entity by key")
        }
        try await undoPendingChanges(for: set, key: key)
    }

    /// Undoes the pending changes of every entity the URLs name, together.
    public func undoPendingChanges(forURLs urls: [String]) async throws {
        let store = try openStore()
        var entities: [(entitySet: String, key: [String: PrimitiveValue])] = []
        for url in urls {
            let mapped = try await rewriteLocalKeys(url, store: store)
            guard let (set, key) = Keys.parse(mapped, model: store.model, serviceRoot: serviceRoot) else {
                throw OfflineODataError(.invalidRequest, "\(url) does not name one entity by key")
            }
            entities.append((set, key))
        }
        try await undoPendingChanges(for: entities)
    }
}
