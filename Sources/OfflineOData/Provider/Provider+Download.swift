import Foundation
import ODataCore
import ODataStore

/// What one defining query brought from the backend.
struct FetchedQuery: Sendable {
    var name: String
    var entitySet: String
    var entities: [Entity] = []
    var deleted: [DeletedEntity] = []
    var deltaLink: String?
    /// True when this was a delta; false for a full read (then missing rows are deletions).
    var isDelta = false
    /// Pages and entities read (also when the pages went to a handler).
    var pages = 0
    var received = 0
    /// The page as received (only for pages handed to a handler).
    var raw: [UInt8] = []
    /// The page's entities as rows, read without `Entity` values (first opens of flat
    /// entity sets); `entities` is then empty.
    var flat: FlatCollection?
    /// How many entities the page holds, whichever way it was read.
    var entityCount: Int { flat?.entityCount ?? entities.count }
}

extension OfflineODataProvider {
    /// Downloads the changes for every defining query, or only those named, then reapplies the
    /// pending local changes. A backend failure leaves the store as it was, and so does
    /// cancelling the `Task` (it ends with `CancellationError`).
    public func download(definingQueries names: [String]? = nil) async throws {
        try await cancellable { try await runDownload(definingQueries: names) }
    }

    private func runDownload(definingQueries names: [String]?) async throws {
        let store = try beginExclusive()
        defer { busy = false }
        cancelDownloadRequested = false
        bytesSent = 0
        bytesReceived = 0
        let selected = names.map { wanted in definingQueries.filter { wanted.contains($0.name) } } ?? definingQueries
        if let names, selected.count != names.count {
            let unknown = names.filter { name in !definingQueries.contains { $0.name == name } }
            throw OfflineODataError(.unknownDefiningQuery, "No defining query named \(unknown.joined(separator: ", "))")
        }
        let progress = reporter(.download, [.processingDefiningQueries, .receivingDataFromServer, .analyzingReceivedData,
                                            .removingDeletedRelationships, .reapplyingChanges])
        let links = try await store.read { reader -> [String: String] in
            var links: [String: String] = [:]
            for row in try reader.connection.query("SELECT name, delta_link FROM oo_defining") {
                if case .text(let name) = row[0], case .text(let link) = row[1] { links[name] = link }
            }
            return links
        }
        // Pages wait in a staging table as they arrive (memory stays flat); only when every
        // page is in are they applied, in one transaction, so a failure changes nothing.
        let emptyStaging = { @Sendable (writer: StoreWriter) throws in
            _ = try writer.connection.execute("DELETE FROM oo_staging")
            _ = try writer.connection.execute("DELETE FROM oo_stream_staging")
        }
        try await store.write(emptyStaging)
        do {
            _ = try await fetchDefiningQueries(selected.map { ($0, links[$0.name]) }, model: store.model, progress: progress) { page in
                try await store.write { writer in
                    _ = try writer.connection.execute("INSERT INTO oo_staging (query, entity_set, is_delta, body) VALUES (?, ?, ?, ?)",
                                                      [.text(page.name), .text(page.entitySet), .integer(page.isDelta ? 1 : 0), .blob(page.raw)])
                }
                try await self.fetchStreams(of: page, staged: true, store: store)
            }
            if cancelDownloadRequested || Task.isCancelled { throw OfflineODataError(.cancelled, "The download was cancelled; nothing was applied") }
        } catch {
            try? await store.write(emptyStaging)
            throw error
        }
        report(progress, .analyzingReceivedData)
        report(progress, .removingDeletedRelationships)
        let summary = try await applyStaged(to: store)
        report(progress, .reapplyingChanges)
        try await logEvent(in: store, type: "Download", details: summary)
    }

    /// Asks a running download to stop at the next safe point; nothing is half-applied.
    public func cancelDownload() { cancelDownloadRequested = true }

