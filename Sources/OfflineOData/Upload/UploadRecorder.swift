import Foundation
import ODataCore
import ODataStore

/// Applies the answers of one uploaded batch to the store, in the caller's write transaction,
/// as the ``UploadPlanner``'s actions say.
///
/// It owns what an answer changes locally: an applied request leaves the queue; a create's
/// entity (and each nested entity of a deep insert, matched by place) takes over the
/// backend's key, ETag and values, and the key map records the local key; later queued
/// changes of a created entity are applied again on top of the backend's answer; the state
/// kept for undo advances by what the backend took; a refused request, or one not sent
/// because it depends on a refused one, goes to the ErrorArchive and its entity into error
/// state.
struct UploadRecorder {
    let writer: StoreWriter
    let model: Model
    let serviceRoot: String

    init(_ writer: StoreWriter, model: Model, serviceRoot: String) {
        self.writer = writer
        self.model = model
        self.serviceRoot = serviceRoot
    }

    var queue: RequestQueue { RequestQueue(writer, model: model, serviceRoot: serviceRoot) }
    var local: LocalExecutor { LocalExecutor(writer, model: model, serviceRoot: serviceRoot) }

    /// Applies a batch's answers, each with the planner's action: successes leave the queue
    /// and bring the backend's key, ETag and values; failures go to the ErrorArchive.
    func record(_ answered: [(SentResult, UploadPlanner.Action)]) throws -> [OfflineODataFailedRequest] {
        var failures: [OfflineODataFailedRequest] = []
        var touched: Set<String> = []
        // Entities created by this batch: the backend answered the create with the values
        // it had then, so later changes to them in the batch are applied again on top.
        var createdHere: Set<String> = []
        // Entities whose create the backend took in this batch (by their backend key).
        var createdNow: Set<String> = []
        // Requests the backend took, per entity: what its kept state advances by.
        var taken: [String: [(request: QueuedRequest, etag: String?, server: Entity?)]] = [:]
        for (result, action) in answered {
            var request = result.request
            let set = request.entitySet
            let localReference = (set ?? "") + (request.entityKey ?? "")
            // An entity created earlier in this upload now has the backend's key.
            if let set, let local = request.entityKey {
                let mapped = try writer.connection.query(
                    "SELECT server_key FROM oo_key_map WHERE entity_set = ? AND local_key = ?",
                    [.text(set), .text(local)])
                if case .text(let server)? = mapped.first?.first { request.entityKey = server }
            }
            let reference = (set ?? "") + (request.entityKey ?? "")
            touched.insert(reference)
            if case .apply(let takeOver) = action {
                try queue.remove(request.id)
                guard let set, let localKey = request.entityKey,
                    let (_, key) = Keys.parse(set + localKey, model: model, serviceRoot: "")
                else { continue }
                if request.isCreate { createdHere.insert(localReference) }
                if !request.isCreate, request.method != "DELETE", createdHere.contains(localReference),
                    let change = try? LocalChange.replaying(
                        result.request, model: model, serviceRoot: serviceRoot,
                        keyMap: RequestQueue.keyMap(writer.connection)), !change.target.isRef
                {
                    _ = try? writer.connection.savepoint {
                        try local.apply(change, repeatable: false, replaying: result.request)
                    }
                }
                let server =
                    request.mediaType != nil && !request.isCreate
                    ? nil : Self.serverEntity(result, set: set, model: model)
                var predicate = localKey
                if takeOver == .created {
                    if let serverPredicate = try takeOverCreated(
                        result, set: set, localPredicate: localKey, localKey: key)
                    {
                        touched.insert(set + serverPredicate)
                        predicate = serverPredicate
                    }
                    createdNow.insert(set + predicate)
                    let nestedNow = try takeOverNested(result, set: set)
                    touched.formUnion(nestedNow)
                    createdNow.formUnion(nestedNow)
                } else if takeOver == .linkETag,
                    let holder = LocalChange.linkHolder(
                        of: result.request, schema: writer.schema, serviceRoot: serviceRoot,
                        keyMap: try RequestQueue.keyMap(writer.connection))
                {
                    // A link change may give the end holding the foreign key a new ETag: the
                    // answer carries it for the URL's entity; otherwise the upload reads it
                    // (see `refreshETags`) before that entity's next change is sent.
                    if holder.isSource, let etag = result.headers["ETag"],
                        let (holderSet, holderKey) = Keys.parse(holder.reference, model: model, serviceRoot: "")
                    {
                        try writer.setState(in: holderSet, key: holderKey, etag: .some(etag))
                        try queue.renewKeptETag(
                            etag, in: holderSet, predicate: Keys.predicate(holderKey, in: holderSet, model: model))
                    }
                } else if request.method != "DELETE", let etag = result.headers["ETag"] ?? server?.control.etag {
                    try writer.setState(in: set, key: key, etag: .some(etag))
                }
                if !request.options.removeAfterUpload {
                    taken[set + predicate, default: []].append((request, result.headers["ETag"], server))
                }
                continue
            }
            // Failed, or not sent because a request it depends on failed.
            _ = try writer.connection.execute(
                "UPDATE oo_queue SET status = 'failed' WHERE id = ?", [.integer(request.id)])
            var code = "DependencyFailed"
            var dependsOn: Int64?
            if case .archiveDependant(let id) = action { dependsOn = id }
            var message = "Not sent: it depends on request \(dependsOn ?? 0), which failed"
            var inner: String?
            if dependsOn == nil {
                if let error = try? ODataError.parse(result.body, httpStatus: result.status) {
                    code = error.code
                    message = error.message
                    inner = error.innerError?.serialized
                } else {
                    code = "HTTP\(result.status)"
                    message = String(decoding: result.body.prefix(500), as: UTF8.self)
                }
            }
            // A media request's body is a stream, not text: the archive names its type instead.
            let body =
                request.body.isEmpty || request.mediaType != nil
                ? nil : String(decoding: request.body, as: UTF8.self)
            let failure = OfflineODataFailedRequest(
                httpStatus: result.status, requestID: request.id, customTag: request.options.customTag, code: code,
                message: message, innerError: inner, method: request.method, url: request.url, body: body)
            try LocalSchema.archive(failure, domain: dependsOn == nil ? "Backend" : "OfflineOData", writer)
            if let set, let localKey = request.entityKey,
                let (_, key) = Keys.parse(set + localKey, model: model, serviceRoot: "")
            {
                try writer.setState(in: set, key: key, inError: true)
            }
            failures.append(failure)
        }
        // A created entity took the backend's answer, which predates its changes still
        // queued for later batches: they are applied on top again, so that it shows them.
        if !createdNow.isEmpty {
            // Only their requests are loaded, through the queue's entity index (a large queue
            // of creates would otherwise be read whole after every batch).
            var ids: [Int64] = []
            for reference in createdNow {
                // `Set(key)`, matched as the queue holds it.
                guard let open = reference.firstIndex(of: "(") else { continue }
                for row in try writer.connection.query(
                    "SELECT id FROM oo_queue WHERE entity_set = ? AND entity_key = ? AND status = 'pending' "
                        + "AND is_create = 0",
                    [.text(String(reference[..<open])), .text(String(reference[open...]))])
                {
                    if case .integer(let id) = row[0] { ids.append(id) }
                }
            }
            ids.sort()
            let keyMap = ids.isEmpty ? [:] : try RequestQueue.keyMap(writer.connection)
            let requests = try stride(from: 0, to: ids.count, by: 500).flatMap { start in
                try RequestQueue.load(
                    writer.connection, statuses: ["pending"], ids: Array(ids[start..<min(start + 500, ids.count)]))
            }
            for request in requests {
                guard
                    let change = try? LocalChange.replaying(
                        request, model: model, serviceRoot: serviceRoot, keyMap: keyMap),
                    !change.target.isRef
                else { continue }
                _ = try? writer.connection.savepoint {
                    try local.apply(change, repeatable: false, replaying: request)
                }
            }
        }
        // Entities without queued requests are no longer pending, and need no kept state.
        // Those with requests left (waiting or failed) keep the backend's state after the
        // requests it took.
        // Each touched entity's requests are found through the queue's entity index (one pass
        // over the whole queue per batch made an upload of 10,000 changes quadratic).
        func statuses(_ set: String, _ predicate: String) throws -> (pending: Bool, any: Bool) {
            var pending = false
            var any = false
            for row in try writer.connection.query(
                "SELECT status FROM oo_queue WHERE entity_set = ? AND entity_key = ?", [.text(set), .text(predicate)])
            {
                any = true
                if row[0] == .text("pending") { pending = true }
            }
            return (pending, any)
        }
        for reference in touched {
            guard let (set, key) = Keys.parse(reference, model: model, serviceRoot: "") else { continue }
            let predicate = Keys.predicate(key, in: set, model: model)
            let left = try statuses(set, predicate)
            if !left.pending {
                try writer.setState(in: set, key: key, pending: false)
                if !left.any {
                    try queue.forgetKeptState(set, predicate: predicate)
                    continue
                }
            }
            for (request, etag, server) in taken[reference] ?? [] {
                try queue.advanceKeptState(
                    after: request, etag: etag, server: server, in: set, predicate: predicate)
            }
        }
        return failures
    }

