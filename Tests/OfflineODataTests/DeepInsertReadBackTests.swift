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

    /// Issue 55, item 3: a nested entity whose key contradicts its parent's referential
    /// constraint (an item of order SODEEP that says it belongs to SO1) is refused with 400 by
    /// the server and by a local write, naming both values; nothing is stored. V4 and V2.
    @Test(arguments: [false, true])
    func aNestedEntityThatContradictsItsParentIsRefused(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let body =
            #"{"OrderID":"SODEEP","PartnerID":"BP1","Items":[{"OrderID":"SO1","ItemPosition":77,"Quantity":1}]}"#
        let root = (v2 ? fixture.server.v2Root : fixture.server.v4Root).absoluteString
        var headers = ODataCore.HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers["Accept"] = "application/json"
        let response = try await DefaultTransport.make().send(
            TransportRequest(method: "POST", url: root + "SalesOrders", headers: headers, body: Array(body.utf8)),
            timeout: 10)
        let text = String(decoding: response.body, as: UTF8.self)
        #expect(response.status == 400, "\(text)")
        #expect(text.contains("OrderID") && text.contains("'SO1'") && text.contains("'SODEEP'"), "\(text)")
        #expect(try await fixture.backend("SalesOrders?$filter=OrderID eq 'SODEEP'")["value"]?.arrayValue?.count == 0)
        #expect(
            try await fixture.backend("SalesOrderItems?$filter=ItemPosition eq 77")["value"]?.arrayValue?.count == 0)
        // The same agreeing with its parent is created, under it.
        let agreeing = body.replacingOccurrences(of: #""OrderID":"SO1""#, with: #""OrderID":"SODEEP""#)
        let created = try await DefaultTransport.make().send(
            TransportRequest(method: "POST", url: root + "SalesOrders", headers: headers, body: Array(agreeing.utf8)),
            timeout: 10)
        #expect(created.status == 201, "\(String(decoding: created.body, as: UTF8.self))")
        #expect(
            try await fixture.backend("SalesOrderItems?$filter=OrderID eq 'SODEEP'")["value"]?.arrayValue?.count == 1)

        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        let local = body.replacingOccurrences(of: "SODEEP", with: "SOLOCAL")
        do {
            _ = try await provider.execute(method: "POST", url: "SalesOrders", body: Array(local.utf8))
            Issue.record("the local deep insert was taken")
        } catch let error as OfflineODataError {
            #expect(error.message.contains("'SO1'") && error.message.contains("'SOLOCAL'"), "\(error)")
        }
        #expect(try await provider.readEntities("SalesOrders?$filter=OrderID eq 'SOLOCAL'").isEmpty)
        #expect(try await provider.readEntities("SalesOrders('SO1')/Items?$filter=ItemPosition eq 77").isEmpty)
    }

    /// The `$expand` the read-back asks for, nested paths included.
    @Test func theReadBackExpandsTheCreatedPaths() {
        #expect(Uploader.expandOption(for: ["Contacts/0", "Contacts/1"]) == "Contacts")
        #expect(Uploader.expandOption(for: ["Items/0", "Items/1/Notes/0", "Partner", "Items/0/Notes/1/Tags/0"])
                == "Items($expand=Notes($expand=Tags)),Partner")
        #expect(Uploader.legacyExpandOption(for: ["Items/0", "Items/1/Notes/0", "Partner"]) == "Items,Items/Notes,Partner")
    }
}
