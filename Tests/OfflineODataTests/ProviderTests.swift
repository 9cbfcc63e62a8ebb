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

    static func start(faults: [FaultRule] = [], pageSize: Int = 20) async throws -> Fixture {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-offline-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let server = try await EmbeddedServer.sales(at: directory.appendingPathComponent("backend.sqlite").path, scale: 3, pageSize: pageSize, faults: faults)
        return Fixture(directory: directory, server: server)
    }

    func parameters(key: String? = "offline-key") -> OfflineODataParameters {
        var parameters = OfflineODataParameters()
        parameters.storePath = directory.path
        parameters.storeEncryptionKey = key
        return parameters
    }

    func provider(v2: Bool = false, parameters: OfflineODataParameters? = nil, queries: [OfflineODataDefiningQuery] = Fixture.queries,
                  delegate: (any OfflineODataDelegate)? = nil) async throws -> OfflineODataProvider {
        let provider = OfflineODataProvider(serviceRoot: v2 ? server.v2Root : server.v4Root, parameters: parameters ?? self.parameters(), delegate: delegate)
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
        let response = try await AsyncHTTPClientTransport().send(TransportRequest(method: "GET", url: server.v4Root.absoluteString + url.replacingOccurrences(of: " ", with: "%20")), timeout: 10)
        return try JSONValue.parse(response.body)
    }

    func stop() async {
        await server.stop()
        try? FileManager.default.removeItem(at: directory)
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
        let model = try await provider.model
        if let function = model.entityContainer?.functionImports.first?.name {
            do {
                _ = try await provider.read("\(function)()")
                Issue.record("a function import must be refused")
            } catch let error as OfflineODataError {
                #expect(error.code == .notSupportedOffline || error.code == .invalidRequest)
            }
        }
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
        // After a download the entities are no longer local.
        try await provider.download()
        #expect(count(try await provider.read("Contacts?$filter=isLocal()")) == 0)
        #expect(count(try await provider.read("EventLog?$filter=Type eq 'Upload'")) == 1)
        #expect(count(try await provider.read("EventLog?$filter=Type eq 'Download'")) == 1)
    }
}
