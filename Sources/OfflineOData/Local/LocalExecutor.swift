import Foundation
import ODataCore
import ODataStore

/// Local writes: a modification (``LocalChange``) applied to the store and queued, in the
/// caller's write transaction.
///
/// It owns what a local write decides: whether the target is in the store, the local
/// temporary keys of created entities (nested ones of a deep insert included), the links a
/// body binds, the cascade of a delete, the snapshot of each entity's state before its first
/// change (kept through ``RequestQueue``), and the queue row. Applied again with `replaying`,
/// a queued request rebuilds an entity's local state after an undo, a revert or a create the
/// backend answered, without queueing anything. Local reads run through ``LocalReader``.
struct LocalExecutor {
    let writer: StoreWriter
    let model: Model
    let serviceRoot: String

    init(_ writer: StoreWriter, model: Model, serviceRoot: String) {
        self.writer = writer
        self.model = model
        self.serviceRoot = serviceRoot
    }

    var queue: RequestQueue { RequestQueue(writer, model: model, serviceRoot: serviceRoot) }

    /// Applies a change to the store and queues it. With `replaying`, the change is a queued
    /// request applied again while an entity's local state is rebuilt: no snapshot, nothing
    /// queued, and a create keeps its recorded key.
    @discardableResult
    func apply(_ change: LocalChange, repeatable: Bool, replaying: QueuedRequest? = nil) throws -> Entity? {
        let target = change.target
        func snapshot(_ entitySet: String, key: [String: PrimitiveValue]) throws {
            if replaying == nil { try queue.snapshot(entitySet, key: key) }
        }
        // `@odata.bind` links of the body; a target outside the store is linked on the backend only.
        func bind(_ change: LocalChange, set: String, key: [String: PrimitiveValue]) throws {
            for bind in change.binds where try writer.rowid(in: bind.entitySet, key: bind.key) != nil {
                try snapshot(bind.entitySet, key: bind.key)
                try writer.link(set, key: key, navigation: bind.navigation, to: bind.key)
            }
        }
        var queued = QueuedRequest(
            method: change.method, url: change.url, body: change.body, headers: change.headers, options: change.options)
        queued.mediaType = change.mediaType
        queued.repeatID = repeatable ? GuidValue.random().description : nil
        var result: Entity?
        if target.isValue {
            guard let key = target.key, let mediaType = change.mediaType, change.method == "PUT" else {
                throw OfflineODataError(
                    .invalidRequest, "\(change.method) \(change.url): a media stream is replaced with PUT and a body")
            }
            guard model.entityType(ofEntitySet: target.entitySet)?.hasStream == true else {
                throw OfflineODataError(
                    .invalidRequest, "\(change.url): \(target.entitySet) entities have no media stream")
            }
            guard try writer.reader.bookkeeping(in: target.entitySet, key: key) != nil else {
                throw OfflineODataError(
                    .invalidRequest, "\(change.method) \(change.url): the entity is not in the offline store", httpStatus: 404)
            }
            let predicate = Keys.predicate(key, in: target.entitySet, model: model)
            try snapshot(target.entitySet, key: key)
            if replaying == nil { try queue.keepStream(target.entitySet, predicate: predicate) }
            try queue.writeStream(target.entitySet, predicate: predicate, contentType: mediaType, body: change.body)
            try writer.setState(in: target.entitySet, key: key, isLocal: true, pending: true)
            queued.entitySet = target.entitySet
            queued.entityKey = predicate
        } else if target.isRef {
            guard let key = target.key, let navigation = target.navigation else {
                throw OfflineODataError(
                    .invalidRequest, "\(change.url): a $ref needs an entity and a navigation property")
            }
            try snapshot(target.entitySet, key: key)
            if let (otherSet, otherKey) = LocalChange.linkedEntity(change, model: model) {
                try snapshot(otherSet, key: otherKey)
            }
            if change.method == "DELETE" {
                if let other = target.navigationKey {
                    try writer.unlink(target.entitySet, key: key, navigation: navigation, from: other)
                } else {
                    // A single-valued navigation property names its one link without a key.
                    guard try !writer.isCollection(target.entitySet, navigation: navigation),
                        let otherSet = model.targetEntitySet(from: target.entitySet, navigationPath: navigation)?.name
                    else {
                        throw OfflineODataError(
                            .invalidRequest,
                            "\(change.url): say which link of the collection to delete, with a key or $id")
                    }
                    for other in try writer.linkedKeys(target.entitySet, key: key, navigation: navigation) {
                        try snapshot(otherSet, key: other)
                        try writer.unlink(target.entitySet, key: key, navigation: navigation, from: other)
                    }
                }
            } else {
                guard let (_, other) = change.linkTarget else {
                    throw OfflineODataError(.invalidRequest, "\(change.url): the body must name the entity to link")
                }
                try writer.link(target.entitySet, key: key, navigation: navigation, to: other)
            }
            try writer.setState(in: target.entitySet, key: key, isLocal: true, pending: true)
            queued.entitySet = target.entitySet
            queued.entityKey = Keys.predicate(key, in: target.entitySet, model: model)
        } else if change.method == "POST" {
            let set =
                target.navigation.flatMap { model.targetEntitySet(from: target.entitySet, navigationPath: $0)?.name }
                ?? target.entitySet
            guard target.key == nil || target.navigation != nil, var entity = change.entity else {
                throw OfflineODataError(
                    .invalidRequest, "POST \(change.url) must name an entity set or a collection navigation property")
            }
            if let parentKey = target.key, let navigation = target.navigation {
                // `POST SalesOrders('SO2')/Items`: the new item's OrderID comes from its order.
                for (name, value) in try writer.reader.propertiesImplied(
                    creatingThrough: navigation, of: target.entitySet, key: parentKey)
                where entity[name] == nil || entity[name] == .null {
                    entity[name] = .primitive(value)
                }
            }
            var localKey = false
            if let replaying, replaying.localKey, let recorded = replaying.entityKey,
                let (_, key) = Keys.parse(set + recorded, model: model, serviceRoot: "")
            {
                for (name, value) in key {
                    entity.properties.removeAll { $0.name == name }
                    entity.properties.append(NamedValue(name: name, value: .primitive(value)))
                }
                localKey = true
            }
            if let type = model.entityType(ofEntitySet: set) {
                let missing = try localKeyValues(forMissingKeyOf: entity, type: type) { name in
                    "POST \(change.url): the key \(name) is missing and no local key can be made for its type"
                }
                for (name, value) in missing {
                    entity.properties.removeAll { $0.name == name }
                    entity.properties.append(NamedValue(name: name, value: .primitive(value)))
                    localKey = true
                }
            }
            guard let key = Keys.key(of: entity, in: set, model: model) else {
                throw OfflineODataError(.invalidRequest, "POST \(change.url): the entity has no key")
            }
            let predicate = Keys.predicate(key, in: set, model: model)
            if try writer.rowid(in: set, key: key) != nil {
                throw OfflineODataError(.invalidRequest, "POST \(change.url): \(set)\(predicate) exists already")
            }
            // A deep insert: nested entities without a key get local ones too, which the upload
            // replaces with the keys the backend gave them.
            var nested: [NestedCreate] = []
            try assignNestedKeys(
                &entity, set: set, path: "", parentIsLocal: localKey, recorded: replaying?.nested ?? [], into: &nested,
                url: change.url)
            for created in nested {
                guard let (nestedSet, nestedKey) = Keys.parse(created.entity, model: model, serviceRoot: "") else {
                    continue
                }
                // A nested entity is new, as the top one is (linking an existing one is a bind).
                if try writer.rowid(in: nestedSet, key: nestedKey) != nil {
                    throw OfflineODataError(
                        .invalidRequest, "POST \(change.url): the nested \(created.entity) exists already")
                }
                // It did not exist before: an undo, or the removal of a failed deep insert, takes it away.
                if replaying == nil {
                    _ = try writer.connection.execute(
                        "INSERT OR IGNORE INTO oo_original (entity_set, entity_key, existed, body) VALUES (?, ?, 0, NULL)",
                        [.text(nestedSet), .text(String(created.entity.dropFirst(nestedSet.count)))])
                }
            }
            try writer.insert(
                entity, into: set,
                bookkeeping: StoreWriter.Bookkeeping(isLocal: true, pending: true, localID: localKey ? predicate : nil))
            for created in nested where created.localKey {
                if let (nestedSet, nestedKey) = Keys.parse(created.entity, model: model, serviceRoot: "") {
                    try writer.setState(
                        in: nestedSet, key: nestedKey, localID: .some(String(created.entity.dropFirst(nestedSet.count)))
                    )
                }
            }
            queued.nested = nested
            if let mediaType = change.mediaType {
                // A media entity created from its stream.
                try queue.writeStream(set, predicate: predicate, contentType: mediaType, body: change.body)
            }
            if let parentKey = target.key, let navigation = target.navigation {
                // Created through `Parent(key)/Navigation`: linked to the parent.
                try writer.link(target.entitySet, key: parentKey, navigation: navigation, to: key)
            }
            try bind(change, set: set, key: key)
            // The entity did not exist before: its queue row says so (unless an earlier
            // request already keeps its state, e.g. it was deleted locally before).
            if replaying == nil, try !queue.hasKeptState(set, predicate: predicate) {
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
                throw OfflineODataError(
                    .invalidRequest, "\(change.method) \(change.url): the entity is not in the offline store", httpStatus: 404)
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
                guard var entity = change.entity else {
                    throw OfflineODataError(.invalidRequest, "\(change.method) \(change.url) needs a body")
                }
                for (name, value) in key {
                    entity.properties.removeAll { $0.name == name }
                    entity.properties.append(NamedValue(name: name, value: .primitive(value)))
                }
                entity.control.etag = nil
                // The first change of a downloaded entity keeps its downloaded state in its own
                // queue row: the commit then writes no page beyond the entity's and the queue's.
                if replaying == nil, !state.pending, !state.inError,
                    try !queue.hasKeptState(
                        target.entitySet, predicate: Keys.predicate(key, in: target.entitySet, model: model)),
                    let downloaded = try writer.reader.entity(in: target.entitySet, rowid: state.rowid)
                {
                    queued.original = Original(existed: true, body: V4JSONWriter().write(downloaded))
                }
                try writer.update(
                    entity, in: target.entitySet, rowid: state.rowid, replace: change.method == "PUT",
                    markLocalPending: true)
                try bind(change, set: target.entitySet, key: key)
            }
            queued.entitySet = target.entitySet
            queued.entityKey = Keys.predicate(key, in: target.entitySet, model: model)
        }
        if replaying == nil {
            try refuseNestedLocalKeyInSameTransaction(queued, change: change)
            try queue.enqueue(queued)
        }
        return result
    }

