import Foundation
import ODataCore
import ODataStore
import Logging

/// Runs the defining queries against the backend and applies what they bring.
///
/// It owns the download stream: each query's delta link (or, the first time, after a 410 or
/// without delta support, the query itself) is read page by page, following next links, with
/// the next page fetched while one is applied; the media streams of queries that retrieve
/// them; and the apply. The first open applies each page into the new store as it arrives
/// (``applyFirstFill(_:to:bulkSets:allQueries:)``); a later download stages the pages and applies them
/// in one transaction once all are in (``applyStaged(to:allQueries:start:held:)``), so a failure changes nothing.
/// ``PageApplier`` does the apply: upserts, deletions, the local diff of a full read, and
/// keeping local changes (their kept state takes the backend's values). Its methods that talk
/// to the backend run on the provider's actor (`isolated` parameter).
struct Downloader: Sendable {
    let serviceRoot: String
    let progress: ProgressReporter
    /// How the download's own transactions (staging, the apply) wait for the disk:
    /// ``Store/CommitDurability/redoable`` unless the app asked for durable downloads
    /// (``OfflineODataParameters/durableDownloads``).
    var durability: Store.CommitDurability = .redoable

    /// The steps of a download, in the order they happen.
    static let plan: [OfflineODataProgressStep] = [
        .processingDefiningQueries, .receivingDataFromServer, .analyzingReceivedData,
        .removingDeletedRelationships, .reapplyingChanges,
    ]

    /// Downloads the changes of `selected` into staging, then applies them in one transaction
    /// (see ``OfflineODataProvider/download(definingQueries:)``).
    func run(
        _ selected: [OfflineODataDefiningQuery], store: Store, on provider: isolated OfflineODataProvider
    ) async throws {
        // Memory: the readers are idle while the writer compares and applies, so their caches
        // go first; the writer's is kept small meanwhile (a full read visits pages in key
        // order, and a delta's rows once each: the index's inner pages are what a cache helps
        // with). Both fill again afterwards as work needs.
        await store.releaseReaderCaches()
        let cache = try await store.limitWriterCache(kibibytes: Self.downloadCacheKiB)
        do {
            try await runStaged(selected, store: store, on: provider)
        } catch {
            try? await store.restoreWriterCache(cache)
            throw error
        }
        try? await store.restoreWriterCache(cache)
    }

    /// The writer's page cache during a download, in KiB.
    static let downloadCacheKiB = 16_384

