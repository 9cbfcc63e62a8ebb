import Foundation
import ODataCore
import ODataGateway
import ODataServer
import OfflineOData
import Testing

/// Issue 36: uploads through the gateway are applied exactly once for a backend that ignores
/// repeatable-request headers (the reference server with them off, as most SAP Gateway
/// services are). Real PostgreSQL, real providers, faults injected into the real backend.
@Suite(.serialized) struct GatewayUploadTests {
    static func start(
        v2: Bool, instances: Int = 1,
        configure: (inout GatewayConfiguration) -> Void = { _ in }
    ) async throws -> GatewayDeltaTests.Setup {
        try await GatewayDeltaTests.start(
            v2: v2, instances: instances, backendOptions: { $0.honorsRepeatableRequests = false }, configure: configure)
    }

    /// Rows of `url` on the backend, read directly (V4).
    static func backendRows(_ setup: GatewayDeltaTests.Setup, _ url: String) async throws -> [JSONValue] {
        var headers = HTTPHeaders()
        headers["Accept"] = "application/json"
        let response = try await DefaultTransport.make().send(
            TransportRequest(method: "GET", url: setup.backend.v4Root.absoluteString + url, headers: headers),
            timeout: 30)
        // A refused read is not an empty one.
        #expect(response.status == 200, "\(url): \(String(decoding: response.body, as: UTF8.self))")
        return try JSONValue.parse(response.body)["value"]?.arrayValue ?? []
    }

    /// One entity of `url` on the backend, read directly (V4).
    static func backendEntity(_ setup: GatewayDeltaTests.Setup, _ url: String) async throws -> JSONValue {
        var headers = HTTPHeaders()
        headers["Accept"] = "application/json"
        let response = try await DefaultTransport.make().send(
            TransportRequest(method: "GET", url: setup.backend.v4Root.absoluteString + url, headers: headers),
            timeout: 30)
        #expect(response.status == 200, "\(String(decoding: response.body, as: UTF8.self))")
        return try JSONValue.parse(response.body)
    }

    static func batches(_ setup: GatewayDeltaTests.Setup) async -> Int {
        await setup.backend.service.journal.requests().filter { $0.hasPrefix("POST $batch") }.count
    }

