import Foundation
import ODataCore
import ODataServer
import Testing
@testable import OfflineOData

/// Issue 19, defects 3 and 6: a value the model does not declare or does not allow is refused —
/// by the offline client before anything is queued, and by the reference server with a 400 — on
/// V2 and V4 alike. Before, `{"CompanyNmae":"x"}` was queued, uploaded and silently dropped.
@Suite struct BadWriteTests {
    /// Bodies the sales model refuses, with the words the refusal must contain.
    static let refused: [(url: String, method: String, body: String, words: String)] = [
        ("BusinessPartners", "POST", #"{"PartnerID":"BPT","CompanyNmae":"x"}"#, "Sales.BusinessPartner has no property CompanyNmae"),
        ("BusinessPartners('BP1')", "PATCH", #"{"Phnoe":"1"}"#, "Sales.BusinessPartner has no property Phnoe"),
        ("BusinessPartners('BP1')", "PATCH", #"{"Address":{"City":"B","Cty":"x"}}"#, "Sales.Address has no property Cty"),
        ("BusinessPartners", "POST", #"{"PartnerID":"BPTOOLONG123"}"#, "MaxLength is 10"),
        ("SalesOrders('SO1')", "PATCH", #"{"GrossAmount":1.234}"#, "Scale is 2"),
        ("SalesOrders('SO1')", "PATCH", #"{"GrossAmount":1234567890123}"#, "Precision 14 and Scale 2 allow 12"),
        ("BusinessPartners", "POST", #"{"PartnerID":"BPX","Contacts":[{"FirstName":"A","Nickname":"B"}]}"#,
         "Sales.Contact has no property Nickname"),
    ]

    @Test(arguments: [false, true])
    func theClientRefusesBeforeQueueing(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        for (url, method, body, words) in Self.refused {
            // V2 writes the same values in its own shapes.
            let sent = v2 ? body.replacingOccurrences(of: "1234567890123", with: "\"1234567890123\"")
                .replacingOccurrences(of: "1.234", with: "\"1.234\"") : body
            do {
                _ = try await provider.execute(method: method, url: url, body: Array(sent.utf8))
                Issue.record("\(method) \(url) \(sent) was accepted")
            } catch let error as OfflineODataError {
                #expect(error.code == .invalidRequest, "\(error)")
                #expect(error.message.contains(words), "\(method) \(url): \(error.message)")
            }
        }
        #expect(try await provider.isRequestQueueEmpty)
        #expect(count(try await provider.read("BusinessPartners?$filter=PartnerID eq 'BPT'")) == 0)
        // A correct body still goes through and reaches the backend with every value.
        _ = try await provider.execute(method: "POST", url: "BusinessPartners",
                                       body: Array(#"{"PartnerID":"BPT","CompanyName":"Typed right"}"#.utf8))
        try await provider.upload()
        #expect(try await fixture.backend("BusinessPartners('BPT')")["CompanyName"]?.stringValue == "Typed right")
    }

    @Test(arguments: [false, true])
    func theServerAnswers400AndStoresNothing(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let root = (v2 ? fixture.server.v2Root : fixture.server.v4Root).absoluteString
        for (url, method, body, words) in Self.refused {
            let sent = v2 ? body.replacingOccurrences(of: "1234567890123", with: "\"1234567890123\"")
                .replacingOccurrences(of: "1.234", with: "\"1.234\"") : body
            var headers = ODataCore.HTTPHeaders()
            headers["Content-Type"] = "application/json"
            headers["If-Match"] = "*"
            let response = try await AsyncHTTPClientTransport().send(
                TransportRequest(method: v2 && method == "PATCH" ? "MERGE" : method, url: root + url, headers: headers,
                                 body: Array(sent.utf8)), timeout: 10)
            #expect(response.status == 400, "\(method) \(url): \(response.status)")
            let error = try ODataError.parse(response.body, httpStatus: response.status)
            #expect(error.message.contains(words), "\(method) \(url): \(error.message)")
        }
        let stored = try await fixture.backend("BusinessPartners?$filter=startswith(PartnerID,'BPT')")
        #expect(stored["value"]?.arrayValue?.isEmpty == true)
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Address"]?["City"]?.stringValue != "B")
    }

    /// Issue 19, defect 9, in local reads: what the store does not implement is refused (it was
    /// answered as if applied); `$expand` with `/$count` and `/$ref` works offline.
    @Test func localReadsRefuseWhatTheyDoNotImplement() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        for (url, named) in [("SalesOrders?$apply=groupby((PartnerID))", "$apply"),
                             ("SalesOrders?$compute=GrossAmount%20mul%202%20as%20D", "$compute"),
                             ("SalesOrders?$expand=Items($compute=Quantity%20as%20Q)", "$compute")] {
            do {
                _ = try await provider.read(url)
                Issue.record("\(url) was answered as if \(named) were applied")
            } catch {
                #expect("\(error)".contains(named) && "\(error)".contains("not supported"), "\(url): \(error)")
            }
        }
        let counted = try #require(try await provider.readEntities("SalesOrders('SO1')?$expand=Items/$count").first)
        let items = try await provider.readEntities("SalesOrderItems?$filter=OrderID eq 'SO1'")
        #expect(counted.navigation("Items")?.count == Int64(items.count))
        #expect(counted.navigation("Items")?.inline == nil)
        let refs = try #require(try await provider.readEntities("SalesOrders('SO1')?$expand=Items/$ref").first)
        guard case .collection(let references)? = refs.navigation("Items")?.inline else {
            Issue.record("no references")
            return
        }
        #expect(references.entities.count == items.count)
        #expect(references.entities.allSatisfy { $0.control.id?.hasPrefix("SalesOrderItems(OrderID='SO1',") == true && $0.properties.isEmpty })
    }

    /// Issue 19, defect 13: nested entities of a deep insert whose key the service generates
    /// need no key on the reference server, V2 and V4 (offline: refused with the reason).
    @Test(arguments: [false, true])
    func deepInsertWithGeneratedNestedKeys(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let root = (v2 ? fixture.server.v2Root : fixture.server.v4Root).absoluteString
        var headers = ODataCore.HTTPHeaders()
        headers["Content-Type"] = "application/json"
        let online = try await AsyncHTTPClientTransport().send(TransportRequest(method: "POST", url: root + "BusinessPartners", headers: headers,
            body: Array(#"{"PartnerID":"BPON","Contacts":[{"FirstName":"On1"},{"FirstName":"On2"}]}"#.utf8)), timeout: 10)
        #expect(online.status == 201, "\(String(decoding: online.body, as: UTF8.self))")
        let onlineContacts = try await fixture.backend("Contacts?$filter=PartnerID eq 'BPON'")["value"]?.arrayValue ?? []
        #expect(onlineContacts.count == 2 && Set(onlineContacts.compactMap { $0["ContactID"] }).count == 2, "\(onlineContacts)")

        // Offline this is not done yet: the nested entities would need local keys that the
        // upload's answer replaces. It is refused with the reason, and nothing is queued.
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        do {
            _ = try await provider.execute(method: "POST", url: "BusinessPartners",
                                           body: Array(#"{"PartnerID":"BPOFF","Contacts":[{"FirstName":"Off1"}]}"#.utf8))
            Issue.record("the offline deep insert without nested keys was accepted")
        } catch let error as OfflineODataError {
            #expect(error.message.contains("ContactID"), "\(error.message)")
        }
        #expect(try await provider.isRequestQueueEmpty)
        #expect(try await provider.readEntities("BusinessPartners?$filter=PartnerID eq 'BPOFF'").isEmpty)
    }
}
