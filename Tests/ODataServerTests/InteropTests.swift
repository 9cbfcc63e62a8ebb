import Foundation
import InteropSupport
import ODataCore
import Testing
@testable import ODataServer

/// Runs clients from PyPI that nobody here wrote against the reference service: SAP's pyodata
/// (V2) and python-odata (V4). The venv is made under `.build/interop-venv` on first use.
@Suite(.serialized) struct InteropTests {
    static func run(_ executable: String, _ arguments: [String]) async throws -> (Int32, String, String) {
        try await Interop.runOffPool(executable, arguments)
    }
    static func python() async throws -> String { try await Interop.pythonOffPool() }
    static var repository: URL { Interop.repository }

    @Test func pyodataAgainstTheV2Root() async throws {
        let python = try await Self.python()
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        let script = Self.repository.appendingPathComponent("Tests/Interop/pyodata_client.py").path
        let running = try await EmbeddedServer.start(service)
        let (status, output, errors) = try await Self.run(python, [script, running.v2Root.absoluteString])
        await running.stop()
        #expect(status == 0, "pyodata failed: \(errors)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any], "output: \(output) \(errors)")
        #expect((json["entity_sets"] as? [String])?.contains("SalesOrders") == true)
        #expect(json["filtered_orders"] as? [String] == ["SO18", "SO17", "SO16"])
        #expect(json["inline_count"] as? Int == 10)
        #expect((json["expanded_items"] as? Int ?? 0) >= 1)
        #expect(json["partner_name"] as? String == "Company 2")
        #expect(json["partner_city"] as? String == "Boston")
        #expect((json["partner_contacts"] as? [String])?.count == 2)
        #expect(json["product_count"] as? Int == 20)
        #expect(json["created"] as? String == "PY1")
        #expect(json["update_without_if_match"] as? Int == 428)
        #expect(json["updated"] as? String == "Renamed by pyodata")
        #expect(json["deleted"] as? Bool == true)
        #expect(json["batch_created"] as? [String] == ["PY2", "PY3"])
        #expect(json["function_categories"] as? [String] == ["C3"])
        // V2 shapes and grammar: a property read, a DateTimeOffset read as UTC, V2 literals,
        // a nested expand A/B and $links.
        #expect(json["property"] as? String == "Company 2")
        #expect(json["created_at"] as? String == "2020-03-03T02:00:00+00:00")
        #expect(json["big_orders"] as? [String] == ["SO16", "SO18"])
        let items = try await service.store.query("SalesOrderItems/$count?$filter=Order/PartnerID eq 'BP1'")
        #expect(items == .count(Int64(json["nested_items"] as? Int ?? -1)), "\(String(describing: json["nested_items"]))")
        #expect(json["links"] as? Int == 2)
    }
}

extension InteropTests {
    /// python-odata (a V4 client from PyPI) against the V4 root: reflection of `$metadata`,
    /// queries (paged: 7 entities per page), navigation, expand, writes, a deep insert with
    /// binds, and function and action imports. See `Tests/Interop/python_odata_client.py`.
    @Test func pythonODataAgainstTheV4Root() async throws {
        let python = try await Self.python()
        let server = TestServer()
        defer { server.remove() }
        // python-odata 0.8.1 never sends If-Match: the service must take unconditional writes.
        let service = try await server.service(pageSize: 7, requireIfMatch: false)
        let running = try await EmbeddedServer.start(service)
        let (status, output, errors) = try await Self.run(python, [Interop.script("python_odata_client.py"), running.v4Root.absoluteString])
        await running.stop()
        #expect(status == 0, "python-odata failed: \(errors)")
        let json = try JSONValue.parse(Array(output.utf8))
        func strings(_ name: String) -> [String]? { json[name]?.arrayValue?.compactMap(\.stringValue) }
        #expect(strings("entity_sets") == ["BusinessPartners", "Contacts", "ProductCategories", "ProductPictures", "Products",
                                           "SalesOrderItems", "SalesOrders"])
        #expect(strings("functions") == ["GetProductsByCategory"] && strings("actions") == ["ConfirmOrder"])
        #expect(strings("order_status_members") == ["New", "Confirmed", "Shipped", "Cancelled"])
        #expect(strings("filtered_orders") == ["SO18", "SO17", "SO16"])
        #expect(json["filtered_count"] == .number("10"))
        #expect(json["product_count"] == .number("20"))
        // Every order once, over five pages of next links.
        #expect(json["all_orders"] == .array([.number("30"), .number("30")]))
        #expect(json["big_orders"]?["count"] == .number("21") && json["big_orders"]?["sorted"] == .bool(true))
        #expect(json["big_orders_count"] == .number("21"))
        #expect(strings("confirmed_bp1") == ["SO10", "SO11", "SO12", "SO14"])
        #expect(json["bp1_without_note"] == .number("4"))
        #expect(strings("orders_of_company_1") == ["SO10", "SO11", "SO12"])
        #expect(strings("p1_or_p2") == ["P1", "P2"])
        #expect(strings("name_contains") == ["P3"])
        #expect(strings("name_startswith")?.count == 11)
        #expect(json["selected"]?.arrayValue?.compactMap { $0["OrderID"]?.stringValue } == ["SO16", "SO18"])
        #expect(json["partner_name"]?.stringValue == "Company 2" && json["partner_city"]?.stringValue == "Boston")
        #expect(strings("partner_contacts") == ["Chen", "Dana"])
        #expect(json["order_partner"]?.stringValue == "Company 0")
        #expect(json["expanded_items"]?.arrayValue?.count == 2 && json["expanded_partner"]?.stringValue == "BP0")
        #expect(strings("created") == ["PO1", "From python-odata"])
        #expect(json["updated"]?.stringValue == "Renamed by python-odata")
        #expect(json["deleted"] == .bool(true) && json["deleted_read"]?.stringValue == "HTTP 404 NotFound")
        // A deep insert: the items take the order's key, and their product binds are kept.
        #expect(json["deep_insert"]?["partner"]?.stringValue == "BP2", "\(output)")
        #expect(json["deep_insert"]?["items"] == .array([.array([.number("10"), .string("P1"), .number("1")]),
                                                         .array([.number("20"), .string("P2"), .number("2")])]), "\(output)")
        #expect(json["deep_insert"]?["items_after_delete"] == .number("0"))
        // A function's result with the request's $filter, $orderby and $top.
        #expect(strings("function_products") == ["P13", "P3"])
        #expect(strings("function_with_query") == ["P3"])
        #expect(strings("function_ordered") == ["P3", "P13"])
        #expect(json["action_result"] == .array([.bool(true), .string("Confirmed")]))
        #expect(json["action_reread"]?.stringValue == "Confirmed")
        #expect(json["action_unknown_order"]?.stringValue == "HTTP 404 NotFound")
    }

    @Test func curlAgainstTheV4Root() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        let script = Self.repository.appendingPathComponent("Tests/Interop/curl_v4.sh").path
        let running = try await EmbeddedServer.start(service)
        let (status, output, errors) = try await Self.run("/usr/bin/env", ["bash", script, running.v4Root.absoluteString])
        await running.stop()
        #expect(status == 0, "curl checks failed: \(errors)")
        #expect(output.contains("16 passed, 0 failed"), "\(output) \(errors)")
    }
}