    static func body(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// The backend commits an upload and its answer to the gateway is lost. The device's
    /// resend is answered by reading the backend (a create with its key, an update, a delete):
    /// each change applied once, nothing sent twice, the queue and the ErrorArchive empty.
    @Test(arguments: [false, true])
    func aLostBackendAnswerIsResolvedByReadingTheBackend(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2)
        do {
            let device = try await GatewayDeltaTests.device(setup, gateway: 0, name: "lost")
            let contact = try #require(
                try await device.readEntities("Contacts?$orderby=ContactID").first?.int64("ContactID"))
            _ = try await device.execute(
                method: "POST", url: "BusinessPartners",
                body: Self.body(#"{"PartnerID":"BPX","CompanyName":"Once"}"#))
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: Self.body(#"{"Phone":"+1 once"}"#))
            _ = try await device.execute(method: "DELETE", url: "Contacts(\(contact))")
            // The backend commits and its answer is lost; then the gateway's first read of the
            // entities fails too, so the device's upload fails and the requests stay in doubt.
            await setup.backend.service.faults.set([
                FaultRule(method: "POST", urlContains: "$batch", dropAfterCommit: true, times: 1),
                FaultRule(method: "GET", urlContains: "BusinessPartners('BPX')", status: 503, times: 1),
            ])
            await #expect(throws: (any Error).self) { try await device.upload() }
            #expect(try await device.readEntities("RequestQueue").count == 3)
            // The update and the delete were read back as applied; the create stays in doubt.
            #expect(try await setup.gateways[0].gateway.store.requestCounts().answered == 2)
            await setup.backend.service.journal.clear()
            // The device's repeat: the gateway reads the three entities instead of sending again.
            try await device.upload()
            let resent = await setup.backend.service.journal.requests()
            #expect(!resent.contains { $0.hasPrefix("POST $batch") }, "\(resent)")
            #expect(try await device.readEntities("RequestQueue").isEmpty)
            #expect(try await device.readEntities("ErrorArchive").isEmpty)
            #expect(try await Self.backendRows(setup, "BusinessPartners?$filter=PartnerID eq 'BPX'").count == 1)
            // (This read the single entity as if it were a collection, and so could not fail; it
            // now checks the entity itself.)
            #expect(
                try await Self.backendEntity(setup, "BusinessPartners('BP1')?$select=Phone")["Phone"]?.stringValue
                    == "+1 once")
            let phone = try await Self.backendRows(setup, "BusinessPartners?$filter=PartnerID eq 'BP1'").first?["Phone"]
            #expect(phone?.stringValue == "+1 once")
            #expect(try await Self.backendRows(setup, "Contacts?$filter=ContactID eq \(contact)").isEmpty)
            let counts = try await setup.gateways[0].gateway.store.requestCounts()
            #expect(counts.recorded == 3 && counts.answered == 3)
            try await device.download()
            #expect(try await GatewayDeltaTests.held(device) == (try await GatewayDeltaTests.truth(setup)))
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A create whose key the backend makes cannot be found by reading: when its answer is lost
    /// it lands in the ErrorArchive as `RequestInDoubt`, and the backend holds it once, never
    /// twice.
    @Test(arguments: [false, true])
    func aServerKeyedCreateInDoubtGoesToTheErrorArchive(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2)
        do {
            let device = try await GatewayDeltaTests.device(setup, gateway: 0, name: "doubt")
            _ = try await device.execute(
                method: "POST", url: "Contacts",
                body: Self.body(#"{"PartnerID":"BP0","FirstName":"Doubt","LastName":"Once"}"#))
            await setup.backend.service.faults.set([
                FaultRule(method: "POST", urlContains: "$batch", dropAfterCommit: true, times: 1)
            ])
            // The gateway reads what it can at once: a contact by a key it does not know it
            // cannot, so the answer is RequestInDoubt in the same upload.
            try await device.upload()
            await setup.backend.service.journal.clear()
            let failures = try await device.readEntities("ErrorArchive")
            #expect(failures.count == 1)
            #expect(failures.first?.string("Code") == "RequestInDoubt", "\(failures)")
            #expect(failures.first?.int64("HTTPStatusCode") == 409)
            #expect(failures.first?.string("Message")?.contains("cannot tell whether request") == true)
            #expect(try await Self.backendRows(setup, "Contacts?$filter=FirstName eq 'Doubt'").count == 1)
            // Another upload does not send it: it is in the ErrorArchive, and a repeat would get
            // the recorded answer.
            try await device.upload()
            #expect(await Self.batches(setup) == 0)
            #expect(try await Self.backendRows(setup, "Contacts?$filter=FirstName eq 'Doubt'").count == 1)
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// An hour ago as an HTTP date: a first sending within any retention the tests set (a
    /// fixed date would expire once the retention has passed since it).
    static var anHourAgo: String { HTTPDate.format(secondsSince1970: Int64(Date().timeIntervalSince1970) - 3600) }

    /// A `$batch` as the client sends it: one change set with a create, with its request ID.
    static func batch(id: String, firstSent: String = anHourAgo, name: String) -> MultipartBatch {
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/json"
        headers["Repeatability-Request-ID"] = id
        headers["Repeatability-First-Sent"] = firstSent
        headers["RequestID"] = id
        headers["RepeatabilityCreation"] = firstSent
        var part = HTTPHeaders([("Content-Type", "application/http"), ("Content-Transfer-Encoding", "binary")])
        part["Content-ID"] = "1"
        let message = BatchMessage.request(
            "POST", "Contacts", headers: headers, body: Self.body(#"{"PartnerID":"BP0","FirstName":"\#(name)"}"#))
        return MultipartBatch(parts: [
            .changeSet(ChangeSet(operations: [BatchOperation(partHeaders: part, message: message)]))
        ])
    }

    static func send(_ batch: MultipartBatch, to root: String) async throws -> (TransportResponse, MultipartBatch?) {
        var headers = HTTPHeaders()
        headers["Content-Type"] = batch.contentType
        let response = try await DefaultTransport.make().send(
            TransportRequest(method: "POST", url: root + "$batch", headers: headers, body: batch.write()), timeout: 60)
        let boundary = response.headers["Content-Type"].flatMap { HTTPHeaders.parameter("boundary", in: $0) }
        return (response, try? MultipartBatch.read(response.body, boundary: boundary))
    }

    /// The device's answer is lost instead (it sends the same batch again): the repeat gets the
    /// recorded answer, marked `Repeatability-Result: accepted`, from either instance, and the
    /// backend saw one request. Two repeats at once while the first is still being forwarded
    /// (a slow backend) wait for it instead of forwarding again.
    @Test(arguments: [false, true])
    func aRepeatIsAnsweredFromPostgreSQLAndWaitsForOneUnderWay(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2, instances: 2)
        do {
            let roots = setup.gateways.map(\.root.absoluteString)
            let batch = Self.batch(id: UUID().uuidString, name: "Repeat")
            let (first, firstAnswer) = try await Self.send(batch, to: roots[0])
            #expect(first.status < 300)
            let (second, secondAnswer) = try await Self.send(batch, to: roots[1])
            #expect(second.status < 300)
            func message(_ batch: MultipartBatch?) -> BatchMessage? { batch?.operations.first?.message }
            #expect(message(firstAnswer)?.status == 201)
            #expect(message(secondAnswer)?.status == 201)
            #expect(message(secondAnswer)?.headers["Repeatability-Result"] == "accepted")
            #expect(message(firstAnswer)?.headers["Repeatability-Result"] == nil)
            // The recorded answer names the gateway the repeat reached.
            let location = try #require(message(secondAnswer)?.headers["Location"])
            #expect(location.hasPrefix(roots[1]), "\(location)")
            #expect(await Self.batches(setup) == 1)
            #expect(try await Self.backendRows(setup, "Contacts?$filter=FirstName eq 'Repeat'").count == 1)

            // A slow backend: three sends of one new batch at once, over both instances.
            await setup.backend.service.faults.set([
                FaultRule(method: "POST", urlContains: "$batch", delayMilliseconds: 1500)
            ])
            await setup.backend.service.journal.clear()
            let slow = Self.batch(id: UUID().uuidString, name: "Slow")
            let statuses = try await withThrowingTaskGroup(of: Int?.self) { group in
                for index in 0..<3 {
                    group.addTask { try await message(Self.send(slow, to: roots[index % 2]).1)?.status }
                }
                var statuses: [Int?] = []
                for try await status in group { statuses.append(status) }
                return statuses
            }
            #expect(statuses == [201, 201, 201])
            #expect(await Self.batches(setup) == 1)
            #expect(try await Self.backendRows(setup, "Contacts?$filter=FirstName eq 'Slow'").count == 1)
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A repeat of a request first sent before the records' retention is refused
    /// (`RequestExpired`), never applied; a batch without request IDs passes as it is.
    @Test(arguments: [false, true])
    func aRepeatPastTheRetentionIsRefused(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2) { $0.requestRetention = 3600 }
        do {
            let root = setup.gateways[0].root.absoluteString
            let old = Self.batch(id: UUID().uuidString, firstSent: "Mon, 02 Nov 2026 10:00:00 GMT", name: "Old")
            let (response, answer) = try await Self.send(old, to: root)
            #expect(response.status < 300)
            let message = try #require(answer?.operations.first?.message)
            #expect(message.status == 409)
            #expect(try ODataError.parse(message.body).code == "RequestExpired")
            #expect(await Self.batches(setup) == 0)
            #expect(try await Self.backendRows(setup, "Contacts?$filter=FirstName eq 'Old'").isEmpty)
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A device that sends request by request (a backend without `$batch`): each request is
    /// recorded on its own, and a lost answer is resolved as for a batch.
    @Test(arguments: [false, true])
    func requestsSentOneByOneAreRecordedEach(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2)
        do {
            var parameters = OfflineODataParameters()
            parameters.storePath = setup.folder
            parameters.storeName = "single"
            parameters.backendSupportsBatch = false
            let device = OfflineODataProvider(serviceRoot: setup.gateways[0].root, parameters: parameters)
            try await device.add(
                definingQuery: OfflineODataDefiningQuery(name: "BusinessPartners", query: "BusinessPartners"))
            try await device.open()
            _ = try await device.execute(
                method: "POST", url: "BusinessPartners",
                body: Self.body(#"{"PartnerID":"BPY","CompanyName":"Single"}"#))
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP2')", body: Self.body(#"{"Phone":"single"}"#))
            // The create's answer is lost and the backend cannot be read at once: the gateway
            // cuts the device's connection, and the device keeps both requests.
            await setup.backend.service.faults.set([
                FaultRule(method: "POST", urlContains: "BusinessPartners", dropAfterCommit: true, times: 1),
                FaultRule(method: "GET", urlContains: "BusinessPartners('BPY')", status: 503, times: 1),
            ])
            await #expect(throws: (any Error).self) { try await device.upload() }
            #expect(try await device.readEntities("RequestQueue").count == 2)
            await setup.backend.service.journal.clear()
            try await device.upload()
            let sent = await setup.backend.service.journal.requests()
            #expect(!sent.contains { $0.hasPrefix("POST BusinessPartners") }, "\(sent)")
            #expect(
                sent.filter { $0.contains("BusinessPartners('BP2')") && !$0.hasPrefix("GET") }.count == 1, "\(sent)")
            #expect(try await device.readEntities("RequestQueue").isEmpty)
            #expect(try await device.readEntities("ErrorArchive").isEmpty)
            #expect(try await Self.backendRows(setup, "BusinessPartners?$filter=PartnerID eq 'BPY'").count == 1)
            let phone = try await Self.backendRows(setup, "BusinessPartners?$filter=PartnerID eq 'BP2'").first?["Phone"]
            #expect(phone?.stringValue == "single")
            #expect(try await setup.gateways[0].gateway.store.requestCounts().answered == 2)
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A backend without `$batch` (`supportsBatch` off; the reference server refuses every
    /// `$batch` here): a device's `$batch` goes to it request by request, each recorded, with
    /// `$<Content-ID>` references resolved from earlier answers. A change set whose request fails
    /// keeps what was applied before the failure (the backend cannot undo it) and answers the
    /// rest 424, unsent. A lost answer in the middle is resolved by reading the backend, and the
    /// requests after it still go. A repeat of the whole batch reaches the backend no more.
    @Test(arguments: [false, true])
    func aBatchGoesRequestByRequestToABackendWithoutBatch(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2) { configuration in
            for index in configuration.backends.indices { configuration.backends[index].supportsBatch = false }
        }
        do {
            let device = try await GatewayDeltaTests.device(setup, gateway: 0, name: "nobatch")
            func change(_ method: String, _ url: String, _ body: String, _ transaction: String?) async throws {
                _ = try await device.execute(
                    method: method, url: url, body: Self.body(body),
                    options: OfflineODataRequestOptions(transactionID: transaction))
            }
            let ids = try await device.readEntities("Contacts?$orderby=ContactID&$top=3").compactMap {
                $0.int64("ContactID")
            }
            try #require(ids.count == 3)
            // One change set: a contact created and changed (`$<Content-ID>` in the second).
            try await change("POST", "Contacts", #"{"PartnerID":"BP1","FirstName":"One","LastName":"By"}"#, "T1")
            let local = try #require(
                try await device.readEntities("Contacts?$filter=FirstName eq 'One'").first?.int64("ContactID"))
            try await change("PATCH", "Contacts(\(local))", #"{"LastName":"One"}"#, "T1")
            // Alone: BP2, whose answer is lost after the backend applied it.
            try await change("PATCH", "BusinessPartners('BP2')", #"{"Phone":"lost"}"#, nil)
            // One change set whose second request fails on the backend.
            try await change("PATCH", "Contacts(\(ids[0]))", #"{"LastName":"applied"}"#, "T2")
            try await change("PATCH", "Contacts(\(ids[1]))", #"{"LastName":"refused"}"#, "T2")
            try await change("PATCH", "Contacts(\(ids[2]))", #"{"LastName":"unsent"}"#, "T2")
            await setup.backend.service.journal.clear()
            await setup.backend.service.faults.set([
                FaultRule(method: "POST", urlContains: "$batch", status: 501, code: "NotImplemented"),
                FaultRule(urlContains: "BusinessPartners('BP2')", dropAfterCommit: true, times: 1),
                FaultRule(
                    method: v2 ? "MERGE" : "PATCH", urlContains: "Contacts(\(ids[1])\(v2 ? "L" : ""))", status: 400,
                    code: "Refused", message: "This contact may not change"),
            ])
            try await device.upload()
            let sent = await setup.backend.service.journal.requests()
            #expect(await Self.batches(setup) == 0, "\(sent)")
            let changes = sent.filter { !$0.hasPrefix("GET") }
            #expect(changes.count == 5, "\(sent)")
            #expect(!changes.contains { $0.contains("Contacts(\(ids[2])\(v2 ? "L" : ""))") }, "\(sent)")
            // Only the two failed requests stay queued, as failed.
            let queue = try await device.readEntities("RequestQueue")
            #expect(queue.map { $0.string("Status") } == ["failed", "failed"], "\(queue)")
            let failures = try await device.readEntities("ErrorArchive?$orderby=RequestID")
            #expect(failures.map { $0.int64("HTTPStatusCode") } == [400, 424], "\(failures)")
            #expect(failures.map { $0.string("Code") } == ["Refused", "DependencyFailed"])
            let contact = try await Self.backendRows(setup, "Contacts?$filter=FirstName eq 'One'")
            #expect(contact.map { $0["LastName"]?.stringValue } == ["One"])
            let bp2 = try await Self.backendRows(setup, "BusinessPartners?$filter=PartnerID eq 'BP2'")
            #expect(bp2.map { $0["Phone"]?.stringValue } == ["lost"])
            let names = try await Self.backendRows(
                setup, "Contacts?$filter=ContactID le \(ids[2])&$orderby=ContactID"
            ).map { $0["LastName"]?.stringValue ?? "-" }
            #expect(names.count == 3 && names[0] == "applied" && names[1] != "refused" && names[2] != "unsent")
            // With the failures dismissed, the device holds what the backend holds, the contact
            // with the backend's key.
            // (The change set's failures go together.)
            let id = try #require(failures.first?.int64("RequestID"))
            _ = try await device.execute(method: "DELETE", url: "ErrorArchive(\(id))")
            #expect(try await device.readEntities("ErrorArchive").isEmpty)
            try await device.download()
            #expect(try await GatewayDeltaTests.held(device) == (try await GatewayDeltaTests.truth(setup)))
            #expect(try await setup.gateways[0].gateway.store.requestCounts().answered == 6)
            await device.close()
            // The same batch twice (the device's answer lost): the repeat comes from the record.
            await setup.backend.service.journal.clear()
            let batch = Self.batch(id: UUID().uuidString, name: "Twice")
            let root = setup.gateways[0].root.absoluteString
            let (first, firstAnswer) = try await Self.send(batch, to: root)
            let (second, secondAnswer) = try await Self.send(batch, to: root)
            #expect(first.status < 300 && second.status < 300)
            #expect(firstAnswer?.operations.first?.message.status == 201)
            #expect(secondAnswer?.operations.first?.message.status == 201)
            #expect(secondAnswer?.operations.first?.message.headers["Repeatability-Result"] == "accepted")
            #expect(await setup.backend.service.journal.requests().filter { $0.hasPrefix("POST") }.count == 1)
            #expect(try await Self.backendRows(setup, "Contacts?$filter=FirstName eq 'Twice'").count == 1)
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}

/// Issue 36, item 2: a backend without ETags (the reference server with them off). The
/// gateway gives rows ETags from their hashes and checks a device's update against the
/// backend's current row: another user's change is not overwritten unseen.
@Suite(.serialized) struct GatewayETagTests {
    /// Two devices change one entity at the same moment, through two instances, with the same
    /// gateway ETag, on a slow backend without ETags: the checks are made one after the other,
    /// so one change applies and the other gets 412 (both passed their check before).
    @Test(arguments: [false, true])
    func twoDevicesChangingOneEntityAtOnceAreCheckedInTurn(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2, instances: 2,
            backendOptions: {
                $0.sendsETags = false
                $0.honorsRepeatableRequests = false
            })
        do {
            let first = try await GatewayDeltaTests.device(setup, gateway: 0, name: "first")
            let second = try await GatewayDeltaTests.device(setup, gateway: 1, name: "second")
            let etags = [
                try await first.readEntities("BusinessPartners('BP1')").first?.control.etag,
                try await second.readEntities("BusinessPartners('BP1')").first?.control.etag,
            ]
            #expect(etags[0]?.hasPrefix("W/\"gw.") == true && etags[0] == etags[1], "\(etags)")
            _ = try await first.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"first"}"#.utf8))
            _ = try await second.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"second"}"#.utf8))
            await setup.backend.service.faults.set([
                FaultRule(method: "POST", urlContains: "$batch", delayMilliseconds: 1500)
            ])
            async let one: Void = first.upload()
            async let other: Void = second.upload()
            _ = try await (one, other)
            let failures = [
                try await first.readEntities("ErrorArchive"), try await second.readEntities("ErrorArchive"),
            ]
            #expect(failures.map(\.count).sorted() == [0, 1], "\(failures)")
            let loser = failures[0].isEmpty ? failures[1] : failures[0]
            #expect(loser.first?.int64("HTTPStatusCode") == 412)
            let winner = failures[0].isEmpty ? "first" : "second"
            let bp1 = try await GatewayUploadTests.backendRows(setup, "BusinessPartners?$filter=PartnerID eq 'BP1'")
            #expect(bp1.first?["Phone"]?.stringValue == winner)
            #expect(await GatewayUploadTests.batches(setup) == 1)
            await first.close()
            await second.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    @Test(arguments: [false, true])
    func aConcurrentChangeOnABackendWithoutETagsIs412(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2, instances: 1,
            backendOptions: {
                $0.sendsETags = false
                $0.honorsRepeatableRequests = false
            })
        do {
            // The backend gives no ETag; the gateway does.
            var headers = HTTPHeaders()
            headers["Accept"] = "application/json"
            let direct = try await DefaultTransport.make().send(
                TransportRequest(method: "GET", url: setup.backendRoot + "BusinessPartners('BP1')", headers: headers),
                timeout: 30)
            let directText = String(decoding: direct.body, as: UTF8.self)
            #expect(direct.headers["ETag"] == nil && !directText.contains("etag"), "\(directText)")
            let device = try await GatewayDeltaTests.device(setup, gateway: 0, name: "etags")
            // Another user changes BP1's e-mail on the backend; the device changes its phone.
            #expect(
                try await GatewayDeltaTests.backendSend(
                    setup, "PATCH", "BusinessPartners('BP1')", #"{"Email":"office@example.com"}"#) < 300)
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP1')",
                body: Array(#"{"Phone":"field"}"#.utf8))
            // BP2 changed twice by the device alone, in two uploads without a download between.
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP2')",
                body: Array(#"{"Phone":"first"}"#.utf8))
            try await device.upload()
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP2')",
                body: Array(#"{"Phone":"second"}"#.utf8))
            try await device.upload()
            let failures = try await device.readEntities("ErrorArchive")
            #expect(failures.count == 1, "\(failures)")
            #expect(failures.first?.int64("HTTPStatusCode") == 412)
            #expect(failures.first?.string("RequestURL") == "BusinessPartners('BP1')")
            let bp1 = try await GatewayUploadTests.backendRows(setup, "BusinessPartners?$filter=PartnerID eq 'BP1'")
                .first
            #expect(bp1?["Email"]?.stringValue == "office@example.com")
            #expect(bp1?["Phone"]?.stringValue != "field")
            let bp2 = try await GatewayUploadTests.backendRows(setup, "BusinessPartners?$filter=PartnerID eq 'BP2'")
                .first
            #expect(bp2?["Phone"]?.stringValue == "second")
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}
