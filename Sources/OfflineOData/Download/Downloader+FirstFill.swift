import Foundation
import ODataCore
import ODataStore

extension Downloader {
    /// The first open: makes the store at `path` for `model` and fills it from every defining
    /// query, each page stored as it arrives (memory stays flat). Any failure deletes the
    /// file, so a backend error leaves nothing behind; a marker beside the store says the fill
    /// is unfinished until it is complete (see ``OfflineODataProvider/open()``).
    func fillNewStore(
        at path: String, model: Model, key: String?, declaredIndexes: [String: [[String]]]? = nil,
        on provider: isolated OfflineODataProvider
    ) async throws
        -> Store
    {
        // With a key, every connection of the new store derives it (64,000 PBKDF2 rounds each):
        // the store is made while the first page is fetched, and waited for before that page
        // is stored.
        // The lookup indexes (foreign keys) are kept up to date row by row. Building them after
        // the last page (`deferringLookupIndexes`) sorts every key in memory: at 1,000,000 rows
        // the open's peak memory went from 74 to 108 MiB, and it was slower (6.3–6.4 s against
        // 6.9–7.3 s), since the fill's small page cache holds the few index pages it touches.
        // Unless the cache cannot hold them (a foreign key whose values come scattered): then
        // the sets' lookup indexes are built at the end after all (see `thrashing`).
        // Until the fill is complete, a marker beside the store says so (see `open`).
        // It holds how many defining queries the fill had: a provider without any may redo a
        // fill that had none either.
        let queries = provider.definingQueries
        let indexes = try DefiningQueries.indexes(
            declared: declaredIndexes ?? provider.parameters.indexes ?? [:], queries: queries, model: model)
        guard
            FileManager.default.createFile(
                atPath: StoreFiles.fillingMarker(path), contents: Data("\(provider.definingQueries.count)".utf8))
        else {
            throw OfflineODataError(.store, "Cannot create \(StoreFiles.fillingMarker(path)) beside the new store")
        }
        let creating = Task {
            try await Store.create(path: path, model: model, key: key, indexes: indexes, deferringLookupIndexes: false)
        }
        let root = serviceRoot
        provider.newStore = nil
        defer { provider.newStore = nil }
        func ready() async throws -> Store {
            try await readyNewStore(creating, queries: queries, root: root, on: provider)
        }
        do {
            provider.report(progress, .creatingRequestQueueDatabase)
            // A set is bulk-filled by the first query that covers it; later queries over it upsert.
            var bulkSets: [String: Set<String>] = [:]
            var claimed: Set<String> = []
            // The sets each query writes: its own and those of its expands.
            var writtenSets: [String: Set<String>] = [:]
            for query in queries {
                let set = try DefiningQueries.entitySet(of: query.query, model: model)
                bulkSets[query.name] = claimed.contains(set) ? [] : [set]
                let covered = try DefiningQueries.coveredSets(of: query.query, model: model)
                claimed.formUnion(covered)
                claimed.insert(set)
                writtenSets[query.name] = covered.union([set])
            }
            // Sets whose lookup indexes the fill may build at its end (see `thrashing`): filled in
            // bulk by a query without expands, which no other query writes (their upserts and
            // links would look rows up through those indexes while the fill runs).
            var writers: [String: Int] = [:]
            for sets in writtenSets.values { for set in sets { writers[set, default: 0] += 1 } }
            let deferrable = Set(
                queries.compactMap { query -> String? in
                    guard let sets = writtenSets[query.name], sets.count == 1, let set = sets.first,
                        bulkSets[query.name] == [set], writers[set] == 1
                    else { return nil }
                    return set
                })
            // Queries that fill an empty set may read their pages as rows.
            let rowQueries = Set(queries.filter { !(bulkSets[$0.name] ?? []).isEmpty }.map(\.name))
            // Pages are committed in groups (`firstOpenEntitiesPerCommit`): a backend's small
            // pages (1,000 is common) cost no more commits than large ones.
            let perCommit = max(1, provider.parameters.firstOpenEntitiesPerCommit)
            var grouped = 0
            // Each group's pages written against the pages the file grew by (see `thrashing`).
            var groupStart = (written: 0, fileSize: 0)
            var groupSets: Set<String> = []
            var deferredIndexes: [String] = []
            var deferredSets: Set<String> = []
            let read = try await fetchDefiningQueries(
                queries.map { ($0, nil) }, model: model, rowQueries: rowQueries, keepingBodies: false, on: provider
            ) { page in
                let created = try await ready()
                provider.report(progress, .buildingEntityStore)
                if grouped == 0 {
                    // Counted only while some set may still have its indexes deferred.
                    if !deferrable.isSubset(of: deferredSets) { groupStart = try await created.writerPageCounts() }
                    try await created.beginWriteGroup()
                }
                _ = try await self.applyFirstFill(
                    page, to: created, bulkSets: bulkSets[page.name] ?? [], allQueries: provider.definingQueries)
                try await self.fetchStreams(of: page, staged: false, store: created, on: provider)
                grouped += max(1, page.flat?.entityCount ?? page.entities.count)
                if deferrable.contains(page.entitySet) { groupSets.insert(page.entitySet) }
                if grouped >= perCommit {
                    try await created.commitWriteGroup()
                    grouped = 0
                    // Judged again after each group: a later query's sets may thrash too.
                    let undecided = groupSets.subtracting(deferredSets)
                    if !undecided.isEmpty,
                        Self.thrashing(
                            from: groupStart, to: try await created.writerPageCounts(),
                            limits: provider.parameters.firstOpenIndexDeferral)
                    {
                        let dropped = try await created.dropLookupIndexes(ofEntitySets: undecided)
                        deferredSets.formUnion(undecided)
                        deferredIndexes += dropped
                        if !dropped.isEmpty {
                            provider.logger.debug("First open: the lookup indexes are built after the fill: \(dropped)")
                        }
                    }
                    groupSets = []
                }
            }
            let created = try await ready()
            try await created.commitWriteGroup()
            // Built in one pass over each table, sorted in memory.
            if !deferredIndexes.isEmpty { try await created.createLookupIndexes() }
            provider.report(progress, .analyzingReceivedData)
            let pages = read.reduce(0) { $0 + $1.pages }
            let entities = read.reduce(0) { $0 + $1.received }
            try await provider.logEvent(
                in: created, type: "Open",
                details: "\(queries.count) defining queries, \(pages) pages, \(entities) entities stored"
                    + (deferredIndexes.isEmpty
                        ? "" : "; lookup indexes built after the fill: \(deferredIndexes.joined(separator: ", "))"))
            // Back to WAL mode and durable commits: the commit that removes the mark makes
            // every page before it durable; then the marker file goes.
            try await created.setBulkFill(false)
            try await created.write { writer in try LocalSchema.markFilled(writer) }
            try? FileManager.default.removeItem(atPath: StoreFiles.fillingMarker(path))
            return created
        } catch {
            // The store may still be in the making: wait for it, so that nothing is left behind.
            var created = provider.newStore
            if created == nil { created = try? await creating.value }
            created?.close()
            StoreFiles.remove(path)
            throw error
        }
    }