    /// Reads each query (its delta link when there is one), following next links. With
    /// `onPage`, each page goes to it as soon as it is read and nothing is collected (the
    /// first open streams into the new store this way, so memory stays flat).
    ///
    /// `rowQueries`: queries whose pages are read as rows where they are flat (see
    /// `V4JSONReader.readFlatCollection`), unless they have `$expand` or streams; only
    /// `onPage` sees them. The first open names the queries that fill an empty set.
    func fetchDefiningQueries(_ queries: [(OfflineODataDefiningQuery, String?)], model: Model, progress: ProgressReporter, rowQueries: Set<String> = [],
                              onPage: ((FetchedQuery) async throws -> Void)? = nil) async throws -> [FetchedQuery] {
        var results: [FetchedQuery] = []
        for (query, deltaLink) in queries {
            report(progress, .processingDefiningQueries, ["name": query.name, "url": "/" + query.query])
            let set = try Self.entitySet(of: query.query, model: model)
            var result = FetchedQuery(name: query.name, entitySet: set)
            var next: String? = deltaLink ?? query.query
            result.isDelta = deltaLink != nil
            let flat = rowQueries.contains(query.name) && onPage != nil && !query.automaticallyRetrievesStreams && !model.version.isLegacy
                && (try? URLParser(version: model.version.grammar).parse(query.query))?.query.expand == nil
            var pages = 0
            // While a page is handed to `onPage`, the next one is already being fetched and
            // parsed, so the backend and the store work at the same time (at most two pages
            // are in memory).
            var prefetched: Task<FetchedPage, any Error>?
            defer { prefetched?.cancel() }
            while let url = next {
                if cancelDownloadRequested || Task.isCancelled { throw OfflineODataError(.cancelled, "The download was cancelled; nothing was applied") }
                pages += 1
                guard pages <= 100_000 else { throw OfflineODataError(.backend, "\(query.name): more than 100000 pages; the backend's next links loop") }
                let fetched: FetchedPage
                if let pending = prefetched {
                    prefetched = nil
                    fetched = try await pending.value
                } else {
                    fetched = try await fetchPage(url, query: query, entitySet: set, isDelta: result.isDelta, model: model, flat: flat)
                }
                guard case .page(let body, let page, let rows) = fetched else {
                    // The delta link expired: read everything again and diff locally.
                    result = FetchedQuery(name: query.name, entitySet: set)
                    next = query.query
                    continue
                }
                report(progress, .receivingDataFromServer, ["receivedBytes": "\(bytesReceived)"])
                result.pages += 1
                result.received += rows?.entityCount ?? page.entities.count
                next = page.nextLink
                if let onPage {
                    if let link = next {
                        let isDelta = result.isDelta
                        prefetched = Task { try await self.fetchPage(link, query: query, entitySet: set, isDelta: isDelta, model: model, flat: flat) }
                    }
                    var chunk = FetchedQuery(name: query.name, entitySet: set, entities: page.entities, deleted: page.deleted, deltaLink: page.deltaLink)
                    chunk.isDelta = result.isDelta
                    chunk.raw = body
                    chunk.flat = rows
                    try await onPage(chunk)
                } else {
                    result.entities += page.entities
                    result.deleted += page.deleted
                    if page.deltaLink != nil { result.deltaLink = page.deltaLink }
                }
            }
            results.append(result)
        }
        return results
    }

    /// One page of a defining query, read and parsed; `.expired` when a delta link got 410.
    enum FetchedPage: Sendable {
        case expired
        /// The body, the collection (its links only when the entities were read as rows) and
        /// the rows.
        case page(body: [UInt8], EntityCollection, FlatCollection?)
    }

    func fetchPage(_ url: String, query: OfflineODataDefiningQuery, entitySet set: String, isDelta: Bool, model: Model, flat: Bool = false) async throws -> FetchedPage {
        let response = try await send(method: "GET", url: try withStreamParameters(url), headers: ["Prefer": "odata.track-changes"])
        if response.status == 410 && isDelta { return .expired }
        guard response.status < 400 else { throw Self.backendError(response, method: "GET", url: absoluteURL(url)) }
        let entityType = model.entitySet(set)?.entityType
        do {
            if flat, let entityType, let rows = try V4JSONReader(model: model).readFlatCollection(response.body, entityType: entityType) {
                var links = EntityCollection(context: rows.context)
                links.count = rows.count
                links.nextLink = rows.nextLink
                links.deltaLink = rows.deltaLink
                return .page(body: response.body, links, rows)
            }
            let page = try model.readCollection(response.body, entityType: entityType)
            return .page(body: response.body, page, nil)
        } catch {
            throw OfflineODataError(.backend, "Defining query \(query.name): the response to GET \(absoluteURL(url)) is not a valid collection: \(error)")
        }
    }

    /// Stores one page of the first open into the new store, in one transaction. Nothing is
    /// diffed or flagged: every row of a new store comes from this open. `bulkSets`: entity
    /// sets still empty, filled by this query alone, where plain entities go in without per-row
    /// lookups. Returns a one-line summary.
    func applyFirstFill(_ page: FetchedQuery, to store: Store, bulkSets: Set<String>) async throws -> String {
        let applier = PageApplier(model: store.model, root: serviceRoot, allQueries: definingQueries, bulkSets: bulkSets, firstFill: true)
        return try await store.write { writer in
            var applier = applier
            try applier.apply(page, writer: writer)
            return try applier.finish(writer: writer)
        }
    }

