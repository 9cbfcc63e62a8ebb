import Foundation
import ODataCore
import ODataServer
import Testing
@testable import OfflineOData

/// Issue 20, item 6: cancelling the Swift `Task` that runs `open()`, `upload()` or `download()`
/// ends it with `CancellationError` — not a transport error — and leaves the store and the
/// queue consistent: a later run completes and applies every change once. V2 and V4.
@Suite struct CancellationTests {
    /// Runs `operation` in a task, cancels it after `milliseconds`, and returns how it ended.
    func cancelled(after milliseconds: Int, _ operation: @escaping @Sendable () async throws -> Void) async -> (any Error)? {
        let task = Task { try await operation() }
        try? await Task.sleep(for: .milliseconds(milliseconds))
        task.cancel()
        switch await task.result {
        case .success: return nil
        case .failure(let error): return error
        }
    }

    @Test(arguments: [false, true])
    func cancellingTheFirstOpenLeavesNoStore(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        await fixture.server.service.faults.set([FaultRule(method: "GET", urlContains: "SalesOrders", trickleMilliseconds: 300)])
        let provider = try await fixture.provider(v2: v2)
        let error = await cancelled(after: 400) { try await provider.open() }
        #expect(error is CancellationError, "\(String(describing: error))")
        #expect(!FileManager.default.fileExists(atPath: fixture.parameters().storeFile))
        await fixture.server.service.faults.set([])
        try await provider.open()
        #expect(try await !provider.readEntities("SalesOrders").isEmpty)
    }

