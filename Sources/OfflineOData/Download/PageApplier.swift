import Foundation
import ODataCore
import ODataStore

/// Applies pages of defining queries inside one write transaction and keeps what the local
/// diff of a full read needs (every key seen per set) until ``finish(writer:)``.
struct PageApplier: Sendable {
    let model: Model
    let root: String
    let allQueries: [OfflineODataDefiningQuery]
    let bulkSets: Set<String>
    /// The first open: no local diff (a page never removes what earlier pages stored).
    let firstFill: Bool
    var upserted = 0
    var deleted = 0
    var seen: [String: Set<String>] = [:]
    var fullSets: Set<String> = []
    /// Queries read this time → whether every page of it was a delta.
    var read: [String: Bool] = [:]
    var queries: Set<String> = []
    /// Entities with pending requests (``RequestQueue/locallyChanged(_:)``).
    var locallyChanged: Set<String> = []

    init(model: Model, root: String, allQueries: [OfflineODataDefiningQuery], bulkSets: Set<String>, firstFill: Bool) {
        self.model = model
        self.root = root
        self.allQueries = allQueries
        self.bulkSets = bulkSets
        self.firstFill = firstFill
    }

    mutating func apply(_ query: FetchedQuery, writer: StoreWriter) throws {
        queries.insert(query.name)
        read[query.name] = (read[query.name] ?? true) && query.isDelta
        // The first fill of an empty set: plain entities go in with one prepared statement
        // (no per-row lookups); expanded ones take the general path.
        let bulk = bulkSets.contains(query.entitySet)
        if let rows = query.flat {
            // The fetch reads rows only for queries that fill their set alone (`rowQueries`).
            guard bulk else {
                throw OfflineODataError(
                    .store, "Defining query \(query.name): rows for \(query.entitySet), which another query fills")
            }
            try writer.bulkInsert(rows, into: query.entitySet)
            upserted += rows.entityCount
        } else if bulk {
            let plain = query.entities.filter { entity in !entity.navigation.contains { $0.inline != nil } }
            try writer.bulkInsert(plain, into: query.entitySet)
            upserted += plain.count
        }
        for entity in query.entities where !bulk || entity.navigation.contains(where: { $0.inline != nil }) {
            upserted += try Self.applyEntity(
                entity, in: query.entitySet, writer: writer, model: model, seen: &seen,
                locallyChanged: locallyChanged)
        }
        for removed in query.deleted {
            guard let key = Self.key(of: removed, in: query.entitySet, model: model, root: root) else { continue }
            if try keepsLocalState(query.entitySet, key: key, writer: writer) { continue }
            if try writer.delete(from: query.entitySet, key: key) { deleted += 1 }
        }
        if !query.isDelta && !firstFill {
            // A full read also returns every child of its expands.
            if let covered = allQueries.first(where: { $0.name == query.name }).flatMap({
                try? DefiningQueries.coveredSets(of: $0.query, model: model)
            }) {
                fullSets.formUnion(covered)
            }
            fullSets.insert(query.entitySet)
        }
        if let link = query.deltaLink {
            _ = try writer.connection.execute(
                "UPDATE oo_defining SET delta_link = ? WHERE name = ?", [.text(link), .text(query.name)])
        }
    }

    /// Whether a delta removal leaves the entity alone: it has pending changes, or it was
    /// deleted locally. The state kept for its undo then says it no longer exists.
    func keepsLocalState(_ entitySet: String, key: [String: PrimitiveValue], writer: StoreWriter) throws -> Bool {
        let predicate = Keys.predicate(key, in: entitySet, model: model)
        let state = try writer.reader.bookkeeping(in: entitySet, key: key)
        guard state?.pending == true || (state == nil && locallyChanged.contains(entitySet + predicate)) else {
            return false
        }
        try RequestQueue(writer, model: model, serviceRoot: root).refreshKeptState(
            nil, in: entitySet, predicate: predicate)
        return true
    }

