import Foundation
import ODataCore
import ODataServer
import ODataStore
import Testing
@testable import OfflineOData

/// A sales backend on loopback plus a folder for offline stores.
struct Fixture {
    let directory: URL
    let server: EmbeddedServer
    /// The providers made by `provider(…)`, closed by `stop()` so that their store files do
    /// not stay open after the test.
    let providers = Providers()

    final class Providers: @unchecked Sendable {
        // The lock guards `all` and `released`.
        private let lock = NSLock()
        private var all: [OfflineODataProvider] = []
        private var released = false
        func add(_ provider: OfflineODataProvider) { lock.withLock { all.append(provider) } }
        func closeAll() async {
            for provider in lock.withLock({ all }) { await provider.close() }
        }
        /// True the first time only: the fixture's place in the gate is given back once.
        func release() -> Bool {
            lock.withLock {
                defer { released = true }
                return !released
            }
        }
    }

    static func start(faults: [FaultRule] = [], pageSize: Int = 20,
                      configure: (inout ODataService.Options) -> Void = { _ in }) async throws -> Fixture {
        await FixtureGate.shared.acquire()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-offline-\(UUID().uuidString)")
        let server: EmbeddedServer
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            server = try await EmbeddedServer.sales(at: directory.appendingPathComponent("backend.sqlite").path, scale: 3, pageSize: pageSize, faults: faults,
                                                    supportDirectory: directory.appendingPathComponent("support").path, configure: configure)
        } catch {
            await FixtureGate.shared.release()
            throw error
        }
        return Fixture(directory: directory, server: server)
    }

    func parameters(key: String? = "offline-key") -> OfflineODataParameters {
        var parameters = OfflineODataParameters()
        parameters.storePath = directory
        parameters.storeEncryptionKey = key
        return parameters
    }

    func provider(v2: Bool = false, parameters: OfflineODataParameters? = nil, queries: [OfflineODataDefiningQuery] = Fixture.queries,
                  delegate: (any OfflineODataDelegate)? = nil) async throws -> OfflineODataProvider {
        let provider = OfflineODataProvider(serviceRoot: v2 ? server.v2Root : server.v4Root, parameters: parameters ?? self.parameters(), delegate: delegate)
        providers.add(provider)
        for query in queries { try await provider.add(definingQuery: query) }
        return provider
    }

    static let queries = [
        OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners"),
        OfflineODataDefiningQuery(name: "Orders", query: "SalesOrders?$expand=Items"),
        OfflineODataDefiningQuery(name: "Contacts", query: "Contacts"),
    ]

    /// Reads straight from the backend (not through the provider).
    func backend(_ url: String) async throws -> JSONValue {
        let response = try await DefaultTransport.make().send(TransportRequest(method: "GET", url: server.v4Root.absoluteString + url.replacingOccurrences(of: " ", with: "%20")), timeout: 10)
        return try JSONValue.parse(response.body)
    }

    /// Changes the backend directly, as another user would.
    @discardableResult
    func backendSend(_ method: String, _ url: String, _ body: String) async throws -> Int {
        var headers = ODataCore.HTTPHeaders()
        headers["Content-Type"] = "application/json"
        // Another user who does not care about concurrency (the backend requires If-Match).
        if method != "POST" { headers["If-Match"] = "*" }
        let response = try await DefaultTransport.make().send(TransportRequest(method: method, url: server.v4Root.absoluteString + url, headers: headers,
                                                                                  body: Array(body.utf8)), timeout: 10)
        return response.status
    }

    func stop() async {
        await providers.closeAll()
        await server.stop()
        try? FileManager.default.removeItem(at: directory)
        if providers.release() { await FixtureGate.shared.release() }
    }
}

/// Collects delegate calls.
final class Recorder: OfflineODataDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var _progress: [OfflineODataProgress] = []
    private var _failures: [OfflineODataFailedRequest] = []
    var progress: [OfflineODataProgress] { lock.withLock { _progress } }
    var failures: [OfflineODataFailedRequest] { lock.withLock { _failures } }
    func offlineODataProvider(didUpdate progress: OfflineODataProgress) { lock.withLock { _progress.append(progress) } }
    func offlineODataProvider(requestDidFail request: OfflineODataFailedRequest) { lock.withLock { _failures.append(request) } }
}

func count(_ result: QueryResult) -> Int {
    if case .collection(let collection) = result { return collection.entities.count }
    if case .count(let n) = result { return Int(n) }
    return -1
}

func string(_ entity: Entity?, _ name: String) -> String? {
    if case .primitive(.string(let text))? = entity?[name] { return text }
    return nil
}

@Suite(.serialized) struct ProviderTests {
    @Test func firstOpenDownloadsTheDefiningQueriesFollowingNextLinks() async throws {
        let fixture = try await Fixture.start(pageSize: 2)
        defer { Task { await fixture.stop() } }
        let recorder = Recorder()
        let provider = try await fixture.provider(delegate: recorder)
        try await provider.open()
        // The fill leaves the lookup (foreign-key) indexes to its end, and makes them there.
        let store = try await provider.openStore()
        let lookup = store.schema.lookupIndexStatements()
        #expect(lookup.contains { $0.contains("$fk/") }, "\(lookup)")
        let indexSQL = try await store.read { reader in try reader.connection.query("SELECT sql FROM sqlite_master WHERE type = 'index'") }
        for statement in lookup {
            #expect(indexSQL.contains { row in row.first == .text(statement.replacingOccurrences(of: " IF NOT EXISTS", with: "")) }, "\(statement)")
        }
        let backendPartners = try await fixture.backend("BusinessPartners/$count")
        let partners = try await provider.read("BusinessPartners/$count")
        #expect(partners == .count(Int64(backendPartners.serialized) ?? -1))
        #expect(count(partners) > 2, "more than one page must have been followed")
        let items = try await provider.read("SalesOrderItems/$count")
        #expect(count(items) > 0)
        // Full query language runs locally.
        let filtered = try await provider.read("SalesOrders?$filter=Items/any(i:i/Quantity gt 0)&$orderby=OrderID desc&$top=2&$select=OrderID")
        #expect(count(filtered) == 2)
        // Out of scope: ProductCategories was not in any defining query.
        #expect(try await provider.read("ProductCategories") == .collection(EntityCollection()))
        // Progress: every open step in order, English by default here.
        let steps = recorder.progress.filter { $0.operation == .open }.map(\.step)
        #expect(steps.first == .loadingMetadata)
        #expect(steps.contains(.processingDefiningQueries) && steps.contains(.buildingEntityStore))
        let message = recorder.progress.first { $0.step == .processingDefiningQueries }?.message
        #expect(message == "Performing step 4 of 7 : Processing defining queries Partners using /BusinessPartners")
        // Steps 4 to 6 repeat per defining query and page (the pages go into the new store as
        // they arrive); every other step comes once, in order.
        let numbers = recorder.progress.filter { $0.operation == .open }.map(\.stepNumber)
        #expect(numbers.filter { $0 < 4 || $0 > 6 } == [1, 2, 3, 7], "\(numbers)")
        #expect(numbers.filter { $0 == 6 }.count > 3, "one building step per page")
        await provider.close()
        // A later open only opens the file (the backend is not asked for metadata again)...
        await fixture.server.service.faults.set([FaultRule(urlContains: "$metadata", status: 500)])
        let again = try await fixture.provider(queries: [])
        try await again.open()
        #expect(try await again.read("BusinessPartners/$count") == partners)
        #expect(await again.currentDefiningQueries.map(\.name) == ["Partners", "Orders", "Contacts"])
        await again.close()
        // ...and checks the key.
        var wrong = fixture.parameters(key: "wrong")
        wrong.storeName = "localstore"
        let badKey = OfflineODataProvider(serviceRoot: fixture.server.v4Root, parameters: wrong)
        await #expect(throws: OfflineODataError.self) { try await badKey.open() }
    }