    private func runStaged(
        _ selected: [OfflineODataDefiningQuery], store: Store, on provider: isolated OfflineODataProvider,
        verifyingChecksums: Bool = true
    ) async throws {
        provider.scopeChecksums = [:]
        // Pages wait in memory or in a staging table as they arrive (memory stays bounded); only
        // when every page is in are they applied, in one transaction, so a failure changes
        // nothing.
        let emptyStaging = { @Sendable (writer: StoreWriter) throws in
            _ = try writer.connection.execute("DELETE FROM oo_staging")
            _ = try writer.connection.execute("DELETE FROM oo_stream_staging")
            try writer.forgetSeen()
        }
        // The delta links are read on the writer, in the same transaction (a reader connection
        // used for the first time would derive the store's key first). A download's transactions
        // are redoable (the next download fetches the same rows): their commits do not wait
        // for the disk. Local changes and recorded answers do.
        let (links, start) = try await store.write(durability) { writer in
            try emptyStaging(writer)
            return (try DefiningQueries.deltaLinks(writer.connection), try DownloadStart(writer))
        }
        // A delta's first pages wait in memory instead, parsed, up to `heldDeltaBytes` of bodies
        // (a parameter): staging them would write them to the store, read them back and parse
        // them again, for a small delta a good part of its cost. Once a page does not fit, it and every later
        // page are staged (pages are applied in the order they came).
        var held: [FetchedQuery] = []
        var heldBytes = 0
        var staging = false
        // A page read as entities, not rows (V2, `@removed` entries, expands), takes several
        // times its body's size in memory.
        func weight(_ page: FetchedQuery) -> Int { page.flat != nil ? page.raw.count : 4 * page.raw.count }
        do {
            // Pages are read as rows where they are flat (only their links and rows are needed
            // here: rows are compared with the store as they arrive).
            _ = try await fetchDefiningQueries(
                selected.map { ($0, links[$0.name]) }, model: store.model, rowQueries: Set(selected.map(\.name)),
                on: provider
            ) { page in
                if !staging, page.isDelta, heldBytes + weight(page) <= provider.parameters.heldDeltaBytes,
                    page.flat == nil || store.schema.acceptsRows(ofEntitySet: page.entitySet)
                {
                    var kept = page
                    heldBytes += weight(page)
                    kept.raw = []
                    held.append(kept)
                } else {
                    staging = true
                    try await store.write(durability) { writer in try Self.stage(page, writer: writer) }
                }
                try await self.fetchStreams(of: page, staged: true, store: store, on: provider)
            }
            if provider.cancelDownloadRequested || Task.isCancelled {
                throw OfflineODataError(.cancelled, "The download was cancelled; nothing was applied")
            }
        } catch {
            try? await store.write(durability, emptyStaging)
            throw error
        }
        provider.report(progress, .analyzingReceivedData)
        provider.report(progress, .removingDeletedRelationships)
        let summary = try await applyStaged(
            to: store, allQueries: provider.definingQueries, start: start, held: held)
        held = []  // applied: not kept through the checksum check and its full read
        provider.report(progress, .reapplyingChanges)
        let checksums = provider.scopeChecksums
        provider.scopeChecksums = [:]
        if verifyingChecksums && provider.parameters.verifiesScopeChecksums && !checksums.isEmpty {
            let mismatched = try await mismatchedChecksums(
                selected, received: checksums, all: provider.definingQueries, store: store)
            if !mismatched.isEmpty {
                for (_, details) in mismatched {
                    provider.logger.warning("\(details)")
                    try await provider.logEvent(
                        in: store, type: Self.mismatchEvent, details: details, durability: durability)
                }
                let names = Set(mismatched.map(\.name))
                try await store.write(durability) { writer in
                    try DefiningQueries.forgetDeltaLinks(named: Array(names), writer)
                }
                // Once: a full read that still differs is logged by the next download.
                try await runStaged(
                    selected.filter { names.contains($0.name) }, store: store, on: provider,
                    verifyingChecksums: false)
            }
        }
        provider.operationSummary["defining-queries"] = .stringConvertible(selected.count)
        provider.operationSummary["result"] = .string(summary)
        try await provider.logEvent(in: store, type: "Download", details: summary, durability: durability)
    }

