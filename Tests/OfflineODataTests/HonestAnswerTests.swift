import Foundation
import InteropSupport
import ODataCore
import ODataServer
import Testing
@testable import OfflineOData

/// Issue 34, items 17 and 18: what the client says when exactly-once cannot hold, and reading
/// the ErrorArchive as the docs show it.
@Suite struct HonestAnswerTests {
    /// A backend that ignores repeatable requests applies a resend again; the client cannot
    /// prevent that, but says so in its log (V4 and V2).
    @Test(arguments: [false, true])
    func aResendAnsweredWithoutRepeatabilityResultIsLogged(v2: Bool) async throws {
        let fixture = try await Fixture.start(
            faults: [FaultRule(method: "POST", urlContains: "$batch", dropAfterCommit: true, times: 1)],
            configure: { $0.honorsRepeatableRequests = false })
        defer { Task { await fixture.stop() } }
        let records = LogCapture()
        var parameters = fixture.parameters()
        parameters.logger = records.logger(level: .warning)
        let provider = try await fixture.provider(v2: v2, parameters: parameters)
        try await provider.open()
        _ = try await provider.execute(
            method: "POST", url: "Contacts", body: Array(#"{"PartnerID":"BP0","FirstName":"TWICE"}"#.utf8))
        await #expect(throws: (any Error).self) { try await provider.upload() }
        #expect(!records.all.contains { $0.message.contains("without Repeatability-Result") }, "not resent yet")
        try await provider.upload()
        let warnings = records.all.filter { $0.message.contains("answered without Repeatability-Result") }
        #expect(warnings.count == 1, "\(records.all)")
        #expect(warnings.first?.metadata["method"] == "POST")
        // What the warning is about: this backend took the create twice.
        #expect(try await fixture.backend("Contacts?$filter=FirstName eq 'TWICE'")["value"]?.arrayValue?.count == 2)
    }

    /// The same resend against a backend that recognizes repeats: one contact, no warning.
    @Test func aRecognizedResendIsNotLogged() async throws {
        let fixture = try await Fixture.start(
            faults: [FaultRule(method: "POST", urlContains: "$batch", dropAfterCommit: true, times: 1)])
        defer { Task { await fixture.stop() } }
        let records = LogCapture()
        var parameters = fixture.parameters()
        parameters.logger = records.logger(level: .warning)
        let provider = try await fixture.provider(parameters: parameters)
        try await provider.open()
        _ = try await provider.execute(
            method: "POST", url: "Contacts", body: Array(#"{"PartnerID":"BP0","FirstName":"ONCE"}"#.utf8))
        await #expect(throws: (any Error).self) { try await provider.upload() }
        try await provider.upload()
        #expect(!records.all.contains { $0.message.contains("Repeatability-Result") }, "\(records.all)")
        #expect(try await fixture.backend("Contacts?$filter=FirstName eq 'ONCE'")["value"]?.arrayValue?.count == 1)
    }

    /// An ErrorArchive row's ID goes into `ErrorArchive(<id>)` through the typed accessor, and
    /// the result prints readably (V4 and V2).
    @Test(arguments: [false, true])
    func anErrorArchiveIDIsReadWithoutPatternMatching(v2: Bool) async throws {
        let fixture = try await Fixture.start(faults: [
            FaultRule(urlContains: "BusinessPartners('BP1')", bodyContains: "Phone", status: 400, code: "Refused", message: "No")
        ])
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"1"}"#.utf8))
        try await provider.upload()
        let failure = try #require(try await provider.readEntities("ErrorArchive").first)
        let id = try #require(failure.int64("RequestID"))
        #expect(failure.int64("HTTPStatusCode") == 400)
        #expect(failure.string("Code") == "Refused")
        let one = try await provider.read("ErrorArchive(\(id))")
        #expect(one.entities.count == 1 && one.entities.first?.int64("RequestID") == id)
        #expect(one.description.contains("RequestID: \(id)"), "\(one)")
        #expect(try await provider.read("ErrorArchive").description.hasPrefix("1 entity:"))
    }

    /// Item 16: messages that say what to do.
    @Test(arguments: [false, true])
    func aBatchRefusedAsUnknownNamesNoBatch(v2: Bool) async throws {
        let fixture = try await Fixture.start(faults: [FaultRule(method: "POST", urlContains: "$batch", status: 404)])
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"2"}"#.utf8))
        do {
            try await provider.upload()
            Issue.record("the upload must fail")
        } catch let error as OfflineODataError {
            #expect(error.message.contains("backendSupportsBatch = false (oodata: --no-batch)"), "\(error)")
        }
        #expect(count(try await provider.read("RequestQueue")) == 1)
    }

    /// A next link to another host gets no credentials; its 401 says so.
    @Test func aFourOhOneOnAnotherHostSaysCredentialsStayHome() async throws {
        let fixture = try await Fixture.start { $0.requiredCredentials = .bearer(["token"]) }
        defer { Task { await fixture.stop() } }
        // 127.0.0.1 and localhost are two origins: the second page is "on another host".
        let elsewhere = fixture.server.v4Root.absoluteString.replacingOccurrences(of: "127.0.0.1", with: "localhost")
        await fixture.server.service.faults.set([
            FaultRule(method: "GET", urlContains: "Contacts", times: 1,
                      answer: #"{"value":[],"@odata.nextLink":"\#(elsewhere)Contacts?$skiptoken=2"}"#)
        ])
        var parameters = fixture.parameters()
        parameters.authenticator = ClosureAuthenticator { _, _ in .bearer("token") }
        let provider = try await fixture.provider(parameters: parameters, queries: PagingGuardTests.contactsOnly)
        do {
            try await provider.open()
            Issue.record("the open must fail")
        } catch let error as OfflineODataError {
            #expect(error.code == .unauthorized, "\(error)")
            #expect(error.message.contains("credentials, cookies and CSRF tokens are never sent across hosts"), "\(error)")
        }
    }

    /// `sendStore` never sends the store under the app's own key.
    @Test func theStoresOwnKeyIsNoSupportKey() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        do {
            try await provider.sendStore(to: fixture.server.v4Root.absoluteString + "support", supportKey: "offline-key")
            Issue.record("the own key must be refused")
        } catch let error as OfflineODataError {
            #expect(error.message.contains("The support key is the store's own key"), "\(error)")
        }
    }

    /// A first open stopped before the store was filled: "open it again", not "damaged".
    @Test func aStoppedFirstOpenSaysOpenItAgain() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let parameters = fixture.parameters()
        let path = parameters.storeFile
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: path, contents: Data()))
        #expect(FileManager.default.createFile(atPath: path + "-filling", contents: Data("3".utf8)))
        do {
            _ = try await OfflineODataProvider.storedSummary(parameters: parameters)
            Issue.record("a stopped first open must be reported")
        } catch let error as OfflineODataError {
            #expect(error.message.contains("was stopped before the store was filled; open it again"), "\(error)")
        }
        // And an open with the defining queries makes it whole.
        let provider = try await fixture.provider()
        try await provider.open()
        #expect(count(try await provider.read("BusinessPartners")) == 3)
    }
}
