import Foundation
import ODataCore
import ODataServer
import ODataStore
import Testing
@testable import OfflineOData

/// The first open commits its pages in groups of `firstOpenEntitiesPerCommit` entities (a fill
/// cut short starts again from nothing, so commits between pages only cost), V4 and V2.
@Suite struct FirstOpenCommitTests {
    /// Four pages of Contacts (2, 2, 2 and 1), each after the one before; the third and fourth
    /// come after `delay` ms. `failing`: the fourth fails once with 500 first.
    static func pages(v2: Bool, delay: Int, failing: Bool = false) -> [FaultRule] {
        var third = FaultRule(
            method: "GET", urlContains: "skiptoken=third",
            answer: PagingGuardTests.page(v2: v2, [(905, "Five"), (906, "Six")], next: "Contacts?$skiptoken=fourth"))
        third.delayMilliseconds = delay
        var fourth = FaultRule(
            method: "GET", urlContains: "skiptoken=fourth",
            answer: PagingGuardTests.page(v2: v2, [(907, "Seven")], next: nil))
        fourth.delayMilliseconds = delay
        let failure = FaultRule(method: "GET", urlContains: "skiptoken=fourth", status: 500, times: 1)
        return (failing ? [failure] : []) + [
            third, fourth,
            FaultRule(
                method: "GET", urlContains: "skiptoken=second",
                answer: PagingGuardTests.page(
                    v2: v2, [(903, "Three"), (904, "Four")],
                    next: "Contacts?$skiptoken=third")),
            FaultRule(
                method: "GET", urlContains: "Contacts",
                answer: PagingGuardTests.page(
                    v2: v2, [(901, "One"), (902, "Two")],
                    next: "Contacts?$skiptoken=second")),
        ]
    }

    /// The Contacts another connection sees in the store file while the open runs.
    static func committedContacts(_ path: String) -> Int? {
        var options = Connection.Options(key: "offline-key")
        options.readOnly = true
        options.create = false
        guard let connection = try? Connection(path: path, options: options) else { return nil }
        defer { connection.close() }
        guard case .integer(let n)? = try? connection.query("SELECT count(*) FROM \"es_Contacts\"").first?.first else {
            return nil
        }
        return Int(n)
    }

