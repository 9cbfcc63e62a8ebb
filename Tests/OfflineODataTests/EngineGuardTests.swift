import Foundation
import ODataCore
import ODataServer
import Testing
@testable import OfflineOData

/// Issue 21: behaviours of the engine that a one-line change could break without any other
/// test noticing. Each test here fails on such a change (see `scripts/mutate`).
@Suite struct EngineGuardTests {
    /// The request ID of the one row the ErrorArchive must have.
    static func onlyErrorArchiveID(_ provider: OfflineODataProvider) async throws -> Int64 {
        let archive = try await provider.readEntities("ErrorArchive")
        try #require(archive.count == 1, "one ErrorArchive row expected: \(archive)")
        guard case .primitive(.int64(let id))? = archive.first?["RequestID"] else {
            throw TransportTestFailure("an ErrorArchive row without a RequestID: \(archive)")
        }
        return id
    }

    /// A download that reads every defining query in full, as from a backend without change
    /// tracking (the delta links are forgotten first).
    static func downloadInFull(_ provider: OfflineODataProvider) async throws {
        try await provider.openStore().write { writer in
            _ = try writer.connection.execute("UPDATE oo_defining SET delta_link = NULL")
        }
        try await provider.download()
    }

    /// PATCH a partner (refused) → POST an order bound to it → PATCH that order: the order
    /// depends on the refused request, and the PATCH depends on the order, which was never
    /// sent. Neither goes to the backend; both are archived as dependency failures.
    @Test(arguments: [false, true])
    func aRequestOnASkippedDependantIsNotSentEither(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let recorder = Recorder()
        let provider = try await fixture.provider(v2: v2, delegate: recorder)
        try await provider.open()
        await fixture.server.service.faults.set([
            FaultRule(
                urlContains: "BusinessPartners", bodyContains: "REFUSED", status: 400,
                code: "PartnerRefused", message: "Not this phone")
        ])
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"REFUSED"}"#.utf8))
        let bind =
            v2
            ? #""Partner":{"__metadata":{"uri":"BusinessPartners('BP1')"}}"#
            : #""Partner@odata.bind":"BusinessPartners('BP1')""#
        _ = try await provider.execute(
            method: "POST", url: "SalesOrders", body: Array(#"{"OrderID":"GAP1","Currency":"EUR",\#(bind)}"#.utf8))
        _ = try await provider.execute(
            method: "PATCH", url: "SalesOrders('GAP1')", body: Array(#"{"Currency":"USD"}"#.utf8))
        await fixture.server.service.journal.clear()
        try await provider.upload()
        #expect(recorder.failures.map(\.httpStatus) == [400, 424, 424])
        let failedID = try #require(recorder.failures.first?.requestID)
        #expect(
            recorder.failures.dropFirst().allSatisfy {
                $0.message == "Not sent: it depends on request \(failedID), which failed"
            })
        let archive = try await provider.readEntities("ErrorArchive?$orderby=RequestID")
        #expect(archive.map { string($0, "Code") } == ["PartnerRefused", "DependencyFailed", "DependencyFailed"])
        #expect(archive.map { string($0, "RequestMethod") } == ["PATCH", "POST", "PATCH"])
        // The backend refused the first; the provider answered for the others.
        #expect(archive.map { string($0, "Domain") } == ["Backend", "OfflineOData", "OfflineOData"])
        let sent = await fixture.server.service.journal.requests().joined(separator: "\n")
        #expect(!sent.contains("GAP1"), "\(sent)")
        #expect(
            try await fixture.backend("SalesOrders?$filter=OrderID eq 'GAP1'")["value"]?.arrayValue?.isEmpty == true)
        // Locally the order keeps its change, in error state like the rest.
        #expect(string(try await provider.readEntities("SalesOrders('GAP1')").first, "Currency") == "USD")
        #expect(count(try await provider.read("SalesOrders?$filter=sap.inErrorState()")) == 1)
    }

    /// `DELETE ErrorArchive(id)` names a failed request; the id of a request that is only
    /// waiting is refused, in both deletion modes, and changes nothing.
    @Test(arguments: [(false, false), (false, true), (true, false), (true, true)])
    func deletingTheArchiveRowOfAPendingRequestIsRefused(v2: Bool, individual: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        var parameters = fixture.parameters()
        parameters.enableIndividualErrorArchiveDeletion = individual
        let provider = try await fixture.provider(v2: v2, parameters: parameters)
        try await provider.open()
        await fixture.server.service.faults.set([
            FaultRule(
                urlContains: "BusinessPartners", bodyContains: "REFUSED", status: 400,
                code: "PartnerRefused", message: "Not this phone")
        ])
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"REFUSED"}"#.utf8))
        try await provider.upload()
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"waiting"}"#.utf8))
        let queue = try await provider.readEntities("RequestQueue")
        let ids = queue.compactMap { entity -> Int64? in
            guard string(entity, "RequestURL")?.contains("BP2") == true,
                case .primitive(.int64(let id))? = entity["RequestID"]
            else { return nil }
            return id
        }
        let pending = try #require(ids.first)
        await #expect(throws: OfflineODataError.self) {
            _ = try await provider.execute(method: "DELETE", url: "ErrorArchive(\(pending))")
        }
        // Nothing changed: the failed request is still archived, the waiting one still queued
        // and still shown.
        #expect(count(try await provider.read("ErrorArchive")) == 1)
        #expect(try await provider.hasPendingUpload)
        #expect(string(try await provider.readEntities("BusinessPartners('BP2')").first, "Phone") == "waiting")
        #expect(string(try await provider.readEntities("BusinessPartners('BP1')").first, "Phone") == "REFUSED")
        // The failed one's row can be deleted; the waiting request stays.
        let failed = try await provider.readEntities("ErrorArchive")
        guard case .primitive(.int64(let failedID))? = failed.first?["RequestID"] else {
            Issue.record("no archive row"); return
        }
        _ = try await provider.execute(method: "DELETE", url: "ErrorArchive(\(failedID))")
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        #expect(string(try await provider.readEntities("BusinessPartners('BP2')").first, "Phone") == "waiting")
        #expect(string(try await provider.readEntities("BusinessPartners('BP1')").first, "Phone") != "REFUSED")
        try await provider.upload()
        #expect(try await fixture.backend("BusinessPartners('BP2')")["Phone"]?.stringValue == "waiting")
    }

    /// Two defining queries fill one entity set. One is read in full (it is new, so it has no
    /// delta link), the other by delta in the same download: the full read's local diff must
    /// not remove the rows only the delta-read query covers.
    @Test(arguments: [false, true])
    func aFullReadDoesNotRemoveRowsAnotherQueryReadByDeltaCovers(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let high = OfflineODataDefiningQuery(name: "ContactsHigh", query: "Contacts?$filter=ContactID gt 3")
        let provider = try await fixture.provider(v2: v2, queries: [Fixture.queries[0], high])
        try await provider.open()
        let highCount = count(try await provider.read("Contacts"))
        #expect(highCount > 0)
        #expect(count(try await provider.read("Contacts?$filter=ContactID le 3")) == 0)
        try await provider.add(
            definingQuery: OfflineODataDefiningQuery(name: "ContactsLow", query: "Contacts?$filter=ContactID le 3"))
        // One change the delta brings, so that the delta-read query is not empty either.
        #expect(try await fixture.backendSend("PATCH", "Contacts(5)", #"{"FirstName":"Delta"}"#) < 300)
        try await provider.download()
        #expect(count(try await provider.read("Contacts?$filter=ContactID le 3")) == 3)
        #expect(count(try await provider.read("Contacts?$filter=ContactID gt 3")) == highCount)
        #expect(string(try await provider.readEntities("Contacts(5)").first, "FirstName") == "Delta")
        let backend = try await fixture.backend("Contacts")["value"]?.arrayValue?.count
        #expect(count(try await provider.read("Contacts")) == backend)
    }

    /// A request resent after a lost answer carries the repeatability time of its first send,
    /// not of the resend, in both header pairs.
    @Test(arguments: [false, true])
    func aResentRequestKeepsItsFirstSentTime(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let recording = RecordingTransport()
        let provider = OfflineODataProvider(
            serviceRoot: v2 ? fixture.server.v2Root : fixture.server.v4Root, parameters: fixture.parameters(),
            transport: recording)
        for query in Fixture.queries { try await provider.add(definingQuery: query) }
        try await provider.open()
        await fixture.server.service.faults.set([
            FaultRule(method: "POST", urlContains: "$batch", dropAfterCommit: true, times: 1)
        ])
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"resent"}"#.utf8))
        await #expect(throws: (any Error).self) { try await provider.upload() }
        // HTTP dates have whole seconds: the resend is in a later one.
        try await Task.sleep(nanoseconds: 1_100_000_000)
        try await provider.upload()
        #expect(try await provider.isRequestQueueEmpty)
        let batches = try await recording.requests.filter { $0.url.contains("$batch") }.map { batch in
            try MultipartBatch.read(
                batch.body,
                boundary: batch.headers["Content-Type"].flatMap { HTTPHeaders.parameter("boundary", in: $0) })
        }
        #expect(batches.count == 2)
        let headers = batches.compactMap { $0.operations.first?.message.headers }
        #expect(headers.count == 2)
        for name in ["Repeatability-Request-ID", "Repeatability-First-Sent", "RequestID", "RepeatabilityCreation"] {
            #expect(headers.first?[name] != nil, "\(name) missing")
            #expect(headers.first?[name] == headers.last?[name], "\(name): \(headers.map { $0[name] ?? "-" })")
        }
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "resent")
    }

    /// The same repeatable request sent nine times at once, on separate connections: plain,
    /// in multipart `$batch` change sets and in JSON `$batch` atomicity groups: the backend
    /// applies it once and answers every copy as the first.
    @Test func identicalRepeatableRequestsSentAtOnceApplyOnce() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let root = fixture.server.v4Root.absoluteString
        let body = Array(#"{"PartnerID":"BP0","FirstName":"Twin","LastName":"Once"}"#.utf8)
        var headers = ODataCore.HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers["Repeatability-Request-ID"] = GuidValue.random().description
        headers["Repeatability-First-Sent"] = "Tue, 24 Nov 2026 06:00:00 GMT"
        let plain = TransportRequest(method: "POST", url: root + "Contacts", headers: headers, body: body)
        let batch = MultipartBatch(parts: [
            .changeSet(
                ChangeSet(operations: [
                    BatchOperation(message: .request("POST", "Contacts", headers: headers, body: body))
                ]))
        ])
        var batchHeaders = ODataCore.HTTPHeaders()
        batchHeaders["Content-Type"] = "multipart/mixed; boundary=\(batch.boundary)"
        let batched = TransportRequest(method: "POST", url: root + "$batch", headers: batchHeaders, body: batch.write())
        // A 4.01 JSON batch with the request in an atomicity group.
        var jsonHeaders = ODataCore.HTTPHeaders()
        jsonHeaders["Content-Type"] = "application/json"
        let repeatHeaders =
            #"{"content-type":"application/json","repeatability-request-id":"\#(headers["Repeatability-Request-ID"] ?? "")","#
            + #""repeatability-first-sent":"Tue, 24 Nov 2026 06:00:00 GMT"}"#
        let jsonBody =
            #"{"requests":[{"id":"1","atomicityGroup":"g1","method":"POST","url":"Contacts","headers":\#(repeatHeaders),"#
            + #""body":{"PartnerID":"BP0","FirstName":"Twin","LastName":"Once"}}]}"#
        let json = TransportRequest(
            method: "POST", url: root + "$batch", headers: jsonHeaders, body: Array(jsonBody.utf8))
        let statuses = try await withThrowingTaskGroup(of: [Int].self) { group in
            for index in 0..<9 {
                group.addTask {
                    // Separate connections from the shared pool, so the requests really overlap.
                    let transport = DefaultTransport.make()
                    switch index % 3 {
                    case 0:
                        return [try await transport.send(plain, timeout: 20).status]
                    case 1:
                        let response = try await transport.send(batched, timeout: 20)
                        let answer = try MultipartBatch.read(
                            response.body,
                            boundary: response.headers["Content-Type"].flatMap {
                                HTTPHeaders.parameter("boundary", in: $0)
                            })
                        return answer.operations.compactMap(\.message.status)
                    default:
                        let response = try await transport.send(json, timeout: 20)
                        let answer = try JSONValue.parse(response.body)
                        return (answer["responses"]?.arrayValue ?? []).compactMap { response -> Int? in
                            if case .number(let text)? = response["status"] { return Int(text) }
                            return nil
                        }
                    }
                }
            }
            return try await group.reduce(into: [Int]()) { $0 += $1 }
        }
        #expect(statuses == Array(repeating: 201, count: 9))
        let rows = try await fixture.backend("Contacts?$filter=FirstName eq 'Twin'")["value"]?.arrayValue ?? []
        #expect(rows.count == 1, "\(rows)")
    }

    /// ErrorArchive rows can only be deleted, and a create cannot reuse the key of an entity
    /// in the store: both are refused as invalid requests, and nothing changes.
    @Test(arguments: [false, true])
    func archiveRowsAreOnlyDeletedAndKeysAreNotReused(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        await fixture.server.service.faults.set([
            FaultRule(urlContains: "BusinessPartners", bodyContains: "REFUSED", status: 400)
        ])
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"REFUSED"}"#.utf8))
        try await provider.upload()
        let archived = try await provider.readEntities("ErrorArchive")
        guard case .primitive(.int64(let id))? = archived.first?["RequestID"] else {
            Issue.record("no archive row"); return
        }
        do {
            _ = try await provider.execute(
                method: "PATCH", url: "ErrorArchive(\(id))", body: Array(#"{"Message":"x"}"#.utf8))
            Issue.record("a PATCH of an ErrorArchive row was accepted")
        } catch let error as OfflineODataError {
            #expect(error.code == .invalidRequest)
            #expect(error.message.contains("can only be deleted"), "\(error)")
        }
        #expect(count(try await provider.read("ErrorArchive")) == 1)
        let before = try await provider.readEntities("BusinessPartners('BP2')")
        do {
            _ = try await provider.execute(
                method: "POST", url: "BusinessPartners", body: Array(#"{"PartnerID":"BP2","CompanyName":"Twice"}"#.utf8)
            )
            Issue.record("a create with the key of an existing entity was accepted")
        } catch let error as OfflineODataError {
            #expect(error.code == .invalidRequest)
            #expect(error.message.contains("BusinessPartners('BP2') exists already"), "\(error)")
        }
        #expect(try await provider.readEntities("BusinessPartners('BP2')") == before)
        #expect(count(try await provider.read("RequestQueue?$filter=RequestMethod eq 'POST'")) == 0)
    }

    /// The reference server's `$batch` rules: a JSON batch request that depends on a failed
    /// one is answered 424 and not run; a multipart batch stops at the first failed top-level
    /// request unless the client prefers continue-on-error (V2 always continues).
    @Test func batchesStopOrContinueAfterAFailureAsAsked() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let transport = DefaultTransport.make()
        var json = ODataCore.HTTPHeaders()
        json["Content-Type"] = "application/json"
        let body =
            #"{"requests":[{"id":"a","method":"POST","url":"Contacts","body":{"PartnerID":"NOPE","Bogus":1}},"#
            + #"{"id":"b","dependsOn":["a"],"method":"POST","url":"Contacts","body":{"PartnerID":"BP0","FirstName":"Never"}},"#
            + #"{"id":"c","method":"POST","url":"Contacts","body":{"PartnerID":"BP0","FirstName":"Independent"}}]}"#
        let answer = try await transport.send(
            TransportRequest(
                method: "POST", url: fixture.server.v4Root.absoluteString + "$batch",
                headers: json, body: Array(body.utf8)), timeout: 20)
        let responses = try JSONValue.parse(answer.body)["responses"]?.arrayValue ?? []
        let statuses = responses.map { response -> String in
            if case .number(let text)? = response["status"] { return (response["id"]?.stringValue ?? "?") + "=" + text }
            return "?"
        }
        #expect(
            statuses.count == 3 && statuses[0].hasPrefix("a=4") && statuses[1] == "b=424" && statuses[2] == "c=201",
            "\(statuses)")
        #expect(
            try await fixture.backend("Contacts?$filter=FirstName eq 'Never'")["value"]?.arrayValue?.isEmpty == true)
        for (root, prefer, expected) in [
            (fixture.server.v4Root, false, 2), (fixture.server.v4Root, true, 3), (fixture.server.v2Root, false, 3),
        ] {
            let batch = MultipartBatch(
                parts: ["Contacts(1)", "Contacts(999999)", "Contacts(2)"].map {
                    .operation(BatchOperation(message: .request("GET", $0)))
                })
            var headers = ODataCore.HTTPHeaders()
            headers["Content-Type"] = "multipart/mixed; boundary=\(batch.boundary)"
            if prefer { headers["Prefer"] = "odata.continue-on-error" }
            let response = try await transport.send(
                TransportRequest(
                    method: "POST", url: root.absoluteString + "$batch", headers: headers,
                    body: batch.write()), timeout: 20)
            let parts = try MultipartBatch.read(
                response.body,
                boundary: response.headers["Content-Type"].flatMap {
                    HTTPHeaders.parameter("boundary", in: $0)
                })
            #expect(
                parts.operations.compactMap(\.message.status) == Array([200, 404, 200].prefix(expected)),
                "\(root) prefer: \(prefer)")
        }
    }

    /// Creates a contact locally and returns the local key the store gave it.
    static func createContact(
        _ provider: OfflineODataProvider, firstName: String, lastName: String
    ) async throws -> Int64 {
        let created = try await provider.execute(
            method: "POST", url: "Contacts",
            body: Array(#"{"PartnerID":"BP0","FirstName":"\#(firstName)","LastName":"\#(lastName)"}"#.utf8))
        guard case .entity(let contact?)? = created.result, case .primitive(.int64(let localID))? = contact["ContactID"]
        else { throw OfflineODataError(.invalidRequest, "The create gave no local Int64 key") }
        return localID
    }

    /// An entity created offline keeps its local key for the app after the upload re-keys it:
    /// reads and changes by that key reach it (in V2 also when the Int64 key is written without
    /// its `L`), and an undo by that key (the typed API) reaches the change queued since.
    @Test(arguments: [false, true])
    func undoByALocalKeyTheBackendReplacedReachesTheEntity(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        let localID = try await Self.createContact(provider, firstName: "Undo", lastName: "Local")
        #expect(localID < 0)
        try await provider.upload()
        // The local key still names the entity, as the app wrote it (V2 too, without `L`).
        #expect(string(try await provider.readEntities("Contacts(\(localID))").first, "LastName") == "Local")
        _ = try await provider.execute(
            method: "PATCH", url: "Contacts(\(localID))", body: Array(#"{"FirstName":"Changed"}"#.utf8))
        #expect(string(try await provider.readEntities("Contacts(\(localID))").first, "FirstName") == "Changed")
        #expect(try await provider.hasPendingUpload)
        try await provider.undoPendingChanges(for: "Contacts", key: ["ContactID": .int64(localID)])
        #expect(try await provider.isRequestQueueEmpty)
        #expect(string(try await provider.readEntities("Contacts(\(localID))").first, "FirstName") == "Undo")
    }

    /// A change queued by a local key before the upload reaches the created entity whatever
    /// the spelling of the key: V2 writes an Int64 key `-1L`, an app may write `-1`. The queue
    /// keeps the key as the store writes it, so the upload names the create by its Content-ID.
    @Test(arguments: [false, true])
    func aChangeQueuedByALocalKeyInAnySpellingFollowsTheCreate(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        let localID = try await Self.createContact(provider, firstName: "Spell", lastName: "Queued")
        _ = try await provider.execute(
            method: "PATCH", url: "Contacts(\(localID))", body: Array(#"{"FirstName":"Spelled"}"#.utf8))
        let urls = try await provider.readEntities("RequestQueue").compactMap { string($0, "RequestURL") }
        #expect(urls == ["Contacts", v2 ? "Contacts(\(localID)L)" : "Contacts(\(localID))"])
        try await provider.upload()
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        let rows = try await fixture.backend("Contacts?$filter=LastName eq 'Queued'")["value"]?.arrayValue ?? []
        #expect(rows.map { $0["FirstName"]?.stringValue } == ["Spelled"])
    }

    /// A failed change stays in the store, in error state, across downloads until its
    /// ErrorArchive row is deleted; the delete then goes back to what the backend has now, not
    /// to the state before those downloads (a download used to overwrite the failed change,
    /// clear its error state and keep the old state for the revert, so the store stayed behind
    /// the backend for good).
    @Test(arguments: [false, true])
    func aFailedChangeSurvivesDownloadsAndItsRevertTakesTheBackendsState(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        // Another user renames BP1: the stored ETag is stale, so the local change gets 412.
        #expect(
            try await fixture.backendSend("PATCH", "BusinessPartners('BP1')", #"{"CompanyName":"Renamed on server"}"#)
                == 204)
        _ = try await provider.execute(
            method: v2 ? "MERGE" : "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"+1 local"}"#.utf8))
        try await provider.upload()
        let id = try await Self.onlyErrorArchiveID(provider)
        for _ in 0..<2 {
            try await provider.download()
            let kept = try #require(try await provider.readEntities("BusinessPartners('BP1')").first)
            #expect(string(kept, "Phone") == "+1 local", "the failed change was lost: \(kept)")
            #expect(count(try await provider.read("BusinessPartners?$filter=sap.inErrorState()")) == 1)
            #expect(count(try await provider.read("ErrorArchive")) == 1)
        }
        // The full read (no delta link) must keep it too.
        try await Self.downloadInFull(provider)
        #expect(string(try await provider.readEntities("BusinessPartners('BP1')").first, "Phone") == "+1 local")
        // Deleting the error: the backend's entity as it is now.
        _ = try await provider.execute(method: "DELETE", url: "ErrorArchive(\(id))")
        let backend = try await fixture.backend("BusinessPartners('BP1')")
        let reverted = try #require(try await provider.readEntities("BusinessPartners('BP1')").first)
        #expect(string(reverted, "CompanyName") == "Renamed on server", "\(reverted)")
        #expect(string(reverted, "Phone") == backend["Phone"]?.stringValue, "\(reverted)")
        #expect(count(try await provider.read("BusinessPartners?$filter=sap.inErrorState()")) == 0)
        // A change now goes through with the right ETag.
        _ = try await provider.execute(
            method: v2 ? "MERGE" : "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"+1 again"}"#.utf8))
        try await provider.upload()
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "+1 again")
        await provider.close()
    }

    /// The same for a failed delete: the entity stays deleted locally across downloads (full or
    /// by delta) until its ErrorArchive row goes; then it comes back as the backend has it.
    @Test(arguments: [false, true])
    func aFailedDeleteStaysUntilItsErrorIsDeleted(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        #expect(try await fixture.backendSend("PATCH", "Contacts(1)", #"{"LastName":"Changed on server"}"#) == 204)
        await fixture.server.service.faults.set([
            FaultRule(method: "DELETE", urlContains: "Contacts", status: 409, code: "StillReferenced", message: "no")
        ])
        _ = try await provider.execute(method: "DELETE", url: "Contacts(1)")
        try await provider.upload()
        let id = try await Self.onlyErrorArchiveID(provider)
        try await provider.download()
        try await Self.downloadInFull(provider)
        #expect(
            try await provider.readEntities("Contacts(1)").isEmpty,
            "a download brought back an entity whose delete failed")
        _ = try await provider.execute(method: "DELETE", url: "ErrorArchive(\(id))")
        let back = try #require(try await provider.readEntities("Contacts(1)").first)
        #expect(string(back, "LastName") == "Changed on server", "\(back)")
        await provider.close()
    }

    /// An item deleted locally (pending, then failed) under `SalesOrders?$expand=Items`: a
    /// download, by delta and in full, keeps it deleted and goes through (linking the order to
    /// the missing item threw, so every download failed); deleting the error brings it back.
    @Test(arguments: [false, true])
    func anExpandedChildDeletedLocallyDoesNotStopDownloads(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        let item = "SalesOrderItems(OrderID='SO1',ItemPosition=10)"
        #expect(try await provider.readEntities(item).count == 1)
        _ = try await provider.execute(method: "DELETE", url: item)
        for round in 0..<2 {
            // The order changes on the backend, so the delta brings it with its items.
            #expect(try await fixture.backendSend("PATCH", "SalesOrders('SO1')", #"{"Note":"round \#(round)"}"#) == 204)
            try await provider.download()
            try await Self.downloadInFull(provider)
            #expect(try await provider.readEntities(item).isEmpty, "round \(round): the deleted item came back")
            #expect(try await provider.readEntities("SalesOrders('SO1')?$expand=Items").count == 1)
            if round == 0 {
                // Now the delete fails on the backend and stays in the ErrorArchive.
                await fixture.server.service.faults.set([
                    FaultRule(
                        method: "DELETE", urlContains: "SalesOrderItems", status: 409, code: "Locked", message: "no")
                ])
                try await provider.upload()
                #expect(count(try await provider.read("ErrorArchive")) == 1)
            }
        }
        let id = try await Self.onlyErrorArchiveID(provider)
        _ = try await provider.execute(method: "DELETE", url: "ErrorArchive(\(id))")
        #expect(try await provider.readEntities(item).count == 1)
        let backendItems = try await fixture.backend("SalesOrders('SO1')/Items")["value"]?.arrayValue?.count
        #expect(count(try await provider.read("SalesOrders('SO1')/Items")) == backendItems)
        await provider.close()
    }

    /// A local create with a key the backend already has fails; the download keeps the local
    /// entity and learns the backend has one, so deleting the error leaves the backend's
    /// entity in the store (it used to remove it, and a delta would not bring it back).
    @Test(arguments: [false, true])
    func aFailedCreateOfAKeyTheBackendHasRevertsToTheBackendsEntity(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        // BP2 exists on the backend; locally it is deleted, uploaded, then created again while
        // another user creates it on the backend first.
        _ = try await provider.execute(method: "DELETE", url: "BusinessPartners('BP2')")
        try await provider.upload()
        #expect(
            try await fixture.backendSend("POST", "BusinessPartners", #"{"PartnerID":"BP2","CompanyName":"Theirs"}"#)
                == 201)
        _ = try await provider.execute(
            method: "POST", url: "BusinessPartners", body: Array(#"{"PartnerID":"BP2","CompanyName":"Mine"}"#.utf8))
        try await provider.upload()
        let id = try await Self.onlyErrorArchiveID(provider)
        try await provider.download()
        try await Self.downloadInFull(provider)
        #expect(string(try await provider.readEntities("BusinessPartners('BP2')").first, "CompanyName") == "Mine")
        _ = try await provider.execute(method: "DELETE", url: "ErrorArchive(\(id))")
        let reverted = try await provider.readEntities("BusinessPartners('BP2')")
        #expect(reverted.count == 1 && string(reverted.first, "CompanyName") == "Theirs", "\(reverted)")
        await provider.close()
    }

    /// The state kept for an entity a queued change only binds (the partner an order is moved
    /// to) follows downloads: undoing the order's change after the partner changed on the
    /// backend leaves the partner as the backend has it (it went back to its old values and
    /// ETag, so the next change of it failed with 412).
    @Test(arguments: [false, true])
    func theKeptStateOfABoundEntityFollowsDownloads(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        let bind =
            v2
            ? #"{"Partner":{"__metadata":{"uri":"BusinessPartners('BP2')"}}}"#
            : #"{"Partner@odata.bind":"BusinessPartners('BP2')"}"#
        _ = try await provider.execute(method: v2 ? "MERGE" : "PATCH", url: "SalesOrders('SO1')", body: Array(bind.utf8))
        #expect(try await fixture.backendSend("PATCH", "BusinessPartners('BP2')", #"{"CompanyName":"Moved on"}"#) == 204)
        try await provider.download()
        #expect(string(try await provider.readEntities("BusinessPartners('BP2')").first, "CompanyName") == "Moved on")
        try await provider.undoPendingChanges(forURLs: ["SalesOrders('SO1')"])
        let partner = try #require(try await provider.readEntities("BusinessPartners('BP2')").first)
        #expect(string(partner, "CompanyName") == "Moved on", "the undo put back an old state: \(partner)")
        _ = try await provider.execute(
            method: v2 ? "MERGE" : "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"+2 after"}"#.utf8))
        try await provider.upload()
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        #expect(try await fixture.backend("BusinessPartners('BP2')")["Phone"]?.stringValue == "+2 after")
        await provider.close()
    }
}
