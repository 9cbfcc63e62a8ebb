import Foundation
import ODataCore
import ODataStore
import Testing
@testable import OfflineOData

/// Applying downloaded pages to a real store, without a server (issue 21): upserts, the local
/// diff of a full read, delta removals, and local changes kept through all of them.
@Suite struct DownloadApplyTests {
    static let all = [OfflineODataDefiningQuery(name: "Customers", query: "Customers")]

    /// A keyed store of the shop model with customers 101, 102 and 103, filled as a first open
    /// fills it (`Downloader.applyFirstFill`).
    static func store(
        _ customers: [(Int64, String)] = [(101, "Downloaded 101"), (102, "Downloaded 102"), (103, "Downloaded 103")],
        queries: [OfflineODataDefiningQuery] = all
    ) async throws -> (Store, URL) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-apply-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let model = try LocalSchema.extend(try MetadataParser().parse(ShopFixture.metadata))
        let store = try await Store.create(
            path: directory.appendingPathComponent("apply.sqlite").path, model: model, key: "apply-key")
        try await store.write { writer in
            try LocalSchema.prepareNewStore(writer, serviceRoot: "http://backend.invalid/", queries: queries)
        }
        let page = FetchedQuery(name: queries[0].name, entitySet: "Customers", entities: entities(customers))
        _ = try await downloader.applyFirstFill(page, to: store, bulkSets: ["Customers"], allQueries: queries)
        try await store.write { writer in try LocalSchema.markFilled(writer) }
        return (store, directory)
    }

    static let downloader = Downloader(
        serviceRoot: "http://backend.invalid/",
        progress: ProgressReporter(operation: .download, plan: Downloader.plan, language: "en"))

    static func entities(_ customers: [(Int64, String)]) -> [Entity] {
        customers.map {
            Entity(properties: [
                NamedValue(name: "CustomerID", value: .primitive(.int64($0.0))),
                NamedValue(name: "Name", value: .primitive(.string($0.1))),
            ])
        }
    }

    /// One staged page of a defining query, as the backend sends it: a V4 JSON collection,
    /// with `@removed` entries for a delta's deletions.
    struct Page {
        var query: String
        var customers: [(Int64, String)] = []
        var removed: [Int64] = []
        var isDelta = false

        var body: String {
            let rows =
                customers.map { #"{"CustomerID":\#($0.0),"Name":"\#($0.1)"}"# }
                + removed.map { #"{"@removed":{"reason":"deleted"},"@id":"Customers(\#($0))"}"# }
            return #"{"value":["# + rows.joined(separator: ",") + "]}"
        }
    }

    /// Stages pages and applies them as a download does (`Downloader.applyStaged`: one
    /// transaction, the local diff at the end).
    static func download(
        _ pages: [Page], to store: Store, queries: [OfflineODataDefiningQuery] = all
    ) async throws -> String {
        try await store.write { writer in
            for page in pages {
                _ = try writer.connection.execute(
                    "INSERT INTO oo_staging (query, entity_set, is_delta, body) VALUES (?, ?, ?, ?)",
                    [
                        .text(page.query), .text("Customers"), .integer(page.isDelta ? 1 : 0),
                        .blob(Array(page.body.utf8)),
                    ])
            }
        }
        let summary = try await downloader.applyStaged(to: store, allQueries: queries)
        let left = try await store.read { reader in try reader.connection.query("SELECT count(*) FROM oo_staging") }
        #expect(left.first?.first == .integer(0), "staged pages are removed once applied")
        return summary
    }

    /// A local change, as the provider makes it.
    static func change(_ method: String, _ url: String, _ body: String = "", in store: Store) async throws {
        let model = store.model
        try await store.write { writer in
            let change = try LocalChange.makeChange(
                method: method, url: url, headers: [:], body: Array(body.utf8),
                options: OfflineODataRequestOptions(), model: model, serviceRoot: "", keyMap: [:])
            try LocalExecutor(writer, model: model, serviceRoot: "").apply(change, repeatable: false)
        }
    }

    static func undo(_ reference: String, in store: Store) async throws {
        let model = store.model
        try await store.write { writer in try RequestQueue(writer, model: model, serviceRoot: "").undo([reference]) }
    }

    static func names(_ store: Store) async throws -> [Int64: String] {
        guard case .collection(let rows) = try await store.query("Customers") else { return [:] }
        var names: [Int64: String] = [:]
        for row in rows.entities {
            if case .primitive(.int64(let id))? = row["CustomerID"], case .primitive(.string(let name))? = row["Name"] {
                names[id] = name
            }
        }
        return names
    }

    /// Pages held in memory are applied before the staged ones, in the order they came (a
    /// download holds only pages before its first staged one): an entity a held page changes
    /// and a staged page changes or removes again ends as the staged page says; a held page's
    /// removal applies too.
    @Test func heldPagesApplyBeforeStagedOnes() async throws {
        let (store, directory) = try await Self.store()
        defer { store.close(); try? FileManager.default.removeItem(at: directory) }
        let model = store.model
        func held(_ page: Page) throws -> FetchedQuery {
            let rows = try #require(
                try V4JSONReader(model: model).readFlatCollection(Array(page.body.utf8), entityType: "Shop.Customer"))
            var chunk = FetchedQuery(name: page.query, entitySet: "Customers")
            chunk.flat = rows
            chunk.isDelta = page.isDelta
            return chunk
        }
        let first = Page(
            query: "Customers", customers: [(101, "Held 101"), (102, "Held 102"), (104, "Held 104")], isDelta: true)
        let removal = try model.readCollection(
            Array(Page(query: "Customers", removed: [103], isDelta: true).body.utf8), entityType: "Shop.Customer")
        var removing = FetchedQuery(name: "Customers", entitySet: "Customers", deleted: removal.deleted)
        removing.isDelta = true
        let later = Page(query: "Customers", customers: [(101, "Staged 101")], removed: [104], isDelta: true)
        try await store.write { writer in
            _ = try writer.connection.execute(
                "INSERT INTO oo_staging (query, entity_set, is_delta, body) VALUES (?, ?, 1, ?)",
                [.text(later.query), .text("Customers"), .blob(Array(later.body.utf8))])
        }
        _ = try await Self.downloader.applyStaged(to: store, allQueries: Self.all, held: [try held(first), removing])
        #expect(try await Self.names(store) == [101: "Staged 101", 102: "Held 102"])
        let left = try await store.read { reader in try reader.connection.query("SELECT count(*) FROM oo_staging") }
        #expect(left.first?.first == .integer(0))
    }

    @Test func aFullReadRemovesWhatTheBackendNoLongerHasAndKeepsLocalChanges() async throws {
        let (store, directory) = try await Self.store()
        defer { store.close(); try? FileManager.default.removeItem(at: directory) }
        try await Self.change("PATCH", "Customers(102)", #"{"Name":"Local 102"}"#, in: store)
        let full = Page(query: "Customers", customers: [(101, "Changed 101"), (102, "Backend 102")])
        let summary = try await Self.download([full], to: store)
        #expect(summary == "1 defining queries, 1 entities inserted or updated, 1 deleted")
        #expect(try await Self.names(store) == [101: "Changed 101", 102: "Local 102"])
        // The state an undo goes back to is the backend's new one.
        try await Self.undo("Customers(102)", in: store)
        #expect(try await Self.names(store) == [101: "Changed 101", 102: "Backend 102"])
        // An unchanged entity is not written again.
        let again = try await Self.download([full], to: store)
        #expect(again == "1 defining queries, 0 entities inserted or updated, 0 deleted")
    }

    @Test func aDeltaRemovalLeavesAnEntityWithLocalChanges() async throws {
        let (store, directory) = try await Self.store()
        defer { store.close(); try? FileManager.default.removeItem(at: directory) }
        try await Self.change("PATCH", "Customers(101)", #"{"Name":"Local 101"}"#, in: store)
        let delta = Page(query: "Customers", customers: [(103, "Delta 103")], removed: [101, 102], isDelta: true)
        let summary = try await Self.download([delta], to: store)
        #expect(summary == "1 defining queries, 1 entities inserted or updated, 1 deleted")
        #expect(try await Self.names(store) == [101: "Local 101", 103: "Delta 103"])
        // The backend deleted it: an undo removes it too.
        try await Self.undo("Customers(101)", in: store)
        #expect(try await Self.names(store) == [103: "Delta 103"])
    }

    @Test func aFullReadKeepsRowsThatAQueryReadByDeltaCovers() async throws {
        let low = OfflineODataDefiningQuery(name: "Low", query: "Customers?$filter=CustomerID le 101")
        let high = OfflineODataDefiningQuery(name: "High", query: "Customers?$filter=CustomerID gt 101")
        let (store, directory) = try await Self.store(queries: [low, high])
        defer { store.close(); try? FileManager.default.removeItem(at: directory) }
        let lowPage = Page(query: "Low", customers: [(101, "Downloaded 101")])
        let highDelta = Page(query: "High", isDelta: true)
        _ = try await Self.download([lowPage, highDelta], to: store, queries: [low, high])
        #expect(try await Self.names(store).keys.sorted() == [101, 102, 103])
        // Both read in full: now the diff sees every query and removes what neither returned.
        let highFull = Page(query: "High", customers: [(103, "Downloaded 103")])
        _ = try await Self.download([lowPage, highFull], to: store, queries: [low, high])
        #expect(try await Self.names(store).keys.sorted() == [101, 103])
    }

    /// A download compares pages with the store as they arrive (`Downloader.stage`) and applies
    /// them later; the app may change the store in between. Found by review (issue 22): an
    /// unchanged entity deleted locally meanwhile lost the backend's state kept for its undo,
    /// and one deleted and undone meanwhile was removed by the full read's diff.
    @Test(arguments: [false, true])
    func localChangesWhileAFullReadIsFetchedAreKept(undoBeforeTheApply: Bool) async throws {
        let (store, directory) = try await Self.store()
        defer { store.close(); try? FileManager.default.removeItem(at: directory) }
        let model = store.model
        let start = try await store.write { writer in
            _ = try writer.connection.execute("DELETE FROM oo_staging")
            return try DownloadStart(writer)
        }
        // The backend returns the three customers unchanged.
        let body = Array(
            Page(
                query: "Customers",
                customers: [
                    (101, "Downloaded 101"), (102, "Downloaded 102"),
                    (103, "Downloaded 103"),
                ]
            ).body.utf8)
        var page = FetchedQuery(name: "Customers", entitySet: "Customers")
        page.raw = body
        page.flat = try V4JSONReader(model: model).readFlatCollection(body, entityType: "Shop.Customer")
        #expect(page.flat?.entityCount == 3)
        let fetched = page
        try await store.write { writer in try Downloader.stage(fetched, writer: writer) }
        try await Self.change("DELETE", "Customers(102)", in: store)
        if undoBeforeTheApply { try await Self.undo("Customers(102)", in: store) }
        _ = try await Self.downloader.applyStaged(to: store, allQueries: Self.all, start: start)
        if !undoBeforeTheApply {
            #expect(try await Self.names(store).keys.sorted() == [101, 103])
            try await Self.undo("Customers(102)", in: store)
        }
        #expect(try await Self.names(store) == [101: "Downloaded 101", 102: "Downloaded 102", 103: "Downloaded 103"])
    }

    @Test func anEntityDeletedLocallyStaysDeletedAfterAFullRead() async throws {
        let (store, directory) = try await Self.store()
        defer { store.close(); try? FileManager.default.removeItem(at: directory) }
        try await Self.change("DELETE", "Customers(102)", in: store)
        let full = Page(
            query: "Customers", customers: [(101, "Downloaded 101"), (102, "Backend 102"), (103, "Downloaded 103")])
        _ = try await Self.download([full], to: store)
        #expect(try await Self.names(store).keys.sorted() == [101, 103])
        // The undo brings back the backend's latest state.
        try await Self.undo("Customers(102)", in: store)
        #expect(try await Self.names(store)[102] == "Backend 102")
    }
}

/// Applying upload answers to a real store, without a server (issue 21): `UploadRecorder`
/// with the planner's actions.
@Suite struct UploadRecordTests {
    static func record(
        _ answered: [(SentResult, UploadPlanner.Action)], in store: Store
    ) async throws -> [OfflineODataFailedRequest] {
        let model = store.model
        return try await store.write { writer in
            try UploadRecorder(writer, model: model, serviceRoot: "").record(answered)
        }
    }

    static func queue(_ store: Store) async throws -> [QueuedRequest] {
        try await store.read { reader in try RequestQueue.load(reader.connection, statuses: ["pending", "failed"]) }
    }

    @Test func aCreateTakesOverTheBackendsKeyAndLaterChangesFollowIt() async throws {
        let (store, directory) = try await DownloadApplyTests.store()
        defer {
            store.close()
            try? FileManager.default.removeItem(at: directory)
        }
        try await DownloadApplyTests.change("POST", "Customers", #"{"Name":"New"}"#, in: store)
        try await DownloadApplyTests.change("PATCH", "Customers(-1)", #"{"City":"Lyon"}"#, in: store)
        let queued = try await Self.queue(store)
        #expect(queued.map(\.entityKey) == ["(-1)", "(-1)"])
        var answer = HTTPHeaders()
        answer["ETag"] = "W/\"9\""
        let created = SentResult(
            request: queued[0], status: 201, headers: answer,
            body: Array(#"{"CustomerID":555,"Name":"New","City":null}"#.utf8))
        let failures = try await Self.record([(created, .apply(.created))], in: store)
        #expect(failures.isEmpty)
        // The entity has the backend's key and ETag; its queued change follows it and is shown
        // on top of the backend's answer.
        let names = try await DownloadApplyTests.names(store)
        #expect(names[555] == "New" && names[-1] == nil)
        guard case .entity(let entity?) = try await store.query("Customers(555)") else {
            Issue.record("no entity"); return
        }
        #expect(entity["City"] == .primitive(.string("Lyon")))
        #expect(entity.control.etag == "W/\"9\"")
        let left = try await Self.queue(store)
        #expect(left.map(\.id) == [queued[1].id])
        #expect(left.first?.entityKey == "(555)")
        let keyMap = try await store.read { reader in try RequestQueue.keyMap(reader.connection) }
        #expect(keyMap == ["Customers(-1)": "Customers(555)"])
    }

    /// Issue 22: the key map kept every re-keyed local reference forever. A download now
    /// forgets those no queued request names.
    @Test func aDownloadForgetsTheLocalKeysNoQueuedRequestNeeds() async throws {
        let (store, directory) = try await DownloadApplyTests.store()
        defer {
            store.close()
            try? FileManager.default.removeItem(at: directory)
        }
        try await DownloadApplyTests.change("POST", "Customers", #"{"Name":"New"}"#, in: store)
        try await DownloadApplyTests.change("POST", "Customers", #"{"Name":"Other"}"#, in: store)
        try await DownloadApplyTests.change("PATCH", "Customers(-2)", #"{"City":"Lyon"}"#, in: store)
        let queued = try await Self.queue(store)
        var answers: [(SentResult, UploadPlanner.Action)] = []
        for (request, key) in zip(queued.prefix(2), [555, 556]) {
            answers.append(
                (
                    SentResult(
                        request: request, status: 201, headers: HTTPHeaders(),
                        body: Array(#"{"CustomerID":\#(key),"Name":"x","City":null}"#.utf8)),
                    .apply(.created)
                ))
        }
        _ = try await Self.record(answers, in: store)
        let keyMap = { try await store.read { reader in try RequestQueue.keyMap(reader.connection) } }
        #expect(try await keyMap() == ["Customers(-1)": "Customers(555)", "Customers(-2)": "Customers(556)"])
        let left = try await Self.queue(store)
        #expect(left.map(\.method) == ["PATCH"])
        _ = try await DownloadApplyTests.download(
            [DownloadApplyTests.Page(query: "Customers", isDelta: true)], to: store)
        // The PATCH still queued names -2 (by its URL): that entry stays, the other goes.
        #expect(left.first?.url.contains("Customers(-2)") == true, "\(left.first?.url ?? "")")
        #expect(try await keyMap() == ["Customers(-2)": "Customers(556)"])
        // Once nothing is queued, the next download forgets it too.
        try await store.write { writer in _ = try writer.connection.execute("DELETE FROM oo_queue") }
        _ = try await DownloadApplyTests.download(
            [DownloadApplyTests.Page(query: "Customers", isDelta: true)], to: store)
        #expect(try await keyMap().isEmpty)
    }

    @Test func refusedAndDependantRequestsGoToTheErrorArchive() async throws {
        let (store, directory) = try await DownloadApplyTests.store()
        defer {
            store.close()
            try? FileManager.default.removeItem(at: directory)
        }
        try await DownloadApplyTests.change("PATCH", "Customers(101)", #"{"Name":"Refused"}"#, in: store)
        try await DownloadApplyTests.change("PATCH", "Customers(101)", #"{"City":"Nice"}"#, in: store)
        let queued = try await Self.queue(store)
        let refused = SentResult(
            request: queued[0], status: 400, headers: HTTPHeaders(),
            body: Array(#"{"error":{"code":"NameRefused","message":"Not this name"}}"#.utf8))
        let skipped = SentResult(
            request: queued[1], status: 424, headers: HTTPHeaders(), body: [], dependencyOf: queued[0].id)
        let failures = try await Self.record(
            [(refused, .archiveFailure(status: 400)), (skipped, .archiveDependant(dependsOn: queued[0].id))],
            in: store)
        #expect(failures.map(\.httpStatus) == [400, 424])
        #expect(failures.map(\.code) == ["NameRefused", "DependencyFailed"])
        #expect(failures.last?.message == "Not sent: it depends on request \(queued[0].id), which failed")
        guard case .collection(let archive) = try await store.query("ErrorArchive?$orderby=RequestID") else {
            Issue.record("no archive")
            return
        }
        #expect(
            archive.entities.map { $0["Domain"] } == [
                .primitive(.string("Backend")), .primitive(.string("OfflineOData")),
            ])
        #expect(try await Self.queue(store).allSatisfy(\.failed))
        // The entity keeps its local changes, in error state.
        #expect(try await DownloadApplyTests.names(store)[101] == "Refused")
        guard case .collection(let inError) = try await store.query("Customers?$filter=sap.inErrorState()") else {
            Issue.record("no error-state read")
            return
        }
        #expect(inError.entities.count == 1)
    }
}
