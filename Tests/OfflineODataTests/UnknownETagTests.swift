import Foundation
import ODataCore
import ODataServer
import Testing

@testable import OfflineOData

/// An entity whose ETag the store does not know (its backend gave none) is never overwritten
/// unseen: its update or delete goes without `If-Match`, so a backend that wants one answers 428
/// into the ErrorArchive. `lastWriterWins` sends `If-Match: *` instead (SPEC §13).
@Suite(.serialized) struct UnknownETagTests {
    /// The If-Match headers of the modifications in the `$batch` requests `recording` saw.
    static func ifMatches(_ recording: RecordingTransport) async throws -> [String: String?] {
        var found: [String: String?] = [:]
        for request in await recording.requests where request.url.contains("$batch") {
            let boundary = request.headers["Content-Type"].flatMap { HTTPHeaders.parameter("boundary", in: $0) }
            for operation in try MultipartBatch.read(request.body, boundary: boundary).operations {
                let message = operation.message
                guard let method = message.method, method != "GET", let url = message.url else { continue }
                found["\(method) \(url)"] = .some(message.headers["If-Match"])
            }
        }
        return found
    }

    @Test(arguments: [false, true])
    func anEntityWithoutAnETagGoesWithoutIfMatchUnlessTheAppChoseLastWriterWins(v2: Bool) async throws {
        let fixture = try await Fixture.start(configure: {
            $0.sendsETags = false
            $0.requiresIfMatchWithoutETags = true
        })
        defer { Task { await fixture.stop() } }
        let update = v2 ? "MERGE BusinessPartners('BP1')" : "PATCH BusinessPartners('BP1')"
        let phone = try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue
        let contacts = try await fixture.backend("Contacts?$orderby=ContactID&$top=1")["value"]?.arrayValue ?? []
        guard case .number(let contact)? = contacts.first?["ContactID"] else {
            Issue.record("no contact on the backend")
            return
        }
        let delete = "DELETE Contacts(\(contact)\(v2 ? "L" : ""))"

        // The default: no If-Match, the backend's 428 lands in the ErrorArchive, nothing changes.
        let checked = RecordingTransport()
        var parameters = fixture.parameters()
        parameters.storeName = "checked"
        let provider = OfflineODataProvider(
            serviceRoot: v2 ? fixture.server.v2Root : fixture.server.v4Root, parameters: parameters,
            transport: checked)
        for query in Fixture.queries { try await provider.add(definingQuery: query) }
        try await provider.open()
        #expect(try await provider.readEntities("BusinessPartners('BP1')").first?.control.etag == nil)
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"field"}"#.utf8))
        _ = try await provider.execute(method: "DELETE", url: "Contacts(\(contact))")
        try await provider.upload()
        let sent = try await Self.ifMatches(checked)
        #expect(sent == [update: .none, delete: .none], "\(sent)")
        let failures = try await provider.readEntities("ErrorArchive?$orderby=RequestID")
        #expect(failures.map { $0["HTTPStatusCode"] } == [.primitive(.int32(428)), .primitive(.int32(428))])
        #expect(failures.map { string($0, "Code") } == ["PreconditionRequired", "PreconditionRequired"])
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == phone)
        #expect(try await fixture.backend("Contacts(\(contact))")["ContactID"] != nil)
        await provider.close()

        // Last-writer-wins: `If-Match: *`, both applied.
        let unchecked = RecordingTransport()
        parameters.storeName = "unchecked"
        parameters.lastWriterWins = true
        let overwriting = OfflineODataProvider(
            serviceRoot: v2 ? fixture.server.v2Root : fixture.server.v4Root, parameters: parameters,
            transport: unchecked)
        for query in Fixture.queries { try await overwriting.add(definingQuery: query) }
        try await overwriting.open()
        _ = try await overwriting.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"field"}"#.utf8))
        _ = try await overwriting.execute(method: "DELETE", url: "Contacts(\(contact))")
        try await overwriting.upload()
        #expect(try await Self.ifMatches(unchecked) == [update: "*", delete: "*"])
        #expect(try await overwriting.readEntities("ErrorArchive").isEmpty)
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "field")
        #expect(try await fixture.backend("Contacts(\(contact))")["ContactID"] == nil)
        await overwriting.close()
    }

    /// A queued delete leaves no row in the store, yet it is checked with the ETag the entity
    /// had: another user's change since the download answers 412 and survives (with `*`, as
    /// before, the delete removed it unseen).
    @Test(arguments: [false, true])
    func aQueuedDeleteIsCheckedWithTheETagTheEntityHad(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let recording = RecordingTransport()
        let provider = OfflineODataProvider(
            serviceRoot: v2 ? fixture.server.v2Root : fixture.server.v4Root, parameters: fixture.parameters(),
            transport: recording)
        for query in Fixture.queries { try await provider.add(definingQuery: query) }
        try await provider.open()
        let contacts = try await provider.readEntities("Contacts?$orderby=ContactID&$top=2")
        guard contacts.count == 2, case .primitive(.int64(let changed))? = contacts[0]["ContactID"],
            case .primitive(.int64(let unchanged))? = contacts[1]["ContactID"], let etag = contacts[0].control.etag
        else {
            Issue.record("two contacts with ETags expected: \(contacts)")
            return
        }
        #expect(
            try await fixture.backendSend("PATCH", "Contacts(\(changed))", #"{"Email":"office@example.com"}"#) < 300)
        _ = try await provider.execute(method: "DELETE", url: "Contacts(\(changed))")
        _ = try await provider.execute(method: "DELETE", url: "Contacts(\(unchanged))")
        try await provider.upload()
        let suffix = v2 ? "L" : ""
        let sent = try await Self.ifMatches(recording)
        #expect(sent["DELETE Contacts(\(changed)\(suffix))"] == .some(etag), "\(sent)")
        #expect(sent["DELETE Contacts(\(unchanged)\(suffix))"] == .some(contacts[1].control.etag), "\(sent)")
        let failures = try await provider.readEntities("ErrorArchive")
        #expect(failures.map { $0["HTTPStatusCode"] } == [.primitive(.int32(412))], "\(failures)")
        #expect(failures.map { string($0, "RequestURL") } == ["Contacts(\(changed)\(suffix))"])
        #expect(try await fixture.backend("Contacts(\(changed))")["Email"]?.stringValue == "office@example.com")
        #expect(try await fixture.backend("Contacts(\(unchanged))")["ContactID"] == nil)
        await provider.close()
    }
}
