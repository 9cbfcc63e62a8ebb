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
        _ = try await online.execute(method: "PATCH", url: "Contacts(\(contactID))", body: Array(#"{"Email":"on@line.example"}"#.utf8))
        #expect(try await fixture.backend("Contacts(\(contactID))")["Email"]?.stringValue == "on@line.example")
        _ = try await online.execute(method: "DELETE", url: "Contacts(\(contactID))")
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
        let online = OnlineODataProvider(serviceRoot: fixture.server.v4Root, timeout: 2)
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