    /// Whether a group of the first open's pages wrote many more pages than the file grew by
    /// (`start` and `end`: ``Store/writerPageCounts()`` before and after it). Rows are appended
    /// in key order, so the table and its key index grow at their ends, and a lookup index whose
    /// values come in turn (a foreign key of 100 values) gains rows at a few places: the group
    /// writes about 1.5 pages per page the file grew. A foreign key whose values come scattered
    /// over many (10,000 categories) gains rows all over its index; once the index outgrows the
    /// fill's 2 MiB cache, its pages are written out and read back again and again: 14 times
    /// the file's size for 1M rows, and the open 3–4 times as long. Such a fill drops the lookup
    /// indexes of the sets it fills and builds them at its end, in one pass each. Groups that
    /// grow the file by little (updates of stored rows) are not judged.
    static func thrashing(
        from start: (written: Int, fileSize: Int), to end: (written: Int, fileSize: Int),
        limits: (factor: Int, minimumGrowth: Int)
    ) -> Bool {
        let grown = end.fileSize - start.fileSize
        return grown >= limits.minimumGrowth && end.written - start.written > limits.factor * grown
    }

    /// The store a first open is making, once `creating` has made it, with the offline side
    /// tables and the defining queries (set up once).
    private func readyNewStore(
        _ creating: Task<Store, any Error>, queries: [OfflineODataDefiningQuery], root: String,
        on provider: isolated OfflineODataProvider
    ) async throws -> Store {
        if let newStore = provider.newStore { return newStore }
        let store = try await creating.value
        if let newStore = provider.newStore { return newStore }
        provider.newStore = store
        // An open cut short is started again, so the fill writes each page once, without a
        // durable journal; the commit that marks it complete is durable with all of them.
        try await store.setBulkFill(true)
        // Until the last page is in, the store is marked as filling: a later open that finds
        // the mark starts again.
        let instance = provider.clientInstanceID
        try await store.write { writer in
            try LocalSchema.prepareNewStore(writer, serviceRoot: root, queries: queries)
            _ = try LocalSchema.clientInstanceID(writer, proposed: instance, replacing: true)
        }
        return store
    }
}
