import Foundation
import ODataCore
import ODataStore

/// Applies pages of defining queries inside one write transaction and keeps what the local
/// diff of a full read needs until ``finish(writer:)``: the rows it returned, per entity set,
/// marked seen on the writer's connection (``StoreWriter/markSeen(in:rowid:)``), so that what
/// it did not return is found by a scan of rowids.
struct PageApplier: Sendable {
    let model: Model
    let root: String
    let allQueries: [OfflineODataDefiningQuery]
    let bulkSets: Set<String>
    /// The first open: no local diff (a page never removes what earlier pages stored).
    let firstFill: Bool
    var upserted = 0
    var deleted = 0
    /// `Set(key)` of entities deleted locally that a full read returned (they have no row to
    /// mark as seen).
    var seenDeleted: Set<String> = []
    var fullSets: Set<String> = []
    /// Queries read this time → whether every page of it was a delta.
    var read: [String: Bool] = [:]
    var queries: Set<String> = []
    /// Entities with pending requests (``RequestQueue/locallyChanged(_:)``), read from the queue
    /// the first time they are needed: a download whose rows are all stored without pending
    /// changes never reads it.
    private var pendingReferences: Set<String>?
    /// The store when the download began (see ``DownloadStart``); nil when the pages were not
    /// compared while they were fetched.
    var start: DownloadStart?

    init(model: Model, root: String, allQueries: [OfflineODataDefiningQuery], bulkSets: Set<String>, firstFill: Bool) {
        self.model = model
        self.root = root
        self.allQueries = allQueries
        self.bulkSets = bulkSets
        self.firstFill = firstFill
    }

    /// Entities with pending requests, and what their deletes cascaded to.
    mutating func locallyChanged(_ writer: StoreWriter) throws -> Set<String> {
        if let known = pendingReferences { return known }
        let loaded = try RequestQueue.locallyChanged(writer.connection)
        pendingReferences = loaded
        return loaded
    }

    mutating func apply(_ query: FetchedQuery, writer: StoreWriter) throws {
        queries.insert(query.name)
        read[query.name] = (read[query.name] ?? true) && query.isDelta
        let set = query.entitySet
        // A full read marks every row it returns as seen; what it did not return is diffed
        // in `finish`.
        let full = !query.isDelta && !firstFill
        // The first fill of an empty set: plain entities go in with one prepared statement
        // (no per-row lookups); expanded ones take the general path.
        let bulk = bulkSets.contains(set)
        // A row that comes again (on a later page of the same read, or twice in one page) is
        // taken once, the last copy winning: the bulk insert stops at it, and the page is
        // applied again row by row (the rows inserted before are merged with themselves).
        var bulkFailed = false
        if let rows = query.flat {
            if bulk {
                do {
                    try writer.bulkInsert(rows, into: set)
                    upserted += rows.entityCount
                } catch let error as StoreError where error.code == .conflict {
                    try applyRows(rows, in: set, recordSeen: full, writer: writer)
                }
            } else {
                try applyRows(rows, in: set, recordSeen: full, writer: writer)
            }
        } else if bulk {
            let plain = query.entities.filter { entity in !entity.navigation.contains { $0.inline != nil } }
            do {
                try writer.bulkInsert(plain, into: set)
                upserted += plain.count
            } catch let error as StoreError where error.code == .conflict {
                bulkFailed = true
            }
        }
        for entity in query.entities
        where !bulk || bulkFailed || entity.navigation.contains(where: { $0.inline != nil }) {
            upserted += try applyEntity(entity, in: set, writer: writer, recordSeen: full)
        }
        for removed in query.deleted {
            guard let key = Self.key(of: removed, in: set, model: model, root: root) else { continue }
            if try keepsLocalState(set, key: key, writer: writer) { continue }
            if try writer.delete(from: set, key: key) { deleted += 1 }
        }
        if full {
            // A full read also returns every child of its expands.
            if let covered = allQueries.first(where: { $0.name == query.name }).flatMap({
                try? DefiningQueries.coveredSets(of: $0.query, model: model)
            }) {
                fullSets.formUnion(covered)
            }
            fullSets.insert(set)
        }
        if let link = query.deltaLink {
            _ = try writer.connection.execute(
                "UPDATE oo_defining SET delta_link = ? WHERE name = ?", [.text(link), .text(query.name)])
        }
    }

