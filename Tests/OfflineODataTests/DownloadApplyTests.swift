import Foundation
import ODataCore
import ODataStore
import Testing
@testable import OfflineOData

/// Applying downloaded pages to a real store, without a server (issue 21): upserts, the local
/// diff of a full read, delta removals, and local changes kept through all of them.
@Suite struct DownloadApplyTests {
    static let all = [OfflineODataDefiningQuery(name: "Customers", query: "Customers")]

    /// A keyed store of the shop model with customers 101, 102 and 103 as a first open leaves it.
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
        let page = FetchedQuery(name: queries[0].name, entitySet: "Customers", entities: entities(customers))
        try await store.write { writer in
            try LocalSchema.prepareNewStore(writer, serviceRoot: "http://backend.invalid/", queries: queries)
            var applier = PageApplier(
                model: model, root: "", allQueries: queries, bulkSets: ["Customers"], firstFill: true)
            try applier.apply(page, writer: writer)
            _ = try applier.finish(writer: writer)
            try LocalSchema.markFilled(writer)
        }
        return (store, directory)
    }

    static func entities(_ customers: [(Int64, String)]) -> [Entity] {
        customers.map {
            Entity(properties: [
                NamedValue(name: "CustomerID", value: .primitive(.int64($0.0))),
                NamedValue(name: "Name", value: .primitive(.string($0.1))),
            ])
        }
    }

    /// Applies pages as a download does (one transaction, the local diff at the end).
    static func download(
        _ pages: [FetchedQuery], to store: Store, queries: [OfflineODataDefiningQuery] = all
    ) async throws -> String {
        let model = store.model
        return try await store.write { writer in
            var applier = PageApplier(model: model, root: "", allQueries: queries, bulkSets: [], firstFill: false)
            applier.locallyChanged = try RequestQueue.locallyChanged(writer.connection)
            try writer.clearFlag("_upserted")
            for page in pages { try applier.apply(page, writer: writer) }
            return try applier.finish(writer: writer)
        }
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

    @Test func aFullReadRemovesWhatTheBackendNoLongerHasAndKeepsLocalChanges() async throws {
        let (store, directory) = try await Self.store()
        defer { store.close(); try? FileManager.default.removeItem(at: directory) }
        try await Self.change("PATCH", "Customers(102)", #"{"Name":"Local 102"}"#, in: store)
        let full = FetchedQuery(
            name: "Customers", entitySet: "Customers",
            entities: Self.entities([(101, "Changed 101"), (102, "Backend 102")]))
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
        var delta = FetchedQuery(
            name: "Customers", entitySet: "Customers", entities: Self.entities([(103, "Delta 103")]),
            deleted: [DeletedEntity(id: "Customers(101)"), DeletedEntity(id: "Customers(102)")])
        delta.isDelta = true
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
        let lowPage = FetchedQuery(
            name: "Low", entitySet: "Customers", entities: Self.entities([(101, "Downloaded 101")]))
        var highDelta = FetchedQuery(name: "High", entitySet: "Customers")
        highDelta.isDelta = true
        _ = try await Self.download([lowPage, highDelta], to: store, queries: [low, high])
        #expect(try await Self.names(store).keys.sorted() == [101, 102, 103])
        // Both read in full: now the diff sees every query and removes what neither returned.
        let highFull = FetchedQuery(
            name: "High", entitySet: "Customers", entities: Self.entities([(103, "Downloaded 103")]))
        _ = try await Self.download([lowPage, highFull], to: store, queries: [low, high])
        #expect(try await Self.names(store).keys.sorted() == [101, 103])
    }

    @Test func anEntityDeletedLocallyStaysDeletedAfterAFullRead() async throws {
        let (store, directory) = try await Self.store()
        defer { store.close(); try? FileManager.default.removeItem(at: directory) }
        try await Self.change("DELETE", "Customers(102)", in: store)
        let full = FetchedQuery(
            name: "Customers", entitySet: "Customers",
            entities: Self.entities([(101, "Downloaded 101"), (102, "Backend 102"), (103, "Downloaded 103")]))
        _ = try await Self.download([full], to: store)
        #expect(try await Self.names(store).keys.sorted() == [101, 103])
        // The undo brings back the backend's latest state.
        try await Self.undo("Customers(102)", in: store)
        #expect(try await Self.names(store)[102] == "Backend 102")
    }
}