    static func serverEntity(_ result: SentResult, set: String, model: Model) -> Entity? {
        guard !result.body.isEmpty else { return nil }
        let type = model.entitySet(set)?.entityType
        return try? model.readEntity(result.body, entityType: type)
    }

    /// A create succeeded: the local entity takes the backend's key, ETag and values; later
    /// requests and read links that use the local key are mapped to the backend's. Returns the
    /// backend's key predicate when the response carried the entity.
    @discardableResult
    func takeOverCreated(
        _ result: SentResult, set: String, localPredicate: String, localKey: [String: PrimitiveValue]
    ) throws -> String? {
        var server = Self.serverEntity(result, set: set, model: model)
        if let etag = result.headers["ETag"] { server?.control.etag = etag }
        return try takeOverCreated(
            server, removeAfterUpload: result.request.options.removeAfterUpload, set: set,
            localPredicate: localPredicate,
            localKey: localKey)
    }

    /// The nested entities of a successful deep insert take the keys, ETags and values the
    /// backend answered with, found at the same place in its answer (the order of the request,
    /// as OData 4.01 §11.4.2.2 and SAP Gateway answer). Returns the entities touched.
    func takeOverNested(_ result: SentResult, set: String) throws -> Set<String> {
        let nested = result.request.nested
        guard !nested.isEmpty else { return [] }
        let removeAfterUpload = result.request.options.removeAfterUpload
        // The answer is used only when it has the nested entities where the request had them,
        // each with the values sent: matched by place, a backend that answers in another order
        // must not swap two entities' keys.
        var server = Self.serverEntity(result, set: set, model: model)
        if let answered = server,
            let sent = try? model.readEntity(result.request.body, entityType: model.entitySet(set)?.entityType),
            !Self.answersInOrder(sent: sent, answered: answered)
        {
            server = nil
        }
        var touched: Set<String> = []
        for created in nested {
            guard let (nestedSet, localKey) = Keys.parse(created.entity, model: model, serviceRoot: "") else {
                continue
            }
            let localPredicate = String(created.entity.dropFirst(nestedSet.count))
            touched.insert(created.entity)
            guard let answered = server.flatMap({ Self.nestedEntity(at: created.path, in: $0) }) else {
                // A backend that answers without the nested entities: they keep their local keys
                // until a download brings the backend's (or go now, with removeAfterUpload).
                if removeAfterUpload { try writer.delete(from: nestedSet, key: localKey) }
                continue
            }
            if let serverPredicate = try takeOverCreated(
                answered, removeAfterUpload: removeAfterUpload, set: nestedSet,
                localPredicate: localPredicate, localKey: localKey)
            {
                touched.insert(nestedSet + serverPredicate)
            }
        }
        return touched
    }

