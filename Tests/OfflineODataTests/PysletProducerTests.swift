import Foundation
import InteropSupport
import ODataCore
import Testing
@testable import OfflineOData

/// The offline client against an OData V2 producer nobody here wrote: pyslet's in-memory V2
/// server from PyPI (`Tests/Interop/pyslet_producer.py`, with its patches listed there). pyslet
/// has no `$batch` and no change tracking, pages its feeds (4 entities per page here), and its
/// Customer_Orders association has no referential constraint.
@Suite(.serialized) struct PysletProducerTests {
    /// One producer per test run of this suite.
    struct Producer {
        let server: Interop.Server
        var root: String { server.serviceRoot.absoluteString }

        init() async throws {
            server = try await Interop.Server.start(script: Interop.script("pyslet_producer.py"), arguments: ["0", "4"])
        }

        func send(_ method: String, _ url: String, _ body: String? = nil) async throws -> TransportResponse {
            var headers = ODataCore.HTTPHeaders()
            headers["Accept"] = "application/json"
            if body != nil { headers["Content-Type"] = "application/json" }
            let target = root + url.replacingOccurrences(of: " ", with: "%20")
            return try await DefaultTransport.make().send(TransportRequest(method: method, url: target, headers: headers,
                                                                              body: Array((body ?? "").utf8)), timeout: 30)
        }

        /// The entities the producer answers for `url`, every page.
        func entities(_ url: String) async throws -> [JSONValue] {
            var result: [JSONValue] = []
            var next: String? = url
            while let current = next {
                let response = try await send("GET", current)
                guard response.status == 200 else { throw Interop.Failure("GET \(current): \(response.status) \(String(decoding: response.body, as: UTF8.self))") }
                let json = try JSONValue.parse(response.body)
                if let rows = json["d"]?["results"]?.arrayValue {
                    result += rows
                } else if let one = json["d"], one["__metadata"] != nil {
                    result.append(one)
                }
                // pyslet writes `"__next": {"uri": …}`.
                next = (json["d"]?["__next"]?["uri"] ?? json["d"]?["__next"])?.stringValue
                    .map { $0.hasPrefix(root) ? String($0.dropFirst(root.count)) : $0 }
            }
            return result
        }

        /// The modifying requests the producer received, as `METHOD path`.
        func changes() async throws -> [String] {
            let log = try JSONValue.parse(try await send("GET", "_log").body)
            return (log.arrayValue ?? []).compactMap { entry in
                guard let method = entry["method"]?.stringValue, method != "GET", let path = entry["path"]?.stringValue else { return nil }
                let target = path.hasPrefix("/") ? String(path.dropFirst()) : path
                return method + " " + (target.removingPercentEncoding ?? target)
            }
        }
    }

    /// A key of each entity, as text: `CustomerID`, `OrderID` or `ItemID`.
    static func keys(_ entities: [JSONValue], _ name: String) -> [String] {
        entities.compactMap { $0[name].map { $0.stringValue ?? $0.serialized } }
    }

    static func keys(_ entities: [Entity], _ name: String) -> [String] {
        entities.compactMap { entity in
            guard case .primitive(let value)? = entity[name] else { return nil }
            return Literal.payloadText(value)
        }
    }

    /// With each transport of the platform (on Linux AsyncHTTPClient and URLSession), since
    /// pyslet is a server we did not write.
    @Test(arguments: TransportKind.available.filter { $0 != .appURLSession })
    func openReadChangeUploadAndDownloadAgainstPyslet(transport: TransportKind) async throws {
        let producer = try await Producer()
        defer { producer.server.stop() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-pyslet-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var parameters = OfflineODataParameters()
        parameters.storePath = directory
        parameters.storeEncryptionKey = "pyslet"
        parameters.backendSupportsBatch = false
        let provider = OfflineODataProvider(
            serviceRoot: producer.server.serviceRoot, parameters: parameters, transport: transport.make())
        // V2 literals and a V2 nested expand in the defining queries.
        try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "Customers", query: "Customers?$expand=Orders/Items"))
        try await provider.add(definingQuery: OfflineODataDefiningQuery(
            name: "Recent", query: "Orders?$filter=OrderDate ge datetime'2021-01-01T00:00:00' and Amount gt 10M"))
        try await provider.open()

