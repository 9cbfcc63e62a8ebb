import Foundation
import ODataCore
import ODataServer
import ODataStore
import Testing
@testable import OfflineOData

/// The typed API through generated types, offline and online, V4 and V2, against the
/// reference server.
/// Serialized: each test runs a backend and stores, and the suite's open files add up beside the
/// others' (swift-corelibs-foundation's `Process.run` over-reads `/proc/self/fd` when a test
/// process has more than about 1,300 open files, swiftlang/swift-corelibs-foundation#5472).
@Suite(.serialized) struct DataServiceTests {
    typealias V4 = SalesV4.SalesService
    typealias V2 = SalesV2.SalesService

    /// The queued requests, oldest first: method, URL and body.
    func queue(_ provider: OfflineODataProvider) async throws -> [(String, String, String)] {
        try await provider.readEntities("RequestQueue?$orderby=RequestID").map {
            (string($0, "RequestMethod") ?? "", string($0, "RequestURL") ?? "", string($0, "RequestBody") ?? "")
        }
    }

    @Test func typedReadsAndWritesOfflineV4() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        let service = try await DataService(provider)
        #expect(service.version == .v4)

        // Reads: filter on a complex property, expand, order, top.
        let us = try await service.fetch(
            V4.businessPartners.query.filter { $0.address.country == "US" || $0.address.country == "FR" }
                .orderBy(\.companyName, descending: true).expand(\.salesOrders))
        #expect(us.map(\.partnerID) == ["BP2", "BP1"])
        #expect(us[0].address?.city == "Boston")
        #expect(us[0].salesOrders?.count == 10)
        #expect(us[0].createdAt?.date == DateValue(year: 2020, month: 3, day: 3))
        let firstOrders = try await service.fetch(SalesV4.SalesOrder.self, where: { $0.partnerID == "BP0" }, top: 3)
        #expect(firstOrders.count == 3)
        #expect(try await service.count(V4.salesOrders.query.filter { $0.partnerID == "BP0" }) == 10)
        let order = try #require(try await service.get(V4.salesOrders, key: .init(orderID: "SO1")))
        #expect(order.items == nil)  // not expanded
        #expect(order.status != nil)
        #expect(try await service.get(V4.salesOrders, key: .init(orderID: "NOPE")) == nil)
        let items = try await service.fetch(\.items, of: order)
        #expect(!items.isEmpty && items.allSatisfy { $0.orderID == "SO1" })
        let partner = try await service.fetch(\.partner, of: order)
        #expect(partner?.partnerID == "BP0")

        // Update: only the changed property, as PATCH.
        var changed = order
        changed.note = "typed note"
        #expect(try await service.update(changed, from: order).note == "typed note")
        var queued = try await queue(provider)
        #expect(queued.count == 1)
        // Nothing changed: nothing is sent.
        _ = try await service.update(changed, from: changed)
        #expect(try await queue(provider).count == 1)
        // A changed navigation value is refused, not dropped.
        var moved = order
        moved.partner = try await service.get(V4.businessPartners, key: .init(partnerID: "BP2"))
        await #expect(throws: DataServiceError.self) { try await service.update(moved, from: order) }
        #expect(queued[0].0 == "PATCH" && queued[0].1.hasSuffix("SalesOrders('SO1')"))
        let body = try JSONValue.parse(Array(queued[0].2.utf8))
        #expect(body["Note"]?.stringValue == "typed note")
        #expect(body["Currency"] == nil && body["OrderID"] == nil)
        // Update by key with a closure.
        let updated = try await service.update(V4.businessPartners, key: .init(partnerID: "BP0")) {
            $0.phone = "+1 555"
        }
        #expect(updated.phone == "+1 555")
        #expect(try await service.get(V4.businessPartners, key: .init(partnerID: "BP0"))?.phone == "+1 555")

