import Foundation
import ODataCore
import ODataServer
import Testing
@testable import OfflineOData

/// Issue 34, item 15: a deep insert whose answer omits the nested entities (a backend that
/// answers 204, or 201 with the parent only) does not leave them with their temporary keys:
/// they are read back with `$expand` and take the backend's keys. V4 and V2.
@Suite struct DeepInsertReadBackTests {
    @Test(arguments: [false, true])
    func nestedEntitiesAreReadBackWhenTheAnswerOmitsThem(v2: Bool) async throws {
        let fixture = try await Fixture.start(faults: [
            FaultRule(method: "POST", urlContains: "BusinessPartners", minimal: true)
        ])
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        let body = #"{"PartnerID":"BPDEEP","CompanyName":"Deep","Contacts":[{"PartnerID":"BPDEEP","FirstName":"Ada","LastName":"One"},"#
            + #"{"PartnerID":"BPDEEP","FirstName":"Bob","LastName":"Two"}]}"#
        _ = try await provider.execute(method: "POST", url: "BusinessPartners", body: Array(body.utf8))
        let local = try await provider.readEntities("Contacts?$filter=PartnerID eq 'BPDEEP'&$orderby=FirstName")
        #expect(local.count == 2)
        let localIDs = local.compactMap { $0.int64("ContactID") }
        try await provider.upload()
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        let backend = try await fixture.backend("Contacts?$filter=PartnerID eq 'BPDEEP'&$orderby=FirstName")
        let backendIDs = (backend["value"]?.arrayValue ?? []).compactMap { $0["ContactID"].flatMap { Int64($0.serialized) } }
        #expect(backendIDs.count == 2)
        // Locally the same two contacts now carry the backend's keys, not the temporary ones.
        let after = try await provider.readEntities("Contacts?$filter=PartnerID eq 'BPDEEP'&$orderby=FirstName")
        #expect(after.compactMap { $0.int64("ContactID") } == backendIDs, "local \(localIDs), backend \(backendIDs)")
        #expect(after.compactMap { $0.string("FirstName") } == ["Ada", "Bob"])
        #expect(Set(after.compactMap { $0.int64("ContactID") }).isDisjoint(with: localIDs))
        // A change made after the upload goes to the backend's entity.
        let key = v2 ? "Contacts(\(backendIDs[0])L)" : "Contacts(\(backendIDs[0]))"
        _ = try await provider.execute(method: "PATCH", url: key, body: Array(#"{"LastName":"Changed"}"#.utf8))
        try await provider.upload()
        #expect(try await fixture.backend("Contacts(\(backendIDs[0]))")["LastName"]?.stringValue == "Changed")
    }

    /// The `$expand` the read-back asks for, nested paths included.
    @Test func theReadBackExpandsTheCreatedPaths() {
        #expect(Uploader.expandOption(for: ["Contacts/0", "Contacts/1"]) == "Contacts")
        #expect(Uploader.expandOption(for: ["Items/0", "Items/1/Notes/0", "Partner", "Items/0/Notes/1/Tags/0"])
                == "Items($expand=Notes($expand=Tags)),Partner")
        #expect(Uploader.legacyExpandOption(for: ["Items/0", "Items/1/Notes/0", "Partner"]) == "Items,Items/Notes,Partner")
    }
}
