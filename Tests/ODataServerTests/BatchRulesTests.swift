import Foundation
import ODataCore
import ODataServer
import Testing

/// Issue 55, items 4 and 5: what the reference server answers for JSON batches that break or
/// use the rules of OData JSON Format 4.01 §19, and for parts addressed by absolute path.
@Suite struct BatchRulesTests {
    static func jsonBatch(_ client: TestServer.Client, _ requests: String) async throws -> (Int, String) {
        let reply = try await client.send(
            "POST", "/odata/v4/$batch", headers: ["Content-Type": "application/json"],
            body: #"{"requests":[\#(requests)]}"#)
        return (reply.status, String(decoding: reply.body, as: UTF8.self))
    }

    @Test func jsonBatchRulesAreAnsweredAsTheFormatSays() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            // `$1` without dependsOn: refused before anything runs.
            let (unnamed, unnamedText) = try await Self.jsonBatch(
                client,
                #"{"id":"1","method":"POST","url":"Contacts","body":{"PartnerID":"BP0","FirstName":"NoDep"}},"#
                    + #"{"id":"2","method":"PATCH","url":"$1","body":{"LastName":"x"}}"#)
            #expect(unnamed == 400 && unnamedText.contains("dependsOn must name"), "\(unnamedText)")
            #expect(
                try await client.send("GET", "/odata/v4/Contacts/$count?$filter=FirstName%20eq%20'NoDep'").body
                    == Array("0".utf8))
            // A header twice, an atomicity group that is no request-id: 400.
            let (twice, twiceText) = try await Self.jsonBatch(
                client, #"{"id":"1","method":"GET","url":"Contacts","headers":{"accept":"a","Accept":"b"}}"#)
            #expect(twice == 400 && twiceText.contains("given twice"), "\(twiceText)")
            let (group, groupText) = try await Self.jsonBatch(
                client,
                #"{"id":"1","method":"POST","url":"Contacts","atomicityGroup":"a b","body":{"PartnerID":"BP0"}}"#)
            #expect(group == 400 && groupText.contains("not a request-id"), "\(groupText)")

            // `if`: that request is not run and gets 424, the others run.
            let (conditional, conditionalText) = try await Self.jsonBatch(
                client,
                #"{"id":"1","method":"GET","url":"BusinessPartners('BP1')"},"#
                    + #"{"id":"2","method":"PATCH","url":"BusinessPartners('BP1')","dependsOn":["1"],"#
                    + #""if":"$1/$succeeded","headers":{"if-match":"*"},"body":{"Phone":"if-ran"}}"#)
            #expect(conditional == 200, "\(conditionalText)")
            let answers = try JSONBatchResponse.read(Array(conditionalText.utf8)).responses
            #expect(answers.map(\.status) == [200, 424], "\(conditionalText)")
            let partner = try JSONValue.parse(try await client.send("GET", "/odata/v4/BusinessPartners('BP1')").body)
            #expect(partner["Phone"]?.stringValue != "if-ran")

            // `$1` naming the entity a GET returned.
            let (read, readText) = try await Self.jsonBatch(
                client,
                #"{"id":"1","method":"GET","url":"BusinessPartners('BP2')"},"#
                    + #"{"id":"2","method":"GET","url":"$1/Contacts","dependsOn":["1"]}"#)
            let reads = try JSONBatchResponse.read(Array(readText.utf8)).responses
            #expect(read == 200 && reads.map(\.status) == [200, 200], "\(readText)")
            #expect((reads.last?.body?["value"]?.arrayValue?.count ?? 0) > 0, "\(readText)")

            // A GET inside an atomicity group is refused plainly (501), and nothing of the
            // group is applied.
            let (inGroup, inGroupText) = try await Self.jsonBatch(
                client,
                #"{"id":"1","atomicityGroup":"g","method":"POST","url":"Contacts","#
                    + #""body":{"PartnerID":"BP0","FirstName":"InGroup"}},"#
                    + #"{"id":"2","atomicityGroup":"g","method":"GET","url":"Contacts"}"#)
            let grouped = try JSONBatchResponse.read(Array(inGroupText.utf8)).responses
            #expect(inGroup == 200 && grouped.map(\.status) == [424, 501], "\(inGroupText)")
            #expect(inGroupText.contains("atomicity group is not supported"), "\(inGroupText)")
            #expect(
                try await client.send("GET", "/odata/v4/Contacts/$count?$filter=FirstName%20eq%20'InGroup'").body
                    == Array("0".utf8))
        }
    }

    /// A part addressed by an absolute path runs only under this service's own root: another
    /// root on the host (`/odata/v2/…` in a V4 batch, `/Products`) is refused, JSON and multipart.
    @Test func aPartUnderAnotherRootIsRefused() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            for url in ["/odata/v2/Products", "/Products('P1')"] {
                let (status, text) = try await Self.jsonBatch(client, #"{"id":"1","method":"GET","url":"\#(url)"}"#)
                #expect(status == 400 && text.contains("another service"), "\(url): \(text)")
                let multipart =
                    "--b1\r\nContent-Type: application/http\r\n\r\nGET \(url) HTTP/1.1\r\n\r\n\r\n--b1--\r\n"
                let reply = try await client.send(
                    "POST", "/odata/v4/$batch", headers: ["Content-Type": "multipart/mixed; boundary=b1"],
                    body: multipart)
                let replyText = String(decoding: reply.body, as: UTF8.self)
                #expect(reply.status == 400 && replyText.contains("another service"), "\(url): \(replyText)")
            }
            // The service's own root, as an absolute path, is this service.
            let (own, ownText) = try await Self.jsonBatch(
                client, #"{"id":"1","method":"GET","url":"/odata/v4/Products?$top=1"}"#)
            let answers = try JSONBatchResponse.read(Array(ownText.utf8)).responses
            #expect(own == 200 && answers.map(\.status) == [200], "\(ownText)")
        }
    }
}