    /// Applies the staged pages of a download in one transaction, one page in memory at a
    /// time, and empties the staging table.
    func applyStaged(to store: Store) async throws -> String {
        let model = store.model
        let applier = PageApplier(model: model, root: serviceRoot, allQueries: definingQueries, bulkSets: [], firstFill: false)
        return try await store.write { writer in
            var applier = applier
            applier.locallyChanged = try Self.locallyChanged(writer.connection)
            try writer.clearFlag("_upserted")
            var last: Int64 = 0
            while let row = try writer.connection.query("SELECT seq, query, entity_set, is_delta, body FROM oo_staging WHERE seq > ? ORDER BY seq LIMIT 1",
                                                        [.integer(last)]).first {
                guard case .integer(let seq) = row[0], case .text(let name) = row[1], case .text(let set) = row[2], case .blob(let body) = row[4] else { break }
                last = seq
                let entityType = model.entitySet(set)?.entityType
                let page: EntityCollection
                do {
                    page = try model.readCollection(body, entityType: entityType)
                } catch {
                    throw OfflineODataError(.backend, "Defining query \(name): a staged page is not a valid collection: \(error)")
                }
                var chunk = FetchedQuery(name: name, entitySet: set, entities: page.entities, deleted: page.deleted, deltaLink: page.deltaLink)
                chunk.isDelta = row[3] == .integer(1)
                try applier.apply(chunk, writer: writer)
            }
            _ = try writer.connection.execute("DELETE FROM oo_staging")
            let summary = try applier.finish(writer: writer)
            // An entity with a local stream change keeps it; the backend's stream becomes the
            // one kept for undo and revert.
            _ = try writer.connection.execute("""
                UPDATE oo_stream_original SET
                  content_type = (SELECT s.content_type FROM oo_stream_staging s WHERE s.entity_set = oo_stream_original.entity_set AND s.entity_key = oo_stream_original.entity_key),
                  body = (SELECT s.body FROM oo_stream_staging s WHERE s.entity_set = oo_stream_original.entity_set AND s.entity_key = oo_stream_original.entity_key)
                WHERE EXISTS (SELECT 1 FROM oo_stream_staging s WHERE s.entity_set = oo_stream_original.entity_set AND s.entity_key = oo_stream_original.entity_key)
                """)
            _ = try writer.connection.execute("""
                DELETE FROM oo_stream_staging WHERE EXISTS (SELECT 1 FROM oo_stream_original o WHERE o.entity_set = oo_stream_staging.entity_set
                  AND o.entity_key = oo_stream_staging.entity_key)
                """)
            // The other streams fetched with these pages replace the old ones; those of entities
            // that are gone go with them.
            _ = try writer.connection.execute("""
                DELETE FROM oo_streams WHERE EXISTS (SELECT 1 FROM oo_stream_staging s WHERE s.entity_set = oo_streams.entity_set
                  AND s.entity_key = oo_streams.entity_key AND s.body IS NULL)
                """)
            _ = try writer.connection.execute("""
                INSERT OR REPLACE INTO oo_streams (entity_set, entity_key, content_type, body)
                  SELECT entity_set, entity_key, content_type, body FROM oo_stream_staging WHERE body IS NOT NULL
                """)
            _ = try writer.connection.execute("DELETE FROM oo_stream_staging")
            try Self.removeOrphanStreams(writer: writer, model: model)
            return summary
        }
    }

    /// `Set(key)` of every entity with pending requests, and of what their deletes cascaded
    /// to: an entity among them that is not in the store was deleted locally.
    static func locallyChanged(_ connection: Connection) throws -> Set<String> {
        var references: Set<String> = []
        for row in try connection.query("SELECT entity_set, entity_key, cascade FROM oo_queue WHERE status = 'pending'") {
            if case .text(let set) = row[0], case .text(let key) = row[1] { references.insert(set + key) }
            if case .text(let json) = row[2], let parsed = try? JSONValue.parse(Array(json.utf8)) {
                references.formUnion((parsed.arrayValue ?? []).compactMap(\.stringValue))
            }
        }
        return references
    }

