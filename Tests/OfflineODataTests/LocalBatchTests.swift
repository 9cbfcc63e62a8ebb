import Foundation
import ODataCore
import ODataServer
import Testing
@testable import OfflineOData

/// Issue 20, item 8: change sets sent to the offline provider — as a multipart or JSON
/// `$batch` through `execute`, or through the Swift API — are applied all or nothing, resolve
/// Content-ID references, and are uploaded as one change set. V2 and V4.
@Suite struct LocalBatchTests {
    @Test(arguments: [false, true])
    func aChangeSetThroughTheSwiftAPIIsAtomicAndUploadedAsOne(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        let responses = try await provider.changeSet { set in
            let partner = set.add("POST", "BusinessPartners", json: #"{"PartnerID":"BPCS","CompanyName":"Change set"}"#)
            set.add("POST", partner + "/Contacts", json: #"{"FirstName":"Via reference"}"#)
            set.add("PATCH", partner, json: #"{"Phone":"123"}"#)
        }
        #expect(responses.map(\.status) == [201, 201, 204])
        #expect(string(try await provider.readEntities("BusinessPartners('BPCS')").first, "Phone") == "123")
        #expect(try await provider.readEntities("BusinessPartners('BPCS')/Contacts").map { string($0, "FirstName") } == ["Via reference"])
        let queue = try await provider.readEntities("RequestQueue?$orderby=RequestID")
        #expect(queue.count == 3 && Set(queue.compactMap { string($0, "TransactionID") }).count == 1, "\(queue)")
        // One refused request: nothing of the change set is applied or queued.
        do {
            _ = try await provider.changeSet { set in
                set.add("POST", "BusinessPartners", json: #"{"PartnerID":"BPNO","CompanyName":"Never"}"#)
                set.add("PATCH", "BusinessPartners('BPNO')", json: #"{"CompanyNmae":"typo"}"#)
            }
            Issue.record("a change set with a refused request was applied")
        } catch let error as OfflineODataError {
            #expect(error.code == .invalidRequest && error.message.contains("CompanyNmae"), "\(error.message)")
        }
        #expect(try await provider.readEntities("BusinessPartners('BPNO')").isEmpty)
        #expect(try await provider.readEntities("RequestQueue").count == 3)
        // Uploaded as one change set.
        await fixture.server.service.journal.clear()
        try await provider.upload()
        #expect(try await provider.readEntities("ErrorArchive").isEmpty)
        let sent = await fixture.server.service.journal.requests()
        #expect(sent.count == 1 && sent[0].components(separatedBy: "  changeset").count == 2, "\(sent)")
        #expect(try await fixture.backend("BusinessPartners('BPCS')")["Phone"]?.stringValue == "123")
        #expect(try await fixture.backend("Contacts?$filter=FirstName eq 'Via reference'")["value"]?.arrayValue?.count == 1)
    }

    @Test(arguments: [false, true])
    func aMultipartBatchIsAnsweredFromTheStore(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        func operation(_ method: String, _ url: String, _ body: String = "", id: String? = nil) -> BatchOperation {
            var headers = ODataCore.HTTPHeaders()
            if !body.isEmpty { headers["Content-Type"] = "application/json" }
            var partHeaders = ODataCore.HTTPHeaders([("Content-Type", "application/http"), ("Content-Transfer-Encoding", "binary")])
            if let id { partHeaders["Content-ID"] = id }
            return BatchOperation(partHeaders: partHeaders, message: .request(method, url, headers: headers, body: Array(body.utf8)))
        }
        let batch = MultipartBatch(parts: [
            .operation(operation("GET", "BusinessPartners('BP1')")),
            .changeSet(ChangeSet(operations: [
                operation("POST", "BusinessPartners", #"{"PartnerID":"BPMB","CompanyName":"Multipart"}"#, id: "1"),
                operation(v2 ? "MERGE" : "PATCH", "$1", #"{"Phone":"77"}"#, id: "2"),
            ])),
            .changeSet(ChangeSet(operations: [
                operation("POST", "BusinessPartners", #"{"PartnerID":"BPBAD","Nope":"x"}"#, id: "3"),
            ])),
            .operation(operation("GET", "BusinessPartners('BPMB')")),
        ])
        let response = try await provider.execute(method: "POST", url: "$batch", headers: ["Content-Type": batch.contentType], body: batch.write())
        #expect(response.status == 200)
        let answer = try MultipartBatch.read(response.body, boundary: response.headers["Content-Type"].flatMap { ODataCore.HTTPHeaders.parameter("boundary", in: $0) })
        #expect(answer.parts.count == 4)
        #expect(answer.operations.map { $0.message.status ?? 0 } == [200, 201, 204, 400, 200])
        let read = try JSONValue.parse(answer.operations.last?.message.body ?? [])
        #expect((v2 ? read["d"]?["Phone"] : read["Phone"])?.stringValue == "77", "\(read)")
        #expect(try await provider.readEntities("BusinessPartners('BPBAD')").isEmpty)
        // The change set is one transaction of its own; nothing else shares its ID.
        let queue = try await provider.readEntities("RequestQueue?$orderby=RequestID")
        #expect(queue.count == 2 && string(queue[0], "TransactionID") != nil && string(queue[0], "TransactionID") == string(queue[1], "TransactionID"))
        try await provider.upload()
        #expect(try await fixture.backend("BusinessPartners('BPMB')")["Phone"]?.stringValue == "77")
    }

    @Test func aJSONBatchIsAnsweredFromTheStore() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        let body = #"""
        {"requests":[
          {"id":"r","method":"GET","url":"BusinessPartners('BP1')"},
          {"id":"1","atomicityGroup":"g","method":"POST","url":"BusinessPartners","headers":{"content-type":"application/json"},
           "body":{"PartnerID":"BPJS","CompanyName":"JSON"}},
          {"id":"2","atomicityGroup":"g","dependsOn":["1"],"method":"POST","url":"$1/Contacts","headers":{"content-type":"application/json"},
           "body":{"FirstName":"JSON contact"}}
        ]}
        """#
        let response = try await provider.execute(method: "POST", url: "$batch", headers: ["Content-Type": "application/json"], body: Array(body.utf8))
        let answer = try JSONBatchResponse.read(response.body)
        #expect(answer.responses.map(\.id) == ["r", "1", "2"])
        #expect(answer.responses.map(\.status) == [200, 201, 201])
        #expect(try await provider.readEntities("BusinessPartners('BPJS')/Contacts").count == 1)
        // A standalone modification is queued as if sent alone; a failing atomicity group is
        // answered with its error for each of its requests and leaves nothing; a property whose
        // value looks like a Content-ID reference stays text.
        let second = #"""
        {"requests":[
          {"id":"s","method":"PATCH","url":"BusinessPartners('BP1')","headers":{"content-type":"application/json"},"body":{"Phone":"$1"}},
          {"id":"a","atomicityGroup":"bad","method":"POST","url":"BusinessPartners","headers":{"content-type":"application/json"},
           "body":{"PartnerID":"BPJX"}},
          {"id":"b","atomicityGroup":"bad","dependsOn":["a"],"method":"PATCH","url":"$a","headers":{"content-type":"application/json"},
           "body":{"Nope":"x"}}
        ]}
        """#
        let again = try await provider.execute(method: "POST", url: "$batch", headers: ["Content-Type": "application/json"], body: Array(second.utf8))
        let answers = try JSONBatchResponse.read(again.body)
        #expect(answers.responses.map(\.status) == [204, 400, 400])
        #expect(string(try await provider.readEntities("BusinessPartners('BP1')").first, "Phone") == "$1")
        #expect(try await provider.readEntities("BusinessPartners('BPJX')").isEmpty)
        let standalone = try #require(try await provider.readEntities("RequestQueue?$orderby=RequestID desc&$top=1").first)
        #expect(string(standalone, "RequestURL") == "BusinessPartners('BP1')" && string(standalone, "TransactionID") == nil)
    }

    /// Issue 55, item 4, offline: a request that depends on a failed one is not run (424), an
    /// `if` is not evaluated (424), a GET inside an atomicity group is refused (501) and its
    /// group applies nothing, and `$1` may name the entity a GET returned.
    @Test func aJSONBatchKeepsItsDependenciesOffline() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        let body = #"""
        {"requests":[
          {"id":"bad","method":"PATCH","url":"BusinessPartners('NOPE')","headers":{"content-type":"application/json"},
           "body":{"Phone":"x"}},
          {"id":"after","dependsOn":["bad"],"method":"PATCH","url":"BusinessPartners('BP1')",
           "headers":{"content-type":"application/json"},"body":{"Phone":"should-not"}},
          {"id":"cond","method":"PATCH","url":"BusinessPartners('BP1')","if":"true",
           "headers":{"content-type":"application/json"},"body":{"Phone":"should-not"}},
          {"id":"c1","atomicityGroup":"g","method":"POST","url":"Contacts","headers":{"content-type":"application/json"},
           "body":{"PartnerID":"BP1","FirstName":"Grouped"}},
          {"id":"c2","atomicityGroup":"g","method":"GET","url":"Contacts"},
          {"id":"read","method":"GET","url":"BusinessPartners('BP2')"},
          {"id":"viaRead","dependsOn":["read"],"method":"GET","url":"$read/Contacts"}
        ]}
        """#
        let response = try await provider.execute(
            method: "POST", url: "$batch", headers: ["Content-Type": "application/json"], body: Array(body.utf8))
        let answers = try JSONBatchResponse.read(response.body).responses
        #expect(answers.map(\.id) == ["bad", "after", "cond", "c1", "c2", "read", "viaRead"])
        #expect(answers.map(\.status) == [404, 424, 424, 424, 501, 200, 200], "\(answers.map(\.status))")
        #expect(string(try await provider.readEntities("BusinessPartners('BP1')").first, "Phone") != "should-not")
        #expect(try await provider.readEntities("Contacts?$filter=FirstName eq 'Grouped'").isEmpty)
        #expect((answers.last?.body?["value"]?.arrayValue?.count ?? 0) > 0, "\(answers.suffix(2))")
    }
}