    @Test(arguments: [false, true])
    func cancellingAnUploadKeepsWhatWasNotAnsweredAndAppliesEachChangeOnce(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        var parameters = fixture.parameters()
        parameters.maxRequestsPerBatch = 1
        let provider = try await fixture.provider(v2: v2, parameters: parameters)
        try await provider.open()
        let names = (1...4).map { "Cancel\($0)" }
        for name in names {
            _ = try await provider.execute(method: "POST", url: "Contacts", body: Array(#"{"PartnerID":"BP1","FirstName":"\#(name)"}"#.utf8))
        }
        await fixture.server.service.faults.set([FaultRule(urlContains: "$batch", trickleMilliseconds: 150)])
        let error = await cancelled(after: 500) { try await provider.upload() }
        #expect(error is CancellationError, "\(String(describing: error))")
        #expect(try await !provider.isRequestQueueEmpty, "the cancel came before the last batch")
        await fixture.server.service.faults.set([])
        try await provider.upload()
        #expect(try await provider.isRequestQueueEmpty)
        #expect(try await provider.readEntities("ErrorArchive").isEmpty)
        for name in names {
            let stored = try await fixture.backend("Contacts?$filter=FirstName eq '\(name)'")["value"]?.arrayValue ?? []
            #expect(stored.count == 1, "\(name) is on the backend \(stored.count) times")
        }
    }

    @Test(arguments: [false, true])
    func cancellingADownloadLeavesTheStoreAsItWas(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"local"}"#.utf8))
        try await fixture.backendSend("PATCH", "BusinessPartners('BP2')", #"{"Phone":"backend"}"#)
        await fixture.server.service.faults.set([FaultRule(method: "GET", urlContains: "BusinessPartners", trickleMilliseconds: 300)])
        let error = await cancelled(after: 400) { try await provider.download() }
        #expect(error is CancellationError, "\(String(describing: error))")
        // Nothing was applied; the local change is still pending and shown.
        #expect(string(try await provider.readEntities("BusinessPartners('BP2')").first, "Phone") != "backend")
        #expect(string(try await provider.readEntities("BusinessPartners('BP1')").first, "Phone") == "local")
        #expect(try await provider.readEntities("RequestQueue").count == 1)
        await fixture.server.service.faults.set([])
        try await provider.download()
        #expect(string(try await provider.readEntities("BusinessPartners('BP2')").first, "Phone") == "backend")
        #expect(string(try await provider.readEntities("BusinessPartners('BP1')").first, "Phone") == "local")
    }
}

/// Issue 20, item 7: one rule for requests that depend on a failed one, whether they would
/// have shared its `$batch` or not: never sent, archived with 424 naming the failed request,
/// and `requestDidFail` once per ErrorArchive row, in queue order. V2 and V4.
@Suite struct DependentRequestTests {
    @Test(arguments: [(false, 100), (false, 1), (true, 100), (true, 1)])
    func dependantsOfAFailedRequestAreNeverSent(v2: Bool, perBatch: Int) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let recorder = Recorder()
        var parameters = fixture.parameters()
        parameters.maxRequestsPerBatch = perBatch
        let provider = try await fixture.provider(v2: v2, parameters: parameters, delegate: recorder)
        try await provider.open()
        await fixture.server.service.faults.set([FaultRule(method: "POST", urlContains: "BusinessPartners", bodyContains: "BPDEP", status: 400, code: "PartnerRefused",
                                                           message: "No new partners today")])
        _ = try await provider.execute(method: "POST", url: "BusinessPartners", body: Array(#"{"PartnerID":"BPDEP","CompanyName":"Dep"}"#.utf8))
        _ = try await provider.execute(method: "POST", url: "BusinessPartners('BPDEP')/Contacts", body: Array(#"{"FirstName":"Dependant"}"#.utf8))
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('BPDEP')", body: Array(#"{"Phone":"9"}"#.utf8))
        // An independent change in between still goes through.
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"independent"}"#.utf8))
        _ = await fixture.server.service.journal.requests()
        await fixture.server.service.journal.clear()
        try await provider.upload()
        let archive = try await provider.readEntities("ErrorArchive?$orderby=RequestID")
        #expect(archive.map { $0["HTTPStatusCode"] } == [.primitive(.int32(400)), .primitive(.int32(424)), .primitive(.int32(424))])
        let failedID = recorder.failures.first?.requestID ?? -1
        #expect(recorder.failures.map(\.httpStatus) == [400, 424, 424])
        #expect(recorder.failures.map(\.requestID) == recorder.failures.map(\.requestID).sorted())
        #expect(recorder.failures.dropFirst().allSatisfy { $0.message == "Not sent: it depends on request \(failedID), which failed" })
        let sent = await fixture.server.service.journal.requests().joined(separator: "\n")
        #expect(!sent.contains("Dependant") && !sent.contains("\"Phone\":\"9\""), "\(sent)")
        #expect(try await fixture.backend("Contacts?$filter=FirstName eq 'Dependant'")["value"]?.arrayValue?.isEmpty == true)
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "independent")
    }

    /// Requests that only bind to one entity neither wait for each other nor fail together:
    /// three orders of one partner go in one batch, and a refused one leaves the others.
    @Test(arguments: [false, true])
    func requestsBindingOneEntityShareABatchAndDoNotFailTogether(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let recorder = Recorder()
        let provider = try await fixture.provider(v2: v2, delegate: recorder)
        try await provider.open()
        await fixture.server.service.faults.set([FaultRule(method: "POST", urlContains: "SalesOrders", bodyContains: "SOB2", status: 400,
                                                           code: "OrderRefused", message: "Not this one")])
        for id in ["SOB1", "SOB2", "SOB3"] {
            let bind = v2 ? #""Partner":{"__metadata":{"uri":"BusinessPartners('BP1')"}}"# : #""Partner@odata.bind":"BusinessPartners('BP1')""#
            _ = try await provider.execute(method: "POST", url: "SalesOrders",
                                           body: Array(#"{"OrderID":"\#(id)","Currency":"EUR",\#(bind)}"#.utf8))
        }
        await fixture.server.service.journal.clear()
        try await provider.upload()
        let sent = await fixture.server.service.journal.requests()
        #expect(sent.count == 1, "one $batch for the three creates: \(sent)")
        #expect(recorder.failures.map(\.httpStatus) == [400])
        #expect(try await fixture.backend("SalesOrders('SOB1')")["PartnerID"]?.stringValue == "BP1")
        #expect(try await fixture.backend("SalesOrders('SOB3')")["PartnerID"]?.stringValue == "BP1")
    }
}
