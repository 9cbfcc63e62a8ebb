import Foundation
import ODataCore
import OfflineOData
import Testing

/// `releaseMemory()` (an app's answer to a memory warning) empties the store's page caches and
/// leaves the provider working: the same reads, and local writes still queue. V2 and V4.
@Suite(.serialized) struct MemoryReleaseTests {
    static let sets = ["BusinessPartners", "SalesOrders", "Contacts"]

    @Test(arguments: [false, true])
    func releasingMemoryEmptiesTheCachesAndTheProviderGoesOn(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        var before: [[Entity]] = []
        for _ in 0..<2 {
            for set in Self.sets { before.append(try await provider.readEntities(set)) }
        }
        #expect(before.allSatisfy { !$0.isEmpty })
        let full = await provider.storeCacheBytes()
        // More than the pager's own structures and a page per connection (about 5 KB each).
        #expect(full > 64 * 1_024, "\(full)")
        await provider.releaseMemory()
        let released = await provider.storeCacheBytes()
        #expect(released < full / 2, "\(released) of \(full)")
        var after: [[Entity]] = []
        for _ in 0..<2 {
            for set in Self.sets { after.append(try await provider.readEntities(set)) }
        }
        #expect(after == before)
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('\(string(before[0].first, "PartnerID") ?? "")')",
            body: Array(#"{"CompanyName":"After the release"}"#.utf8))
        #expect(try await provider.readEntities("RequestQueue").count == 1)
        #expect(await provider.storeCacheBytes() > released)
        await provider.close()
        #expect(await provider.storeCacheBytes() == 0)
        await provider.releaseMemory()
    }
}