    /// Nested entities read back after a deep insert (see `Uploader.readBackNestedCreates`):
    /// each takes over the read child at its path whose primitive values are those it was sent
    /// with, when exactly one child has them.
    func takeOverNested(_ pending: [NestedCreate], sent: Entity, readBack: Entity) throws {
        var used: Set<String> = []
        for created in pending {
            guard let (nestedSet, localKey) = Keys.parse(created.entity, model: model, serviceRoot: ""),
                let answered = Self.matching(created.path, sent: sent, in: readBack),
                let serverKey = Keys.key(of: answered, in: nestedSet, model: model)
            else { continue }
            let serverReference = nestedSet + Keys.predicate(serverKey, in: nestedSet, model: model)
            guard used.insert(serverReference).inserted else { continue }
            try takeOverCreated(
                answered, removeAfterUpload: false, set: nestedSet,
                localPredicate: String(created.entity.dropFirst(nestedSet.count)), localKey: localKey)
        }
    }

    /// The child of `readBack` at `path` whose primitive values are those sent at `path`: the
    /// navigation names must match, the position need not (a read answers in its own order).
    /// Nil unless exactly one child matches at each step (a child two nested entities match is
    /// taken by the first only: see `used` in `takeOverNested`).
    static func matching(_ path: String, sent: Entity, in readBack: Entity) -> Entity? {
        var sentCurrent = sent
        var readCurrent = readBack
        var parts = path.split(separator: "/")[...]
        while let name = parts.popFirst().map(String.init) {
            switch (sentCurrent.navigation(name)?.inline, readCurrent.navigation(name)?.inline) {
            case (.entity(let mine?)?, .entity(let theirs?)?):
                guard sameValues(mine, theirs) else { return nil }
                sentCurrent = mine
                readCurrent = theirs
            case (.collection(let mine)?, .collection(let theirs)?):
                guard let text = parts.popFirst(), let index = Int(text), mine.entities.indices.contains(index) else {
                    return nil
                }
                let wanted = mine.entities[index]
                let candidates = theirs.entities.filter { sameValues(wanted, $0) }
                guard candidates.count == 1, let found = candidates.first else { return nil }
                sentCurrent = wanted
                readCurrent = found
            default:
                return nil
            }
        }
        return readCurrent
    }

