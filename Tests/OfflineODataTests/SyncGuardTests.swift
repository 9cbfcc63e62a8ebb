import Foundation
import ODataCore
import ODataServer
import Testing
@testable import OfflineOData

/// Issue 34, items 22–25: behaviours of the sync engine that a one-line change could break with
/// the rest of the suite still passing (each has a mutant in scripts/mutants.txt). V4 and V2.
@Suite struct SyncGuardTests {
    static let lostBatch = FaultRule(method: "POST", urlContains: "$batch", dropAfterCommit: true, times: 1)

    static func phone(_ fixture: Fixture, _ partner: String) async throws -> String? {
        try await fixture.backend("BusinessPartners('\(partner)')")["Phone"]?.stringValue
    }

    /// 22: a request already sent (its answer lost) is never merged with a later change: the
    /// backend answers the repeat with the first answer, so a merged change would be lost.
    @Test(arguments: [false, true])
    func aSentRequestTakesNoLaterChange(v2: Bool) async throws {
        let fixture = try await Fixture.start(faults: [Self.lostBatch])
        defer { Task { await fixture.stop() } }
        var parameters = fixture.parameters()
        parameters.enableRequestQueueOptimization = true
        let provider = try await fixture.provider(v2: v2, parameters: parameters)
        try await provider.open()
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"first"}"#.utf8))
        await #expect(throws: (any Error).self) { try await provider.upload() }
        #expect(try await Self.phone(fixture, "BP1") == "first", "the lost batch was applied")
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"second"}"#.utf8))
        try await provider.upload()
        #expect(try await Self.phone(fixture, "BP1") == "second")
        #expect(count(try await provider.read("RequestQueue")) == 0)
        #expect(count(try await provider.read("ErrorArchive")) == 0)
    }

    /// 23: a DELETE resent after its answer was lost is answered with the backend's first
    /// answer: not archived as a failure, and the entity stays deleted.
    @Test(arguments: [false, true])
    func aResentDeleteIsNotAFailure(v2: Bool) async throws {
        let fixture = try await Fixture.start(faults: [Self.lostBatch])
        defer { Task { await fixture.stop() } }
        let contacts = try await fixture.backend("Contacts?$filter=PartnerID eq 'BP2'&$orderby=ContactID")
        let id = try #require(contacts["value"]?.arrayValue?.first?["ContactID"]).serialized
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        _ = try await provider.execute(method: "DELETE", url: v2 ? "Contacts(\(id)L)" : "Contacts(\(id))")
        await #expect(throws: (any Error).self) { try await provider.upload() }
        try await provider.upload()
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        #expect(count(try await provider.read("RequestQueue")) == 0)
        #expect(try await fixture.backend("Contacts?$filter=ContactID eq \(id)")["value"]?.arrayValue?.isEmpty == true)
    }

    /// 24: a full read (a backend without delta links) never deletes a local row with pending
    /// changes, even when the backend no longer has it: the change goes up and is archived.
    @Test(arguments: [false, true])
    func aFullReadKeepsRowsWithPendingChanges(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let contacts = try await fixture.backend("Contacts?$filter=PartnerID eq 'BP0'&$orderby=ContactID")
        let id = try #require(contacts["value"]?.arrayValue?.first?["ContactID"]).serialized
        let other = try #require(contacts["value"]?.arrayValue?.last?["ContactID"]).serialized
        let key = v2 ? "Contacts(\(id)L)" : "Contacts(\(id))"
        let otherKey = v2 ? "Contacts(\(other)L)" : "Contacts(\(other))"
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        _ = try await provider.execute(method: "PATCH", url: key, body: Array(#"{"FirstName":"Mine"}"#.utf8))
        // Another user deletes both contacts on the backend.
        #expect(try await fixture.backendSend("DELETE", "Contacts(\(id))", "") < 300)
        #expect(try await fixture.backendSend("DELETE", "Contacts(\(other))", "") < 300)
        try await EngineGuardTests.downloadInFull(provider)
        // The one without local changes goes; the changed one stays until its upload says.
        #expect(try await provider.readEntities(otherKey).isEmpty)
        let kept = try await provider.readEntities(key)
        #expect(kept.first?.string("FirstName") == "Mine")
        try await provider.upload()
        #expect(count(try await provider.read("ErrorArchive")) == 1)
    }

    /// 25: one refused request of a change set archives every request of the change set; none
    /// stays queued to go out alone in the next upload.
    @Test(arguments: [false, true])
    func aRefusedChangeSetIsArchivedWhole(v2: Bool) async throws {
        let fixture = try await Fixture.start(faults: [
            FaultRule(urlContains: "BusinessPartners('BP2')", bodyContains: "REFUSED", status: 400, code: "Refused", message: "No")
        ])
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        let together = OfflineODataRequestOptions(transactionID: "t1")
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"together"}"#.utf8), options: together)
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"REFUSED"}"#.utf8), options: together)
        try await provider.upload()
        let archived = try await provider.readEntities("ErrorArchive?$orderby=RequestID")
        #expect(archived.count == 2)
        #expect(archived.compactMap { $0.string("RequestURL") } == ["BusinessPartners('BP1')", "BusinessPartners('BP2')"])
        // Nothing of the change set reached the backend, and nothing goes out later.
        #expect(try await Self.phone(fixture, "BP1") != "together")
        await fixture.server.service.journal.clear()
        try await provider.upload()
        #expect(try await Self.phone(fixture, "BP1") != "together")
        let sent = await fixture.server.service.journal.requests().filter { $0.contains("$batch") }
        #expect(sent.isEmpty, "\(sent)")
    }

    /// A local delete of an entity the backend then deletes too (the delta says so): undoing
    /// the local delete does not bring back what the backend no longer has.
    @Test(arguments: [false, true])
    func undoingALocalDeleteDoesNotReviveWhatTheBackendDeleted(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let contacts = try await fixture.backend("Contacts?$filter=PartnerID eq 'BP1'&$orderby=ContactID")
        let id = try #require(contacts["value"]?.arrayValue?.first?["ContactID"]).serialized
        let key = v2 ? "Contacts(\(id)L)" : "Contacts(\(id))"
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        _ = try await provider.execute(method: "DELETE", url: key)
        #expect(try await fixture.backendSend("DELETE", "Contacts(\(id))", "") < 300)
        try await provider.download()
        try await provider.undoPendingChanges(forURL: key)
        #expect(try await provider.readEntities(key).isEmpty, "the backend deleted it")
        #expect(count(try await provider.read("RequestQueue")) == 0)
    }
    /// 27: a deep insert and a later delete of its parent cancel out only when the delete takes
    /// the nested entities too (an `OnDelete` cascade). Contacts do not go with their partner:
    /// both requests go up and the backend keeps the contacts, as the store does. Items go with
    /// their order: nothing goes up. With the optimizer and with undo of local creation.
    @Test(arguments: [(false, false), (true, false), (false, true), (true, true)])
    func aDeepInsertGoesWithADeleteOnlyWhenTheDeleteTakesItsNestedEntities(v2: Bool, undo: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        var parameters = fixture.parameters()
        if undo { parameters.enableUndoLocalCreation = true } else { parameters.enableRequestQueueOptimization = true }
        let provider = try await fixture.provider(v2: v2, parameters: parameters)
        try await provider.open()
        let partner = #"{"PartnerID":"BPDI","CompanyName":"Deep","Contacts":[{"PartnerID":"BPDI","FirstName":"Ada"},"#
            + #"{"PartnerID":"BPDI","FirstName":"Bob"}]}"#
        _ = try await provider.execute(method: "POST", url: "BusinessPartners", body: Array(partner.utf8))
        _ = try await provider.execute(method: "DELETE", url: "BusinessPartners('BPDI')")
        let order = #"{"OrderID":"SODI","PartnerID":"BP0","Items":[{"OrderID":"SODI","ItemPosition":10,"Quantity":1}]}"#
        _ = try await provider.execute(method: "POST", url: "SalesOrders", body: Array(order.utf8))
        _ = try await provider.execute(method: "DELETE", url: "SalesOrders('SODI')")
        #expect(try await provider.readEntities("Contacts?$filter=PartnerID eq 'BPDI'").count == 2)
        #expect(try await provider.readEntities("SalesOrderItems?$filter=OrderID eq 'SODI'").isEmpty)
        await fixture.server.service.journal.clear()
        try await provider.upload()
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        #expect(count(try await provider.read("RequestQueue")) == 0)
        let received = await fixture.server.service.journal.requests().joined(separator: "\n")
        #expect(received.contains("POST BusinessPartners") && received.contains("DELETE BusinessPartners('BPDI')"))
        #expect(!received.contains("SODI"), "the order and its items cancel out")
        let contacts = try await fixture.backend("Contacts?$filter=PartnerID eq 'BPDI'&$orderby=FirstName")
        #expect((contacts["value"]?.arrayValue ?? []).compactMap { $0["FirstName"]?.stringValue } == ["Ada", "Bob"])
        #expect(try await fixture.backend("BusinessPartners?$filter=PartnerID eq 'BPDI'")["value"]?.arrayValue?.isEmpty == true)
        let after = try await provider.readEntities("Contacts?$filter=PartnerID eq 'BPDI'&$orderby=FirstName")
        #expect(after.compactMap { $0.string("FirstName") } == ["Ada", "Bob"])
    }
}