    /// Merges a page read as rows (``StoreWriter/mergeRows(_:into:recordSeen:isLocallyDeleted:)``):
    /// one statement per unchanged row; rows of entities with local changes, or deleted
    /// locally, take the general path (``applyEntity(_:in:writer:recordSeen:)``).
    private mutating func applyRows(
        _ rows: FlatCollection, in set: String, recordSeen: Bool, writer: StoreWriter
    ) throws {
        let model = self.model
        let result = try writer.mergeRows(rows, into: set, recordSeen: recordSeen) { row in
            let references = try self.locallyChanged(writer)
            guard !references.isEmpty, let key = Keys.key(of: rows.entity(at: row), in: set, model: model) else {
                return false
            }
            return references.contains(set + Keys.predicate(key, in: set, model: model))
        }
        upserted += result.written
        for row in result.deferred {
            upserted += try applyEntity(rows.entity(at: row), in: set, writer: writer, recordSeen: recordSeen)
        }
    }

    /// Whether a delta removal leaves the entity alone: it has pending or failed changes, or it
    /// was deleted locally. The state kept for its undo then says it no longer exists.
    mutating func keepsLocalState(
        _ entitySet: String, key: [String: PrimitiveValue], writer: StoreWriter
    ) throws -> Bool {
        let predicate = Keys.predicate(key, in: entitySet, model: model)
        let state = try writer.reader.bookkeeping(in: entitySet, key: key)
        guard
            try state?.keepsLocalChanges == true
                || (state == nil && locallyChanged(writer).contains(entitySet + predicate))
        else {
            return false
        }
        try RequestQueue(writer, model: model, serviceRoot: root).refreshKeptState(
            nil, in: entitySet, predicate: predicate)
        return true
    }

    /// A full read: what the backend no longer returns is gone (the rows not marked seen),
    /// unless another query not read in full this time also covers the set, or the
    /// row has pending changes.
    mutating func finish(writer: StoreWriter) throws -> String {
        // Entities changed while the download ran: a page may have shown one unchanged before.
        let changedSince =
            try start.map { try RequestQueue.locallyChanged(writer.connection, after: $0.request) } ?? []
        for set in fullSets {
            let coveredElsewhere = allQueries.contains { query in
                let readInFull = read[query.name] == false
                return !readInFull
                    && ((try? DefiningQueries.coveredSets(of: query.query, model: model))?.contains(set) ?? false)
            }
            if coveredElsewhere { continue }
            // Made after the download began (a local create, a delete undone): not there when
            // the pages were compared, so not missing from them either.
            let made = start?.rowids[set] ?? Int64.max
            for (rowid, key, pending) in try writer.unseenRows(in: set) where rowid <= made {
                if pending {
                    // Kept locally; undo and revert now remove it, as the backend did.
                    try RequestQueue(writer, model: model, serviceRoot: root).refreshKeptState(
                        nil, in: set, predicate: Keys.predicate(key, in: set, model: model))
                } else if try writer.delete(from: set, key: key) {
                    deleted += 1
                }
            }
            // Entities deleted locally that the backend no longer has either; not those changed
            // while the download ran.
            for reference in try locallyChanged(writer)
            where reference.hasPrefix(set + "(") && !seenDeleted.contains(reference)
                && !changedSince.contains(reference)
            {
                guard let (_, key) = Keys.parse(reference, model: model, serviceRoot: ""),
                    try writer.rowid(in: set, key: key) == nil
                else { continue }
                try RequestQueue(writer, model: model, serviceRoot: root).refreshKeptState(
                    nil, in: set, predicate: Keys.predicate(key, in: set, model: model))
            }
        }
        try refreshSnapshots(writer: writer)
        try writer.forgetSeen()
        return "\(queries.count) defining queries, \(upserted) entities inserted or updated, \(deleted) deleted"
    }

    /// The states kept for entities that queued requests only link or bind (the other end of
    /// a `$ref`, an `@odata.bind` target: snapshots in `oo_original`) follow the backend: when
    /// this download wrote such an entity (it has no pending or failed change of its own, so
    /// its row now holds the backend's values and ETag), its snapshot becomes that row. An undo
    /// or a revert then puts back what the backend has, not an older state with a stale ETag.
    private func refreshSnapshots(writer: StoreWriter) throws {
        let snapshots = try writer.connection.query("SELECT entity_set, entity_key FROM oo_original WHERE existed = 1")
        guard !snapshots.isEmpty else { return }
        let generation = try writer.downloadGeneration()
        for row in snapshots {
            guard case .text(let set) = row[0], case .text(let predicate) = row[1],
                let (_, key) = Keys.parse(set + predicate, model: model, serviceRoot: ""),
                let table = writer.schema.table(forEntitySet: set),
                let state = try writer.reader.bookkeeping(in: set, key: key), !state.keepsLocalChanges
            else { continue }
            let written = try writer.connection.query(
                "SELECT _upserted FROM \(StoreSchema.quote(table.name)) WHERE _rowid = ?", [.integer(state.rowid)])
            guard written.first?.first == .integer(generation),
                let entity = try writer.reader.entity(in: set, rowid: state.rowid)
            else { continue }
            _ = try writer.connection.execute(
                "UPDATE oo_original SET body = ? WHERE entity_set = ? AND entity_key = ?",
                [.blob(V4JSONWriter().write(entity)), .text(set), .text(predicate)])
        }
    }