    /// Whether every primitive value sent has the same value in `answered`. With
    /// `absentMatches`, a value the answer leaves out (or gives as non-primitive) counts as the
    /// same (a create's answer may select fewer properties); a read-back must have them all.
    static func sameValues(_ sent: Entity, _ answered: Entity, absentMatches: Bool = false) -> Bool {
        sent.properties.allSatisfy { property in
            guard case .primitive(let mine) = property.value else { return true }
            guard case .primitive(let theirs)? = answered[property.name] else { return absentMatches }
            return mine == theirs || Literal.convert(.primitive(theirs), to: mine.type) == .primitive(mine)
        }
    }

    /// Whether `answered` has the inline entities of `sent` at the same places (as many, in the
    /// same order), each with the primitive values sent.
    static func answersInOrder(sent: Entity, answered: Entity, depth: Int = 0) -> Bool {
        guard depth < 32 else { return false }
        for value in sent.navigation {
            guard let inline = value.inline else { continue }
            let pairs: [(Entity, Entity)]
            switch (inline, answered.navigation(value.name)?.inline) {
            case (.entity(let child?), .entity(let other?)?):
                pairs = [(child, other)]
            case (.entity(nil), _):
                continue
            case (.collection(let children), .collection(let others)?)
            where children.entities.count == others.entities.count:
                pairs = Array(zip(children.entities, others.entities))
            default:
                return false
            }
            for (child, other) in pairs {
                guard sameValues(child, other, absentMatches: true) else { return false }
                guard answersInOrder(sent: child, answered: other, depth: depth + 1) else { return false }
            }
        }
        return true
    }

