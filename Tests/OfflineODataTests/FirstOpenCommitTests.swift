import Foundation
import ODataCore
import ODataServer
import ODataStore
import Testing
@testable import OfflineOData

/// The first open commits its pages in groups of `firstOpenEntitiesPerCommit` entities (a fill
/// cut short starts again from nothing, so commits between pages only cost), V4 and V2.
@Suite struct FirstOpenCommitTests {
    /// Pages of two Contacts each, 6 in all; the third page comes after `delay` ms.
    static func pages(v2: Bool, delay: Int) -> [FaultRule] {
        var third = FaultRule(
            method: "GET", urlContains: "skiptoken=third",
            answer: PagingGuardTests.page(v2: v2, [(905, "Five"), (906, "Six")], next: nil))
        third.delayMilliseconds = delay
        return [
            third,
            FaultRule(method: "GET", urlContains: "skiptoken=second",
                      answer: PagingGuardTests.page(v2: v2, [(903, "Three"), (904, "Four")],
                                                    next: "Contacts?$skiptoken=third")),
            FaultRule(method: "GET", urlContains: "Contacts",
                      answer: PagingGuardTests.page(v2: v2, [(901, "One"), (902, "Two")],
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
    /// them; committed per page, it saw 4). The third page completes the group: all 6.
    @Test(arguments: [false, true])
    func pagesAreCommittedInGroups(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        await fixture.server.service.faults.set(Self.pages(v2: v2, delay: 3_000))
        var parameters = fixture.parameters()
        parameters.firstOpenEntitiesPerCommit = 5
        let provider = try await fixture.provider(v2: v2, parameters: parameters, queries: PagingGuardTests.contactsOnly)
        let opening = Task { try await provider.open() }
        // Until the third page is asked for, then a second for the second page to be stored.
        var asked = false
        for _ in 0..<200 where !asked {
            asked = await fixture.server.service.journal.requests().contains { $0.contains("skiptoken=third") }
            if !asked { try await Task.sleep(nanoseconds: 20_000_000) }
        }
        #expect(asked)
        try await Task.sleep(nanoseconds: 1_000_000_000)
        let during = Self.committedContacts(parameters.storeFile)
        try await opening.value
        #expect(during == 0, "committed while the third page was on its way: \(String(describing: during))")
        let names = try await provider.readEntities("Contacts?$orderby=ContactID").map { string($0, "FirstName") ?? "" }
        #expect(names == ["One", "Two", "Three", "Four", "Five", "Six"])
    }

    /// A page that fails after a group was committed: the open fails and leaves no store
    /// behind; the next open stores everything. Groups of 1 entity commit every page.
    @Test(arguments: [false, true])
    func aFailureAfterACommittedGroupLeavesNothing(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        // The third page fails once, then comes as the rules below say.
        await fixture.server.service.faults.set(
            [FaultRule(method: "GET", urlContains: "skiptoken=third", status: 500, times: 1)] + Self.pages(v2: v2, delay: 0))
        var parameters = fixture.parameters()
        parameters.firstOpenEntitiesPerCommit = 3
        let provider = try await fixture.provider(v2: v2, parameters: parameters, queries: PagingGuardTests.contactsOnly)
        let error = await PagingGuardTests.openError(provider)
        #expect(error.contains("500"), "\(error)")
        #expect(!FileManager.default.fileExists(atPath: parameters.storeFile))
        #expect(!FileManager.default.fileExists(atPath: parameters.storeFile + "-wal"))
        try await provider.open()
        #expect(count(try await provider.read("Contacts")) == 6)
    }
}