    /// Upserts an entity and, first, its expanded children, then links them. Returns how many
    /// entities were written; with `recordSeen`, every entity is marked seen in its set. An
    /// entity with pending changes or failed ones in the ErrorArchive, or deleted locally (in
    /// ``locallyChanged(_:)``, not in the store), keeps its local state and its links; the
    /// backend's values become the state kept for its undo and revert.
    mutating func applyEntity(
        _ entity: Entity, in entitySet: String, writer: StoreWriter, recordSeen: Bool
    ) throws -> Int {
        var count = 0
        var parent = entity
        var links: [(navigation: String, target: String, key: [String: PrimitiveValue])] = []
        for nav in entity.navigation {
            guard let inline = nav.inline,
                let target = model.targetEntitySet(from: entitySet, navigationPath: nav.name)?.name
            else { continue }
            let children: [Entity]
            switch inline {
            case .entity(let child): children = child.map { [$0] } ?? []
            case .collection(let collection): children = collection.entities
            }
            for child in children {
                count += try applyEntity(child, in: target, writer: writer, recordSeen: recordSeen)
                if let key = Keys.key(of: child, in: target, model: model) { links.append((nav.name, target, key)) }
            }
        }
        parent.navigation = []
        guard let key = Keys.key(of: parent, in: entitySet, model: model) else {
            throw OfflineODataError(.backend, "An entity of \(entitySet) from the backend has no key")
        }
        let predicate = Keys.predicate(key, in: entitySet, model: model)
        let state = try writer.reader.bookkeeping(in: entitySet, key: key)
        let keepsLocalState =
            try state?.keepsLocalChanges == true
            || (state == nil && locallyChanged(writer).contains(entitySet + predicate))
        if keepsLocalState {
            // The local row keeps its pending changes (a deleted one stays deleted); the state
            // they started from becomes the backend's new one, which undo and a revert return to.
            // `created`: also when the kept state says it did not exist (a local create whose
            // key the backend has too): the backend has it now.
            try RequestQueue(writer, model: model, serviceRoot: "").refreshKeptState(
                parent, in: entitySet, predicate: predicate, created: true)
            guard state != nil else {
                if recordSeen { seenDeleted.insert(entitySet + predicate) }
                return count
            }
            if recordSeen, let rowid = try writer.rowid(in: entitySet, key: key) {
                try writer.markSeen(in: entitySet, rowid: rowid)
            }
        } else {
            // Only what changed is written and counts as upserted (a full read of a backend
            // without change tracking returns every entity, changed or not).
            let (rowid, changed) = try writer.upsertIfChanged(parent, into: entitySet)
            if recordSeen { try writer.markSeen(in: entitySet, rowid: rowid) }
            if changed {
                try writer.setState(in: entitySet, rowid: rowid, isLocal: false, inError: false, upserted: true)
                count += 1
            } else if state?.isLocal == true || state?.inError == true {
                try writer.setState(in: entitySet, rowid: rowid, isLocal: false, inError: false)
            }
        }
        // A row that keeps its local state keeps its links too (a link can be a foreign key of
        // the row); a child deleted locally (pending or failed) has no row to link to.
        guard !keepsLocalState else { return count }
        for link in links where writer.schema.table(forEntitySet: entitySet)?.navigation(link.navigation) != nil {
            guard try writer.rowid(in: link.target, key: link.key) != nil else { continue }
            try writer.link(entitySet, key: key, navigation: link.navigation, to: link.key)
        }
        return count
    }

    static func key(
        of removed: DeletedEntity, in entitySet: String, model: Model, root: String
    ) -> [String: PrimitiveValue]? {
        if let key = Keys.key(of: Entity(properties: removed.properties), in: entitySet, model: model) { return key }
        guard let id = removed.id else { return nil }
        return Keys.parse(id, model: model, serviceRoot: root)?.1
    }
}