    /// A change set cannot name an entity that a deep insert in it creates with a local key:
    /// no `Content-ID` names a nested entity, so its key is known only after the upload.
    func refuseNestedLocalKeyInSameTransaction(_ request: QueuedRequest, change: LocalChange) throws {
        guard let transaction = request.options.transactionID, !request.isCreate else { return }
        var named: [String] = []
        if let set = request.entitySet, let key = request.entityKey { named.append(set + key) }
        if change.target.isRef, let (set, key) = LocalChange.linkedEntity(change, model: model) {
            named.append(set + Keys.predicate(key, in: set, model: model))
        }
        for reference in named {
            // Only an entity with a local key can be one (a cheap lookup spares the queue scan).
            guard let (set, key) = Keys.parse(reference, model: model, serviceRoot: ""),
                try writer.reader.bookkeeping(in: set, key: key)?.localID != nil
            else { continue }
            let marker = NestedCreate(path: "", entity: reference, localKey: true).json["entity"]?.serialized ?? ""
            let rows = try writer.connection.query(
                """
                SELECT id FROM oo_queue WHERE transaction_id = ? AND status = 'pending' AND nested LIKE ? ESCAPE '\\' LIMIT 1
                """, [.text(transaction), .text("%\"entity\":" + Self.likeEscaped(marker) + ",\"localKey\":true%")])
            if case .integer(let id)? = rows.first?.first {
                throw OfflineODataError(
                    .invalidRequest,
                    "\(request.method) \(request.url): \(reference) is created with a local key by the deep "
                        + "insert of request \(id) in the same transaction \(transaction); its key is known only after the "
                        + "upload, so change it in the deep insert's body or in another transaction")
            }
        }
    }

