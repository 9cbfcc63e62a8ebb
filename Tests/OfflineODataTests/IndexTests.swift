import Foundation
import ODataCore
import Testing

@testable import ODataStore
@testable import OfflineOData

/// Indexes for local queries (issue 22): declared per entity set in the parameters, made for
/// the defining queries' `$orderby` and `$filter`, changed on reopen, and used by the plan.
@Suite struct IndexTests {
    static let queries = [
        OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners"),
        OfflineODataDefiningQuery(
            name: "Orders", query: "SalesOrders?$filter=Currency eq 'EUR' and GrossAmount gt 10&$orderby=OrderDate desc"
        ),
    ]

    /// The names of the store's indexes an application or a defining query asked for.
    static func indexNames(_ parameters: OfflineODataParameters) async throws -> Set<String> {
        let store = try await Store.open(path: parameters.storeFile, key: parameters.storeEncryptionKey)
        defer { store.close() }
        let rows = try await store.read { reader in
            try reader.connection.query("SELECT name FROM sqlite_master WHERE type = 'index'")
        }
        return Set(
            rows.compactMap { row -> String? in
                if case .text(let name) = row[0], name.contains("/$index") { return name }
                return nil
            })
    }

    /// The query plan of every statement a local read runs.
    static func plan(_ url: String, _ parameters: OfflineODataParameters) async throws -> String {
        let store = try await Store.open(path: parameters.storeFile, key: parameters.storeEncryptionKey)
        defer { store.close() }
        let (_, statements) = try await store.queryTracingSQL(url)
        var details: [String] = []
        for statement in statements {
            // The plan does not depend on the values: every parameter is bound to NULL.
            let parameters = [DatabaseValue](repeating: .null, count: statement.filter { $0 == "?" }.count)
            let rows = try await store.read { reader in
                try reader.connection.query("EXPLAIN QUERY PLAN " + statement, parameters)
            }
            details += rows.compactMap { row in
                if case .text(let detail)? = row.last { return detail }
                return nil
            }
        }
        return details.joined(separator: "\n")
    }

    @Test(arguments: [false, true])
    func declaredAndDefiningQueryIndexesServeLocalQueries(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        var parameters = fixture.parameters()
        parameters.indexes = ["BusinessPartners": [["CompanyName"]], "SalesOrders": [["PartnerID", "OrderDate"]]]
        let provider = try await fixture.provider(v2: v2, parameters: parameters, queries: Self.queries)
        try await provider.open()
        await provider.close()
        #expect(
            try await Self.indexNames(parameters) == [
                "es_BusinessPartners/$index/CompanyName", "es_SalesOrders/$index/PartnerID,OrderDate",
                "es_SalesOrders/$index/OrderDate", "es_SalesOrders/$index/Currency,GrossAmount",
            ])
        let byName = try await Self.plan(
            "BusinessPartners?$filter=CompanyName eq 'Partner 1'&$orderby=CompanyName&$top=5", parameters)
        #expect(byName.contains("USING INDEX es_BusinessPartners/$index/CompanyName"), "\(byName)")
        let ordered = try await Self.plan("SalesOrders?$orderby=OrderDate desc&$top=50", parameters)
        #expect(
            ordered.contains("SCAN TABLE es_SalesOrders AS t0 USING INDEX es_SalesOrders/$index/OrderDate"),
            "\(ordered)")
        let byPartner = try await Self.plan(
            "SalesOrders?$filter=PartnerID eq 'BP1'&$orderby=OrderDate&$top=5", parameters)
        #expect(
            byPartner.contains("USING INDEX es_SalesOrders/$index/PartnerID,OrderDate (PartnerID=?)"), "\(byPartner)")
        #expect(!byPartner.contains("TEMP B-TREE FOR ORDER BY"), "\(byPartner)")
        // Without the declaration, the same read scans the table.
        let byEmail = try await Self.plan("BusinessPartners?$filter=Email eq 'x'", parameters)
        #expect(byEmail.contains("SCAN TABLE es_BusinessPartners"), "\(byEmail)")

        // Reopened with other declarations: the old index goes, the new one is built, and the
        // defining queries' own indexes stay.
        parameters.indexes = ["BusinessPartners": [["Email"]]]
        let reopened = try await fixture.provider(v2: v2, parameters: parameters, queries: [])
        try await reopened.open()
        #expect(
            try await Self.indexNames(parameters) == [
                "es_BusinessPartners/$index/Email", "es_SalesOrders/$index/OrderDate",
                "es_SalesOrders/$index/Currency,GrossAmount",
            ])
        // The reads give the same answers with or without indexes.
        let partners = try await reopened.read("BusinessPartners?$filter=Email ne null&$orderby=CompanyName")
        guard case .collection(let rows) = partners else {
            Issue.record("not a collection")
            return
        }
        #expect(rows.entities.count == 3)
        await reopened.close()
        let plan = try await Self.plan("BusinessPartners?$filter=Email eq 'x'", parameters)
        #expect(plan.contains("USING INDEX es_BusinessPartners/$index/Email"), "\(plan)")
        // Without declarations (nil), an open keeps the store's indexes; `[:]` drops the declared ones.
        let before = try await Self.indexNames(parameters)
        parameters.indexes = nil
        let kept = try await fixture.provider(v2: v2, parameters: parameters, queries: [])
        try await kept.open()
        await kept.close()
        #expect(try await Self.indexNames(parameters) == before)
        parameters.indexes = [:]
        let dropped = try await fixture.provider(v2: v2, parameters: parameters, queries: [])
        try await dropped.open()
        await dropped.close()
        #expect(
            try await Self.indexNames(parameters) == [
                "es_SalesOrders/$index/OrderDate", "es_SalesOrders/$index/Currency,GrossAmount",
            ])
    }

    @Test func aDeclarationThatNamesNoPropertyIsRefusedBeforeAnythingIsMade() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        for (indexes, named) in [
            (["BusinessPartners": [["Nope"]]], "Nope"), (["Nowhere": [["Name"]]], "Nowhere"),
            (["BusinessPartners": [["Address"]]], "Address"), (["BusinessPartners": [[]]], "names no property"),
        ] as [([String: [[String]]], String)] {
            var parameters = fixture.parameters()
            parameters.indexes = indexes
            let provider = try await fixture.provider(parameters: parameters)
            do {
                try await provider.open()
                Issue.record("\(indexes) was accepted")
            } catch let error as OfflineODataError {
                #expect(error.code == .invalidParameter)
                #expect(error.message.contains(named), "\(error.message)")
            }
            #expect(!FileManager.default.fileExists(atPath: parameters.storeFile))
            #expect(!FileManager.default.fileExists(atPath: StoreFiles.fillingMarker(parameters.storeFile)))
        }
    }
}
