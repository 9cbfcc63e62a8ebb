import Foundation
import ODataCore
import ODataServer
import ODataStore
import Testing

@testable import OfflineOData

/// A backend whose `$metadata` changes under a deployed app (SPEC §14): every download checks
/// it, additive changes migrate the store in place, breaking ones build a new store and replay
/// the queue, and no queued change is lost.
@Suite(.serialized) struct MetadataChangeTests {
    /// The sales sample's `$metadata` with `edits` applied (each `(old, new)` must match).
    static func salesModel(_ edits: [(String, String)]) throws -> Model {
        var text = SalesSample.metadata
        for (old, new) in edits {
            #expect(text.contains(old), "the sample has no \(old)")
            text = text.replacingOccurrences(of: old, with: new)
        }
        return try MetadataParser().parse(Data(text.utf8))
    }

    static let partnerPhone = #"<Property Name="Phone" Type="Edm.String"/>"#
    /// Business partners gain a nullable `Rating`; a new `Warehouses` set appears.
    static let additive: [(String, String)] = [
        (partnerPhone, partnerPhone + #"<Property Name="Rating" Type="Edm.Int32"/>"#),
        (
            #"<Function Name="GetProductsByCategory">"#,
            #"<EntityType Name="Warehouse"><Key><PropertyRef Name="WarehouseID"/></Key>"#
                + #"<Property Name="WarehouseID" Type="Edm.String" Nullable="false"/>"#
                + #"<Property Name="City" Type="Edm.String"/></EntityType>"#
                + #"<Function Name="GetProductsByCategory">"#
        ),
        (
            #"<FunctionImport Name="GetProductsByCategory""#,
            #"<EntitySet Name="Warehouses" EntityType="Sales.Warehouse"/><FunctionImport Name="GetProductsByCategory""#
        ),
    ]
    /// Business partners lose `Email` (contacts keep theirs).
    static let partnerEmailRemoved: [(String, String)] = [
        (
            #"<Property Name="CompanyName" Type="Edm.String"/><Property Name="Email" Type="Edm.String"/>"#,
            #"<Property Name="CompanyName" Type="Edm.String"/>"#
        )
    ]
    /// The `Contacts` set is gone (the type stays, unbound).
    static let contactsRemoved: [(String, String)] = [
        (#"<NavigationPropertyBinding Path="Contacts" Target="Contacts"/>"#, ""),
        (
            #"<EntitySet Name="Contacts" EntityType="Sales.Contact"><NavigationPropertyBinding Path="Partner" Target="BusinessPartners"/></EntitySet>"#,
            ""
        ),
    ]

    /// Collects what a provider reports.
    final class Listener: OfflineODataDelegate, @unchecked Sendable {
        private let lock = NSLock()
        private var _progress: [OfflineODataProgress] = []
        private var _failures: [OfflineODataFailedRequest] = []
        private var _changes: [OfflineODataMetadataChange] = []
        var progress: [OfflineODataProgress] { lock.withLock { _progress } }
        var failures: [OfflineODataFailedRequest] { lock.withLock { _failures } }
        var changes: [OfflineODataMetadataChange] { lock.withLock { _changes } }
        func offlineODataProvider(didUpdate progress: OfflineODataProgress) {
            lock.withLock { _progress.append(progress) }
        }
        func offlineODataProvider(requestDidFail request: OfflineODataFailedRequest) {
            lock.withLock { _failures.append(request) }
        }
        func offlineODataProvider(
            _ provider: OfflineODataProvider, didChangeMetadata change: OfflineODataMetadataChange
        ) {
            lock.withLock { _changes.append(change) }
        }
        func reset() {
            lock.withLock {
                _progress = []
                _failures = []
                _changes = []
            }
        }
    }

    /// The download's progress: one total, step numbers that never go back, exact texts.
    static func checkProgress(_ progress: [OfflineODataProgress], total: Int, first: OfflineODataProgressStep) {
        let download = progress.filter { $0.operation == .download }
        #expect(!download.isEmpty)
        #expect(Set(download.map(\.totalSteps)) == [total], "\(download.map(\.totalSteps))")
        let numbers = download.map(\.stepNumber)
        #expect(numbers == numbers.sorted(), "\(numbers)")
        #expect(download.first?.step == first)
        #expect(download.first?.stepNumber == 1)
        if first == .loadingMetadata {
            #expect(download.first?.message == "Performing step 1 of \(total) : Loading metadata")
        }
        #expect(download.last?.stepNumber == total)
    }

    static func ids(_ entities: [Entity], _ name: String = "RequestID") -> [Int64] {
        entities.compactMap { entity in
            if case .primitive(.int64(let id))? = entity[name] { return id }
            return nil
        }
    }

    @Test(arguments: [false, true])
    func anAdditiveChangeMigratesInPlaceAndReadsAgainOnlyTheQueriesWhoseTypesGrew(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await fixture.provider(v2: v2, delegate: listener)
        try await provider.open()
        // A change waits in the queue across the migration and the full read of its set.
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"+49 field"}"#.utf8))
        // Nothing changed yet: a download asks for $metadata conditionally (the backend gave
        // an ETag), gets 304, and goes on as before.
        await fixture.server.service.journal.clear()
        try await provider.download()
        #expect(listener.changes.isEmpty)
        let asked = await fixture.server.service.journal.requestHeaders().filter {
            $0.request.hasPrefix("GET $metadata")
        }
        #expect(asked.count == 1)
        #expect(asked.first?.headers["If-None-Match"]?.hasPrefix("\"md-") == true)
        Self.checkProgress(listener.progress, total: Downloader.plan.count, first: .processingDefiningQueries)

        try await fixture.server.service.changeModel(to: Self.salesModel(Self.additive))
        #expect(try await fixture.backendSend("PATCH", "BusinessPartners('BP1')", #"{"Rating":5}"#) < 300)
        listener.reset()
        await fixture.server.service.journal.clear()
        try await provider.download()

        #expect(listener.changes.count == 1)
        let change = try #require(listener.changes.first)
        #expect(change.kind == .additive)
        #expect(change.reReadDefiningQueries == ["Partners"])
        #expect(change.archivedRequests.isEmpty)
        #expect(change.changes.contains { $0.subject == "Sales.BusinessPartner/Rating" && $0.kind == .additive })
        // The provider's own sets make a second container: sets are named with theirs.
        #expect(
            change.changes.contains { $0.subject == "SalesService/Warehouses" && $0.kind == .additive },
            "\(change.changes)")
        Self.checkProgress(listener.progress, total: MetadataMigration.additivePlan.count, first: .loadingMetadata)
        // Only the query whose type grew was read in full; the others went on from their delta links.
        let reads = await fixture.server.service.journal.requestHeaders().map(\.request).filter {
            $0.hasPrefix("GET ") && !$0.contains("$metadata")
        }
        let token = v2 ? "!deltatoken=" : "$deltatoken="
        #expect(reads.contains { $0.contains("BusinessPartners") && !$0.contains(token) }, "\(reads)")
        #expect(!reads.contains { $0.contains("BusinessPartners") && $0.contains(token) }, "\(reads)")
        #expect(reads.contains { $0.contains("SalesOrders") && $0.contains(token) }, "\(reads)")
        #expect(reads.contains { $0.contains("Contacts") && $0.contains(token) }, "\(reads)")

        // The new property reads locally; the queued change is still there, and uploads.
        let bp1 = try await provider.readEntities("BusinessPartners('BP1')").first
        #expect(bp1?["Rating"] == .primitive(.int32(5)))
        let filtered = try await provider.readEntities("BusinessPartners?$filter=Rating eq 5")
        #expect(filtered.map { string($0, "PartnerID") } == ["BP1"])
        #expect(string(try await provider.readEntities("BusinessPartners('BP2')").first, "Phone") == "+49 field")
        #expect(try await provider.model.entitySet("Warehouses") != nil)
        #expect(try await provider.isRequestQueueEmpty == false)
        // A write may use the new property.
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Rating":2}"#.utf8))
        try await provider.upload()
        #expect(try await provider.readEntities("ErrorArchive").isEmpty)
        #expect(try await fixture.backend("BusinessPartners('BP2')")["Phone"]?.stringValue == "+49 field")
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Rating"] == .number("2"))

        // The next download finds the same $metadata: no change, the usual steps.
        listener.reset()
        try await provider.download()
        #expect(listener.changes.isEmpty)
        Self.checkProgress(listener.progress, total: Downloader.plan.count, first: .processingDefiningQueries)
        // The store reopens with the new model.
        await provider.close()
        try await provider.open()
        #expect(try await provider.readEntities("BusinessPartners('BP1')").first?["Rating"] == .primitive(.int32(2)))
    }