    /// `text` with LIKE's wildcards escaped by a backslash.
    static func likeEscaped(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "%", with: "\\%")
            .replacingOccurrences(of: "_", with: "\\_")
    }

    /// Fills in the keys of the nested entities of a deep insert (at any depth): the parent's
    /// side of a foreign key, then a local temporary key for each part still missing (the one
    /// recorded at `path` when a queued create is applied again). `created` gets every nested
    /// entity, in document order.
    func assignNestedKeys(
        _ entity: inout Entity, set: String, path: String, parentIsLocal: Bool, recorded: [NestedCreate],
        into created: inout [NestedCreate], url: String, depth: Int = 0
    ) throws {
        guard depth < 32 else {
            throw OfflineODataError(.invalidRequest, "POST \(url): a deep insert nested deeper than 32 levels")
        }
        for index in entity.navigation.indices {
            let name = entity.navigation[index].name
            guard let inline = entity.navigation[index].inline,
                let target = model.targetEntitySet(from: set, navigationPath: name)?.name,
                let type = model.entityType(ofEntitySet: target)
            else { continue }
            let implied = writer.schema.propertiesImplied(creatingThrough: name, of: set, parent: entity)
            func prepare(_ child: inout Entity, _ childPath: String) throws {
                if let (property, given, value) = writer.schema.contradiction(
                    creatingThrough: name, of: set, parent: entity, child: child)
                {
                    throw OfflineODataError(
                        .invalidRequest,
                        "POST \(url): the nested \(target) entity at \(childPath) gives \(property) "
                            + "\(Literal.format(.primitive(given))), but its parent's referential constraint makes it "
                            + "\(Literal.format(.primitive(value)))")
                }
                var local = false
                let keyNames = Set(model.key(of: type).map(\.name))
                for (property, value) in implied where child[property] == nil || child[property] == .null {
                    child[property] = .primitive(value)
                    // A key part taken from a parent with a local key is local too (an item of a new order).
                    if parentIsLocal && keyNames.contains(property) { local = true }
                }
                if let earlier = recorded.first(where: { $0.path == childPath && $0.localKey }),
                    let (_, key) = Keys.parse(earlier.entity, model: model, serviceRoot: "")
                {
                    for (property, value) in key { child[property] = .primitive(value) }
                    local = true
                }
                let missing = try localKeyValues(forMissingKeyOf: child, type: type) { name in
                    "POST \(url): the key \(name) of the nested \(target) entity at \(childPath) "
                        + "is missing and no local key can be made for its type"
                }
                for (name, value) in missing {
                    child[name] = .primitive(value)
                    local = true
                }
                guard let key = Keys.key(of: child, in: target, model: model) else {
                    throw OfflineODataError(
                        .invalidRequest, "POST \(url): the nested \(target) entity at \(childPath) has no key")
                }
                created.append(
                    NestedCreate(
                        path: childPath, entity: target + Keys.predicate(key, in: target, model: model), localKey: local
                    ))
                try assignNestedKeys(
                    &child, set: target, path: childPath + "/", parentIsLocal: local, recorded: recorded,
                    into: &created, url: url, depth: depth + 1)
            }
            switch inline {
            case .entity(var child?):
                try prepare(&child, path + name)
                entity.navigation[index].inline = .entity(child)
            case .collection(var children):
                for item in children.entities.indices {
                    try prepare(&children.entities[item], "\(path)\(name)/\(item)")
                }
                entity.navigation[index].inline = .collection(children)
            case .entity(nil):
                break
            }
        }
    }

    /// A local temporary key value for each key part of `entity` that is missing (absent or
    /// null), in key order; `refusal` says what is wrong when a part's type has none.
    func localKeyValues(
        forMissingKeyOf entity: Entity, type: EntityType, refusal: (String) -> String
    ) throws
        -> [(name: String, value: PrimitiveValue)]
    {
        var values: [(name: String, value: PrimitiveValue)] = []
        for ref in model.key(of: type) where entity[ref.name] == nil || entity[ref.name] == .null {
            guard let property = model.property(ref.name, ofStructuredType: type.qualifiedName),
                let value = try nextLocalKey(PrimitiveType(rawValue: property.type.name))
            else { throw OfflineODataError(.invalidRequest, refusal(ref.name)) }
            values.append((ref.name, value))
        }
        return values
    }

    /// A local temporary key value: negative numbers for integers, `LOCAL~n` for strings, a
    /// random GUID for GUIDs.
    func nextLocalKey(_ type: PrimitiveType?) throws -> PrimitiveValue? {
        let rows = try writer.connection.query("SELECT value FROM oo_meta WHERE key = 'nextLocalKey'")
        var next: Int64 = 1
        if case .text(let text)? = rows.first?.first, let value = Int64(text) { next = value }
        _ = try writer.connection.execute(
            "UPDATE oo_meta SET value = ? WHERE key = 'nextLocalKey'", [.text("\(next + 1)")])
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
