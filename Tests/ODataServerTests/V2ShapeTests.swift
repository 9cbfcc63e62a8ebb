import Foundation
import InteropSupport
import ODataCore
import ODataStore
import Testing
@testable import ODataServer

/// The reference server's V2 root answers in the shapes the OData V2 JSON format gives, and
/// takes what V2 clients send (V2 literals, `A/B` expands, `$links`, creates through a
/// navigation property, percent-encoded delimiters).
@Suite(.serialized) struct V2ShapeTests {
    @Test func propertyLinksAndDateResponses() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            // A property: `{"d":{"Name":…}}`, a complex one the same way.
            let name = try await client.send("GET", "/odata/v2/Products('P1')/Name")
            #expect(name.json?["d"]?["Name"]?.stringValue == "Product 1", "\(name.text)")
            #expect(name.json?["d"]?["value"] == nil)
            let address = try await client.send("GET", "/odata/v2/BusinessPartners('BP1')/Address")
            #expect(address.json?["d"]?["Address"]?["City"]?.stringValue != nil, "\(address.text)")
            // V4 keeps `{"value":…}`, with an absolute context URL (found by python-odata: a
            // relative one resolves against the request URL, wrong for deeper paths).
            let v4 = try await client.send("GET", "/odata/v4/Products('P1')/Name")
            #expect(v4.json?["value"]?.stringValue == "Product 1")
            #expect(v4.json?["@odata.context"]?.stringValue?.hasSuffix("/odata/v4/$metadata#Products('P1')/Name") == true, "\(v4.text)")
            #expect(v4.json?["@odata.context"]?.stringValue?.hasPrefix("http://") == true)
            let contacts = try await client.send("GET", "/odata/v4/BusinessPartners('BP2')/Contacts")
            #expect(contacts.json?["@odata.context"]?.stringValue?.hasSuffix("/odata/v4/$metadata#Contacts") == true, "\(contacts.text)")
            #expect(try await client.send("GET", "/odata/v4/Products/$count").header("OData-Version") == "4.0")
            #expect(try await client.send("GET", "/odata/v2/Products/$count").header("DataServiceVersion") == "2.0")
            // $value and $count are plain text.
            #expect(try await client.send("GET", "/odata/v2/Products('P1')/Name/$value").text == "Product 1")
            #expect(try await client.send("GET", "/odata/v2/Products/$count").text == "20")
            // $links: a collection, and a to-one link.
            let links = try await client.send("GET", "/odata/v2/SalesOrders('SO1')/$links/Items")
            let uris = links.json?["d"]?["results"]?.arrayValue?.compactMap { $0["uri"]?.stringValue } ?? []
            #expect(!uris.isEmpty && uris.allSatisfy { $0.contains("/odata/v2/SalesOrderItems(") }, "\(links.text)")
            let partner = try await client.send("GET", "/odata/v2/SalesOrders('SO1')/$links/Partner")
            #expect(partner.json?["d"]?["uri"]?.stringValue?.hasSuffix("BusinessPartners('BP0')") == true, "\(partner.text)")
            #expect(try await client.send("GET", "/odata/v2/SalesOrders('SO1')/$links").status == 400)
            // A media link entry: media_src, edit_media and the stream's content_type.
            let put = try await client.send("PUT", "/odata/v2/ProductPictures('PIC1')/$value", headers: ["Content-Type": "image/png", "If-Match": "*"],
                                       body: "PNG")
            #expect(put.status < 300, "\(put.text)")
            let picture = try await client.send("GET", "/odata/v2/ProductPictures('PIC1')")
            let metadata = picture.json?["d"]?["__metadata"]
            #expect(metadata?["media_src"]?.stringValue?.hasSuffix("/odata/v2/ProductPictures('PIC1')/$value") == true, "\(picture.text)")
            #expect(metadata?["edit_media"] == metadata?["media_src"])
            #expect(metadata?["content_type"]?.stringValue == "image/png", "\(picture.text)")
            let pictures = try await client.send("GET", "/odata/v2/ProductPictures?$filter=PictureID eq 'PIC1' or PictureID eq 'PIC2'&$orderby=PictureID")
            let rows = pictures.json?["d"]?["results"]?.arrayValue ?? []
            #expect(rows.map { $0["__metadata"]?["content_type"]?.stringValue } == ["image/png", nil], "\(pictures.text)")
            // Edm.DateTimeOffset as `/Date(ms+0000)/`: UTC milliseconds, the offset every reader agrees on.
            let date = try await client.send("GET", "/odata/v2/SalesOrders('SO1')/OrderDate")
            let text = try #require(date.json?["d"]?["OrderDate"]?.stringValue, "\(date.text)")
            #expect(text.hasPrefix("/Date(") && text.hasSuffix("+0000)/"), "\(text)")
            let v4Date = try await client.send("GET", "/odata/v4/SalesOrders('SO1')/OrderDate")
            let v4Text = try #require(v4Date.json?["value"]?.stringValue)
            guard case .dateTimeOffset(let v2Value)? = V2JSONReader.parseDate(text, as: .dateTimeOffset),
                  case .primitive(.dateTimeOffset(let v4Value)) = try Literal.parse(v4Text, version: .v401) else {
                Issue.record("dates not read: \(text) \(v4Text)")
                return
            }
            #expect(v2Value.instant == v4Value.instant)
        }
    }

    @Test func v2FiltersExpandsAndEncodedDelimiters() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            // datetime'…' against an Edm.DateTime that the V4 model keeps as Edm.Date.
            let recent = try await client.send("GET", "/odata/v2/Products?$filter=ReleaseDate ge datetime'2021-01-01T00:00:00'&$inlinecount=allpages")
            #expect(recent.status == 200, "\(recent.text)")
            let v4Recent = try await client.send("GET", "/odata/v4/Products/$count?$filter=ReleaseDate ge 2021-01-01")
            #expect(recent.json?["d"]?["__count"]?.stringValue == v4Recent.text)
            // V2 literals and functions.
            let big = try await client.send("GET", "/odata/v2/SalesOrders/$count?$filter=GrossAmount gt 1000M and substringof('SO',OrderID)")
            let v4Big = try await client.send("GET", "/odata/v4/SalesOrders/$count?$filter=GrossAmount gt 1000 and contains(OrderID,'SO')")
            #expect(big.status == 200 && big.text == v4Big.text, "\(big.text)")
            // `$expand=A/B`: V2's nested expand.
            let nested = try await client.send("GET", "/odata/v2/BusinessPartners('BP1')?$expand=SalesOrders/Items,Contacts")
            #expect(nested.status == 200, "\(nested.text)")
            let orders = nested.json?["d"]?["SalesOrders"]?["results"]?.arrayValue ?? []
            #expect(!orders.isEmpty)
            #expect(orders.allSatisfy { ($0["Items"]?["results"]?.arrayValue?.count ?? 0) > 0 }, "\(nested.text)")
            #expect(nested.json?["d"]?["Contacts"]?["results"]?.arrayValue != nil)
            // %2C between expand items, %29 closing a key (Python's requests sends these).
            let encoded = try await client.send("GET", "/odata/v4/SalesOrders('SO1')?$expand=Items%2CPartner")
            #expect(encoded.json?["Items"]?.arrayValue?.isEmpty == false && encoded.json?["Partner"]?["PartnerID"] != nil, "\(encoded.text)")
            let v2Encoded = try await client.send("GET", "/odata/v2/SalesOrders('SO1')?$expand=Items%2CPartner")
            #expect(v2Encoded.json?["d"]?["Partner"]?["PartnerID"] != nil, "\(v2Encoded.text)")
            // A function's result with 4.01's options without `$`, and with an alias parameter.
            let bare = try await client.send("GET", "/odata/v4/GetProductsByCategory(CategoryID=@c)?@c='C3'&filter=ProductID eq 'P3'&select=ProductID")
            #expect(bare.json?["value"]?.arrayValue?.compactMap { $0["ProductID"]?.stringValue } == ["P3"], "\(bare.text)")
            // Long key lists: 1,500 values (SQLite binds 999 at most) and a 2,000-term `or`.
            let list = (1...1_500).map { "'P\($0)'" }.joined(separator: ",")
            let inList = try await client.send("GET", "/odata/v4/Products/$count?$filter=ProductID in (\(list))")
            #expect(inList.status == 200 && inList.text == "19", "\(inList.text.prefix(300))")
            let ors = (1...2_000).map { "ProductID eq 'P\($0)'" }.joined(separator: " or ")
            let orList = try await client.send("GET", "/odata/v2/Products/$count?$filter=" + ors)
            #expect(orList.status == 200 && orList.text == "19", "\(orList.text.prefix(300))")
            let closed = try await client.send("GET", "/odata/v4/Products('P1'%29/Name")
            #expect(closed.json?["value"]?.stringValue == "Product 1", "\(closed.text)")
        }
    }

    @Test func referenceDeletesCheckTheLink() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            // SO0 belongs to BP0: unlinking it through BP1 is a 404, and BP0 keeps it.
            let wrong = try await client.send("DELETE", "/odata/v4/BusinessPartners('BP1')/SalesOrders/$ref?$id=SalesOrders('SO0')")
            #expect(wrong.status == 404, "\(wrong.text)")
            #expect(try await client.send("GET", "/odata/v4/SalesOrders('SO0')/Partner").json?["PartnerID"]?.stringValue == "BP0")
            let right = try await client.send("DELETE", "/odata/v4/BusinessPartners('BP0')/SalesOrders/$ref?$id=SalesOrders('SO0')")
            #expect(right.status == 204, "\(right.text)")
            #expect(try await client.send("GET", "/odata/v4/SalesOrders('SO0')").json?["PartnerID"] == .null)
        }
    }

    @Test func internalErrorsNameNoSQLButTheLogHasTheDetail() async throws {
        let server = TestServer()
        defer { server.remove() }
        let records = LogCapture()
        let service = try await server.service(logger: records.logger(level: .debug))
        let failure = DatabaseError(.sqlite, message: "no such table: es_Secret", sql: "SELECT \"Password\" FROM es_Secret")
        let response = service.errorResponse(failure, version: .v4)
        let body = String(decoding: response.body, as: UTF8.self)
        #expect(response.status == 500)
        #expect(!body.contains("SELECT") && !body.contains("es_Secret") && body.contains("in its log"), "\(body)")
        let logged = try #require(records.all.first { $0.message == "Internal error" })
        #expect(logged.level == .error)
        #expect(logged.metadata["error"]?.contains("es_Secret") == true)
        #expect(body.contains("error \(logged.metadata["error-id"] ?? "?")"), "\(body) \(logged)")
    }

    @Test func eachRequestAndBatchIsLoggedWithoutKeysOrQueryValues() async throws {
        let server = TestServer()
        defer { server.remove() }
        let records = LogCapture()
        let service = try await server.service(logger: records.logger(level: .debug))
        try await server.run(service) { client in
            #expect(try await client.send("GET", "/odata/v4/BusinessPartners('BP1')?$select=Phone").status == 200)
            let boundary = "batch_log"
            let body = "--\(boundary)\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n"
                + "GET Products?$top=1 HTTP/1.1\r\nAccept: application/json\r\n\r\n\r\n--\(boundary)--\r\n"
            let batch = try await client.send(
                "POST", "/odata/v4/$batch", headers: ["Content-Type": "multipart/mixed;boundary=\(boundary)"], body: body)
            #expect(batch.status == 200, "\(batch.text)")
        }
        let handled = records.all.filter { $0.message == "Request handled" }
        #expect(handled.map { $0.metadata["url"] ?? "" } == ["/odata/v4/BusinessPartners(…)?$select=…", "/odata/v4/$batch"])
        #expect(handled.map { $0.metadata["status"] ?? "" } == ["200", "200"])
        #expect(handled.allSatisfy { $0.level == .debug && $0.metadata["duration-ms"] != nil })
        let batch = try #require(records.all.first { $0.message == "Batch received" })
        #expect(batch.metadata["parts"] == "1" && batch.metadata["change-sets"] == "0", "\(batch)")
        #expect(!records.all.contains { $0.text.contains("BP1") })
    }

    @Test func createThroughANavigationTakesTheParentsKey() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            for (root, position) in [("/odata/v4/", 901), ("/odata/v2/", 902)] {
                let created = try await client.send("POST", root + "SalesOrders('SO2')/Items", headers: ["Accept": "application/json"],
                                                    body: #"{"ItemPosition":\#(position),"ProductID":"P1","Quantity":2}"#)
                #expect(created.status == 201, "\(root): \(created.text)")
                let read = try await client.send("GET", "/odata/v4/SalesOrderItems(OrderID='SO2',ItemPosition=\(position))")
                #expect(read.json?["OrderID"]?.stringValue == "SO2", "\(root): \(read.text)")
                let listed = try await client.send("GET", "/odata/v4/SalesOrders('SO2')/Items?$filter=ItemPosition eq \(position)")
                #expect(listed.json?["value"]?.arrayValue?.count == 1)
            }
        }
    }
}
