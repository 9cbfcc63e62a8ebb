import Foundation
import ODataCore
import ODataServer
import Testing
@testable import OfflineOData

/// Issue 34, item 12: a backend's paging cannot make a download run on, and a row on two pages
/// is taken once. The reference server plays the misbehaving backend (fault rules that answer
/// with a given page), V4 and V2.
@Suite struct PagingGuardTests {
    /// A page of Contacts in the version's JSON: `(ContactID, FirstName)` rows and a next link.
    static func page(v2: Bool, _ rows: [(Int, String)], next: String?) -> String {
        let entities = rows.map { id, name in
            v2
                ? #"{"__metadata":{"uri":"Contacts(\#(id)L)","type":"Sales.Contact"},"ContactID":"\#(id)","PartnerID":"BP0","FirstName":"\#(name)"}"#
                : #"{"ContactID":\#(id),"PartnerID":"BP0","FirstName":"\#(name)"}"#
        }.joined(separator: ",")
        if v2 {
            return #"{"d":{"results":[\#(entities)]\#(next.map { #","__next":"\#($0)""# } ?? "")}}"#
        }
        return #"{"value":[\#(entities)]\#(next.map { #","@odata.nextLink":"\#($0)""# } ?? "")}"#
    }

    static let contactsOnly = [OfflineODataDefiningQuery(name: "Contacts", query: "Contacts")]

    /// The open's error, as text ("" when it succeeds).
    static func openError(_ provider: OfflineODataProvider) async -> String {
        do {
            try await provider.open()
            return ""
        } catch {
            return String(describing: error)
        }
    }

    /// An empty page that links to itself: the second read of the link stops the open with an
    /// error naming it (it drew 10,000 requests in 20 s before), and a download the same way.
    @Test(arguments: [false, true])
    func aNextLinkReadTwiceStopsTheRead(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        await fixture.server.service.faults.set([
            FaultRule(method: "GET", urlContains: "Contacts", answer: Self.page(v2: v2, [], next: "Contacts?$skiptoken=again"))
        ])
        await fixture.server.service.journal.clear()
        let provider = try await fixture.provider(v2: v2, queries: Self.contactsOnly)
        let error = await Self.openError(provider)
        #expect(error.contains("next link"), "\(error)")
        #expect(error.contains("Contacts?$skiptoken=again was already read in this download"), "\(error)")
        let reads = await fixture.server.service.journal.requests().filter { $0.contains("Contacts") }
        #expect(reads.count == 2, "\(reads)")
    }

    /// Empty pages with ever new links: after `maximumEmptyPagesInARow` the read stops.
    @Test(arguments: [false, true])
    func emptyPagesThatLinkOnAreBounded(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        var rules = (1..<20).map { n in
            FaultRule(method: "GET", urlContains: "skiptoken=\(n)&", answer: Self.page(v2: v2, [], next: "Contacts?$skiptoken=\(n + 1)&x=1"))
        }
        rules.append(FaultRule(method: "GET", urlContains: "Contacts", answer: Self.page(v2: v2, [], next: "Contacts?$skiptoken=1&x=1")))
        await fixture.server.service.faults.set(rules)
        var parameters = fixture.parameters()
        parameters.maximumEmptyPagesInARow = 5
        let provider = try await fixture.provider(v2: v2, parameters: parameters, queries: Self.contactsOnly)
        let error = await Self.openError(provider)
        #expect(error.contains("more than 5 pages in a row without an entity link to a next page"), "\(error)")
    }

    /// `maximumPagesPerQuery` bounds a read that pages normally.
    @Test(arguments: [false, true])
    func pagesPerQueryAreBoundedByTheParameter(v2: Bool) async throws {
        let fixture = try await Fixture.start(pageSize: 2)
        defer { Task { await fixture.stop() } }
        var parameters = fixture.parameters()
        parameters.maximumPagesPerQuery = 2
        let provider = try await fixture.provider(v2: v2, parameters: parameters, queries: Self.contactsOnly)
        let error = await Self.openError(provider)
        #expect(error.contains("more than 2 pages (maximumPagesPerQuery)"), "\(error)")
        parameters.maximumPagesPerQuery = 3
        parameters.storeName = "enough-pages"
        let enough = try await fixture.provider(v2: v2, parameters: parameters, queries: Self.contactsOnly)
        try await enough.open()
        #expect(count(try await enough.read("Contacts")) == 6)
    }

    /// A row on two pages of the first open is taken once, the later copy winning (the open
    /// failed on a UNIQUE constraint before); a row twice on one page the same.
    @Test(arguments: [false, true])
    func aRowOnTwoPagesOfTheFirstOpenIsTakenOnce(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        await fixture.server.service.faults.set([
            FaultRule(method: "GET", urlContains: "skiptoken=second",
                      answer: Self.page(v2: v2, [(902, "Twice"), (901, "Second")], next: nil)),
            FaultRule(method: "GET", urlContains: "Contacts",
                      answer: Self.page(v2: v2, [(901, "First"), (902, "Once"), (903, "Other")], next: "Contacts?$skiptoken=second")),
        ])
        let provider = try await fixture.provider(v2: v2, queries: Self.contactsOnly)
        try await provider.open()
        let contacts = try await provider.readEntities("Contacts?$orderby=ContactID")
        #expect(contacts.map { string($0, "FirstName") ?? "" } == ["Second", "Twice", "Other"])
        #expect(count(try await provider.read("RequestQueue")) == 0)
    }
}