        // Create, link, delete.
        let contact = try await service.create(
            SalesV4.Contact(contactID: 0, partnerID: "BP0", firstName: "Typed", lastName: "Tester"),
            keyGeneratedByBackend: true)
        #expect(contact.firstName == "Typed")
        let bp1 = try #require(try await service.get(V4.businessPartners, key: .init(partnerID: "BP1")))
        try await service.link(bp1, \.contacts, to: contact)
        #expect(try await service.fetch(\.contacts, of: bp1).contains { $0.firstName == "Typed" })
        try await service.delete(try #require(try await service.get(V4.contacts, key: .init(contactID: 6))))
        #expect(try await service.get(V4.contacts, key: .init(contactID: 6)) == nil)

        // A change set: two writes, all or nothing.
        let answers = try await service.changeSet { changes in
            try changes.create(
                SalesV4.Contact(contactID: 0, partnerID: "BP2", firstName: "Batch"), keyGeneratedByBackend: true)
            var partner2 = us[0]
            partner2.salesOrders = nil
            var renamed = partner2
            renamed.companyName = "Renamed 2"
            try changes.update(renamed, from: partner2)
        }
        #expect(answers.count == 2)
        #expect(try answers[0].entity(as: SalesV4.Contact.self)?.firstName == "Batch")
        #expect(try await service.get(V4.businessPartners, key: .init(partnerID: "BP2"))?.companyName == "Renamed 2")

        // Operations run online only.
        await #expect(throws: DataServiceError.self) {
            try await service.call(V4.getProductsByCategory(categoryID: "C1"))
        }
        do {
            _ = try await service.call(V4.getProductsByCategory(categoryID: "C1"))
        } catch {
            #expect(error.code == .onlineOnly)
        }

