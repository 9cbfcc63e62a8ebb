import Foundation
import ODataCore
import ODataServer
import ODataStore
import Testing
@testable import OfflineOData

@Suite(.serialized) struct OnlineProviderTests {
    @Test func readsWritesOperationsAndBatchGoToTheBackend() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let online = OnlineODataProvider(serviceRoot: fixture.server.v4Root)
        // Reads, typed with the backend's model.
        guard case .collection(let orders) = try await online.read("SalesOrders?$top=2&$orderby=OrderID") else { Issue.record("no collection"); return }
        #expect(orders.entities.count == 2)
        let orderID = try #require(string(orders.entities.first, "OrderID"))
        if case .primitive(.decimal)? = orders.entities.first?["GrossAmount"] {} else { Issue.record("GrossAmount is not typed as Decimal") }
        guard case .entity(let order?) = try await online.read("SalesOrders('\(orderID)')") else { Issue.record("no entity"); return }
        #expect(string(order, "OrderID") == orderID)
        let backendCount = try await fixture.backend("Products/$count")
        #expect(try await online.read("Products/$count") == .count(Int64(backendCount.serialized) ?? -1))
        guard case .value(.primitive(.string(let name))) = try await online.read("Products('P1')/Name") else { Issue.record("no value"); return }
        #expect(name == "Product 1")
        // A function import and an action import.
        guard case .collection(let products) = try await online.read("GetProductsByCategory(CategoryID='C1')") else { Issue.record("no result"); return }
        #expect(!products.entities.isEmpty && products.entities.allSatisfy { string($0, "CategoryID") == "C1" })
        let confirmed = try await online.execute(method: "POST", url: "ConfirmOrder", body: Array(#"{"OrderID":"\#(orderID)"}"#.utf8))
        guard case .entity(let confirmedOrder?)? = confirmed.result else { Issue.record("no action result"); return }
        #expect(confirmedOrder["Status"] == .enumeration(EnumValue(typeName: "Sales.OrderStatus", members: ["Confirmed"])))
        // Create (the backend makes the key), update, delete.
        let created = try await online.execute(method: "POST", url: "Contacts", body: Array(#"{"FirstName":"On","LastName":"Line","PartnerID":"BP1"}"#.utf8))
        #expect(created.status == 201)
        guard case .entity(let contact?)? = created.result, case .primitive(.int64(let contactID))? = contact["ContactID"] else { Issue.record("no key"); return }
        #expect(contactID > 0)
        // The backend wants If-Match (428 without it), as SAP Gateway does: the ETag of the create.
        let etag = try #require(created.headers["ETag"])
        await #expect(throws: ODataError.self) {
            _ = try await online.execute(method: "PATCH", url: "Contacts(\(contactID))", body: Array(#"{"Email":"x@y.z"}"#.utf8))
        }
        let patched = try await online.execute(method: "PATCH", url: "Contacts(\(contactID))", headers: ["If-Match": etag],
                                               body: Array(#"{"Email":"on@line.example"}"#.utf8))
        #expect(try await fixture.backend("Contacts(\(contactID))")["Email"]?.stringValue == "on@line.example")
        _ = try await online.execute(method: "DELETE", url: "Contacts(\(contactID))", headers: ["If-Match": patched.headers["ETag"] ?? "*"])
        // Backend errors come back as the backend's ODataError.
        do {
            _ = try await online.read("Products('nope')")
            Issue.record("a missing entity must fail")
        } catch let error as ODataError {
            #expect(error.httpStatus == 404)
            #expect(error.code == "NotFound")
        }
        // $batch: two reads, answered part by part.
        let batch = MultipartBatch(parts: [.operation(BatchOperation(message: .request("GET", "Products('P1')"))),
                                           .operation(BatchOperation(message: .request("GET", "Products('nope')")))])
        let answer = try await online.batch(batch)
        #expect(answer.parts.count == 2)
        if case .operation(let first) = answer.parts[0], case .operation(let second) = answer.parts[1] {
            #expect(first.message.status == 200)
            #expect(second.message.status == 404)
        } else {
            Issue.record("unexpected batch answer")
        }
    }

    @Test func v2BackendsWorkTheSameWay() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let online = OnlineODataProvider(serviceRoot: fixture.server.v2Root)
        #expect(try await online.model().version.isLegacy)
        guard case .collection(let partners) = try await online.read("BusinessPartners?$top=2&$orderby=PartnerID") else { Issue.record("no collection"); return }
        #expect(partners.entities.count == 2)
        guard case .entity(let order?) = try await online.read("SalesOrders('SO1')") else { Issue.record("no entity"); return }
        if case .primitive(.decimal)? = order["GrossAmount"] {} else { Issue.record("GrossAmount is not typed as Decimal in V2") }
        _ = try await online.execute(method: "MERGE", url: "BusinessPartners('BP1')", headers: ["If-Match": "*"],
                                     body: Array(#"{"Phone":"v2 online"}"#.utf8))
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "v2 online")
        do {
            _ = try await online.read("SalesOrders('nope')")
            Issue.record("a missing entity must fail")
        } catch let error as ODataError {
            #expect(error.httpStatus == 404)
        }
    }

    @Test func aDroppedBackendIsATransportError() async throws {
        let fixture = try await Fixture.start()
        let online = OnlineODataProvider(serviceRoot: fixture.server.v4Root, timeout: 2)
        _ = try await online.model()
        await fixture.stop()
        do {
            _ = try await online.read("Products")
            Issue.record("a stopped backend must fail")
        } catch let error as OfflineODataError {
            #expect(error.code == .transport)
        }
    }
}

@Suite(.serialized) struct RouterTests {
    @Test func urlsRouteByModeAndDefiningQueries() {
        let root = "https://host/service/"
        let offlineSets: Set<String> = ["Customers", "SalesOrders"]
        let table: [(url: String, mixed: ODataDestination)] = [
            ("Customers", .offline),
            ("Customers('A')", .offline),
            ("Customers('A')/Orders?$top=1", .offline),
            ("Customers/Sales.VIP", .offline),
            ("Customers?$filter=Name eq 'x'&$top=2", .offline),
            ("https://host/service/Customers('A')?$top=1", .offline),
            ("http://127.0.0.1:8080/service/SalesOrders", .offline),
            ("/Customers%28%27A%27%29", .offline),
            ("Products", .online),
            ("Products('P1')", .online),
            ("GetProductsByCategory(CategoryID='C1')", .online),
            ("ConfirmOrder", .online),
            ("$batch", .online),
            ("$metadata", .online),
            ("https://host/service/Products?$expand=Customers", .online),
            ("", .online),
        ]
        for row in table {
            #expect(ODataRouter.destination(for: row.url, mode: .mixed, serviceRoot: root, offlineSets: offlineSets) == row.mixed, "\(row.url)")
            #expect(ODataRouter.destination(for: row.url, mode: .online, serviceRoot: root, offlineSets: offlineSets) == .online, "\(row.url)")
            #expect(ODataRouter.destination(for: row.url, mode: .offline, serviceRoot: root, offlineSets: offlineSets) == .offline, "\(row.url)")
        }
        #expect(ODataRouter.resourcePath(of: "https://host/service/Customers('A')?$top=1", serviceRoot: root) == "Customers('A')")
    }

    @Test func mixedModeKeepsOfflineReadsWorkingWhenTheBackendIsGone() async throws {
        let fixture = try await Fixture.start(faults: [FaultRule(urlContains: "slow=1", delayMilliseconds: 800)])
        defer { Task { await fixture.stop() } }
        let offline = try await fixture.provider()
        try await offline.open()
        // (The slow read below takes 0.8 s; a loaded machine may stall it past a 2 s idle
        // timeout. The backend that goes away refuses connections at once, whatever the timeout.)
        let online = OnlineODataProvider(serviceRoot: fixture.server.v4Root, timeout: 10)
        let router = ODataRouter(online: online, offline: offline)
        #expect(await router.mode == .mixed)
        #expect(await offline.definingQueryEntitySets() == ["BusinessPartners", "SalesOrders", "Contacts"])
        // A local change shows through the router: the read went offline.
        _ = try await router.execute(method: "PATCH", url: fixture.server.v4Root.absoluteString + "BusinessPartners('BP1')", body: Array(#"{"Phone":"local only"}"#.utf8))
        #expect(string(try await router.read("BusinessPartners('BP1')").entities.first, "Phone") == "local only")
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue != "local only")
        // Products has no defining query and the function import runs on the backend.
        let backendProducts = try await fixture.backend("Products/$count")
        #expect(try await router.read("Products/$count") == .count(Int64(backendProducts.serialized) ?? -1))
        #expect(try await router.read("GetProductsByCategory(CategoryID='C2')").entities.count > 0)
        // Switching the mode while a request is in flight: it finishes where it started.
        async let slow = router.read("Products?slow=1&$top=3")
        try await Task.sleep(nanoseconds: 200_000_000)
        await router.setMode(.offline)
        #expect(try await slow.entities.count == 3, "the in-flight request stayed online")
        #expect(try await router.read("Products").entities.isEmpty, "offline, Products is out of scope")
        await router.setMode(.mixed)
        // The backend goes away: offline reads keep working, online ones fail clearly.
        await fixture.server.stop()
        #expect(try await router.read("SalesOrders?$top=2").entities.count == 2)
        do {
            _ = try await router.read("GetProductsByCategory(CategoryID='C1')")
            Issue.record("the function import needs the backend")
        } catch let error as OfflineODataError {
            #expect(error.code == .transport)
        }
    }
}

extension QueryResult {
    /// The entities of a collection or single-entity result.
    var entities: [Entity] {
        switch self {
        case .collection(let collection): collection.entities
        case .entity(let entity): entity.map { [$0] } ?? []
        default: []
        }
    }
}

@Suite(.serialized) struct ResponseCacheTests {
    enum Mode: String, CaseIterable, Sendable { case memory, file }

    static func cache(_ mode: Mode, in directory: URL, model: Model, key: String = "cache-key") throws -> ODataResponseCache {
        switch mode {
        case .memory: return try ODataResponseCache(storage: .memory, model: model)
        case .file: return try ODataResponseCache(storage: .file(path: directory.appendingPathComponent("cache.db").path, key: key), model: model)
        }
    }

    func ids(_ entities: [Entity], _ name: String) -> [String] { entities.compactMap { string($0, name) } }

    /// An online provider for the fixture's backend that keeps its GETs in a cache of `mode`.
    static func cachingProvider(_ fixture: Fixture, _ mode: Mode) async throws -> (OnlineODataProvider, ODataResponseCache) {
        let online = OnlineODataProvider(serviceRoot: fixture.server.v4Root)
        let cache = try cache(mode, in: fixture.directory, model: try await online.model())
        await online.setCache(cache)
        return (online, cache)
    }

    @Test(arguments: Mode.allCases)
    func onlineGetsFillTheCacheAndDeltasUpdateIt(mode: Mode) async throws {
        let fixture = try await Fixture.start(pageSize: 7)
        defer { Task { await fixture.stop() } }
        let (online, cache) = try await Self.cachingProvider(fixture, mode)
        // A plain GET is kept under its URL.
        _ = try await online.read("BusinessPartners?$top=3&$orderby=PartnerID")
        let firstPartners = (try await fixture.backend("BusinessPartners?$top=3&$orderby=PartnerID")["value"]?.arrayValue ?? []).compactMap { $0["PartnerID"]?.stringValue }
        #expect(firstPartners.count == 3)
        #expect(ids(try await cache.serverEntries(forURLKey: "BusinessPartners?$top=3&$orderby=PartnerID"), "PartnerID") == firstPartners)
        // A full read with change tracking (every page), then a delta after backend changes.
        let first = try await online.refreshCache(forURL: "SalesOrders")
        let total = Int(try await fixture.backend("SalesOrders/$count").serialized) ?? -1
        #expect(total > 7, "several pages")
        let backendOrders = try await fixture.backend("SalesOrders?$orderby=OrderID")["value"]?.arrayValue ?? []
        #expect(first == total)
        #expect(try await cache.serverEntries(forURLKey: "SalesOrders").count == total)
        #expect(try await cache.deltaToken(forURLKey: "SalesOrders") != nil)
        let changed = try #require(backendOrders.first?["OrderID"]?.stringValue)
        let removed = try #require(backendOrders.last?["OrderID"]?.stringValue)
        #expect(try await fixture.backendSend("PATCH", "SalesOrders('\(changed)')", #"{"Note":"changed on the server"}"#) < 300)
        #expect(try await fixture.backendSend("DELETE", "SalesOrders('\(removed)')", "") < 300)
        #expect(try await fixture.backendSend("POST", "SalesOrders", #"{"OrderID":"SO-NEW","PartnerID":"BP1","Currency":"EUR"}"#) < 300)
        let delta = try await online.refreshCache(forURL: "SalesOrders")
        #expect(delta == 3, "only the three changes travel")
        let cached = try await cache.serverEntries(forURLKey: "SalesOrders")
        #expect(cached.count == total)
        #expect(!ids(cached, "OrderID").contains(removed) && ids(cached, "OrderID").contains("SO-NEW"))
        #expect(string(cached.first { string($0, "OrderID") == changed }, "Note") == "changed on the server")
        // clearCache drops the entries and the delta token: the next refresh is a full read.
        try await cache.clearCache(forURLKey: "SalesOrders")
        #expect(try await cache.serverEntries(forURLKey: "SalesOrders").isEmpty)
        #expect(try await cache.deltaToken(forURLKey: "SalesOrders") == nil)
        #expect(try await online.refreshCache(forURL: "SalesOrders") == total)
    }

    @Test(arguments: Mode.allCases)
    func localEntriesOverlayTheServerEntriesUntilTheirRequestSucceeds(mode: Mode) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let (online, cache) = try await Self.cachingProvider(fixture, mode)
        _ = try await online.read("Products?$top=3&$orderby=ProductID")
        let key = "Products?$top=3&$orderby=ProductID"
        let server = try await cache.serverEntries(forURLKey: key)
        #expect(ids(server, "ProductID") == ["P0", "P1", "P10"])
        // Local entries: a create, an update and a delete of server entries.
        var created = Entity()
        created["ProductID"] = .primitive(.string("PNEW"))
        created["Name"] = .primitive(.string("New here"))
        let createdID = try await cache.addLocalEntry(created, entitySet: "Products", urlKey: key)
        var updated = server[1]
        updated["Name"] = .primitive(.string("Renamed here"))
        let updatedID = try await cache.updateLocalEntry(updated, entitySet: "Products")
        try await cache.deleteLocalEntry(entryID: "Products('P10')")
        #expect(createdID == "Products('PNEW')" && updatedID == "Products('P1')")
        #expect(try await cache.localEntry(forEntryID: createdID)?.state == .created)
        #expect(try await cache.localEntry(forEntryID: updatedID)?.state == .updated)
        #expect(try await cache.localEntry(forEntryID: "Products('P10')")?.state == .deleted)
        #expect(try await cache.localEntry(forEntryID: "Products('P0')") == nil)
        // Updating a local create keeps it a create.
        created["Price"] = .primitive(.decimal(DecimalValue("9.50") ?? DecimalValue(0)))
        try await cache.updateLocalEntry(created, entitySet: "Products", urlKey: key)
        #expect(try await cache.localEntry(forEntryID: createdID)?.state == .created)
        let merged = try await cache.mergedEntries(forURLKey: key)
        #expect(merged.map(\.entryID) == ["Products('P0')", "Products('P1')", "Products('PNEW')"])
        #expect(merged.map(\.isLocal) == [false, true, true])
        #expect(string(merged[1].entity, "Name") == "Renamed here")
        // A single request succeeds: its entry is cleared.
        _ = try await online.execute(method: "POST", url: "Products", body: Array(#"{"ProductID":"PNEW","Name":"New here","Price":9.5}"#.utf8))
        try await cache.requestSucceeded(carrying: [createdID])
        #expect(try await cache.localEntry(forEntryID: createdID) == nil)
        // A batch: the part that succeeded clears its entry, the failed one keeps its.
        let batch = MultipartBatch(parts: [
            .changeSet(ChangeSet(operations: [BatchOperation(message: .request("PATCH", "Products('P1')", headers: ODataCore.HTTPHeaders([("Content-Type", "application/json"), ("If-Match", "*")]),
                                                                               body: Array(#"{"Name":"Renamed here"}"#.utf8)))])),
            .changeSet(ChangeSet(operations: [BatchOperation(message: .request("DELETE", "Products('nope')"))])),
        ])
        let answer = try await online.batch(batch)
        var statuses: [Int] = []
        for part in answer.parts {
            switch part {
            case .changeSet(let set): statuses.append(set.operations.first?.message.status ?? 500)
            case .operation(let operation): statuses.append(operation.message.status ?? 500)
            }
        }
        #expect(statuses.count == 2 && statuses[0] < 300 && statuses[1] >= 400, "\(statuses)")
        try await cache.batchCompleted([(entryIDs: [updatedID], status: statuses[0]), (entryIDs: ["Products('P10')"], status: statuses[1])])
        #expect(try await cache.localEntry(forEntryID: updatedID) == nil)
        #expect(try await cache.localEntry(forEntryID: "Products('P10')")?.state == .deleted)
        // Deleting a local create removes it outright.
        let other = try await cache.addLocalEntry(created, entitySet: "Products")
        try await cache.deleteLocalEntry(entryID: other)
        #expect(try await cache.localEntry(forEntryID: other) == nil)
    }

    @Test(arguments: Mode.allCases)
    func serviceAndMetadataDocumentsAreKeptPerURLKey(mode: Mode) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let online = OnlineODataProvider(serviceRoot: fixture.server.v4Root)
        let model = try await online.model()
        let cache = try Self.cache(mode, in: fixture.directory, model: model)
        let service = try await online.send(method: "GET", url: "").body
        let metadata = try await online.send(method: "GET", url: "$metadata", headers: ["Accept": "application/xml"]).body
        #expect(String(decoding: service, as: UTF8.self).contains("BusinessPartners"))
        try await cache.storeServiceDocument(service, forURLKey: "sales")
        try await cache.storeMetadataDocument(metadata, forURLKey: "sales")
        #expect(try await cache.serviceDocument(forURLKey: "sales") == service)
        #expect(try await cache.metadataDocument(forURLKey: "sales") == metadata)
        #expect(try await cache.serviceDocument(forURLKey: "other") == nil)
    }

    @Test func aPersistentCacheSurvivesAndChecksItsKey() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let online = OnlineODataProvider(serviceRoot: fixture.server.v4Root)
        let model = try await online.model()
        do {
            let cache = try Self.cache(.file, in: fixture.directory, model: model)
            await online.setCache(cache)
            _ = try await online.read("Contacts")
        }
        await online.setCache(nil)
        let reopened = try Self.cache(.file, in: fixture.directory, model: model)
        let backendContacts = try await fixture.backend("Contacts/$count")
        #expect(try await reopened.serverEntries(forURLKey: "Contacts").count == Int(backendContacts.serialized) ?? -1)
        #expect(throws: (any Error).self) { try Self.cache(.file, in: fixture.directory, model: model, key: "wrong") }
        // The file is encrypted: the contact names are not in it as plain text.
        let bytes = try Data(contentsOf: fixture.directory.appendingPathComponent("cache.db"))
        #expect(bytes.range(of: Data("BusinessPartners".utf8)) == nil && bytes.range(of: Data("SQLite format 3".utf8)) == nil)
        // A damaged entry is a clear error, not a silently shorter list.
        let raw = try Connection(path: fixture.directory.appendingPathComponent("cache.db").path, options: Connection.Options(key: "cache-key"))
        _ = try raw.execute("UPDATE cache_server SET body = ? WHERE rowid = (SELECT min(rowid) FROM cache_server)", [.blob([0x7B, 0x22])])
        raw.close()
        let damaged = try Self.cache(.file, in: fixture.directory, model: model)
        do {
            _ = try await damaged.serverEntries(forURLKey: "Contacts")
            Issue.record("a damaged entry must fail")
        } catch let error as OfflineODataError {
            #expect(error.code == .store && error.message.contains("Contacts"), "\(error)")
        }
    }
}