        // Local reads answer what the producer answers.
        let reads: [(String, String)] = [
            ("Customers?$orderby=CustomerID", "CustomerID"),
            ("Orders?$filter=Amount gt 100M&$orderby=OrderID", "OrderID"),
            ("Orders?$filter=OrderDate ge datetime'2022-01-01T00:00:00' and Quantity ge 5L&$orderby=OrderID", "OrderID"),
            ("Orders?$filter=day(OrderDate) eq 5&$orderby=OrderID", "OrderID"),
            ("Orders?$filter=Token eq guid'00000000-0000-4000-8000-000000000007'", "OrderID"),
            ("Customers?$filter=substringof('an',Name) or startswith(Country,'S')&$orderby=CustomerID", "CustomerID"),
            ("Customers('C1')/Orders?$orderby=OrderID", "OrderID"),
            ("Orders(3)/Customer", "CustomerID"),
            ("Orders(9)/Items?$orderby=ItemID", "ItemID"),
            ("Items?$filter=Order/Amount gt 200M&$orderby=ItemID", "ItemID"),
            ("Orders?$orderby=Amount desc,OrderID&$top=3&$skip=1", "OrderID"),
        ]
        for (url, key) in reads {
            let expected = Self.keys(try await producer.entities(url), key)
            let local = Self.keys(try await provider.readEntities(url), key)
            #expect(!expected.isEmpty, "\(url)")
            #expect(local == expected, "\(url)")
        }
        // Typed values: decimal, Int64, Guid and DateTime as the producer has them.
        let order = try #require(try await provider.readEntities("Orders(4)").first)
        #expect(order["Amount"] == .primitive(.decimal(try #require(DecimalValue("250.75")))))
        #expect(order["Quantity"] == .primitive(.int64(20)))
        #expect(order["Token"].map { Literal.format($0, version: .v2) } == "guid'00000000-0000-4000-8000-000000000004'")
        #expect(order["OrderDate"].map { Literal.format($0, version: .v2) } == "datetime'2021-04-10T15:20:00'")

        // Local changes: creates (one through a navigation property without its key part),
        // an update and a delete, uploaded request by request (pyslet has no $batch).
        _ = try await producer.send("POST", "_log/clear")
        _ = try await provider.execute(method: "POST", url: "Customers", body: Array(#"{"CustomerID":"C9","Name":"Nine","Country":"Norway"}"#.utf8))
        _ = try await provider.execute(method: "POST", url: "Customers('C9')/Orders",
                                       body: Array(#"{"OrderID":100,"Amount":"12.50","Quantity":"1"}"#.utf8))
        _ = try await provider.execute(method: "POST", url: "Orders(100)/Items", body: Array(#"{"ItemID":100,"Product":"Widget","Price":"1.25"}"#.utf8))
        _ = try await provider.execute(method: "PATCH", url: "Orders(2)", body: Array(#"{"Amount":"99.95"}"#.utf8))
        _ = try await provider.execute(method: "DELETE", url: "Items(20)")
        #expect(Self.keys(try await provider.readEntities("Orders(100)/Customer"), "CustomerID") == ["C9"])
        #expect(Self.keys(try await provider.readEntities("Items(100)"), "OrderID") == ["100"])
        try await provider.upload()
        #expect(try await provider.isRequestQueueEmpty)
        #expect(try await provider.readEntities("ErrorArchive").isEmpty)
        // Each change arrived once, in order; a V2 update as MERGE.
        let changes = try await producer.changes()
        #expect(changes == ["POST Customers", "POST Customers('C9')/Orders", "POST Orders(100)/Items", "MERGE Orders(2)",
                                                 "DELETE Items(20)"])
        #expect(Self.keys(try await producer.entities("Customers('C9')/Orders"), "OrderID") == ["100"])
        #expect(Self.keys(try await producer.entities("Orders(100)/Items"), "ItemID") == ["100"])
        #expect(try await producer.entities("Orders(2)").first?["Amount"]?.stringValue == "99.95")
        #expect(try await producer.send("GET", "Items(20)").status == 404)

        // The item's OrderID came from its order locally; pyslet keeps the link but not the
        // property (it ignores referential constraints), and its answer to the create says so.
        #expect(Self.keys(try await producer.entities("Items(100)/Order"), "OrderID") == ["100"])
        // Changes on the producer; the download reads everything again (no change tracking)
        // and marks only what changed.
        #expect(try await producer.send("MERGE", "Customers('C2')", #"{"Name":"Renamed on the producer"}"#).status == 204)
        #expect(try await producer.send("POST", "Customers('C3')/Orders",
                                        #"{"OrderID":200,"Amount":"500.00","Quantity":"7","OrderDate":"\/Date(1700000000000)\/"}"#).status == 201)
        #expect(try await producer.send("DELETE", "Items(19)").status == 204)
        try await provider.download()
        #expect(Self.keys(try await provider.readEntities("Customers?$filter=Name eq 'Renamed on the producer'"), "CustomerID") == ["C2"])
        #expect(Self.keys(try await provider.readEntities("Orders(200)/Customer"), "CustomerID") == ["C3"])
        #expect(Self.keys(try await provider.readEntities("Orders(200)"), "OrderDate") == ["2023-11-14T22:13:20"])
        #expect(try await provider.readEntities("Items(19)").isEmpty)
        let upsertedCustomers = Self.keys(try await provider.readEntities("Customers?$filter=sap.upsertedLastDownload()"), "CustomerID")
        let upsertedOrders = Self.keys(try await provider.readEntities("Orders?$filter=sap.upsertedLastDownload()"), "OrderID")
        let upsertedItems = Self.keys(try await provider.readEntities("Items?$filter=sap.upsertedLastDownload()"), "ItemID")
        #expect(upsertedCustomers == ["C2"])
        #expect(upsertedOrders == ["200"])
        #expect(upsertedItems.isEmpty)
        // Everything local agrees with the producer again.
        for (url, key) in reads + [("Items?$orderby=ItemID", "ItemID"), ("Customers('C9')/Orders", "OrderID")] {
            #expect(Self.keys(try await provider.readEntities(url), key) == Self.keys(try await producer.entities(url), key), "\(url)")
        }
        await provider.close()
    }
}