        // Upload; the backend has every change.
        queued = try await queue(provider)
        try await provider.upload()
        #expect(try await provider.isRequestQueueEmpty)
        let online = try await DataService(OnlineODataProvider(serviceRoot: fixture.server.v4Root))
        #expect(try await online.get(V4.salesOrders, key: .init(orderID: "SO1"))?.note == "typed note")
        #expect(try await online.get(V4.businessPartners, key: .init(partnerID: "BP2"))?.companyName == "Renamed 2")
        #expect(try await online.get(V4.contacts, key: .init(contactID: 6)) == nil)
        let typed = try await online.fetch(V4.contacts.query.filter { $0.firstName == "Typed" }.expand(\.partner))
        #expect(typed.count == 1 && typed.first?.partner?.partnerID == "BP1")
        #expect(try await online.count(V4.contacts.query.filter { $0.firstName == "Batch" }) == 1)
    }

    @Test func typedReadsAndWritesOfflineV2() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: true)
        try await provider.open()
        let service = try await DataService(provider)
        #expect(service.version == .v2)
        let partners = try await service.fetch(
            V2.businessPartners.query.filter { $0.address.country == "US" }.expand(\.salesOrders))
        #expect(partners.map(\.partnerID) == ["BP2"])
        #expect(partners[0].salesOrders?.count == 10)
        let contact = try #require(try await service.get(V2.contacts, key: .init(contactID: 3)))
        #expect(contact.partnerID == "BP1")
        let order = try #require(try await service.get(V2.salesOrders, key: .init(orderID: "SO1")))
        var changed = order
        changed.note = "typed v2"
        try await service.update(changed, from: order)
        let queued = try await queue(provider)
        #expect(queued.count == 1 && queued[0].0 == "MERGE")
        let body = try JSONValue.parse(Array(queued[0].2.utf8))
        #expect(body["Note"]?.stringValue == "typed v2" && body["Currency"] == nil)
        let created = try await service.create(
            SalesV2.Contact(contactID: 0, partnerID: "BP0", firstName: "V2"), keyGeneratedByBackend: true)
        try await service.link(created, \.partner, to: partners[0])
        #expect(try await service.fetch(\.partner, of: created)?.partnerID == "BP2")
        try await service.changeSet { changes in
            try changes.create(
                SalesV2.Contact(contactID: 0, partnerID: "BP1", firstName: "Batch2"), keyGeneratedByBackend: true)
        }
        try await provider.upload()
        #expect(try await provider.isRequestQueueEmpty)
        let online = try await DataService(OnlineODataProvider(serviceRoot: fixture.server.v2Root))
        #expect(online.version == .v2)
        #expect(try await online.get(V2.salesOrders, key: .init(orderID: "SO1"))?.note == "typed v2")
        let v2 = try await online.fetch(V2.contacts.query.filter { $0.firstName == "V2" }.expand(\.partner))
        #expect(v2.count == 1 && v2.first?.partner?.partnerID == "BP2")
        #expect(try await online.count(V2.contacts.query.filter { $0.firstName == "Batch2" }) == 1)
    }

    @Test(arguments: [false, true])
    func typedReadsWritesAndCallsOnline(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let online = OnlineODataProvider(serviceRoot: v2 ? fixture.server.v2Root : fixture.server.v4Root)
        let service = try await DataService(online)
        if v2 {
            let order = try #require(try await service.get(V2.salesOrders, key: .init(orderID: "SO2")))
            var changed = order
            changed.note = "online v2"
            try await service.update(changed, from: order)
            #expect(try await service.get(V2.salesOrders, key: .init(orderID: "SO2"))?.note == "online v2")
            let created = try await service.create(
                SalesV2.Contact(contactID: 0, partnerID: "BP0", firstName: "Online"), keyGeneratedByBackend: true)
            #expect(created.contactID > 0)
            try await service.delete(created)
            #expect(try await service.get(V2.contacts, key: .init(contactID: created.contactID)) == nil)
            let products = try await service.call(V2.getProductsByCategory(categoryID: "C1"))
            #expect(!products.isEmpty && products.allSatisfy { $0.categoryID == "C1" })
            let confirmed = try await service.call(V2.confirmOrder(orderID: "SO3"))
            #expect(confirmed?.orderID == "SO3" && confirmed?.status == "Confirmed")
            // A stale ETag: the backend refuses with 412, typed.
            do {
                try await service.update(changed, from: order)
                Issue.record("a stale ETag was accepted")
            } catch {
                #expect(error.code == .preconditionFailed)
            }
        } else {
            let order = try #require(try await service.get(V4.salesOrders, key: .init(orderID: "SO2")))
            var changed = order
            changed.note = "online v4"
            changed.status = .shipped
            let updated = try await service.update(changed, from: order)
            #expect(updated.odataETag != nil && updated.odataETag != order.odataETag)
            // The answered ETag makes the next update of the returned entity work.
            var again = updated
            again.note = "online v4 again"
            let twice = try await service.update(again, from: updated)
            #expect(try await service.get(V4.salesOrders, key: .init(orderID: "SO2"))?.note == "online v4 again")
            changed = twice
            let reread = try #require(try await service.get(V4.salesOrders, key: .init(orderID: "SO2")))
            #expect(reread.note == "online v4 again" && reread.status == .shipped)
            let created = try await service.create(
                SalesV4.Contact(contactID: 0, partnerID: "BP0", firstName: "Online"), keyGeneratedByBackend: true)
            #expect(created.contactID > 0)
            try await service.delete(created)
            #expect(try await service.get(V4.contacts, key: .init(contactID: created.contactID)) == nil)
            let products = try await service.call(V4.getProductsByCategory(categoryID: "C1"))
            #expect(!products.isEmpty && products.allSatisfy { $0.categoryID == "C1" })
            let confirmed = try await service.call(V4.confirmOrder(orderID: "SO3"))
            #expect(confirmed?.orderID == "SO3" && confirmed?.status == .confirmed)
            do {
                try await service.update(changed, from: order)
                Issue.record("a stale ETag was accepted")
            } catch {
                #expect(error.code == .preconditionFailed)
            }
            let missing = try await service.get(V4.salesOrders, key: .init(orderID: "NOPE"))
            #expect(missing == nil)
        }
    }

    /// Through the router (mixed mode): reads and writes of downloaded sets stay offline,
    /// operation calls go online, and a live query sees the offline store's changes.
    @Test(arguments: [false, true])
    func typedAPIThroughTheRouter(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let offline = try await fixture.provider(v2: v2)
        try await offline.open()
        let root = v2 ? fixture.server.v2Root : fixture.server.v4Root
        let router = ODataRouter(online: OnlineODataProvider(serviceRoot: root), offline: offline)
        let service = try await DataService(router)
        #expect(service.version == (v2 ? .v2 : .v4))
        let url = "SalesOrders?$filter=PartnerID eq 'BP1'&$orderby=OrderID"
        let live = Collector(service.observe(url: url))
        try await live.wait(for: 1)
        if v2 {
            let order = try #require(try await service.get(V2.salesOrders, key: .init(orderID: "SO11")))
            var changed = order
            changed.note = "routed"
            try await service.update(changed, from: order)
            let products = try await service.call(V2.getProductsByCategory(categoryID: "C2"))
            #expect(!products.isEmpty && products.allSatisfy { $0.categoryID == "C2" })
        } else {
            let order = try #require(try await service.get(V4.salesOrders, key: .init(orderID: "SO11")))
            var changed = order
            changed.note = "routed"
            try await service.update(changed, from: order)
            let products = try await service.call(V4.getProductsByCategory(categoryID: "C2"))
            #expect(!products.isEmpty && products.allSatisfy { $0.categoryID == "C2" })
        }
        // The update went to the offline queue, not to the backend.
        #expect(try await queue(offline).count == 1)
        try await live.wait(for: 2)
        live.cancel()
        #expect(try await eventually { await offline.activeChangeSubscriptions == 0 })
    }
}