    /// A full read: what the backend no longer returns is gone, unless another query not read
    /// in full this time also covers the set, or the row has pending changes.
    mutating func finish(writer: StoreWriter) throws -> String {
        for set in fullSets {
            let coveredElsewhere = allQueries.contains { query in
                let readInFull = read[query.name] == false
                return !readInFull
                    && ((try? DefiningQueries.coveredSets(of: query.query, model: model))?.contains(set) ?? false)
            }
            if coveredElsewhere { continue }
            for (key, pending) in try writer.keys(in: set) {
                let predicate = Keys.predicate(key, in: set, model: model)
                if seen[set]?.contains(predicate) == true { continue }
                if pending {
                    // Kept locally; undo and revert now remove it, as the backend did.
                    try RequestQueue(writer, model: model, serviceRoot: root).refreshKeptState(
                        nil, in: set, predicate: predicate)
                } else if try writer.delete(from: set, key: key) {
                    deleted += 1
                }
            }
            // Entities deleted locally that the backend no longer has either.
            for reference in locallyChanged
            where reference.hasPrefix(set + "(")
                && !(seen[set]?.contains(String(reference.dropFirst(set.count))) ?? false)
            {
                guard let (_, key) = Keys.parse(reference, model: model, serviceRoot: ""),
                    try writer.rowid(in: set, key: key) == nil
                else { continue }
                try RequestQueue(writer, model: model, serviceRoot: root).refreshKeptState(
                    nil, in: set, predicate: Keys.predicate(key, in: set, model: model))
            }
        }
        return "\(queries.count) defining queries, \(upserted) entities inserted or updated, \(deleted) deleted"
    }

    /// Upserts an entity and, first, its expanded children, then links them. Returns how many
    /// entities were written; `seen` collects the key predicate of every entity per set. An
    /// entity with pending changes, or deleted locally (in `locallyChanged`, not in the
    /// store), keeps its local state; the backend's values become the state kept for its undo.
    static func applyEntity(
        _ entity: Entity, in entitySet: String, writer: StoreWriter, model: Model, seen: inout [String: Set<String>],
        locallyChanged: Set<String> = []
    ) throws -> Int {
        var count = 0
        var parent = entity
        var links: [(String, [String: PrimitiveValue])] = []
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
                count += try applyEntity(
                    child, in: target, writer: writer, model: model, seen: &seen, locallyChanged: locallyChanged)
                if let key = Keys.key(of: child, in: target, model: model) { links.append((nav.name, key)) }
            }
        }
        parent.navigation = []
        guard let key = Keys.key(of: parent, in: entitySet, model: model) else {
            throw OfflineODataError(.backend, "An entity of \(entitySet) from the backend has no key")
        }
        let predicate = Keys.predicate(key, in: entitySet, model: model)
        seen[entitySet, default: []].insert(predicate)
        let state = try writer.reader.bookkeeping(in: entitySet, key: key)
        if state?.pending == true || (state == nil && locallyChanged.contains(entitySet + predicate)) {
            // The local row keeps its pending changes (a deleted one stays deleted); the state
            // they started from becomes the backend's new one, which undo and a revert return to.
            try RequestQueue(writer, model: model, serviceRoot: "").refreshKeptState(
                parent, in: entitySet, predicate: predicate)
            if state == nil { return count }
        } else {
            // Only what changed is written and counts as upserted (a full read of a backend
            // without change tracking returns every entity, changed or not).
            let (rowid, changed) = try writer.upsertIfChanged(parent, into: entitySet)
            if changed {
                try writer.setState(in: entitySet, rowid: rowid, isLocal: false, inError: false, upserted: true)
                count += 1
            } else if state?.isLocal == true || state?.inError == true {
                try writer.setState(in: entitySet, rowid: rowid, isLocal: false, inError: false)
            }
        }
        for (navigation, childKey) in links
        where writer.schema.table(forEntitySet: entitySet)?.navigation(navigation) != nil {
            try writer.link(entitySet, key: key, navigation: navigation, to: childKey)
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