    /// Reads each query (its delta link when there is one), following next links. With
    /// `onPage`, each page goes to it as soon as it is read and nothing is collected (the
    /// first open streams into the new store this way, so memory stays flat).
    ///
    /// `rowQueries`: queries whose pages are read as rows where they are flat (see
    /// `V4JSONReader.readFlatCollection`), unless they have `$expand` or streams; only
    /// `onPage` sees them. The first open names the queries that fill an empty set.
    ///
    /// `keepingBodies`: whether the pages handed to `onPage` keep their bodies as received
    /// (`FetchedQuery.raw`, which staging cuts the changed rows from). The first open does not
    /// need them: each body is then dropped as soon as it is parsed, so that the page being
    /// applied and the one being fetched do not also hold their bodies.
    func fetchDefiningQueries(
        _ queries: [(OfflineODataDefiningQuery, String?)], model: Model, rowQueries: Set<String> = [],
        keepingBodies: Bool = true,
        on provider: isolated OfflineODataProvider,
        onPage: ((FetchedQuery) async throws -> Void)? = nil
    ) async throws -> [FetchedQuery] {
        var results: [FetchedQuery] = []
        for (query, deltaLink) in queries {
            provider.report(progress, .processingDefiningQueries, ["name": query.name, "url": "/" + query.query])
            let set = try DefiningQueries.entitySet(of: query.query, model: model)
            var result = FetchedQuery(name: query.name, entitySet: set)
            var next: String? = deltaLink ?? query.query
            result.isDelta = deltaLink != nil
            let flat =
                rowQueries.contains(query.name) && onPage != nil && !query.automaticallyRetrievesStreams
                && !model.version.isLegacy
                && (try? URLParser(version: model.version.grammar).parse(query.query))?.query.expand == nil
            var pages = 0
            // Next links already read in this query's read, and the empty pages in a row.
            var readLinks: Set<String> = []
            var emptyRun = 0
            let maximumPages = max(1, provider.parameters.maximumPagesPerQuery)
            let maximumEmpty = max(1, provider.parameters.maximumEmptyPagesInARow)
            // While a page is handed to `onPage`, the next one is already being fetched and
            // parsed, so the backend and the store work at the same time (at most two pages
            // are in memory).
            var prefetched: Task<FetchedPage, any Error>?
            defer { prefetched?.cancel() }
            while let url = next {
                if provider.cancelDownloadRequested || Task.isCancelled {
                    throw OfflineODataError(.cancelled, "The download was cancelled; nothing was applied")
                }
                pages += 1
                guard pages <= maximumPages else {
                    throw OfflineODataError(
                        .backend,
                        "Defining query \(query.name): more than \(maximumPages) pages (maximumPagesPerQuery); "
                            + "the backend's next links do not end")
                }
                let fetched: FetchedPage
                if let pending = prefetched {
                    prefetched = nil
                    fetched = try await pending.value
                } else {
                    fetched = try await fetchPage(
                        url, query: query, entitySet: set, isDelta: result.isDelta, model: model, flat: flat,
                        keepingBody: keepingBodies, on: provider)
                }
                guard case .page(let body, let page, let rows) = fetched else {
                    // The delta link expired: read everything again and diff locally.
                    result = FetchedQuery(name: query.name, entitySet: set)
                    next = query.query
                    continue
                }
                provider.report(progress, .receivingDataFromServer, ["receivedBytes": "\(provider.bytesReceived)"])
                result.pages += 1
                let received = rows?.entityCount ?? page.entities.count
                result.received += received
                next = page.nextLink
                if let link = next {
                    guard readLinks.insert(link).inserted else {
                        throw OfflineODataError(
                            .backend,
                            "Defining query \(query.name): the backend's next link \(provider.absoluteURL(link)) was "
                                + "already read in this download (its next links loop); nothing was applied")
                    }
                    emptyRun = received == 0 && page.deleted.isEmpty ? emptyRun + 1 : 0
                    guard emptyRun <= maximumEmpty else {
                        throw OfflineODataError(
                            .backend,
                            "Defining query \(query.name): more than \(maximumEmpty) pages in a row without an entity "
                                + "link to a next page (maximumEmptyPagesInARow); nothing was applied")
                    }
                }
                if let onPage {
                    if let link = next {
                        let isDelta = result.isDelta
                        prefetched = Task {
                            try await self.fetchPage(
                                link, query: query, entitySet: set, isDelta: isDelta, model: model, flat: flat,
                                keepingBody: keepingBodies, on: provider)
                        }
                    }
                    var chunk = FetchedQuery(
                        name: query.name, entitySet: set, entities: page.entities, deleted: page.deleted,
                        deltaLink: page.deltaLink)
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

    func fetchPage(
        _ url: String, query: OfflineODataDefiningQuery, entitySet set: String, isDelta: Bool, model: Model,
        flat: Bool = false, keepingBody: Bool = true,
        on provider: isolated OfflineODataProvider
    ) async throws -> FetchedPage {
        let target = try provider.withStreamParameters(url)
        let response = try await provider.withServerProgress(progress) { operation in
            var headers = ["Prefer": "odata.track-changes"]
            if let operation { headers["OOData-Operation"] = operation }
            return try await provider.send(method: "GET", url: target, headers: headers)
        }
        if response.status == 410 && isDelta { return .expired }
        if response.status < 400, let checksum = response.headers[Self.checksumHeader] {
            provider.scopeChecksums[query.name] = checksum
        }
        guard response.status < 400 else {
            let absolute = provider.absoluteURL(url)
            var error = OfflineODataProvider.backendError(response, method: "GET", url: absolute)
            if response.status == 401, BackendSession.origin(of: absolute) != BackendSession.origin(of: serviceRoot) {
                // A next link to another host went without the session's credentials.
                error = OfflineODataError(
                    .unauthorized,
                    error.message + "; the next link is on another host than the service root ("
                        + (BackendSession.origin(of: serviceRoot) ?? serviceRoot) + "), and credentials, cookies and "
                        + "CSRF tokens are never sent across hosts: that host must accept the request without them")
            }
            throw error
        }
        let entityType = model.entitySet(set)?.entityType
        do {
            if flat, let entityType,
                let rows = try V4JSONReader(model: model).readFlatCollection(response.body, entityType: entityType)
            {
                var links = EntityCollection(context: rows.context)
                links.count = rows.count
                links.nextLink = rows.nextLink
                links.deltaLink = rows.deltaLink
                return .page(body: keepingBody ? response.body : [], links, rows)
            }
            let page = try model.readCollection(response.body, entityType: entityType)
            return .page(body: keepingBody ? response.body : [], page, nil)
        } catch {
            throw OfflineODataError(
                .backend,
                "Defining query \(query.name): the response to GET \(provider.absoluteURL(url)) is not a valid collection: \(error)"
            )
        }
    }

    /// Stores one page of the first open into the new store, in one transaction (or in the
    /// open's write group, which commits several pages at once: see `fillNewStore`). Nothing is
    /// diffed or flagged: every row of a new store comes from this open. `bulkSets`: entity
    /// sets still empty, filled by this query alone, where plain entities go in without per-row
    /// lookups. Returns a one-line summary.
    func applyFirstFill(
        _ page: FetchedQuery, to store: Store, bulkSets: Set<String>, allQueries: [OfflineODataDefiningQuery]
    )
        async throws -> String
    {
        let applier = PageApplier(
            model: store.model, root: serviceRoot, allQueries: allQueries, bulkSets: bulkSets, firstFill: true)
        return try await store.write { writer in
            var applier = applier
            try applier.apply(page, writer: writer)
            return try applier.finish(writer: writer)
        }
    }

    /// Stages one fetched page. A page of a full read, read as rows, is compared with the store
    /// as it arrives: only the rows that are new, changed or locally changed are staged (a full
    /// read of an unchanged backend stages next to nothing), and the rows it returned are
    /// marked seen. A delta's page is staged as it came: its rows are the backend's changes, and
    /// the apply compares each of them with the store anyway. Compared here too, each changed
    /// row's table page was read and decrypted twice, once now and once at the apply, since a
    /// delta larger than the writer's cache has pushed it out by then (at 1M rows, 1 % changed:
    /// 10,000 pages for a 16 MiB cache of 4,000).
    static func stage(_ page: FetchedQuery, writer: StoreWriter) throws {
        var body = page.raw
        if !page.isDelta, let rows = page.flat, writer.acceptsRows(of: page.entitySet) {
            let changed = try writer.changedRows(rows, in: page.entitySet, recordSeen: true)
            body = rows.page(ofRows: changed, from: page.raw)
        }
        _ = try writer.connection.execute(
            "INSERT INTO oo_staging (query, entity_set, is_delta, body) VALUES (?, ?, ?, ?)",
            [.text(page.name), .text(page.entitySet), .integer(page.isDelta ? 1 : 0), .blob(body)])
    }

    /// Applies the pages of a download in one transaction: first `held`, the pages kept in
    /// memory, then the staged ones, one in memory at a time; and empties the staging table.
    /// `start`: the store when the download began (rows and requests made since were not there
    /// when the pages were compared).
    func applyStaged(
        to store: Store, allQueries: [OfflineODataDefiningQuery], start: DownloadStart? = nil,
        held: [FetchedQuery] = []
    ) async throws -> String {
        let model = store.model
        var applier = PageApplier(
            model: model, root: serviceRoot, allQueries: allQueries, bulkSets: [], firstFill: false)
        applier.start = start
        let prepared = applier
        CrashPoint.reach("delta-staged")
        let summary = try await store.write(durability) { writer in
            var applier = prepared
            // Rows this download writes are marked with a new generation: the marks of the last
            // one stop counting without a scan of every table.
            try writer.beginDownloadGeneration()
            for chunk in held { try applier.apply(chunk, writer: writer) }
            var last: Int64 = 0
            while let row = try writer.connection.query(
                "SELECT seq, query, entity_set, is_delta, body FROM oo_staging WHERE seq > ? ORDER BY seq LIMIT 1",
                [.integer(last)]
            ).first {
                guard case .integer(let seq) = row[0], case .text(let name) = row[1], case .text(let set) = row[2],
                    case .blob(let body) = row[4]
                else { break }
                last = seq
                let entityType = model.entitySet(set)?.entityType
                var chunk = FetchedQuery(name: name, entitySet: set)
                do {
                    // Pages of flat entities are merged as rows, as the first open stores them.
                    if !model.version.isLegacy, let entityType, writer.acceptsRows(of: set),
                        let rows = try V4JSONReader(model: model).readFlatCollection(body, entityType: entityType)
                    {
                        chunk.flat = rows
                        chunk.deltaLink = rows.deltaLink
                    } else {
                        let page = try model.readCollection(body, entityType: entityType)
                        chunk.entities = page.entities
                        chunk.deleted = page.deleted
                        chunk.deltaLink = page.deltaLink
                    }
                } catch {
                    throw OfflineODataError(
                        .backend, "Defining query \(name): a staged page is not a valid collection: \(error)")
                }
                chunk.isDelta = row[3] == .integer(1)
                try applier.apply(chunk, writer: writer)
            }
            _ = try writer.connection.execute("DELETE FROM oo_staging")
            let summary = try applier.finish(writer: writer)
            _ = try RequestQueue.pruneKeyMap(writer.connection)
            // An entity with a local stream change keeps it; the backend's stream becomes the
            // one kept for undo and revert.
            _ = try writer.connection.execute(
                """
                UPDATE oo_stream_original SET
                  content_type = (SELECT s.content_type FROM oo_stream_staging s WHERE s.entity_set = oo_stream_original.entity_set AND s.entity_key = oo_stream_original.entity_key),
                  body = (SELECT s.body FROM oo_stream_staging s WHERE s.entity_set = oo_stream_original.entity_set AND s.entity_key = oo_stream_original.entity_key)
                WHERE EXISTS (SELECT 1 FROM oo_stream_staging s WHERE s.entity_set = oo_stream_original.entity_set AND s.entity_key = oo_stream_original.entity_key)
                """)
            _ = try writer.connection.execute(
                """
                DELETE FROM oo_stream_staging WHERE EXISTS (SELECT 1 FROM oo_stream_original o WHERE o.entity_set = oo_stream_staging.entity_set
                  AND o.entity_key = oo_stream_staging.entity_key)
                """)
            // The other streams fetched with these pages replace the old ones; those of entities
            // that are gone go with them.
            _ = try writer.connection.execute(
                """
                DELETE FROM oo_streams WHERE EXISTS (SELECT 1 FROM oo_stream_staging s WHERE s.entity_set = oo_streams.entity_set
                  AND s.entity_key = oo_streams.entity_key AND s.body IS NULL)
                """)
            _ = try writer.connection.execute(
                """
                INSERT OR REPLACE INTO oo_streams (entity_set, entity_key, content_type, body)
                  SELECT entity_set, entity_key, content_type, body FROM oo_stream_staging WHERE body IS NOT NULL
                """)
            _ = try writer.connection.execute("DELETE FROM oo_stream_staging")
            try Self.removeOrphanStreams(writer: writer, model: model)
            return summary
        }
        CrashPoint.reach("delta-applied")
        return summary
    }

    /// Fetches the media stream of every entity of `page` when its defining query retrieves
    /// streams (`automaticallyRetrievesStreams`) and its type has one (from its media read link
    /// when that is on the service, else from `Set(key)/$value`), into `oo_streams`, or with
    /// `staged` into `oo_stream_staging` for a download not yet applied. One stream is in
    /// memory at a time; an entity without a stream (404, 204) has none stored.
    func fetchStreams(
        of page: FetchedQuery, staged: Bool, store: Store, on provider: isolated OfflineODataProvider
    ) async throws {
        let table = staged ? "oo_stream_staging" : "oo_streams"
        // Staged streams are fetched again by the next download when lost.
        let durability: Store.CommitDurability = staged ? self.durability : .durable
        let model = store.model
        guard provider.definingQueries.first(where: { $0.name == page.name })?.automaticallyRetrievesStreams == true,
            model.entityType(ofEntitySet: page.entitySet)?.hasStream == true
        else { return }
        let set = page.entitySet
        for entity in page.entities {
            guard let key = Keys.key(of: entity, in: set, model: model) else { continue }
            let predicate = Keys.predicate(key, in: set, model: model)
            // A read link to another host is not followed: the provider's headers and cookies
            // (credentials) go to the service only.
            let link = entity.control.mediaReadLink.flatMap {
                $0.contains("://") && !$0.hasPrefix(serviceRoot) ? nil : $0
            }
            let url = link ?? (set + predicate + "/$value")
            let response = try await provider.send(method: "GET", url: url, headers: ["Accept": "*/*"])
            if response.status == 404 || response.status == 204 {
                try await store.write(durability) { writer in
                    if staged {
                        // Applied with the pages: the stream kept so far goes.
                        _ = try writer.connection.execute(
                            "INSERT OR REPLACE INTO oo_stream_staging (entity_set, entity_key, body) VALUES (?, ?, NULL)",
                            [.text(set), .text(predicate)])
                    } else {
                        _ = try writer.connection.execute(
                            "DELETE FROM oo_streams WHERE entity_set = ? AND entity_key = ?",
                            [.text(set), .text(predicate)])
                    }
                }
                continue
            }
            guard response.status < 300 else {
                throw OfflineODataProvider.backendError(response, method: "GET", url: url)
            }
            let contentType = response.headers["Content-Type"] ?? entity.control.mediaContentType
            let body = response.body
            try await store.write(durability) { writer in
                _ = try writer.connection.execute(
                    "INSERT OR REPLACE INTO \(table) (entity_set, entity_key, content_type, body) VALUES (?, ?, ?, ?)",
                    [.text(set), .text(predicate), contentType.map { .text($0) } ?? .null, .blob(body)])
            }
        }
    }

    /// Removes the streams of entities that are no longer in the store.
    static func removeOrphanStreams(writer: StoreWriter, model: Model) throws {
        // An entity deleted locally (its delete pending, or failed and in the ErrorArchive)
        // keeps its stream for an undo or a revert.
        var kept: Set<String>?
        for row in try writer.connection.query("SELECT entity_set, entity_key FROM oo_streams") {
            guard case .text(let set) = row[0], case .text(let predicate) = row[1] else { continue }
            if kept == nil { kept = try RequestQueue.locallyChanged(writer.connection) }
            if kept?.contains(set + predicate) == true { continue }
            if let (_, key) = Keys.parse(set + predicate, model: model, serviceRoot: ""),
                try writer.rowid(in: set, key: key) != nil
            {
                continue
            }
            _ = try writer.connection.execute(
                "DELETE FROM oo_streams WHERE entity_set = ? AND entity_key = ?", [.text(set), .text(predicate)])
        }
    }
}

/// The store when a download began: the highest rowid of every entity table and the last
/// queued request. A full read compares its pages with the store while it fetches and marks
/// the rows it saw; rows made after this (local creates, deletes undone) and requests queued
/// after it were not there to be compared, so its local diff leaves them alone.
struct DownloadStart: Sendable {
    var rowids: [String: Int64] = [:]
    var request: Int64 = 0

    init(_ writer: StoreWriter) throws {
        for table in writer.schema.tables {
            let rows = try? writer.connection.query("SELECT max(_rowid) FROM \(StoreSchema.quote(table.name))")
            guard let rows else { continue }
            if case .integer(let highest)? = rows.first?.first {
                rowids[table.entitySet] = highest
            } else {
                rowids[table.entitySet] = 0
            }
        }
        if case .integer(let highest)? = try writer.connection.query("SELECT max(id) FROM oo_queue").first?.first {
            request = highest
        }
    }
}

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