    @Test(arguments: [false, true])
    func aRemovedPropertyArchivesTheRequestsThatUseItAndReplaysTheRest(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await fixture.provider(v2: v2, delegate: listener)
        try await provider.open()
        let contacts = try await provider.readEntities("Contacts?$orderby=ContactID&$top=1")
        guard case .primitive(.int64(let contact))? = contacts.first?["ContactID"] else {
            Issue.record("no contact")
            return
        }
        let oldPhone = try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue
        // 1 uses Email, which goes; 2 changes the same partner after it; 3 and 4 fit.
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Email":"gone@example.com"}"#.utf8))
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"+1 555"}"#.utf8))
        _ = try await provider.execute(
            method: "PATCH", url: "Contacts(\(contact))", body: Array(#"{"FirstName":"Replayed"}"#.utf8))
        _ = try await provider.execute(
            method: "PATCH", url: "SalesOrders('SO1')", body: Array(#"{"Note":"kept across the migration"}"#.utf8))
        let queued = Self.ids(try await provider.readEntities("RequestQueue?$orderby=RequestID"))
        #expect(queued.count == 4)

        try await fixture.server.service.changeModel(to: Self.salesModel(Self.partnerEmailRemoved))
        // Another user changes a row meanwhile: the new store has it.
        #expect(try await fixture.backendSend("PATCH", "SalesOrders('SO2')", #"{"Note":"office"}"#) < 300)
        listener.reset()
        try await provider.download()

        let change = try #require(listener.changes.first)
        #expect(listener.changes.count == 1)
        #expect(change.kind == .breaking)
        #expect(change.changes.contains { $0.subject == "Sales.BusinessPartner/Email" && $0.kind == .breaking })
        #expect(change.archivedRequests == Array(queued.prefix(2)))
        #expect(change.leftOutDefiningQueries.isEmpty)
        Self.checkProgress(listener.progress, total: MetadataMigration.breakingPlan.count, first: .loadingMetadata)
        #expect(listener.failures.map(\.code) == ["MetadataChanged", "DependencyFailed"])
        #expect(listener.failures.map(\.httpStatus) == [0, 424])

        let archive = try await provider.readEntities("ErrorArchive?$orderby=RequestID")
        #expect(Self.ids(archive) == Array(queued.prefix(2)))
        #expect(archive.map { string($0, "Code") } == ["MetadataChanged", "DependencyFailed"])
        #expect(
            string(archive.first, "Message")?.contains("Email") == true, "\(string(archive.first, "Message") ?? "")")
        #expect(archive.first?["HTTPStatusCode"] == .null)
        #expect(archive.last?["HTTPStatusCode"] == .primitive(.int32(424)))
        // The pending requests keep their IDs and their effect on the new store.
        let pending = try await provider.readEntities("RequestQueue?$filter=Status eq 'pending'&$orderby=RequestID")
        #expect(Self.ids(pending) == Array(queued.suffix(2)))
        #expect(string(try await provider.readEntities("Contacts(\(contact))").first, "FirstName") == "Replayed")
        #expect(
            string(try await provider.readEntities("SalesOrders('SO1')").first, "Note") == "kept across the migration")
        #expect(string(try await provider.readEntities("SalesOrders('SO2')").first, "Note") == "office")
        #expect(try await provider.readEntities("BusinessPartners('BP1')").first?["Email"] == nil)
        #expect(
            try await provider.model.entityType("Sales.BusinessPartner")?.properties.contains { $0.name == "Email" }
                == false)
        // Nothing is left of the migration beside the store.
        let storeFile = fixture.parameters().storeFile
        #expect(!FileManager.default.fileExists(atPath: StoreFiles.migratingStore(storeFile)))
        #expect(!FileManager.default.fileExists(atPath: StoreFiles.migrationMarker(storeFile)))

        try await provider.upload()
        #expect(try await fixture.backend("Contacts(\(contact))")["FirstName"]?.stringValue == "Replayed")
        #expect(try await fixture.backend("SalesOrders('SO1')")["Note"]?.stringValue == "kept across the migration")
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == oldPhone)
        #expect(Self.ids(try await provider.readEntities("ErrorArchive")).count == 2)
        // Deleting the archive rows reverts BP1 to the backend's state.
        _ = try await provider.execute(method: "DELETE", url: "ErrorArchive(\(queued[0]))")
        #expect(try await provider.readEntities("ErrorArchive").isEmpty)
        #expect(string(try await provider.readEntities("BusinessPartners('BP1')").first, "Phone") == oldPhone)
        // The key still opens the store, and later downloads are plain again.
        await provider.close()
        try await provider.open()
        listener.reset()
        try await provider.download()
        #expect(listener.changes.isEmpty)
    }

    @Test(arguments: [false, true])
    func aRemovedEntitySetLeavesItsQueryOutAndArchivesItsChanges(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await fixture.provider(v2: v2, delegate: listener)
        try await provider.open()
        let contacts = try await provider.readEntities("Contacts?$orderby=ContactID&$top=1")
        guard case .primitive(.int64(let contact))? = contacts.first?["ContactID"] else {
            Issue.record("no contact")
            return
        }
        _ = try await provider.execute(
            method: "PATCH", url: "Contacts(\(contact))", body: Array(#"{"FirstName":"Lost set"}"#.utf8))
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"+33 1"}"#.utf8))

        try await fixture.server.service.changeModel(to: Self.salesModel(Self.contactsRemoved))
        listener.reset()
        try await provider.download()

        let change = try #require(listener.changes.first)
        #expect(change.kind == .breaking)
        #expect(Array(change.leftOutDefiningQueries.keys) == ["Contacts"])
        #expect(change.leftOutDefiningQueries["Contacts"]?.contains("Contacts") == true)
        #expect(change.archivedRequests.count == 1)
        let archive = try await provider.readEntities("ErrorArchive")
        #expect(archive.map { string($0, "Code") } == ["MetadataChanged"])
        #expect(string(archive.first, "Message")?.contains("Contacts") == true)
        #expect(await provider.definingQueries.map(\.name) == ["Partners", "Orders"])
        #expect(string(try await provider.readEntities("BusinessPartners('BP2')").first, "Phone") == "+33 1")
        #expect(try await provider.readEntities("SalesOrders").count > 0)

        try await provider.upload()
        #expect(try await fixture.backend("BusinessPartners('BP2')")["Phone"]?.stringValue == "+33 1")
        // The app still defines the query at its next start: it stays out, said so, and the
        // rest of the store keeps downloading.
        await provider.close()
        let again = try await fixture.provider(v2: v2, delegate: listener)
        try await again.open()
        listener.reset()
        try await again.download()
        #expect(listener.changes.isEmpty)
        #expect(string(try await again.readEntities("BusinessPartners('BP2')").first, "Phone") == "+33 1")
    }

    @Test(arguments: [false, true])
    func aRetypedKeyBuildsANewStoreAndArchivesTheRequestsThatNameTheOldKey(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await fixture.provider(v2: v2, delegate: listener)
        try await provider.open()
        let contacts = try await provider.readEntities("Contacts?$orderby=ContactID&$top=1")
        guard case .primitive(.int64(let contact))? = contacts.first?["ContactID"] else {
            Issue.record("no contact")
            return
        }
        _ = try await provider.execute(
            method: "PATCH", url: "Contacts(\(contact))", body: Array(#"{"FirstName":"Old key"}"#.utf8))
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"+44 2"}"#.utf8))

        // The backend restarts on the same port with contacts keyed by text, and the same data.
        let port = fixture.server.port
        await fixture.server.stop()
        let model = try Self.salesModel([
            (
                #"<Property Name="ContactID" Type="Edm.Int64" Nullable="false"/>"#,
                #"<Property Name="ContactID" Type="Edm.String" Nullable="false"/>"#
            )
        ])
        let store = try await Store.create(
            path: fixture.directory.appendingPathComponent("backend-retyped.sqlite").path, model: model)
        var options = ODataService.Options()
        options.pageSize = 20
        let service = try await ODataService.open(store: store, options: options)
        try await service.load(
            SalesSample.data(scale: 3).map { set, entities in
                guard set == "Contacts" else { return (set, entities) }
                return (
                    set,
                    entities.map { entity in
                        var entity = entity
                        if case .primitive(.int64(let id))? = entity["ContactID"] {
                            entity["ContactID"] = .primitive(.string("C\(id)"))
                        }
                        return entity
                    }
                )
            })
        // The port can stay taken for a while after the old server stopped (by a client socket of
        // another test that the system gave it to as its own port, in a parallel run).
        var started: EmbeddedServer?
        for _ in 0..<300 where started == nil {
            started = try? await EmbeddedServer.start(service, port: port)
            if started == nil { try await Task.sleep(nanoseconds: 100_000_000) }
        }
        let restarted = try #require(started, "the backend could not listen on port \(port) again")
        defer {
            Task {
                await restarted.stop()
                store.close()
            }
        }
        listener.reset()
        try await provider.download()

        let change = try #require(listener.changes.first)
        #expect(change.kind == .breaking)
        #expect(change.changes.contains { $0.subject.hasPrefix("Sales.Contact") && $0.kind == .breaking }, "\(change)")
        let archive = try await provider.readEntities("ErrorArchive")
        #expect(archive.map { string($0, "Code") } == ["MetadataChanged"])
        // A V2 store keeps the URL with the key in V2's form.
        #expect(string(archive.first, "RequestURL") == "Contacts(\(contact)\(v2 ? "L" : ""))")
        #expect(string(try await provider.readEntities("Contacts('C\(contact)')").first, "FirstName") != nil)
        #expect(string(try await provider.readEntities("BusinessPartners('BP2')").first, "Phone") == "+44 2")
        try await provider.upload()
        #expect(try await fixture.backend("BusinessPartners('BP2')")["Phone"]?.stringValue == "+44 2")
        _ = try await provider.execute(
            method: "PATCH", url: "Contacts('C\(contact)')", body: Array(#"{"FirstName":"New key"}"#.utf8))
        try await provider.upload()
        #expect(try await fixture.backend("Contacts('C\(contact)')")["FirstName"]?.stringValue == "New key")
    }

    @Test(arguments: [false, true])
    func aNewRequiredPropertyArchivesTheCreatesMadeWithoutIt(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await fixture.provider(v2: v2, delegate: listener)
        try await provider.open()
        _ = try await provider.execute(
            method: "POST", url: "BusinessPartners",
            body: Array(#"{"PartnerID":"BPNEW","CompanyName":"Made offline"}"#.utf8))
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BPNEW')", body: Array(#"{"Phone":"+1 new"}"#.utf8))
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"+1 old"}"#.utf8))

        try await fixture.server.service.changeModel(
            to: Self.salesModel([
                (
                    Self.partnerPhone,
                    Self.partnerPhone + #"<Property Name="Region" Type="Edm.String" Nullable="false"/>"#
                )
            ]))
        // The backend fills the new property of every partner it has.
        let partners = try await fixture.backend("BusinessPartners?$select=PartnerID")["value"]?.arrayValue ?? []
        #expect(!partners.isEmpty)
        for partner in partners {
            let id = partner["PartnerID"]?.stringValue ?? "?"
            #expect(try await fixture.backendSend("PATCH", "BusinessPartners('\(id)')", #"{"Region":"EMEA"}"#) < 300)
        }
        listener.reset()
        try await provider.download()

        let change = try #require(listener.changes.first)
        #expect(change.kind == .breaking)
        let archive = try await provider.readEntities("ErrorArchive?$orderby=RequestID")
        #expect(archive.map { string($0, "Code") } == ["MetadataChanged", "DependencyFailed"])
        #expect(
            string(archive.first, "Message")?.contains("Region") == true, "\(string(archive.first, "Message") ?? "")")
        #expect(string(try await provider.readEntities("BusinessPartners('BP1')").first, "Region") == "EMEA")
        try await provider.upload()
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "+1 old")
        #expect(
            try await fixture.backend("BusinessPartners?$filter=PartnerID eq 'BPNEW'")["value"]?.arrayValue?.count == 0)
    }

    @Test(arguments: [false, true])
    func generatedTypesAndLiveQueriesKeepWorkingAcrossMigrations(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        let service = try await DataService(provider)
        let live = Collector(service.observe(url: "BusinessPartners?$filter=PartnerID eq 'BP1'"))
        try await live.wait(for: 1)
        @Sendable func last() -> Entity? {
            guard case .collection(let collection)? = live.all.last else { return nil }
            return collection.entities.first
        }
        /// The generated types (made from the old $metadata) read BP1 and change its phone.
        func typedUpdate(_ phone: String) async throws {
            if v2 {
                let set = SalesV2.SalesService.businessPartners
                let read = try await service.get(set, key: .init(partnerID: "BP1"))
                #expect(read?.partnerID == "BP1")
                try await service.update(set, key: .init(partnerID: "BP1")) { $0.phone = phone }
            } else {
                let set = SalesV4.SalesService.businessPartners
                let read = try await service.get(set, key: .init(partnerID: "BP1"))
                #expect(read?.partnerID == "BP1")
                try await service.update(set, key: .init(partnerID: "BP1")) { $0.phone = phone }
            }
        }

        // Additive: the live query delivers the new property; the generated types ignore it on
        // read, and their update keeps it (only what changed is sent).
        try await fixture.server.service.changeModel(to: Self.salesModel(Self.additive))
        #expect(try await fixture.backendSend("PATCH", "BusinessPartners('BP1')", #"{"Rating":5}"#) < 300)
        try await provider.download()
        #expect(try await eventually { last()?["Rating"] == .primitive(.int32(5)) })
        try await typedUpdate("typed")
        #expect(try await eventually { string(last(), "Phone") == "typed" })
        try await provider.upload()
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Rating"] == .number("5"))
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "typed")

        // Breaking: the store is replaced; the same live query goes on delivering from the new
        // one, and the generated types still read and write (their Email is now absent).
        try await fixture.server.service.changeModel(
            to: Self.salesModel(Self.additive + Self.partnerEmailRemoved))
        let before = live.all.count
        try await provider.download()
        #expect(try await eventually { live.all.count > before })
        #expect(last()?["Email"] == nil)
        #expect(last()?["Rating"] == .primitive(.int32(5)))
        try await typedUpdate("typed again")
        #expect(try await eventually { string(last(), "Phone") == "typed again" })
        #expect(live.error == nil)
        try await provider.upload()
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "typed again")
        live.cancel()
    }

    /// Issue 55: a backend that negotiates its version (odatapy says `Version="4.01"` to one
    /// request and `"4.0"` to another) changes no model: the download reports no change,
    /// builds no new store and goes on with its delta; a backend row deleted meanwhile goes.
    /// V2's counterpart is DataServiceVersion 2.0 and 3.0.
    @Test(arguments: [false, true])
    func aVersionThatOnlyTheNegotiationChangedIsNoChange(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await fixture.provider(v2: v2, delegate: listener)
        try await provider.open()
        var model = try Self.salesModel([])
        model.version = v2 ? .v3 : .v401
        try await fixture.server.service.changeModel(to: model)
        let root = (v2 ? fixture.server.v2Root : fixture.server.v4Root).absoluteString
        let document = String(
            decoding: try await DefaultTransport.make().send(
                TransportRequest(method: "GET", url: root + "$metadata"), timeout: 10
            ).body, as: UTF8.self)
        #expect(document.contains(v2 ? #"m:DataServiceVersion="3.0""# : #"Version="4.01""#), "\(document.prefix(300))")
        #expect(try await fixture.backendSend("DELETE", "Contacts(1)", "") < 300)
        listener.reset()
        try await provider.download()
        #expect(listener.changes.isEmpty, "\(listener.changes)")
        Self.checkProgress(listener.progress, total: Downloader.plan.count, first: .processingDefiningQueries)
        #expect(try await provider.readEntities("Contacts?$filter=ContactID eq 1").isEmpty)
        // And back: still no change.
        model.version = v2 ? .v2 : .v4
        try await fixture.server.service.changeModel(to: model)
        listener.reset()
        try await provider.download()
        #expect(listener.changes.isEmpty, "\(listener.changes)")
    }

    @Test(arguments: [false, true])
    func withoutAnETagTheDownloadComparesTheContentHash(v2: Bool) async throws {
        let fixture = try await Fixture.start(configure: { $0.sendsETags = false })
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await fixture.provider(v2: v2, delegate: listener)
        try await provider.open()
        await fixture.server.service.journal.clear()
        try await provider.download()
        #expect(listener.changes.isEmpty)
        let asked = await fixture.server.service.journal.requestHeaders().filter {
            $0.request.hasPrefix("GET $metadata")
        }
        #expect(asked.count == 1)
        #expect(asked.first?.headers["If-None-Match"] == nil)
        try await fixture.server.service.changeModel(to: Self.salesModel(Self.additive))
        try await provider.download()
        #expect(listener.changes.map(\.kind) == [.additive])
        listener.reset()
        try await provider.download()
        #expect(listener.changes.isEmpty)
    }

    @Test(arguments: [false, true])
    func openChecksTheMetadataWhenAsked(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        var parameters = fixture.parameters()
        parameters.checksMetadataAtOpen = true
        let provider = try await fixture.provider(v2: v2, parameters: parameters, delegate: listener)
        try await provider.open()
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Email":"open@example.com"}"#.utf8))
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"at open"}"#.utf8))
        await provider.close()

        // Additive at open: the model follows; the new values come with the next download.
        try await fixture.server.service.changeModel(to: Self.salesModel(Self.additive))
        // (BP0: an entity with pending changes keeps its local row until they are uploaded.)
        #expect(try await fixture.backendSend("PATCH", "BusinessPartners('BP0')", #"{"Rating":3}"#) < 300)
        listener.reset()
        try await provider.open()
        #expect(listener.changes.map(\.kind) == [.additive])
        #expect(
            listener.progress.filter { $0.operation == .open }.map(\.step) == [.loadingMetadata, .buildingEntityStore])
        #expect(
            try await provider.model.entityType("Sales.BusinessPartner")?.properties.contains { $0.name == "Rating" }
                == true)
        listener.reset()
        try await provider.download()
        #expect(listener.changes.isEmpty)
        #expect(try await provider.readEntities("BusinessPartners('BP0')").first?["Rating"] == .primitive(.int32(3)))
        await provider.close()

        // Breaking at open: a new store, the queue replayed; the change that used Email archived.
        try await fixture.server.service.changeModel(to: Self.salesModel(Self.additive + Self.partnerEmailRemoved))
        listener.reset()
        try await provider.open()
        #expect(listener.changes.map(\.kind) == [.breaking])
        let steps = listener.progress.filter { $0.operation == .open }
        #expect(Set(steps.map(\.totalSteps)) == [MetadataMigration.breakingPlan.count])
        #expect(steps.map(\.stepNumber) == steps.map(\.stepNumber).sorted())
        #expect(try await provider.readEntities("ErrorArchive").map { string($0, "Code") } == ["MetadataChanged"])
        try await provider.upload()
        #expect(try await fixture.backend("BusinessPartners('BP2')")["Phone"]?.stringValue == "at open")

        // An open that cannot reach the backend still opens the store.
        await provider.close()
        await fixture.server.stop()
        try await provider.open()
        #expect(string(try await provider.readEntities("BusinessPartners('BP2')").first, "Phone") == "at open")
    }

    @Test(arguments: [false, true])
    func aChangeSetWithOneRequestThatNoLongerFitsIsArchivedWhole(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let listener = Listener()
        let provider = try await fixture.provider(v2: v2, delegate: listener)
        try await provider.open()
        let note = try await fixture.backend("SalesOrders('SO1')")["Note"]?.stringValue
        _ = try await provider.changeSet { set in
            set.add("PATCH", "SalesOrders('SO1')", json: #"{"Note":"with the partner"}"#)
            set.add("PATCH", "BusinessPartners('BP1')", json: #"{"Email":"set@example.com"}"#)
        }
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"alone"}"#.utf8))
        try await fixture.server.service.changeModel(to: Self.salesModel(Self.partnerEmailRemoved))
        try await provider.download()
        let archive = try await provider.readEntities("ErrorArchive?$orderby=RequestID")
        #expect(archive.map { string($0, "Code") } == ["DependencyFailed", "MetadataChanged"])
        #expect(string(archive.first, "Message")?.contains("change set") == true)
        try await provider.upload()
        #expect(try await fixture.backend("SalesOrders('SO1')")["Note"]?.stringValue == note)
        #expect(try await fixture.backend("BusinessPartners('BP2')")["Phone"]?.stringValue == "alone")
    }

    @Test(arguments: [false, true])
    func writesDuringAMigrationGoToTheNewStore(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2)
        try await provider.open()
        try await fixture.server.service.changeModel(to: Self.salesModel(Self.partnerEmailRemoved))
        // The new store's download is slow: the app goes on writing meanwhile, one request, a
        // $batch of two and a change set.
        await fixture.server.service.faults.set([
            FaultRule(method: "GET", urlContains: "SalesOrders", delayMilliseconds: 400)
        ])
        let download = Task { try await provider.download() }
        try await Task.sleep(nanoseconds: 150_000_000)
        _ = try await provider.execute(
            method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"during 1"}"#.utf8))
        let boundary = "batch_during"
        let parts = [("BusinessPartners('BP2')", "during 2"), ("BusinessPartners('BP0')", "during 3")].map {
            url, phone in
            "--\(boundary)\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n"
                + "PATCH \(url) HTTP/1.1\r\nContent-Type: application/json\r\n\r\n{\"Phone\":\"\(phone)\"}\r\n"
        }
        let batch = try await provider.execute(
            method: "POST", url: "$batch", headers: ["Content-Type": "multipart/mixed; boundary=\(boundary)"],
            body: Array((parts.joined() + "--\(boundary)--\r\n").utf8))
        #expect(batch.status < 300)
        _ = try await provider.changeSet { set in
            set.add("PATCH", "SalesOrders('SO3')", json: #"{"Note":"during 4"}"#)
        }
        try await download.value
        await fixture.server.service.faults.set([])
        let queued = try await provider.readEntities("RequestQueue?$filter=Status eq 'pending'")
        #expect(queued.count == 4, "\(queued.map { string($0, "RequestURL") ?? "" })")
        try await provider.upload()
        #expect(try await fixture.backend("BusinessPartners('BP1')")["Phone"]?.stringValue == "during 1")
        #expect(try await fixture.backend("BusinessPartners('BP2')")["Phone"]?.stringValue == "during 2")
        #expect(try await fixture.backend("BusinessPartners('BP0')")["Phone"]?.stringValue == "during 3")
        #expect(try await fixture.backend("SalesOrders('SO3')")["Note"]?.stringValue == "during 4")
    }

    /// The parts of a local `$batch` run inside their batch's turn: a migration that waits for
    /// the batch does not make them wait for it; a write outside waits.
    @Test func aLocalWriteWaitsForTheCarryOverButNotInsideItsOwnTurn() async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider()
        try await provider.open()
        await provider.setMigratingForTest(true)
        let body = Array(#"{"Phone":"inside"}"#.utf8)
        let inside = try await LocalWriteTurn.$held.withValue(true) {
            try await provider.execute(method: "PATCH", url: "BusinessPartners('BP1')", body: body)
        }
        #expect(inside.status < 300)
        let outside = Task {
            try await provider.execute(method: "PATCH", url: "BusinessPartners('BP2')", body: body)
        }
        try await Task.sleep(nanoseconds: 200_000_000)
        #expect(try await provider.readEntities("RequestQueue").count == 1, "the write outside waits")
        await provider.setMigratingForTest(false)
        #expect(try await outside.value.status < 300)
        #expect(try await provider.readEntities("RequestQueue").count == 2)
    }
}

extension OfflineODataProvider {
    func setMigratingForTest(_ value: Bool) { migrating = value }
}