    @Test func functionImportsAreRefusedAndBadRequestsNamed() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        do {
            _ = try await provider.read("GetProductsByCategory(CategoryID='C1')")
            Issue.record("a function import must be refused")
        } catch let error as OfflineODataError {
            #expect(error.code == .notSupportedOffline)
            #expect(error.message.contains("GetProductsByCategory"))
        }
        do {
            _ = try await provider.execute(method: "POST", url: "ConfirmOrder", body: Array("{}".utf8))
            Issue.record("an action import must be refused")
        } catch let error as OfflineODataError {
            #expect(error.code == .notSupportedOffline)
        }
        #expect(try await provider.isRequestQueueEmpty)
        do {
            _ = try await provider.read("BusinessPartners?$filter=CompanyName eq")
            Issue.record("a malformed URL must fail")
        } catch let error as OfflineODataError {
            #expect(error.code == .invalidRequest)
            #expect(error.message.contains("CompanyName eq"))
        }
        do {
            _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('nope')", body: Array("{\"Phone\":\"1\"}".utf8))
            Issue.record("a missing entity must fail")
        } catch let error as OfflineODataError {
            #expect(error.message.contains("not in the offline store"))
        }
    }

    @Test func localWritesQueueAndUploadWithContentIDs() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        #expect(try await provider.isRequestQueueEmpty)
        let partner = try #require(try await provider.readEntities("BusinessPartners?$top=1").first)
        let partnerID = try #require(string(partner, "PartnerID"))
        // Update: local store changed and queued, in one transaction.
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('\(partnerID)')", body: Array("{\"Phone\":\"+49 555\"}".utf8),
                                       options: OfflineODataRequestOptions(customTag: "phone"))
        #expect(string(try await provider.readEntities("BusinessPartners('\(partnerID)')").first, "Phone") == "+49 555")
        #expect(try await provider.hasPendingUpload)
        #expect(count(try await provider.read("BusinessPartners?$filter=sap.hasPendingChanges()")) == 1)
        #expect(count(try await provider.read("BusinessPartners?$filter=isLocal()")) == 1)
        // Create with a backend-generated key: a local key, then a child bound to it and an update of it.
        let created = try await provider.execute(method: "POST", url: "Contacts",
                                                 body: Array("{\"FirstName\":\"Ada\",\"LastName\":\"Local\",\"PartnerID\":\"\(partnerID)\"}".utf8))
        guard case .entity(let contact?)? = created.result, case .primitive(.int64(let localID))? = contact["ContactID"] else {
            Issue.record("no local key")
            return
        }
        #expect(localID < 0)
        _ = try await provider.execute(method: "PATCH", url: "Contacts(\(localID))", body: Array("{\"Email\":\"ada@example.com\"}".utf8))
        let queue = try await provider.read("RequestQueue?$orderby=RequestID")
        #expect(count(queue) == 3)
        #expect(count(try await provider.read("RequestQueue?$filter=CustomTag eq 'phone'")) == 1)
        try await provider.upload()
        #expect(try await provider.isRequestQueueEmpty)
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        // The backend has the changes, once each.
        let backendPartner = try await fixture.backend("BusinessPartners('\(partnerID)')")
        #expect(backendPartner["Phone"]?.stringValue == "+49 555")
        let backendContacts = try await fixture.backend("Contacts?$filter=LastName eq 'Local'")
        let rows = backendContacts["value"]?.arrayValue ?? []
        #expect(rows.count == 1)
        #expect(rows.first?["Email"]?.stringValue == "ada@example.com")
        // The local read link still works and now shows the backend's key.
        let relinked = try #require(try await provider.readEntities("Contacts(\(localID))").first)
        guard case .primitive(.int64(let serverID))? = relinked["ContactID"] else { Issue.record("no key"); return }
        #expect(serverID > 0)
        #expect(rows.first?["ContactID"] == .number("\(serverID)"))
        #expect(count(try await provider.read("BusinessPartners?$filter=sap.hasPendingChanges()")) == 0)
        // The local link also works for later changes, which reach the backend's entity.
        _ = try await provider.execute(method: "PATCH", url: "Contacts(\(localID))", body: Array("{\"Email\":\"ada@backend.example\"}".utf8))
        try await provider.upload()
        #expect(try await fixture.backend("Contacts(\(serverID))")["Email"]?.stringValue == "ada@backend.example")
        // After a download the entities are no longer local.
        try await provider.download()
        #expect(count(try await provider.read("Contacts?$filter=isLocal()")) == 0)
        #expect(count(try await provider.read("EventLog?$filter=Type eq 'Upload'")) == 2)
        #expect(count(try await provider.read("EventLog?$filter=Type eq 'Download'")) == 1)
    }

    @Test func failedRequestsGoToTheErrorArchiveWithTheirDependants() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let recorder = Recorder()
        let provider = try await fixture.provider(delegate: recorder)
        try await provider.open()
        let events = await provider.events()
        let partners = try await provider.readEntities("BusinessPartners?$orderby=PartnerID&$top=2")
        let first = try #require(string(partners.first, "PartnerID"))
        let second = try #require(string(partners.last, "PartnerID"))
        // 1: rejected by the backend (4xx); 2: ETag conflict; 3: depends on 1 (same entity), not sent.
        await fixture.server.service.faults.set([FaultRule(method: "PATCH", bodyContains: "REJECT", status: 400, code: "Invalid", message: "Phone is not valid")])
        #expect(try await fixture.backendSend("PATCH", "BusinessPartners('\(second)')", "{\"Email\":\"changed@backend\"}") < 300)
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('\(first)')", body: Array("{\"Phone\":\"REJECT\"}".utf8),
                                       options: OfflineODataRequestOptions(customTag: "one"))
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('\(second)')", body: Array("{\"Phone\":\"2\"}".utf8))
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('\(first)')", body: Array("{\"Email\":\"x@y\"}".utf8))
        try await provider.upload()
        // One callback per ErrorArchive row, in queue order; the dependant was never sent and
        // is reported with 424 naming the request it depends on.
        #expect(recorder.failures.map(\.httpStatus) == [400, 412, 424])
        #expect(recorder.failures.first?.code == "Invalid")
        #expect(recorder.failures.first?.customTag == "one")
        #expect(recorder.failures.last?.message == "Not sent: it depends on request \(recorder.failures.first?.requestID ?? 0), which failed")
        #expect(count(try await provider.read("ErrorArchive")) == 3)
        #expect(count(try await provider.read("ErrorArchive?$filter=HTTPStatusCode eq 400&$top=10")) == 1)
        let archived = try await provider.readEntities("ErrorArchive?$orderby=RequestID")
        #expect(string(archived.first, "Message") == "Phone is not valid")
        #expect(string(archived.first, "RequestMethod") == "PATCH")
        #expect(string(archived.last, "Code") == "DependencyFailed")
        // The backend never saw request 3.
        #expect(try await fixture.backend("BusinessPartners('\(first)')")["Email"]?.stringValue != "x@y")
        // AffectedEntity reads the local entity, which is in error state.
        guard case .primitive(.int64(let id))? = archived.first?["RequestID"] else { Issue.record("no id"); return }
        let affected = try await provider.readEntities("ErrorArchive(\(id))/AffectedEntity")
        #expect(string(affected.first, "PartnerID") == first)
        #expect(string(affected.first, "Phone") == "REJECT")
        #expect(count(try await provider.read("BusinessPartners?$filter=sap.inErrorState()")) == 2)
        // The same failures arrive on the AsyncSequence.
        let reader = Task {
            var streamed = 0
            for await event in events {
                if case .requestFailed = event { streamed += 1 }
                if streamed == 2 { break }
            }
            return streamed
        }
        let watchdog = Task {
            try await Task.sleep(nanoseconds: 5_000_000_000)
            reader.cancel()
        }
        let streamed = await reader.value
        watchdog.cancel()
        #expect(streamed == 2)
        // Deleting any row clears the archive and reverts those changes.
        _ = try await provider.execute(method: "DELETE", url: "ErrorArchive(\(id))")
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        let reverted = try await provider.readEntities("BusinessPartners('\(first)')")
        #expect(string(reverted.first, "Phone") != "REJECT")
        #expect(count(try await provider.read("BusinessPartners?$filter=sap.inErrorState()")) == 0)
        #expect(try await provider.isRequestQueueEmpty)
    }

    @Test func aLostResponseIsResentAndAppliedOnce() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        await fixture.server.service.faults.set([FaultRule(method: "POST", urlContains: "$batch", dropAfterCommit: true, times: 1)])
        _ = try await provider.execute(method: "POST", url: "Contacts", body: Array("{\"FirstName\":\"Once\",\"LastName\":\"Only\"}".utf8))
        await #expect(throws: OfflineODataError.self) { try await provider.upload() }
        // Nothing lost: the request is still queued.
        #expect(try await !provider.isRequestQueueEmpty)
        try await provider.upload()
        #expect(try await provider.isRequestQueueEmpty)
        let rows = try await fixture.backend("Contacts?$filter=LastName eq 'Only'")["value"]?.arrayValue ?? []
        #expect(rows.count == 1)
    }

    @Test func withoutBatchRequestsGoOneByOneAndCategoriesFilter() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        var parameters = fixture.parameters()
        parameters.backendSupportsBatch = false
        let provider = try await fixture.provider(parameters: parameters)
        try await provider.open()
        await fixture.server.service.faults.set([FaultRule(urlContains: "$batch", status: 501, code: "NoBatch", message: "no batch here")])
        let partner = try #require(string(try await provider.readEntities("BusinessPartners?$top=1").first, "PartnerID"))
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('\(partner)')", body: Array("{\"Phone\":\"cat-a\"}".utf8),
                                       options: OfflineODataRequestOptions(uploadCategory: "a"))
        let created = try await provider.execute(method: "POST", url: "Contacts", body: Array("{\"FirstName\":\"B\",\"LastName\":\"CatB\"}".utf8),
                                                 options: OfflineODataRequestOptions(uploadCategory: "b", removeAfterUpload: true))
        guard case .entity(let contact?)? = created.result, case .primitive(.int64(let localID))? = contact["ContactID"] else { Issue.record("no key"); return }
        try await provider.upload(categories: ["a"])
        #expect(try await fixture.backend("BusinessPartners('\(partner)')")["Phone"]?.stringValue == "cat-a")
        #expect((try await fixture.backend("Contacts?$filter=LastName eq 'CatB'")["value"]?.arrayValue ?? []).isEmpty)
        #expect(count(try await provider.read("RequestQueue")) == 1)
        try await provider.upload(categories: ["b"])
        #expect((try await fixture.backend("Contacts?$filter=LastName eq 'CatB'")["value"]?.arrayValue ?? []).count == 1)
        // removeAfterUpload: the local copy is gone until the next download brings the backend's.
        #expect(try await provider.readEntities("Contacts(\(localID))").isEmpty)
        #expect(count(try await provider.read("Contacts?$filter=LastName eq 'CatB'")) == 0)
        try await provider.download()
        #expect(count(try await provider.read("Contacts?$filter=LastName eq 'CatB'")) == 1)
    }

    @Test func downloadAppliesDeltasAndKeepsPendingEdits() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let recorder = Recorder()
        let provider = try await fixture.provider(delegate: recorder)
        try await provider.open()
        let partners = try await provider.readEntities("BusinessPartners?$orderby=PartnerID")
        let changed = try #require(string(partners.first, "PartnerID"))
        let edited = try #require(string(partners.dropFirst().first, "PartnerID"))
        let before = count(try await provider.read("BusinessPartners"))
        // Server side: an update, an insert and a delete; locally: an unsent edit.
        #expect(try await fixture.backendSend("PATCH", "BusinessPartners('\(changed)')", "{\"CompanyName\":\"Renamed on server\"}") < 300)
        #expect(try await fixture.backendSend("POST", "BusinessPartners", "{\"PartnerID\":\"NEW1\",\"CompanyName\":\"New\"}") < 300)
        #expect(try await fixture.backendSend("PATCH", "BusinessPartners('\(edited)')", "{\"CompanyName\":\"Server wins?\"}") < 300)
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('\(edited)')", body: Array("{\"CompanyName\":\"Local edit\"}".utf8))
        try await provider.download(definingQueries: ["Partners"])
        #expect(string(try await provider.readEntities("BusinessPartners('\(changed)')").first, "CompanyName") == "Renamed on server")
        #expect(count(try await provider.read("BusinessPartners")) == before + 1)
        #expect(string(try await provider.readEntities("BusinessPartners('\(edited)')").first, "CompanyName") == "Local edit")
        #expect(count(try await provider.read("BusinessPartners?$filter=sap.upsertedLastDownload()")) == 2)
        let steps = recorder.progress.filter { $0.operation == .download }.map(\.step)
        #expect(steps.first == .processingDefiningQueries)
        #expect(steps.contains(.reapplyingChanges))
        // Undo after the download goes back to the backend's values (and ETag), which the
        // download kept for it; an edit made then uploads without a conflict.
        try await provider.undoPendingChanges(forURL: "BusinessPartners('\(edited)')")
        #expect(string(try await provider.readEntities("BusinessPartners('\(edited)')").first, "CompanyName") == "Server wins?")
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('\(edited)')", body: Array("{\"CompanyName\":\"Local again\"}".utf8))
        try await provider.upload()
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        #expect(try await fixture.backend("BusinessPartners('\(edited)')")["CompanyName"]?.stringValue == "Local again")
        // An entity deleted locally and changed on the backend stays deleted until the upload.
        let third = try #require(string(partners.dropFirst(2).first, "PartnerID"))
        try await provider.deleteEntity(in: "BusinessPartners", key: ["PartnerID": .string(third)])
        #expect(try await fixture.backendSend("PATCH", "BusinessPartners('\(third)')", "{\"CompanyName\":\"Changed meanwhile\"}") < 300)
        try await provider.download(definingQueries: ["Partners"])
        #expect(try await provider.readEntities("BusinessPartners('\(third)')").isEmpty)
        try await provider.undoPendingChanges(forURL: "BusinessPartners('\(third)')")
        #expect(string(try await provider.readEntities("BusinessPartners('\(third)')").first, "CompanyName") == "Changed meanwhile")
        // An entity edited locally and deleted on the backend keeps the edit until the upload;
        // undo then removes it, as the backend did.
        _ = try await provider.execute(method: "PATCH", url: "Contacts(1)", body: Array("{\"FirstName\":\"Edited\"}".utf8))
        #expect(try await fixture.backendSend("DELETE", "Contacts(1)", "") < 300)
        try await provider.download(definingQueries: ["Contacts"])
        #expect(string(try await provider.readEntities("Contacts(1)").first, "FirstName") == "Edited")
        try await provider.undoPendingChanges(forURL: "Contacts(1)")
        #expect(try await provider.readEntities("Contacts(1)").isEmpty)
        #expect(try await provider.isRequestQueueEmpty)
        // A delete on the server arrives as a delta removal.
        #expect(try await fixture.backendSend("DELETE", "BusinessPartners('NEW1')", "") < 300)
        try await provider.download()
        #expect(try await provider.readEntities("BusinessPartners('NEW1')").isEmpty)
        // A backend error during download leaves the store as it was.
        #expect(try await fixture.backendSend("PATCH", "BusinessPartners('\(changed)')", "{\"CompanyName\":\"Not yet\"}") < 300)
        await fixture.server.service.faults.set([FaultRule(method: "GET", urlContains: "SalesOrders", status: 503, code: "Down", message: "maintenance")])
        await #expect(throws: OfflineODataError.self) { try await provider.download() }
        #expect(string(try await provider.readEntities("BusinessPartners('\(changed)')").first, "CompanyName") == "Renamed on server")
        await fixture.server.service.faults.set([])
        try await provider.download()
        #expect(string(try await provider.readEntities("BusinessPartners('\(changed)')").first, "CompanyName") == "Not yet")
    }

    @Test func undoPendingChangesRestoresTheDownloadedState() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        let partner = try #require(try await provider.readEntities("BusinessPartners?$top=1").first)
        let id = try #require(string(partner, "PartnerID"))
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('\(id)')", body: Array("{\"Phone\":\"undo me\"}".utf8))
        try await provider.undoPendingChanges(for: "BusinessPartners", key: ["PartnerID": .string(id)])
        #expect(string(try await provider.readEntities("BusinessPartners('\(id)')").first, "Phone") == string(partner, "Phone"))
        #expect(try await provider.isRequestQueueEmpty)
        // A created entity disappears; a deleted one comes back.
        let created = try await provider.createEntity(Entity(properties: [NamedValue(name: "FirstName", value: .primitive(.string("Tmp")))]), in: "Contacts")
        guard case .primitive(let localKey)? = created["ContactID"] else { Issue.record("no key"); return }
        try await provider.undoPendingChanges(for: "Contacts", key: ["ContactID": localKey])
        #expect(try await provider.readEntities("Contacts(\(Literal.format(.primitive(localKey))))").isEmpty)
        try await provider.deleteEntity(in: "BusinessPartners", key: ["PartnerID": .string(id)])
        #expect(try await provider.readEntities("BusinessPartners('\(id)')").isEmpty)
        try await provider.undoPendingChanges(for: "BusinessPartners", key: ["PartnerID": .string(id)])
        #expect(string(try await provider.readEntities("BusinessPartners('\(id)')").first, "PartnerID") == id)
        #expect(try await provider.isRequestQueueEmpty)
    }

    /// Undo after part of an entity's requests reached the backend goes back to the backend's
    /// state after them, not to the state before the first local change.
    @Test func undoAfterAPartialUploadGoesBackToTheBackendsState() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        let partner = try #require(try await provider.readEntities("BusinessPartners?$orderby=PartnerID&$top=1").first)
        let id = try #require(string(partner, "PartnerID"))
        let first = OfflineODataRequestOptions(uploadCategory: "first")
        let second = OfflineODataRequestOptions(uploadCategory: "second")
        // An update sent, a second one waiting.
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('\(id)')", body: Array(#"{"Phone":"sent"}"#.utf8), options: first)
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('\(id)')", body: Array(#"{"Email":"waiting@example.com"}"#.utf8), options: second)
        // A create sent, its update waiting.
        let contact = try await provider.createEntity(Entity(properties: [NamedValue(name: "FirstName", value: .primitive(.string("Sent")))]), in: "Contacts", options: first)
        guard case .primitive(let localContact)? = contact["ContactID"] else { Issue.record("no key"); return }
        let contactURL = "Contacts(\(Literal.format(.primitive(localContact))))"
        _ = try await provider.execute(method: "PATCH", url: contactURL, body: Array(#"{"LastName":"Waiting"}"#.utf8), options: second)
        // A link removed and sent, an update of the same contact waiting.
        _ = try await provider.execute(method: "DELETE", url: "Contacts(1)/Partner/$ref", options: first)
        _ = try await provider.execute(method: "PATCH", url: "Contacts(1)", body: Array(#"{"LastName":"Also waiting"}"#.utf8), options: second)
        try await provider.upload(categories: ["first"])
        #expect(count(try await provider.read("ErrorArchive")) == 0)

        try await provider.undoPendingChanges(forURLs: ["BusinessPartners('\(id)')", contactURL, "Contacts(1)"])
        #expect(try await provider.isRequestQueueEmpty)
        let undone = try await provider.readEntities("BusinessPartners('\(id)')").first
        #expect(string(undone, "Phone") == "sent")
        #expect(string(undone, "Email") == string(partner, "Email"))
        let created = try await provider.readEntities(contactURL).first
        #expect(string(created, "FirstName") == "Sent")
        #expect(string(created, "LastName") == nil)
        #expect(string(try await provider.readEntities("Contacts(1)").first, "LastName") != "Also waiting")
        #expect(try await provider.readEntities("Contacts(1)").count == 1)
        // The kept ETag is the backend's: a new change uploads without a conflict.
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('\(id)')", body: Array(#"{"Phone":"after undo"}"#.utf8))
        _ = try await provider.execute(method: "PATCH", url: contactURL, body: Array(#"{"LastName":"after undo"}"#.utf8))
        try await provider.upload()
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        #expect(try await fixture.backend("BusinessPartners('\(id)')")["Phone"]?.stringValue == "after undo")
    }

    @Test func theStoreAndQueuePersistAcrossRestartsAndV2Works() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: true)
        try await provider.open()
        let partner = try #require(string(try await provider.readEntities("BusinessPartners?$top=1").first, "PartnerID"))
        _ = try await provider.execute(method: "MERGE", url: "BusinessPartners('\(partner)')", body: Array("{\"Phone\":\"v2 phone\"}".utf8))
        await provider.close()
        // A new provider (as after a restart) finds the queue and uploads it.
        let restarted = try await fixture.provider(v2: true, queries: [])
        try await restarted.open()
        #expect(try await restarted.hasPendingUpload)
        try await restarted.upload()
        #expect(try await restarted.isRequestQueueEmpty)
        #expect(try await fixture.backend("BusinessPartners('\(partner)')")["Phone"]?.stringValue == "v2 phone")
        try await restarted.download()
        #expect(count(try await restarted.read("SalesOrderItems")) > 0)
    }

    /// The V2 side of failures, conflicts and deltas: MERGE requests in a V2 `$batch`, a 4xx
    /// and an ETag conflict archived with their dependant, and downloads through `!deltatoken`.
    @Test func v2UploadFailuresConflictsAndDeltaDownloads() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let recorder = Recorder()
        let provider = try await fixture.provider(v2: true, queries: [OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners")], delegate: recorder)
        try await provider.open()
        let partners = try await provider.readEntities("BusinessPartners?$orderby=PartnerID&$top=3")
        let ids = partners.compactMap { string($0, "PartnerID") }
        try #require(ids.count == 3)
        await fixture.server.service.faults.set([FaultRule(method: "MERGE", bodyContains: "REJECT", status: 400, code: "Invalid", message: "Phone is not valid")])
        #expect(try await fixture.backendSend("PATCH", "BusinessPartners('\(ids[1])')", "{\"Email\":\"changed@backend\"}") < 300)
        await fixture.server.service.journal.clear()
        _ = try await provider.execute(method: "MERGE", url: "BusinessPartners('\(ids[0])')", body: Array("{\"Phone\":\"REJECT\"}".utf8))
        _ = try await provider.execute(method: "MERGE", url: "BusinessPartners('\(ids[1])')", body: Array("{\"Phone\":\"2\"}".utf8))
        _ = try await provider.execute(method: "MERGE", url: "BusinessPartners('\(ids[0])')", body: Array("{\"Email\":\"x@y\"}".utf8))
        _ = try await provider.execute(method: "MERGE", url: "BusinessPartners('\(ids[2])')", body: Array("{\"Phone\":\"fine\"}".utf8))
        try await provider.upload()
        let sent = await fixture.server.service.journal.requests()
        // A batch never changes one entity twice: the second change of ids[0] would start the
        // next batch, but it depends on the rejected one and is not sent. The 412 of ids[1]
        // reads the backend's copy to keep it with the ErrorArchive row (SPEC §15).
        #expect(sent == ["""
            POST $batch
              changeset
                MERGE BusinessPartners('\(ids[0])') {"Phone":"REJECT"}
              changeset
                MERGE BusinessPartners('\(ids[1])') {"Phone":"2"}
            """, "GET BusinessPartners('\(ids[1])')", """
            POST $batch
              changeset
                MERGE BusinessPartners('\(ids[2])') {"Phone":"fine"}
            """])
        #expect(!sent.joined().contains("x@y"), "the dependant is not sent")
        #expect(recorder.failures.map(\.httpStatus) == [400, 412, 424])
        let archived = try await provider.readEntities("ErrorArchive?$orderby=RequestID")
        #expect(archived.map { string($0, "Code") ?? "" } == ["Invalid", "PreconditionFailed", "DependencyFailed"])
        #expect(recorder.failures.map(\.code) == ["Invalid", "PreconditionFailed", "DependencyFailed"])
        #expect(string(archived.first, "RequestMethod") == "MERGE")
        #expect(try await fixture.backend("BusinessPartners('\(ids[2])')")["Phone"]?.stringValue == "fine")
        #expect(try await fixture.backend("BusinessPartners('\(ids[1])')")["Phone"]?.stringValue != "2", "the conflicting change is not applied")
        #expect(count(try await provider.read("BusinessPartners?$filter=sap.inErrorState()")) == 2)

        // Downloads ask for the changes since the last one (`!deltatoken`): an update, an
        // insert, then a delete on the backend.
        await fixture.server.service.faults.set([])
        #expect(try await fixture.backendSend("PATCH", "BusinessPartners('\(ids[2])')", "{\"CompanyName\":\"Renamed on server\"}") < 300)
        #expect(try await fixture.backendSend("POST", "BusinessPartners", "{\"PartnerID\":\"NEWV2\",\"CompanyName\":\"New\"}") < 300)
        await fixture.server.service.journal.clear()
        try await provider.download()
        // (Besides the $metadata check every download starts with, SPEC §14.)
        let downloads = await fixture.server.service.journal.requests().filter { !$0.contains("$metadata") }
        #expect(downloads.count == 1 && downloads[0].contains("!deltatoken"), "\(downloads)")
        #expect(string(try await provider.readEntities("BusinessPartners('\(ids[2])')").first, "CompanyName") == "Renamed on server")
        #expect(try await provider.readEntities("BusinessPartners('NEWV2')").count == 1)
        #expect(try await fixture.backendSend("DELETE", "BusinessPartners('NEWV2')", "") < 300)
        try await provider.download()
        #expect(try await provider.readEntities("BusinessPartners('NEWV2')").isEmpty)
    }

    @Test func sendStoreSendsAReKeyedCopyInChunks() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let recorder = Recorder()
        let provider = try await fixture.provider(delegate: recorder)
        try await provider.open()
        let partner = try #require(string(try await provider.readEntities("BusinessPartners?$top=1").first, "PartnerID"))
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('\(partner)')", body: Array(#"{"Phone":"queued"}"#.utf8))
        let url = try #require(URL(string: "/support/stores/device-1.db", relativeTo: fixture.server.v4Root)).absoluteString
        // An encrypted store is never sent with the app's key.
        await #expect(throws: OfflineODataError.self) { try await provider.sendStore(to: url) }
        try await provider.sendStore(to: url, supportKey: "support-key", chunkSize: 64 * 1024)
        let updates = recorder.progress.filter { $0.operation == .sendStore }
        let total = Int(updates.last?.parameters["totalBytes"] ?? "") ?? 0
        #expect(total > 64 * 1024, "the copy takes several chunks")
        #expect(updates.count == 1 + (total + 64 * 1024 - 1) / (64 * 1024), "one update before the first chunk and one per chunk")
        #expect(updates.allSatisfy { $0.step == .sendingEntityStoreDatabase })
        #expect(updates.last?.parameters["sentBytes"] == "\(total)")
        // What arrived is a whole store: it opens with the support key (not the app's) and has
        // the entities and the queued change.
        let received = fixture.directory.appendingPathComponent("support/device-1.db").path
        #expect((try FileManager.default.attributesOfItem(atPath: received)[.size] as? NSNumber)?.intValue == total)
        #expect(throws: DatabaseError.self) { try Connection(path: received, options: Connection.Options(key: "offline-key")) }
        let copy = try Connection(path: received, options: Connection.Options(key: "support-key"))
        let partners = try copy.query("SELECT count(*) FROM \"es_BusinessPartners\"").first?.first
        #expect(partners == .integer(Int64(count(try await provider.read("BusinessPartners")))))
        #expect(try copy.query("SELECT method, url FROM oo_queue") == [[.text("PATCH"), .text("BusinessPartners('\(partner)')")]])
        copy.close()
        let events = try await provider.readEntities("EventLog?$filter=Type eq 'SendStore'")
        #expect(events.count == 1)
        // The server lists it; a chunk that does not continue the file is refused.
        let listing = try await DefaultTransport.make().send(TransportRequest(method: "GET", url: try #require(URL(string: "/support/stores", relativeTo: fixture.server.v4Root)).absoluteString), timeout: 10)
        #expect(try JSONValue.parse(listing.body).arrayValue?.first?["name"]?.stringValue == "device-1.db")
        let gap = try await DefaultTransport.make().send(TransportRequest(method: "POST", url: url, headers: HTTPHeaders([("Content-Range", "bytes 5-6/10")]), body: [1, 2]), timeout: 10)
        #expect(gap.status == 416)
        let badName = try await DefaultTransport.make().send(TransportRequest(method: "POST", url: url.replacingOccurrences(of: "device-1.db", with: "..%2Fescape"),
                                                                               headers: HTTPHeaders([("Content-Range", "bytes 0-1/2")]), body: [1, 2]), timeout: 10)
        #expect(badName.status == 400)
        // An unencrypted store goes as it is, unless a support key is given.
        var plainParameters = fixture.parameters(key: nil)
        plainParameters.storeName = "plain"
        let plain = try await fixture.provider(parameters: plainParameters, queries: [OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners")])
        try await plain.open()
        try await plain.sendStore(to: url.replacingOccurrences(of: "device-1.db", with: "device-2.db"))
        let plainCopy = try Connection(path: fixture.directory.appendingPathComponent("support/device-2.db").path)
        #expect(try plainCopy.query("SELECT count(*) FROM \"es_BusinessPartners\"").first?.first == partners)
        plainCopy.close()
    }

    @Test func definingQueriesThatRetrieveStreamsKeepMediaOffline() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        func putMedia(_ id: String, _ bytes: [UInt8], _ type: String) async throws -> Int {
            var headers = ODataCore.HTTPHeaders()
            headers["Content-Type"] = type
            headers["If-Match"] = "*"
            return try await DefaultTransport.make().send(TransportRequest(method: "PUT", url: fixture.server.v4Root.absoluteString + "ProductPictures('\(id)')/$value",
                                                                              headers: headers, body: bytes), timeout: 10).status
        }
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0, 1, 2, 255]
        #expect(try await putMedia("PIC0", png, "image/png") < 300)
        #expect(try await putMedia("PIC1", Array("first".utf8), "text/plain") < 300)
        let queries = [OfflineODataDefiningQuery(name: "Pictures", query: "ProductPictures", automaticallyRetrievesStreams: true),
                       OfflineODataDefiningQuery(name: "Products", query: "Products")]
        let provider = try await fixture.provider(queries: queries)
        try await provider.open()
        let first = try await provider.execute(method: "GET", url: "ProductPictures('PIC0')/$value")
        #expect(first.status == 200)
        #expect(first.body == png)
        #expect(first.headers["Content-Type"] == "image/png")
        #expect(try await provider.read("ProductPictures('PIC1')/$value") == .value(.primitive(.binary(Data("first".utf8)))))
        // A picture the backend has no stream for, and one that is not there at all.
        await #expect(throws: OfflineODataError.self) { try await provider.read("ProductPictures('PIC2')/$value") }
        #expect(try await provider.execute(method: "GET", url: "ProductPictures('NOPE')/$value").status == 404)
        // A download brings changed streams and drops those of deleted entities.
        #expect(try await putMedia("PIC1", Array("second".utf8), "text/plain") < 300)
        #expect(try await fixture.backendSend("DELETE", "ProductPictures('PIC0')", "") < 300)
        try await provider.download()
        #expect(try await provider.execute(method: "GET", url: "ProductPictures('PIC1')/$value").body == Array("second".utf8))
        #expect(try await provider.execute(method: "GET", url: "ProductPictures('PIC0')/$value").status == 404)
        let store = try await provider.openStore()
        let kept = try await store.read { reader in try reader.connection.query("SELECT entity_key FROM oo_streams ORDER BY entity_key") }
        #expect(kept == [[.text("('PIC1')")]])
        // A stream the backend no longer has goes with the download that finds it gone.
        #expect(try await fixture.backendSend("PATCH", "ProductPictures('PIC1')", #"{"Caption":"no picture now"}"#) < 300)
        await fixture.server.service.faults.set([FaultRule(method: "GET", urlContains: "PIC1')/$value", status: 404, code: "NotFound", message: "no stream")])
        try await provider.download()
        await fixture.server.service.faults.set([])
        await #expect(throws: OfflineODataError.self) { try await provider.read("ProductPictures('PIC1')/$value") }
        #expect(try await store.read { reader in try reader.connection.query("SELECT count(*) FROM oo_streams").first?.first } == .integer(0))
        await provider.close()
        // A media read link to another host is not followed (the provider's headers and cookies
        // would go with it): the stream comes from the service's own `$value`.
        var foreignParameters = fixture.parameters()
        foreignParameters.storeName = "foreign"
        let foreign = ForeignMediaLinkTransport()
        let guarded = OfflineODataProvider(serviceRoot: fixture.server.v4Root, parameters: foreignParameters, transport: foreign)
        try await guarded.add(definingQuery: queries[0])
        try await guarded.open()
        #expect(try await guarded.execute(method: "GET", url: "ProductPictures('PIC1')/$value").body == Array("second".utf8))
        #expect(await foreign.urls.allSatisfy { !$0.contains("elsewhere.invalid") })
        #expect(await foreign.urls.contains { $0.hasSuffix("ProductPictures('PIC1')/$value") })
        await guarded.close()
        // Without automaticallyRetrievesStreams no stream is stored, and reading one says why.
        var parameters = fixture.parameters()
        parameters.storeName = "nostreams"
        let plain = try await fixture.provider(parameters: parameters, queries: [OfflineODataDefiningQuery(name: "Pictures", query: "ProductPictures")])
        try await plain.open()
        do {
            _ = try await plain.read("ProductPictures('PIC1')/$value")
            Issue.record("a stream that was not retrieved cannot be read")
        } catch let error as OfflineODataError {
            #expect(error.code == .notSupportedOffline && error.message.contains("automaticallyRetrievesStreams"), "\(error.message)")
        }
    }

    @Test func definingQueriesFollowTheRules() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        await #expect(throws: OfflineODataError.self) { try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "Partners", query: "Products")) }
        await #expect(throws: OfflineODataError.self) { try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "P2", query: "BusinessPartners")) }
        // A second query over the same entity set shares its rows.
        try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "GermanPartners", query: "BusinessPartners?$filter=Address/Country eq 'DE'"))
        try await provider.open()
        let all = count(try await provider.read("BusinessPartners"))
        try await provider.remove(definingQueryNamed: "GermanPartners")
        #expect(count(try await provider.read("BusinessPartners")) == all)
        // Added after open: filled by the next download.
        try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "Products", query: "Products"))
        #expect(count(try await provider.read("Products")) == 0)
        try await provider.download(definingQueries: ["Products"])
        #expect(count(try await provider.read("Products")) > 0)
        // Removing the only query over a set removes its data, with the sets of its expands.
        try await provider.remove(definingQueryNamed: "Products")
        #expect(count(try await provider.read("Products")) == 0)
        #expect(count(try await provider.read("SalesOrderItems")) > 0)
        try await provider.remove(definingQueryNamed: "Orders")
        let store = try await provider.openStore()
        #expect(try await store.query("SalesOrders/$count") == .count(0))
        #expect(try await store.query("SalesOrderItems/$count") == .count(0))
    }

    @Test func progressMessagesComeInTheDeviceLanguage() async throws {
        let messages = ProgressMessages.shared
        #expect(messages.availableLanguages.count == 30)
        #expect(messages.language(for: Locale(identifier: "de_DE")) == "de")
        #expect(messages.language(for: Locale(identifier: "zh_TW")) == "zh-Hant")
        #expect(messages.language(for: Locale(identifier: "zh_CN")) == "zh-Hans")
        #expect(messages.language(for: Locale(identifier: "nb_NO")) == "no")
        #expect(messages.language(for: Locale(identifier: "xx_YY")) == "en")
        let english = messages.message(step: .processingDefiningQueries, number: 3, total: 9, parameters: ["name": "Customers", "url": "/Customers"], language: "en")
        #expect(english == "Performing step 3 of 9 : Processing defining queries Customers using /Customers")
        for language in messages.availableLanguages where language != "en" {
            let text = messages.message(step: .processingDefiningQueries, number: 3, total: 9, parameters: ["name": "Customers", "url": "/Customers"], language: language)
            #expect(text != english, "\(language) must be translated")
            #expect(text.contains("Customers") && text.contains("3") && text.contains("9"), "\(language): \(text)")
        }
    }

    @Test func linksDeepInsertAndRequestHeadersTravel() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        var parameters = fixture.parameters()
        parameters.customHeaders = ["X-App": "field-sales"]
        parameters.customCookies = ["session": "abc"]
        parameters.urlSuffix = "sap-client=100"
        let recording = RecordingTransport()
        let provider = OfflineODataProvider(serviceRoot: fixture.server.v4Root, parameters: parameters, transport: recording)
        for query in Fixture.queries { try await provider.add(definingQuery: query) }
        try await provider.open()
        // Deep insert: an order with two items, then a link of the order to another partner.
        let partners = try await provider.readEntities("BusinessPartners?$orderby=PartnerID&$top=2")
        let first = try #require(string(partners.first, "PartnerID"))
        let second = try #require(string(partners.last, "PartnerID"))
        let body = """
        {"OrderID":"DEEP1","PartnerID":"\(first)","Currency":"EUR","Items":[
          {"OrderID":"DEEP1","ItemPosition":1,"ProductID":"P0","Quantity":2},{"OrderID":"DEEP1","ItemPosition":2,"ProductID":"P1","Quantity":3}]}
        """
        _ = try await provider.execute(method: "POST", url: "SalesOrders", body: Array(body.utf8))
        #expect(count(try await provider.read("SalesOrders('DEEP1')/Items")) == 2)
        _ = try await provider.execute(method: "PUT", url: "SalesOrders('DEEP1')/Partner/$ref",
                                       body: Array("{\"@odata.id\":\"BusinessPartners('\(second)')\"}".utf8))
        #expect(string(try await provider.readEntities("SalesOrders('DEEP1')/Partner").first, "PartnerID") == second)
        try await provider.upload()
        #expect(count(try await provider.read("ErrorArchive")) == 0)
        let backendOrder = try await fixture.backend("SalesOrders('DEEP1')?$expand=Items")
        #expect(backendOrder["PartnerID"]?.stringValue == second)
        #expect(backendOrder["Items"]?.arrayValue?.count == 2)
        // Every request carried the custom header, cookie and URL suffix; modifications carried both
        // repeatability pairs with one ID per request.
        let sent = await recording.requests
        #expect(!sent.isEmpty)
        for request in sent {
            #expect(request.headers["X-App"] == "field-sales")
            #expect(request.headers["Cookie"] == "session=abc")
            #expect(request.url.contains("sap-client=100"), "\(request.url)")
        }
        // The link depends on the new order: it goes in the batch after the create's.
        let batches = try sent.filter { $0.url.contains("$batch") }.map { batch in
            try MultipartBatch.read(batch.body, boundary: batch.headers["Content-Type"].flatMap { HTTPHeaders.parameter("boundary", in: $0) })
        }
        #expect(batches.map(\.operations.count) == [1, 1])
        let operations = batches.flatMap(\.operations)
        let ids = operations.compactMap { $0.message.headers["Repeatability-Request-ID"] }
        #expect(ids.count == 2 && Set(ids).count == 2)
        #expect(operations.allSatisfy { $0.message.headers["RequestID"] == $0.message.headers["Repeatability-Request-ID"] })
        #expect(operations.allSatisfy { $0.message.headers["Repeatability-First-Sent"]?.hasSuffix("GMT") == true })
        #expect(operations.last?.message.headers["If-Match"] == nil, "a link change carries no If-Match")
    }

    @Test func anExpiredDeltaLinkFallsBackToAFullReadWithALocalDiff() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        let before = count(try await provider.read("Contacts"))
        let victim = try #require(try await provider.readEntities("Contacts?$top=1").first)
        guard case .primitive(.int64(let victimID))? = victim["ContactID"] else { Issue.record("no key"); return }
        #expect(try await fixture.backendSend("DELETE", "Contacts(\(victimID))", "") < 300)
        for n in 0..<5 { #expect(try await fixture.backendSend("PATCH", "BusinessPartners('BP0')", "{\"Phone\":\"\(n)\"}") < 300) }
        // An expanded child removed on the server disappears too.
        let item = try #require(try await provider.readEntities("SalesOrderItems?$top=1").first)
        let order = try #require(string(item, "OrderID"))
        guard case .primitive(.int32(let position))? = item["ItemPosition"] else { Issue.record("no item key"); return }
        let itemURL = "SalesOrderItems(OrderID='\(order)',ItemPosition=\(position))"
        #expect(try await fixture.backendSend("DELETE", itemURL, "") < 300)
        // The server forgets its change history: every delta link now answers 410.
        try await fixture.server.service.pruneChangeHistory(keepingLast: 0)
        try await provider.download()
        #expect(count(try await provider.read("Contacts")) == before - 1)
        #expect(try await provider.readEntities("Contacts(\(victimID))").isEmpty)
        #expect(string(try await provider.readEntities("BusinessPartners('BP0')").first, "Phone") == "4")
        #expect(try await provider.readEntities(itemURL).isEmpty)
    }
}

extension ProviderTests {
    @Test func cancelUploadStopsAtABatchBoundaryAndLosesNothing() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        var parameters = fixture.parameters()
        parameters.maxRequestsPerBatch = 1
        let provider = try await fixture.provider(parameters: parameters)
        try await provider.open()
        let partners = try await provider.readEntities("BusinessPartners?$orderby=PartnerID&$top=3")
        for partner in partners {
            let id = try #require(string(partner, "PartnerID"))
            _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('\(id)')", body: Array("{\"Phone\":\"cancel\"}".utf8))
        }
        await fixture.server.service.faults.set([FaultRule(urlContains: "$batch", delayMilliseconds: 400)])
        await fixture.server.service.journal.clear()
        let upload = Task { try await provider.upload() }
        // Cancelled once the first batch is at the backend (a fixed wait let a loaded machine
        // cancel before anything was sent).
        for _ in 0..<400 {
            if await fixture.server.service.journal.requests().contains(where: { $0.contains("$batch") }) { break }
            try await Task.sleep(nanoseconds: 25_000_000)
        }
        await provider.cancelUpload()
        do {
            try await upload.value
            Issue.record("the upload should report the cancellation")
        } catch let error as OfflineODataError {
            #expect(error.code == .cancelled)
        }
        // The batch in flight completed; the rest is still queued, nothing half-applied.
        #expect(count(try await provider.read("RequestQueue")) == 2)
        await fixture.server.service.faults.set([])
        try await provider.upload()
        #expect(try await provider.isRequestQueueEmpty)
        let phones = try await fixture.backend("BusinessPartners?$filter=Phone eq 'cancel'")["value"]?.arrayValue ?? []
        #expect(phones.count == 3)
    }
}

extension ProviderTests {
    /// `extraStreamParameters` travel as custom query options with every request of the
    /// download stream ($metadata and defining-query pages, next links included), and only there.
    @Test func extraStreamParametersTravelWithTheDownloadStream() async throws {
        let fixture = try await Fixture.start(pageSize: 2)
        defer { Task { await fixture.stop() } }
        var parameters = fixture.parameters()
        parameters.extraStreamParameters = "sap-client=100; trace = a b;"
        let transport = RecordingTransport()
        let provider = OfflineODataProvider(serviceRoot: fixture.server.v4Root, parameters: parameters, transport: transport)
        try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners"))
        try await provider.open()
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"stream"}"#.utf8))
        try await provider.upload()
        try await provider.download()
        let requests = await transport.requests
        let stream = requests.filter { $0.method == "GET" && ($0.url.contains("$metadata") || $0.url.contains("BusinessPartners")) }
        #expect(stream.count >= 4, "metadata, pages of the open (next links followed) and of the download")
        for request in stream {
            #expect(request.url.contains("sap-client=100") && request.url.contains("trace=a%20b"), "\(request.url)")
            #expect(request.url.components(separatedBy: "sap-client=").count == 2, "once: \(request.url)")
        }
        #expect(requests.filter { $0.method != "GET" }.allSatisfy { !$0.url.contains("sap-client") })
        #expect(try await provider.read("BusinessPartners/$count") == .count(Int64(try await fixture.backend("BusinessPartners/$count").serialized) ?? -1))
        await provider.close()
        // Malformed options, and OData's own, are refused before anything is sent.
        for bad in ["novalue", "$top=1", "@x=1"] {
            parameters.extraStreamParameters = bad
            parameters.storeName = "bad"
            let refused = OfflineODataProvider(serviceRoot: fixture.server.v4Root, parameters: parameters, transport: transport)
            let sent = await transport.requests.count
            await #expect(throws: OfflineODataError.self) { try await refused.open() }
            #expect(await transport.requests.count == sent, "\(bad)")
        }
    }

    @Test func theEventLogKeepsTheLast100Events() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(queries: [OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners")])
        try await provider.open()
        let store = try await provider.openStore()
        for n in 0..<120 { try await provider.logEvent(in: store, type: "Test", details: "event \(n)") }
        #expect(count(try await provider.read("EventLog")) == 100)
        let oldest = try await provider.readEntities("EventLog?$orderby=ID&$top=1").first
        #expect(string(oldest, "Details") == "event 20")
    }
}

/// Records what the provider sends, then sends it over the real transport.
actor RecordingTransport: Transport {
    private(set) var requests: [TransportRequest] = []
    private let inner = DefaultTransport.make()
    nonisolated func send(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse {
        await record(request)
        return try await inner.send(request, timeout: timeout)
    }
    private func record(_ request: TransportRequest) { requests.append(request) }
}

/// The real transport, with a media read link to another host written into every
/// ProductPictures page (as a hostile or misconfigured backend might send).
actor ForeignMediaLinkTransport: Transport {
    private(set) var urls: [String] = []
    private let inner = DefaultTransport.make()
    nonisolated func send(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse {
        await record(request.url)
        var response = try await inner.send(request, timeout: timeout)
        if request.url.contains("ProductPictures"), !request.url.contains("$value"), var text = String(bytes: response.body, encoding: .utf8) {
            text = text.replacingOccurrences(of: #""PictureID":"#, with: #""@odata.mediaReadLink":"http://elsewhere.invalid/steal","PictureID":"#)
            response.body = Array(text.utf8)
        }
        return response
    }
    private func record(_ url: String) { urls.append(url) }
}

@Suite(.serialized) struct StagedDownloadTests {
    /// The first open fetches the next page while it stores the current one: a failure of a
    /// later page still ends the open with the backend's error and leaves no file behind.
    @Test func aFirstOpenThatFailsOnALaterPageLeavesNoStore() async throws {
        let fixture = try await Fixture.start(pageSize: 2)
        defer { Task { await fixture.stop() } }
        await fixture.server.service.faults.set([FaultRule(urlContains: "skiptoken", status: 503)])
        let provider = try await fixture.provider(queries: [OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners")])
        do {
            try await provider.open()
            Issue.record("the open must fail")
        } catch let error as OfflineODataError {
            #expect(error.code == .backend, "\(error)")
            #expect(error.message.contains("503"), "\(error.message)")
        }
        #expect(await provider.isOpen == false)
        let files = try FileManager.default.contentsOfDirectory(atPath: fixture.directory.path).filter { $0.hasPrefix("localstore") }
        #expect(files.isEmpty, "\(files)")
        // Without the fault the same open stores every page.
        await fixture.server.service.faults.set([])
        try await provider.open()
        let backendCount = try await fixture.backend("BusinessPartners/$count")
        #expect(try await provider.read("BusinessPartners/$count") == .count(Int64(backendCount.serialized) ?? -1))
        #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.directory.path).contains("localstore.db"))
        await provider.close()
    }

    /// A process that ends while its first open fills the store leaves the store marked as
    /// unfinished; the next open makes it again instead of using a store with missing data.
    @Test func aFirstOpenCutShortByTheProcessEndingIsMadeAgain() async throws {
        let fixture = try await Fixture.start(pageSize: 2)
        defer { Task { await fixture.stop() } }
        let queries = [OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners")]
        var provider = try await fixture.provider(queries: queries)
        try await provider.open()
        let file = await provider.parameters.storeFile
        let store = try await provider.openStore()
        #expect(try await store.read { reader in try reader.connection.query("SELECT count(*) FROM oo_meta WHERE key = 'filling'").first?.first } == .integer(0),
                "a finished open leaves no mark")
        await provider.close()
        // What an open cut short after its first page leaves: the mark, and only some rows.
        let connection = try Connection(path: file, options: Connection.Options(key: "offline-key"))
        _ = try connection.execute("DELETE FROM \"es_BusinessPartners\" WHERE _rowid > 2")
        _ = try connection.execute("INSERT INTO oo_meta (key, value) VALUES ('filling', '1')")
        connection.close()
        #expect(try await fixture.backendSend("PATCH", "BusinessPartners('BP1')", #"{"Phone":"changed meanwhile"}"#) < 300)
        provider = try await fixture.provider(queries: queries)
        try await provider.open()
        let backendCount = try await fixture.backend("BusinessPartners/$count")
        #expect(try await provider.read("BusinessPartners/$count") == .count(Int64(backendCount.serialized) ?? -1))
        #expect(string(try await provider.readEntities("BusinessPartners('BP1')").first, "Phone") == "changed meanwhile", "the store was filled again")
        let events = try await provider.readEntities("EventLog")
        #expect(events.filter { string($0, "Type") == "Open" }.count == 1, "a new store: one open in its log")
        #expect(!FileManager.default.fileExists(atPath: file + "-filling"), "a finished open leaves no marker file")
        await provider.close()
        // The fill writes without a durable journal, so a crash can leave the file damaged:
        // the marker file beside it (there until the fill is complete) is enough to start again.
        try Data(repeating: 0x5A, count: 8_192).write(to: URL(fileURLWithPath: file))
        #expect(FileManager.default.createFile(atPath: file + "-filling", contents: Data()))
        #expect(try await fixture.backendSend("PATCH", "BusinessPartners('BP1')", #"{"Phone":"changed again"}"#) < 300)
        provider = try await fixture.provider(queries: queries)
        try await provider.open()
        #expect(try await provider.read("BusinessPartners/$count") == .count(Int64(backendCount.serialized) ?? -1))
        #expect(string(try await provider.readEntities("BusinessPartners('BP1')").first, "Phone") == "changed again")
        #expect(!FileManager.default.fileExists(atPath: file + "-filling"))
        // The store is back in WAL mode, with durable commits.
        let refilled = try await provider.openStore()
        #expect(try await refilled.write { writer in try writer.connection.query("PRAGMA journal_mode").first?.first } == .text("wal"))
        #expect(try await refilled.write { writer in try writer.connection.query("PRAGMA synchronous").first?.first } == .integer(2))
        await provider.close()

        // Files that are not offline stores are refused and left alone: a plain SQLite file,
        // and a store of the same format without the offline tables.
        let plainPath = fixture.directory.appendingPathComponent("plain.db").path
        let plain = try Connection(path: plainPath, options: Connection.Options(key: "offline-key"))
        try plain.execute("CREATE TABLE t (x INTEGER)")
        plain.close()
        let bare = try await Store.create(path: fixture.directory.appendingPathComponent("bare.db").path, model: try MetadataParser().parse(ShopFixture.metadata),
                                          key: "offline-key")
        bare.close()
        for (name, expected) in [("plain", "cannot be opened"), ("bare", "not an offline store")] {
            var parameters = fixture.parameters()
            parameters.storeName = name
            let stranger = try await fixture.provider(parameters: parameters, queries: queries)
            do {
                try await stranger.open()
                Issue.record("\(name): a file that is not an offline store must be refused")
            } catch let error as OfflineODataError {
                #expect(error.code == .store && error.message.contains(expected), "\(error.message)")
            }
            #expect(FileManager.default.fileExists(atPath: fixture.directory.appendingPathComponent("\(name).db").path))
        }
    }

    /// A second defining query over an entity set the first one fills, with an expand: its
    /// pages go in one by one, and none may remove what earlier pages stored.
    @Test func aFirstOpenWithTwoQueriesOverOneSetKeepsEveryPage() async throws {
        let fixture = try await Fixture.start(pageSize: 2)
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(queries: [OfflineODataDefiningQuery(name: "Orders", query: "SalesOrders"),
                                                            OfflineODataDefiningQuery(name: "OrdersWithItems", query: "SalesOrders?$expand=Items")])
        try await provider.open()
        for set in ["SalesOrders", "SalesOrderItems"] {
            let backend = try await fixture.backend("\(set)/$count")
            #expect(try await provider.read("\(set)/$count") == .count(Int64(backend.serialized) ?? -1), "\(set)")
        }
        // Flat pages fill an empty set as rows; the flat pages of a second query over that set
        // go the general way and add what the first did not have.
        let confirmed = try await Int(fixture.backend("SalesOrders/$count?$filter=Status eq Sales.OrderStatus'Confirmed'").serialized) ?? -1
        let all = try await Int(fixture.backend("SalesOrders/$count").serialized) ?? -1
        #expect(confirmed > 0 && confirmed < all)
        var parameters = fixture.parameters()
        parameters.storeName = "flat-twice"
        let twice = try await fixture.provider(parameters: parameters,
                                               queries: [OfflineODataDefiningQuery(name: "Confirmed", query: "SalesOrders?$filter=Status eq Sales.OrderStatus'Confirmed'"),
                                                         OfflineODataDefiningQuery(name: "Orders", query: "SalesOrders")])
        try await twice.open()
        #expect(try await twice.read("SalesOrders/$count") == .count(Int64(all)))
        // Every value arrived as the backend has it.
        let orders = try await provider.readEntities("SalesOrders")
        #expect(!orders.isEmpty)
        for order in orders {
            let id = try #require(string(order, "OrderID"))
            let remote = try await fixture.backend("SalesOrders('\(id)')")
            let local = try JSONValue.parse(V4JSONWriter(format: JSONFormat(metadata: .none)).write(order))
            for name in ["OrderID", "PartnerID", "OrderDate", "Status", "GrossAmount", "Currency", "Note"] {
                #expect(local[name] == remote[name], "\(id).\(name)")
            }
        }
    }

    /// A provider over BusinessPartners (pages of 2) whose next download is a full read over
    /// several pages (the stored delta link would make it small), with BP1 changed on the backend.
    func storeAwaitingAFullRead(_ fixture: Fixture) async throws -> (OfflineODataProvider, Store) {
        let provider = try await fixture.provider(queries: [OfflineODataDefiningQuery(name: "Partners", query: "BusinessPartners")])
        try await provider.open()
        let store = try await provider.openStore()
        try await store.write { writer in _ = try writer.connection.execute("UPDATE oo_defining SET delta_link = NULL") }
        #expect(try await fixture.backendSend("PATCH", "BusinessPartners('BP1')", #"{"Phone":"changed on the server"}"#) < 300)
        return (provider, store)
    }

    /// Whether the backend's change to BP1 has arrived, and the staging table is empty.
    func expectDownloaded(_ arrived: Bool, _ provider: OfflineODataProvider, _ store: Store) async throws {
        let phone = string(try await provider.readEntities("BusinessPartners('BP1')").first, "Phone")
        #expect((phone == "changed on the server") == arrived, "\(phone ?? "-")")
        #expect(try await store.read { reader in try reader.connection.query("SELECT count(*) FROM oo_staging").first?.first } == .integer(0))
    }

    @Test func cancelDownloadStopsBetweenPagesAndChangesNothing() async throws {
        let fixture = try await Fixture.start(pageSize: 2)
        defer { Task { await fixture.stop() } }
        let (provider, store) = try await storeAwaitingAFullRead(fixture)
        await fixture.server.service.faults.set([FaultRule(urlContains: "skiptoken", delayMilliseconds: 300)])
        let download = Task { try await provider.download() }
        try await Task.sleep(nanoseconds: 100_000_000)
        await provider.cancelDownload()
        do {
            try await download.value
            Issue.record("the download should report the cancellation")
        } catch let error as OfflineODataError {
            #expect(error.code == .cancelled, "\(error)")
        }
        try await expectDownloaded(false, provider, store)
        // A cancel does not stick: the next download runs to the end.
        await fixture.server.service.faults.set([])
        try await provider.download()
        try await expectDownloaded(true, provider, store)
    }

    @Test func aDownloadThatFailsOnALaterPageChangesNothingAndLeavesNoStagedPages() async throws {
        let fixture = try await Fixture.start(pageSize: 2)
        defer { Task { await fixture.stop() } }
        let (provider, store) = try await storeAwaitingAFullRead(fixture)
        await fixture.server.service.faults.set([FaultRule(urlContains: "skiptoken", status: 503)])
        await #expect(throws: OfflineODataError.self) { try await provider.download() }
        try await expectDownloaded(false, provider, store)
        // Without the fault the same download applies every page.
        await fixture.server.service.faults.set([])
        try await provider.download()
        try await expectDownloaded(true, provider, store)
        let backendCount = try await fixture.backend("BusinessPartners/$count")
        #expect(try await provider.read("BusinessPartners/$count") == .count(Int64(backendCount.serialized) ?? -1))
    }
}
