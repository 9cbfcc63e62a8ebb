import Foundation
import ODataCore
import ODataServer
import ODataStore
import Testing
@testable import OfflineOData

/// A delta's pages wait in memory, parsed, up to `heldDeltaBytes`; the pages after the first
/// that does not fit are staged in the store. Whichever way its pages wait, a download applies
/// them in the order they came, with the same result. V4 and V2.
@Suite struct DeltaHoldingTests {
    /// Every stored BusinessPartner and Contact, in key order, as JSON.
    static func contents(_ provider: OfflineODataProvider) async throws -> [String] {
        var rows: [String] = []
        for url in ["BusinessPartners?$orderby=PartnerID", "Contacts?$orderby=ContactID"] {
            for entity in try await provider.readEntities(url) {
                rows.append(String(decoding: V4JSONWriter().write(entity), as: UTF8.self))
            }
        }
        return rows
    }

    @Test(arguments: [false, true])
    func aDeltaAppliesTheSameWhetherItsPagesWaitInMemoryOrInTheStore(v2: Bool) async throws {
        let fixture = try await Fixture.start(pageSize: 2)
        defer { Task { await fixture.stop() } }
        let queries = [
            OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners"),
            OfflineODataDefiningQuery(name: "Contacts", query: "Contacts"),
        ]
        // Nothing held; the first pages held and the rest staged (1 of 4 pages in V2, 2 in V4,
        // seen while this test was written); everything held.
        var providers: [OfflineODataProvider] = []
        for (index, budget) in [0, 1_800, 4 << 20].enumerated() {
            var parameters = fixture.parameters()
            parameters.storeName = "held-\(index)"
            parameters.heldDeltaBytes = budget
            let provider = try await fixture.provider(v2: v2, parameters: parameters, queries: queries)
            try await provider.open()
            providers.append(provider)
        }
        let partners = try await providers[0].readEntities("BusinessPartners?$orderby=PartnerID")
        try #require(partners.count >= 3)
        let ids = partners.prefix(3).compactMap { string($0, "PartnerID") }
        // Updates, creates and deletes on the backend: a delta of several pages of 2.
        for (offset, id) in ids.prefix(3).enumerated() {
            #expect(
                try await fixture.backendSend(
                    "PATCH", "BusinessPartners('\(id)')", "{\"CompanyName\":\"Server \(offset)\"}") < 300)
        }
        for n in 1...3 {
            #expect(
                try await fixture.backendSend(
                    "POST", "BusinessPartners", "{\"PartnerID\":\"HELD\(n)\",\"CompanyName\":\"New \(n)\"}") < 300)
        }
        #expect(try await fixture.backendSend("DELETE", "Contacts(1)", "") < 300)
        #expect(try await fixture.backendSend("PATCH", "Contacts(2)", "{\"FirstName\":\"Changed\"}") < 300)
        // And a local edit in each store, which the delta must leave alone.
        for provider in providers {
            _ = try await provider.execute(
                method: "PATCH", url: "BusinessPartners('\(ids[1])')", body: Array("{\"CompanyName\":\"Local\"}".utf8))
        }
        for provider in providers { try await provider.download() }
        let all = try await Self.contents(providers[2])
        for provider in providers.dropLast() {
            #expect(try await Self.contents(provider) == all)
        }
        for provider in providers {
            let named = { (id: String) async throws -> String? in
                string(try await provider.readEntities("BusinessPartners('\(id)')").first, "CompanyName")
            }
            #expect(try await named(ids[0]) == "Server 0")
            #expect(try await named(ids[1]) == "Local")
            #expect(try await named(ids[2]) == "Server 2")
            #expect(try await named("HELD3") == "New 3")
            #expect(try await provider.readEntities("Contacts(1)").isEmpty)
            #expect(string(try await provider.readEntities("Contacts(2)").first, "FirstName") == "Changed")
            #expect(count(try await provider.read("BusinessPartners?$filter=sap.upsertedLastDownload()")) == 5)
        }
        // Nothing is left waiting in the staging table.
        for provider in providers {
            let store = try await provider.openStore()
            let staged = try await store.read { reader in try reader.connection.query("SELECT count(*) FROM oo_staging")
            }
            #expect(staged.first?.first == .integer(0))
        }
    }
}