    /// Upserts an entity and, first, its expanded children, then links them. Returns how many
    /// entities were written; `seen` collects the key predicate of every entity per set. An
    /// entity with pending changes, or deleted locally (in `locallyChanged`, not in the
    /// store), keeps its local state; the backend's values become the state kept for its undo.
    static func applyEntity(_ entity: Entity, in entitySet: String, writer: StoreWriter, model: Model, seen: inout [String: Set<String>],
                            locallyChanged: Set<String> = []) throws -> Int {
        var count = 0
        var parent = entity
        var links: [(String, [String: PrimitiveValue])] = []
        for nav in entity.navigation {
            guard let inline = nav.inline, let target = model.targetEntitySet(from: entitySet, navigationPath: nav.name)?.name else { continue }
            let children: [Entity]
            switch inline {
            case .entity(let child): children = child.map { [$0] } ?? []
            case .collection(let collection): children = collection.entities
            }
            for child in children {
                count += try applyEntity(child, in: target, writer: writer, model: model, seen: &seen, locallyChanged: locallyChanged)
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
            try refreshKeptState(parent, in: entitySet, predicate: predicate, writer: writer)
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
        for (navigation, childKey) in links where writer.schema.table(forEntitySet: entitySet)?.navigation(navigation) != nil {
            try writer.link(entitySet, key: key, navigation: navigation, to: childKey)
        }
        return count
    }

    static func key(of removed: DeletedEntity, in entitySet: String, model: Model, root: String) -> [String: PrimitiveValue]? {
        if let key = Keys.key(of: Entity(properties: removed.properties), in: entitySet, model: model) { return key }
        guard let id = removed.id else { return nil }
        return Keys.parse(id, model: model, serviceRoot: root)?.1
    }
}

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
    /// Entities with pending requests (``OfflineODataProvider/locallyChanged(_:)``).
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
            guard bulk else { throw OfflineODataError(.store, "Defining query \(query.name): rows for \(query.entitySet), which another query fills") }
            try writer.bulkInsert(rows, into: query.entitySet)
            upserted += rows.entityCount
        } else if bulk {
            let plain = query.entities.filter { entity in !entity.navigation.contains { $0.inline != nil } }
            try writer.bulkInsert(plain, into: query.entitySet)
            upserted += plain.count
        }
        for entity in query.entities where !bulk || entity.navigation.contains(where: { $0.inline != nil }) {
            upserted += try OfflineODataProvider.applyEntity(entity, in: query.entitySet, writer: writer, model: model, seen: &seen,
                                                             locallyChanged: locallyChanged)
        }
        for removed in query.deleted {
            guard let key = OfflineODataProvider.key(of: removed, in: query.entitySet, model: model, root: root) else { continue }
            if try keepsLocalState(query.entitySet, key: key, writer: writer) { continue }
            if try writer.delete(from: query.entitySet, key: key) { deleted += 1 }
        }
        if !query.isDelta && !firstFill {
            // A full read also returns every child of its expands.
            if let covered = allQueries.first(where: { $0.name == query.name }).flatMap({ try? OfflineODataProvider.coveredSets(of: $0.query, model: model) }) {
                fullSets.formUnion(covered)
            }
            fullSets.insert(query.entitySet)
        }
        if let link = query.deltaLink {
            _ = try writer.connection.execute("UPDATE oo_defining SET delta_link = ? WHERE name = ?", [.text(link), .text(query.name)])
        }
    }

    /// Whether a delta removal leaves the entity alone: it has pending changes, or it was
    /// deleted locally. The state kept for its undo then says it no longer exists.
    func keepsLocalState(_ entitySet: String, key: [String: PrimitiveValue], writer: StoreWriter) throws -> Bool {
        let predicate = Keys.predicate(key, in: entitySet, model: model)
        let state = try writer.reader.bookkeeping(in: entitySet, key: key)
        guard state?.pending == true || (state == nil && locallyChanged.contains(entitySet + predicate)) else { return false }
        try OfflineODataProvider.refreshKeptState(nil, in: entitySet, predicate: predicate, writer: writer)
        return true
    }

    /// A full read: what the backend no longer returns is gone, unless another query not read
    /// in full this time also covers the set, or the row has pending changes.
    mutating func finish(writer: StoreWriter) throws -> String {
        for set in fullSets {
            let coveredElsewhere = allQueries.contains { query in
                let readInFull = read[query.name] == false
                return !readInFull && ((try? OfflineODataProvider.coveredSets(of: query.query, model: model))?.contains(set) ?? false)
            }
            if coveredElsewhere { continue }
            for (key, pending) in try writer.keys(in: set) {
                let predicate = Keys.predicate(key, in: set, model: model)
                if seen[set]?.contains(predicate) == true { continue }
                if pending {
                    // Kept locally; undo and revert now remove it, as the backend did.
                    try OfflineODataProvider.refreshKeptState(nil, in: set, predicate: predicate, writer: writer)
                } else if try writer.delete(from: set, key: key) {
                    deleted += 1
                }
            }
            // Entities deleted locally that the backend no longer has either.
            for reference in locallyChanged where reference.hasPrefix(set + "(") && !(seen[set]?.contains(String(reference.dropFirst(set.count))) ?? false) {
                guard let (_, key) = Keys.parse(reference, model: model, serviceRoot: ""), try writer.rowid(in: set, key: key) == nil else { continue }
                try OfflineODataProvider.refreshKeptState(nil, in: set, predicate: Keys.predicate(key, in: set, model: model), writer: writer)
            }
        }
        return "\(queries.count) defining queries, \(upserted) entities inserted or updated, \(deleted) deleted"
    }
}