    /// The entity at `path` (`Contacts/0`, `Items/1/Notes/0`, `Manager`) among the inline
    /// navigation values of `entity`.
    static func nestedEntity(at path: String, in entity: Entity) -> Entity? {
        var current = entity
        var parts = path.split(separator: "/")[...]
        while let name = parts.popFirst() {
            switch current.navigation(String(name))?.inline {
            case .entity(let child?)?:
                current = child
            case .collection(let children)?:
                guard let text = parts.popFirst(), let index = Int(text), children.entities.indices.contains(index)
                else { return nil }
                current = children.entities[index]
            default:
                return nil
            }
        }
        return current
    }

    /// The entity the backend answered a create with takes over the local one (see above).
    @discardableResult
    func takeOverCreated(
        _ answered: Entity?, removeAfterUpload: Bool, set: String, localPredicate: String,
        localKey: [String: PrimitiveValue]
    ) throws -> String? {
        guard var server = answered, let serverKey = Keys.key(of: server, in: set, model: model) else {
            if removeAfterUpload {
                try writer.delete(from: set, key: localKey)
                _ = try writer.connection.execute(
                    "DELETE FROM oo_streams WHERE entity_set = ? AND entity_key = ?",
                    [.text(set), .text(localPredicate)])
            }
            return nil
        }
        server.navigation = []
        let serverPredicate = Keys.predicate(serverKey, in: set, model: model)
        // An entity deleted locally since (its delete is queued after the create) has nothing
        // to take over; only its key is mapped.
        if try writer.rowid(in: set, key: localKey) != nil {
            if removeAfterUpload {
                try writer.delete(from: set, key: localKey)
                _ = try writer.connection.execute(
                    "DELETE FROM oo_streams WHERE entity_set = ? AND entity_key = ?",
                    [.text(set), .text(localPredicate)])
            } else if serverPredicate != localPredicate {
                // The row takes the backend's key in place (its links stay, and the foreign keys
                // of children created under it follow), then the backend's values. A row that
                // still has that key is an older entity the backend has since deleted: it goes.
                if let stale = try writer.rowid(in: set, key: serverKey),
                    stale != (try writer.rowid(in: set, key: localKey))
                {
                    try writer.delete(from: set, key: serverKey)
                }
                try writer.changeKey(in: set, from: localKey, to: serverKey)
                try writer.update(server, in: set, replace: true)
                try writer.setState(
                    in: set, key: serverKey, isLocal: true, pending: false, etag: .some(server.control.etag),
                    localID: .some(localPredicate))
            } else {
                try writer.update(server, in: set, replace: false)
                try writer.setState(in: set, key: serverKey, etag: .some(server.control.etag))
            }
        }
        if serverPredicate != localPredicate {
            _ = try writer.connection.execute(
                "INSERT OR REPLACE INTO oo_key_map (entity_set, local_key, server_key) VALUES (?, ?, ?)",
                [.text(set), .text(localPredicate), .text(serverPredicate)])
            _ = try writer.connection.execute(
                "UPDATE oo_queue SET entity_key = ? WHERE entity_set = ? AND entity_key = ?",
                [.text(serverPredicate), .text(set), .text(localPredicate)])
            // A backend may give a key again after deleting its entity: what was kept for the old one is stale.
            _ = try writer.connection.execute(
                "DELETE FROM oo_original WHERE entity_set = ? AND entity_key = ?", [.text(set), .text(serverPredicate)])
            _ = try writer.connection.execute(
                "UPDATE oo_original SET entity_key = ? WHERE entity_set = ? AND entity_key = ?",
                [.text(serverPredicate), .text(set), .text(localPredicate)])
            try queue.rekeyStreams(set, from: localPredicate, to: serverPredicate)
            let stillPending = try writer.connection.query(
                "SELECT 1 FROM oo_queue WHERE entity_set = ? AND entity_key = ? AND status = 'pending'",
                [.text(set), .text(serverPredicate)])
            if !stillPending.isEmpty, !removeAfterUpload { try writer.setState(in: set, key: serverKey, pending: true) }
        }
        return serverPredicate
    }
}
