import Foundation
import ODataCore
import ODataServer
import Testing

@testable import OfflineOData

/// Issue 55, item 2: `cast` of primitive values answers what OData 4.01 says, on the reference
/// server and in local reads alike, through V4 and V2: decimals cast to numbers by value, any
/// value to `Edm.String` as its payload literal, a string that is no literal of the target
/// type to null, an enum to its member's name. Each expectation is computed here from the rows
/// themselves, never by the code under test.
@Suite struct CastTests {
    static let queries = [
        OfflineODataDefiningQuery(name: "Products", query: "Products"),
        OfflineODataDefiningQuery(name: "Orders", query: "SalesOrders"),
    ]

    /// The keys a `$filter` selects: from the server (V4 or V2 JSON) and from the local store.
    static func keys(
        _ fixture: Fixture, _ provider: OfflineODataProvider, v2: Bool, _ set: String, _ key: String, _ filter: String
    ) async throws -> (server: [String], local: [String]) {
        let root = (v2 ? fixture.server.v2Root : fixture.server.v4Root).absoluteString
        var components = URLComponents()
        components.queryItems = [
            URLQueryItem(name: "$filter", value: filter), URLQueryItem(name: "$top", value: "1000"),
        ]
        let query = (components.percentEncodedQuery ?? "").replacingOccurrences(of: "+", with: "%2B")
        var headers = ODataCore.HTTPHeaders()
        headers["Accept"] = "application/json"
        let response = try await DefaultTransport.make().send(
            TransportRequest(method: "GET", url: root + set + "?" + query, headers: headers), timeout: 20)
        let json = try JSONValue.parse(response.body)
        #expect(response.status == 200, "\(filter): \(String(decoding: response.body, as: UTF8.self).prefix(400))")
        let rows = (v2 ? json["d"]?["results"]?.arrayValue : json["value"]?.arrayValue) ?? []
        let server = rows.compactMap { $0[key]?.stringValue }.sorted()
        let local = try await provider.readEntities(set + "?$filter=" + filter).compactMap { $0.string(key) }.sorted()
        return (server, local)
    }

    @Test(arguments: [false, true])
    func castAnswersByValueOnTheServerAndLocally(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        // Notes that are numbers, and some that look like one and are not.
        let notes = ["SO1": "0", "SO2": "42", "SO3": " 7", "SO4": "1.5", "SO5": "9999999999", "SO6": "-0"]
        for (order, note) in notes {
            #expect(try await fixture.backendSend("PATCH", "SalesOrders('\(order)')", #"{"Note":"\#(note)"}"#) < 300)
        }
        let provider = try await fixture.provider(v2: v2, queries: Self.queries)
        try await provider.open()
        let products = try await provider.readEntities("Products")
        let orders = try await provider.readEntities("SalesOrders")
        #expect(products.count > 10 && orders.count > 10)
        func ids(_ rows: [Entity], _ key: String, _ keep: (Entity) -> Bool) -> [String] {
            rows.filter(keep).compactMap { $0.string(key) }.sorted()
        }
        func price(_ e: Entity) -> Double? { e.decimal("Price").flatMap { Double($0.description) } }
        let first = try #require(products.first)
        let firstPrice = try #require(first.decimal("Price")).description
        // An Edm.Date in V4, an Edm.DateTime in V2 (which has no date type).
        func dateText(_ e: Entity) -> String? {
            switch e["ReleaseDate"] {
            case .primitive(.date(let d))?: return d.description
            case .primitive(.dateTime(let d))?: return d.description
            default: return nil
            }
        }
        let firstDate = try #require(dateText(first))
        #expect(firstDate.count == (v2 ? 19 : 10), "\(firstDate)")
        let shipped = ids(orders, "OrderID") { e in
            switch e["Status"] {
            case .enumeration(let value)?: return value.members == ["Shipped"]
            case .primitive(.string(let name))?: return name == "Shipped"
            default: return false
            }
        }
        let cases: [(set: String, key: String, filter: String, expected: [String])] = [
            (
                "Products", "ProductID", "cast(Price,Edm.Double) gt 1000",
                ids(products, "ProductID") { (price($0) ?? 0) > 1000 }
            ),
            (
                "Products", "ProductID", "cast(Price,Edm.Double) gt 1",
                ids(products, "ProductID") { (price($0) ?? 0) > 1 }
            ),
            (
                "Products", "ProductID", "cast(Price,Edm.Int32) ge 1000",
                ids(products, "ProductID") { (price($0) ?? 0).rounded(.towardZero) >= 1000 }
            ),
            (
                "Products", "ProductID", "cast(Price,Edm.String) eq '\(firstPrice)'",
                ids(products, "ProductID") {
                    $0.decimal("Price")?.description == firstPrice
                }
            ),
            (
                "Products", "ProductID", "cast(ReleaseDate,Edm.String) eq '\(firstDate)'",
                ids(products, "ProductID") {
                    dateText($0) == firstDate
                }
            ),
            ("Products", "ProductID", "cast(2.5,Edm.Double) gt 1", ids(products, "ProductID") { _ in true }),
            ("Products", "ProductID", "cast('12x',Edm.Int32) eq 0", []),
            ("Products", "ProductID", "cast('12',Edm.Int32) eq 12", ids(products, "ProductID") { _ in true }),
            ("SalesOrders", "OrderID", "cast(Note,Edm.Int32) eq 0", ["SO1", "SO6"]),
            ("SalesOrders", "OrderID", "cast(Note,Edm.Int32) eq 42", ["SO2"]),
            ("SalesOrders", "OrderID", "cast(Note,Edm.Int32) ne null", ["SO1", "SO2", "SO6"]),
            ("SalesOrders", "OrderID", "cast(Note,Edm.Int64) eq 9999999999", ["SO5"]),
            ("SalesOrders", "OrderID", "cast(Note,Edm.Decimal) eq 1.5", ["SO4"]),
            // V2 has no enums: its metadata makes the status a string of the member's name.
            ("SalesOrders", "OrderID", "cast(Status,Edm.String) eq 'Shipped'", shipped),
            ("SalesOrders", "OrderID", "cast(Status,Edm.String) eq '2'", []),
        ]
        for (set, key, filter, expected) in cases {
            // V2's cast names the type as a string.
            let sent = v2 ? Self.v2Cast(filter) : filter
            let (server, local) = try await Self.keys(fixture, provider, v2: v2, set, key, sent)
            #expect(server == expected, "server: \(sent)")
            #expect(local == expected, "local: \(sent)")
        }
    }

    /// `cast(x,Edm.T)` in V2's spelling, `cast(x,'Edm.T')`.
    static func v2Cast(_ filter: String) -> String {
        var text = filter
        for type in ["Edm.Double", "Edm.Int32", "Edm.Int64", "Edm.String", "Edm.Decimal"] {
            text = text.replacingOccurrences(of: "," + type + ")", with: ",'" + type + "')")
        }
        return text
    }

    /// Casts that cannot be computed are refused (501), never answered with a guess.
    @Test(arguments: [false, true])
    func aCastThatCannotBeComputedIsRefused(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let provider = try await fixture.provider(v2: v2, queries: Self.queries)
        try await provider.open()
        let filter = v2 ? "cast(Name,'Edm.GeographyPoint') eq null" : "cast(Name,Edm.GeographyPoint) eq null"
        await #expect(throws: (any Error).self) { try await provider.readEntities("Products?$filter=" + filter) }
    }
}