    /// Groups of at least 5 entities over pages of 2: while the third page is on its way, the
    /// first four entities are stored but not committed (another connection sees none of
    /// them; committed per page, it saw 4). The third page completes the group, which is
    /// committed before the fourth page comes (6); the last commit adds the seventh.
    @Test(arguments: [false, true])
    func pagesAreCommittedInGroups(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        await fixture.server.service.faults.set(Self.pages(v2: v2, delay: 5_000))
        var parameters = fixture.parameters()
        parameters.firstOpenEntitiesPerCommit = 5
        let provider = try await fixture.provider(
            v2: v2, parameters: parameters, queries: PagingGuardTests.contactsOnly)
        let opening = Task { try await provider.open() }
        /// What another connection sees a second after `page` was asked for (the page before
        /// it is stored by then: it came before it).
        func seen(whileWaitingFor page: String) async throws -> Int? {
            var asked = false
            for _ in 0..<1_000 where !asked {
                asked = await fixture.server.service.journal.requests().contains { $0.contains("skiptoken=\(page)") }
                if !asked { try await Task.sleep(nanoseconds: 20_000_000) }
            }
            #expect(asked, "\(page) was never asked for")
            try await Task.sleep(nanoseconds: 1_000_000_000)
            return Self.committedContacts(parameters.storeFile)
        }
        let beforeThird = try await seen(whileWaitingFor: "third")
        let beforeFourth = try await seen(whileWaitingFor: "fourth")
        try await opening.value
        #expect(beforeThird == 0, "committed while the third page was on its way: \(String(describing: beforeThird))")
        #expect(
            beforeFourth == 6, "committed while the fourth page was on its way: \(String(describing: beforeFourth))")
        let names = try await provider.readEntities("Contacts?$orderby=ContactID").map { string($0, "FirstName") ?? "" }
        #expect(names == ["One", "Two", "Three", "Four", "Five", "Six", "Seven"])
    }

    /// A page that fails after a group was committed, with the next group open (groups of at
    /// least 3 entities: pages 1 and 2 are committed, page 3 is stored in the open group when
    /// page 4 fails): the open fails and leaves no store behind; the next open stores all 7.
    @Test(arguments: [false, true])
    func aFailureWithAGroupOpenLeavesNothing(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        await fixture.server.service.faults.set(Self.pages(v2: v2, delay: 0, failing: true))
        var parameters = fixture.parameters()
        parameters.firstOpenEntitiesPerCommit = 3
        let provider = try await fixture.provider(
            v2: v2, parameters: parameters, queries: PagingGuardTests.contactsOnly)
        let error = await PagingGuardTests.openError(provider)
        #expect(error.contains("500"), "\(error)")
        #expect(!FileManager.default.fileExists(atPath: parameters.storeFile))
        #expect(!FileManager.default.fileExists(atPath: parameters.storeFile + "-wal"))
        try await provider.open()
        #expect(count(try await provider.read("Contacts")) == 7)
    }

    /// The lookup indexes of a store: their names and SQL, read from the file.
    static func lookupIndexes(_ provider: OfflineODataProvider) async throws -> [String: String] {
        let store = try await provider.openStore()
        let names = Set(
            store.schema.lookupIndexStatements().compactMap { statement -> String? in
                guard let start = statement.range(of: "EXISTS \"")?.upperBound,
                    let end = statement[start...].firstIndex(of: "\"")
                else { return nil }
                return String(statement[start..<end])
            })
        let rows = try await store.read { reader in
            try reader.connection.query("SELECT name, sql FROM sqlite_master WHERE type = 'index'")
        }
        var found: [String: String] = [:]
        for row in rows {
            if case .text(let name) = row[0], names.contains(name), case .text(let sql) = row[1] { found[name] = sql }
        }
        #expect(found.count == names.count, "lookup indexes missing: \(names.subtracting(found.keys).sorted())")
        return found
    }

    /// A fill whose groups write many more pages than the file grows by (a foreign key whose
    /// values come scattered; forced here, every group of 2 counts as one) drops the lookup
    /// indexes of the sets it fills in bulk and builds them at its end. The store then has every lookup
    /// index, as one filled row by row does, the Open event names those built at the end, and
    /// reads through foreign keys and expands give the same answers. V4 and V2.
    @Test(arguments: [false, true])
    func aFillThatRewritesItsIndexesBuildsThemAtTheEnd(v2: Bool) async throws {
        let fixture = try await Fixture.start(pageSize: 2)
        defer { Task { await fixture.stop() } }
        var deferring = fixture.parameters()
        deferring.storeName = "deferring"
        deferring.firstOpenEntitiesPerCommit = 2
        deferring.firstOpenIndexDeferral = (factor: 0, minimumGrowth: 0)
        let provider = try await fixture.provider(v2: v2, parameters: deferring)
        try await provider.open()
        var plain = fixture.parameters()
        plain.storeName = "row-by-row"
        plain.firstOpenEntitiesPerCommit = 2
        let reference = try await fixture.provider(v2: v2, parameters: plain)
        try await reference.open()

        let events = try await provider.readEntities("EventLog?$filter=Type eq 'Open'")
        let details = events.compactMap { string($0, "Details") }
        #expect(details.count == 1 && details[0].contains("lookup indexes built after the fill: "), "\(details)")
        let referenceDetails = try await reference.readEntities("EventLog?$filter=Type eq 'Open'").compactMap {
            string($0, "Details")
        }
        #expect(referenceDetails.count == 1 && !referenceDetails[0].contains("lookup indexes"), "\(referenceDetails)")
        // The foreign-key indexes of the sets filled in bulk by one query alone were dropped and
        // built again (the contacts'); not those of sets an expand writes (the orders and their
        // items: linking them looks rows up while the fill runs).
        #expect(details.first?.contains("Contacts/$fk/") == true, "\(details)")
        #expect(details.first?.contains("SalesOrder") == false, "\(details)")
        let built = try await Self.lookupIndexes(provider)
        #expect(built == (try await Self.lookupIndexes(reference)))
        #expect(!built.isEmpty)
        for url in [
            "SalesOrders?$expand=Items($orderby=ItemPosition)&$orderby=OrderID",
            "BusinessPartners?$filter=SalesOrders/any(o:o/OrderID ne '')&$orderby=PartnerID&$select=PartnerID",
            "SalesOrderItems/$count",
        ] {
            let stored = try await provider.read(url)
            #expect(stored == (try await reference.read(url)), "\(url)")
            #expect(count(stored) > 0, "\(url)")
        }
    }

    /// The judgement itself: a group is judged only when the file grew by at least the
    /// minimum, and counts when it wrote more than `factor` pages per page grown.
    @Test func aGroupRewritesItsIndexesWhenItWritesMoreThanThreePagesPerPageGrown() {
        let limits = OfflineODataParameters().firstOpenIndexDeferral
        #expect(limits == (3, 256))
        #expect(!Downloader.thrashing(from: (0, 0), to: (1_500, 1_000), limits: limits))
        #expect(!Downloader.thrashing(from: (0, 0), to: (3_000, 1_000), limits: limits))
        #expect(Downloader.thrashing(from: (0, 0), to: (3_001, 1_000), limits: limits))
        #expect(Downloader.thrashing(from: (10_000, 500), to: (24_000, 1_500), limits: limits))
        // Updates of stored rows grow the file by little: never judged.
        #expect(!Downloader.thrashing(from: (0, 1_000), to: (50_000, 1_255), limits: limits))
        #expect(Downloader.thrashing(from: (0, 1_000), to: (50_000, 1_256), limits: limits))
    }
}
