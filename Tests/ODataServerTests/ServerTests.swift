import Foundation
import Logging
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import NIOCore
import ODataCore
import ODataStore
import Testing
@testable import ODataServer

/// A sales service on a temporary store, served over a real loopback port.
struct TestServer {
    let directory: URL
    let path: String

    init() {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-server-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        path = directory.appendingPathComponent("sales.sqlite").path
    }

    func service(faults: [FaultRule] = [], create: Bool = true, pageSize: Int = 50,
                 requireIfMatch: Bool = true, logger: Logger? = nil) async throws -> ODataService {
        var options = ODataService.Options()
        if let logger { options.logger = logger }
        options.pageSize = pageSize
        options.requireIfMatch = requireIfMatch
        options.serverGeneratedKeys = SalesSample.serverGeneratedKeys
        let store = create && !FileManager.default.fileExists(atPath: path)
            ? try await Store.create(path: path, model: try SalesSample.model(), key: "test-key")
            : try await Store.open(path: path, key: "test-key")
        let service = try await ODataService.open(store: store, options: options, faults: faults)
        let existing = try await store.query("BusinessPartners/$count")
        if create && existing == .count(0) {
            try await service.load(SalesSample.data(scale: 3))
        }
        return service
    }

    /// Runs `body` with a live HTTP client against the service.
    func run(_ service: ODataService, _ body: @Sendable (Client) async throws -> Void) async throws {
        let app = ODataHTTPServer.application(service: service, host: "127.0.0.1", port: 0)
        try await app.test(.live) { client in try await body(Client(client: client)) }
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }

    struct Reply {
        var status: Int
        var headers: HTTPFields
        var body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
        var json: JSONValue? { try? JSONValue.parse(body) }
        func header(_ name: String) -> String? { HTTPField.Name(name).flatMap { headers[$0] } }
    }

    struct Client: Sendable {
        let client: any TestClientProtocol

        func send(_ method: String, _ uri: String, headers: [String: String] = [:], body: String? = nil) async throws -> Reply {
            var fields = HTTPFields()
            for (name, value) in headers { if let field = HTTPField.Name(name) { fields[field] = value } }
            if body != nil && fields[.contentType] == nil { fields[.contentType] = "application/json" }
            // Encode spaces as a client does; everything else is sent as written.
            let encoded = uri.replacingOccurrences(of: " ", with: "%20")
            let response = try await client.execute(uri: encoded, method: HTTPRequest.Method(method) ?? .get, headers: fields,
                                                     body: body.map { ByteBuffer(string: $0) })
            return Reply(status: response.status.code, headers: response.headers, body: Array(response.body.readableBytesView))
        }
    }
}

@Suite(.serialized) struct ServerTests {
    @Test func readsMetadataPagingAndV2() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            let document = try await client.send("GET", "/odata/v4/")
            #expect(document.status == 200)
            #expect(document.json?["value"]?.arrayValue?.count == 7)
            let metadata = try await client.send("GET", "/odata/v4/$metadata")
            let model = try MetadataParser().parse(Data(metadata.body))
            #expect(model.entitySet("SalesOrders") != nil)
            let v2 = try await client.send("GET", "/odata/v2/$metadata")
            let v2Model = try MetadataParser(options: .init(strict: true)).parse(Data(v2.body))
            #expect(v2Model.version == .v2)
            #expect(v2Model.targetEntitySet(from: "SalesOrders", navigationPath: "Items")?.name == "SalesOrderItems")
            #expect(v2Model.navigationProperty("Order", ofStructuredType: "Sales.SalesOrderItem")?.referentialConstraints.first?.property == "OrderID")
            // Server-driven paging.
            let page = try await client.send("GET", "/odata/v4/SalesOrders?$orderby=OrderID&$select=OrderID", headers: ["Prefer": "odata.maxpagesize=4"])
            #expect(page.status == 200)
            #expect(page.json?["value"]?.arrayValue?.count == 4)
            let next = try #require(page.json?["@odata.nextLink"]?.stringValue)
            #expect(page.header("Preference-Applied") == "odata.maxpagesize=4")
            let second = try await client.send("GET", String(next.drop { $0 != "/" }.dropFirst(2).drop { $0 != "/" }))
            #expect(second.json?["value"]?.arrayValue?.first?["OrderID"]?.stringValue == "SO12")
            // V2: inlinecount, __next and verbose JSON.
            let v2Page = try await client.send("GET", "/odata/v2/SalesOrders?$inlinecount=allpages&$top=3&$filter=substringof('SO1',OrderID)")
            #expect(v2Page.json?["d"]?["__count"]?.stringValue == "11")
            #expect(v2Page.json?["d"]?["results"]?.arrayValue?.first?["__metadata"]?["uri"]?.stringValue?.hasPrefix("http://") == true)
            let count = try await client.send("GET", "/odata/v4/Products/$count")
            #expect(count.text == "20")
            let value = try await client.send("GET", "/odata/v4/Products('P1')/Name/$value")
            #expect(value.text == "Product 1")
            let missing = try await client.send("GET", "/odata/v4/Products('nope')")
            #expect(missing.status == 404)
            #expect(missing.json?["error"]?["code"]?.stringValue == "NotFound")
        }
    }

    @Test func writesEtagsAndCascades() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            // Server-generated key.
            let created = try await client.send("POST", "/odata/v4/Contacts", body: #"{"PartnerID":"BP1","FirstName":"Zoe","LastName":"Quinn"}"#)
            #expect(created.status == 201)
            let location = try #require(created.header("Location"))
            #expect(location.hasSuffix("Contacts(7)"))
            let etag = try #require(created.header("ETag"))
            // A stale ETag is refused with 412.
            let stale = try await client.send("PATCH", "/odata/v4/Contacts(7)", headers: ["If-Match": "W/\"stale\""], body: #"{"LastName":"X"}"#)
            #expect(stale.status == 412)
            let patched = try await client.send("PATCH", "/odata/v4/Contacts(7)", headers: ["If-Match": etag, "Prefer": "return=representation"], body: #"{"LastName":"Quincy"}"#)
            #expect(patched.status == 200)
            #expect(patched.json?["LastName"]?.stringValue == "Quincy")
            #expect(patched.json?["FirstName"]?.stringValue == "Zoe")
            #expect(try await client.send("PATCH", "/odata/v4/Contacts(7)", headers: ["If-Match": "*"], body: #"{"Email":"z@q.example"}"#).status == 204)
            // V2 MERGE and X-HTTP-Method tunnelling.
            #expect(try await client.send("POST", "/odata/v2/Contacts(7L)", headers: ["X-HTTP-Method": "MERGE", "If-Match": "*"],
                                             body: #"{"FirstName":"Zoey"}"#).status == 204)
            let v2 = try await client.send("GET", "/odata/v2/Contacts(7L)")
            #expect(v2.json?["d"]?["FirstName"]?.stringValue == "Zoey")
            // Deep insert with a bind, then a cascade delete.
            let order = try await client.send("POST", "/odata/v4/SalesOrders", headers: ["Prefer": "return=minimal"], body: """
                {"OrderID":"SO-NEW","Status":"New","Partner@odata.bind":"BusinessPartners('BP2')",
                 "Items":[{"OrderID":"SO-NEW","ItemPosition":10,"ProductID":"P1","Quantity":2,"NetAmount":10.50}]}
                """)
            #expect(order.status == 204)
            #expect(order.header("Location")?.hasSuffix("SalesOrders('SO-NEW')") == true)
            let items = try await client.send("GET", "/odata/v4/SalesOrders('SO-NEW')/Items")
            #expect(items.json?["value"]?.arrayValue?.count == 1)
            let partner = try await client.send("GET", "/odata/v4/SalesOrders('SO-NEW')/Partner")
            #expect(partner.json?["PartnerID"]?.stringValue == "BP2")
            #expect(try await client.send("DELETE", "/odata/v4/SalesOrders('SO-NEW')").status == 428)
            #expect(try await client.send("DELETE", "/odata/v4/SalesOrders('SO-NEW')", headers: ["If-Match": "*"]).status == 204)
            let gone = try await client.send("GET", "/odata/v4/SalesOrderItems?$filter=OrderID eq 'SO-NEW'")
            #expect(gone.json?["value"]?.arrayValue?.isEmpty == true)
            // $ref: link a contact to another partner, then read it back.
            #expect(try await client.send("PUT", "/odata/v4/Contacts(7)/Partner/$ref", body: #"{"@odata.id":"BusinessPartners('BP0')"}"#).status == 204)
            let linked = try await client.send("GET", "/odata/v4/Contacts(7)?$select=PartnerID")
            #expect(linked.json?["PartnerID"]?.stringValue == "BP0")
            // Media upload and download.
            #expect(try await client.send("PUT", "/odata/v4/ProductPictures('PIC1')/$value", headers: ["Content-Type": "image/png"],
                                          body: "PNGDATA").status == 428)
            #expect(try await client.send("PUT", "/odata/v4/ProductPictures('PIC1')/$value",
                                          headers: ["Content-Type": "image/png", "If-Match": "*"], body: "PNGDATA").status == 204)
            let media = try await client.send("GET", "/odata/v4/ProductPictures('PIC1')/$value")
            #expect(media.text == "PNGDATA")
            #expect(media.header("Content-Type") == "image/png")
            // Functions and actions.
            let function = try await client.send("GET", "/odata/v4/GetProductsByCategory(CategoryID='C3')")
            #expect(function.json?["value"]?.arrayValue?.allSatisfy { $0["CategoryID"]?.stringValue == "C3" } == true)
            let action = try await client.send("POST", "/odata/v4/ConfirmOrder", body: #"{"OrderID":"SO1"}"#)
            #expect(action.json?["Status"]?.stringValue == "Confirmed")
        }
    }

    @Test func mediaEntitiesAreCreatedFromTheirStream() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            // The body is the stream; the Slug header names the key (percent-encoded).
            let created = try await client.send("POST", "/odata/v4/ProductPictures", headers: ["Content-Type": "text/plain", "Slug": "PIC%20NEW"], body: "a picture")
            #expect(created.status == 201)
            #expect(created.json?["PictureID"]?.stringValue == "PIC NEW")
            #expect(created.json?["Caption"] == .null)
            #expect(created.header("Location")?.hasSuffix("ProductPictures('PIC%20NEW')") == true || created.header("Location")?.hasSuffix("ProductPictures('PIC NEW')") == true)
            let media = try await client.send("GET", "/odata/v4/ProductPictures('PIC%20NEW')/$value")
            #expect(media.text == "a picture")
            #expect(media.header("Content-Type") == "text/plain")
            // Through a navigation property: linked to its product.
            let child = try await client.send("POST", "/odata/v4/Products('P2')/Pictures", headers: ["Content-Type": "image/png", "Slug": "PIC-P2"], body: "png")
            #expect(child.status == 201)
            #expect(child.json?["ProductID"]?.stringValue == "P2")
            #expect(try await client.send("GET", "/odata/v4/ProductPictures('PIC-P2')/$value").text == "png")
            // Without a Slug there is no key; a taken key is a conflict; other sets need JSON.
            let keyless = try await client.send("POST", "/odata/v4/ProductPictures", headers: ["Content-Type": "text/plain"], body: "x")
            #expect(keyless.status == 400)
            #expect(keyless.json?["error"]?["code"]?.stringValue == "MissingKey")
            let taken = try await client.send("POST", "/odata/v4/ProductPictures", headers: ["Content-Type": "text/plain", "Slug": "PIC0"], body: "x")
            #expect(taken.status >= 400 && taken.status < 500)
            #expect(try await client.send("POST", "/odata/v4/Products", headers: ["Content-Type": "image/png"], body: "png").status == 400)
            // A JSON create of a media entity stays an entity create.
            let json = try await client.send("POST", "/odata/v4/ProductPictures", body: #"{"PictureID":"PIC-JSON","Caption":"values only"}"#)
            #expect(json.status == 201)
            #expect(try await client.send("GET", "/odata/v4/ProductPictures('PIC-JSON')/$value").status == 404)
        }
    }

    @Test func batchChangeSetsAreAtomic() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            let body = """
            --b1\r
            Content-Type: multipart/mixed; boundary=cs1\r
            \r
            --cs1\r
            Content-Type: application/http\r
            Content-ID: 1\r
            \r
            POST SalesOrders HTTP/1.1\r
            Content-Type: application/json\r
            \r
            {"OrderID":"SO-B1","Status":"New"}\r
            --cs1\r
            Content-Type: application/http\r
            Content-ID: 2\r
            \r
            POST $1/Items HTTP/1.1\r
            Content-Type: application/json\r
            \r
            {"OrderID":"SO-B1","ItemPosition":10,"Quantity":1}\r
            --cs1--\r
            --b1\r
            Content-Type: application/http\r
            \r
            GET SalesOrders('SO-B1')/Items/$count HTTP/1.1\r
            \r
            \r
            --b1--\r

            """
            let reply = try await client.send("POST", "/odata/v4/$batch", headers: ["Content-Type": "multipart/mixed; boundary=b1"], body: body)
            #expect(reply.status == 200)
            let batch = try MultipartBatch.read(reply.body, boundary: HTTPHeaders.parameter("boundary", in: reply.header("Content-Type") ?? ""))
            guard case .changeSet(let set) = batch.parts[0], case .operation(let count) = batch.parts[1] else {
                Issue.record("expected a change set and an operation: \(reply.text) \(batch.parts)")
                return
            }
            #expect(set.operations.map { $0.message.status } == [201, 201])
            #expect(String(decoding: count.message.body, as: UTF8.self) == "1")
            // A failing change set leaves nothing behind.
            let failing = body.replacingOccurrences(of: "SO-B1", with: "SO-B2").replacingOccurrences(of: #""ItemPosition":10"#, with: #""ItemPosition":"ten""#)
            let failed = try await client.send("POST", "/odata/v4/$batch", headers: ["Content-Type": "multipart/mixed; boundary=b1"], body: failing)
            let failedBatch = try MultipartBatch.read(failed.body)
            guard case .operation(let failure) = failedBatch.parts[0] else {
                Issue.record("a failed change set answers with one error")
                return
            }
            #expect(failure.message.status == 400)
            #expect(try await client.send("GET", "/odata/v4/SalesOrders('SO-B2')").status == 404)
            // JSON batch with an atomicity group.
            let json = #"{"requests":[{"id":"a","method":"POST","url":"Contacts","atomicityGroup":"g","body":{"PartnerID":"BP0","FirstName":"J"}},{"id":"b","method":"GET","url":"Contacts/$count","dependsOn":["g"]}]}"#
            let jsonReply = try await client.send("POST", "/odata/v4/$batch", headers: ["Content-Type": "application/json"], body: json)
            let responses = try JSONBatchResponse.read(jsonReply.body)
            #expect(responses.responses.map(\.status) == [201, 200])
        }
    }

    /// A change set of batch `b1` with `operations` (each a request written by ``post(_:_:)``).
    static func changeSet(_ boundary: String, _ operations: [String]) -> String {
        var text = "--b1\r\nContent-Type: multipart/mixed; boundary=\(boundary)\r\n\r\n"
        for (index, operation) in operations.enumerated() {
            text += "--\(boundary)\r\nContent-Type: application/http\r\nContent-ID: \(boundary)-\(index)\r\n\r\n"
            text += operation + "\r\n"
        }
        return text + "--\(boundary)--\r\n"
    }

    /// Sends batch `b1` (V4 `"v4"` with `Prefer: odata.continue-on-error`, `"v4-stop"`
    /// without); expects V2's 202 or V4's 200 and returns the reply and the batch it holds.
    static func sendBatch(
        _ body: String, variant: String, root: String, _ client: TestServer.Client
    ) async throws -> (TestServer.Reply, MultipartBatch) {
        var headers = ["Content-Type": "multipart/mixed; boundary=b1"]
        if variant == "v4" { headers["Prefer"] = "odata.continue-on-error" }
        let reply = try await client.send("POST", root + "$batch", headers: headers, body: body)
        #expect(reply.status == (variant == "v2" ? 202 : 200))
        return (reply, try MultipartBatch.read(reply.body))
    }

    /// A POST of `json` to `url`, as a batch part.
    static func post(_ url: String, _ json: String) -> String {
        "POST \(url) HTTP/1.1\r\nContent-Type: application/json\r\n\r\n\(json)"
    }

    /// A change set that fills the store (SQLite's `max_page_count`, as a full disk) in the
    /// middle of change sets committed together: whatever SQLite does with the transaction,
    /// each change set is answered as it was applied (a success is stored, a failure is not),
    /// and the one that filled the store failed.
    @Test(arguments: ["v2", "v4"])
    func aChangeSetThatFillsTheStoreIsAnsweredAsApplied(_ variant: String) async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        let root = variant == "v2" ? "/odata/v2/" : "/odata/v4/"
        let pages = try await service.store.read { reader in try reader.connection.query("PRAGMA page_count") }
        guard case .integer(let count)? = pages.first?.first else {
            Issue.record("no page count")
            return
        }
        try await service.store.write { writer in
            _ = try writer.connection.query("PRAGMA max_page_count = \(count + 60)")
        }
        let note = String(repeating: "x", count: 600_000)
        let body =
            Self.changeSet("cs1", [Self.post("SalesOrders", #"{"OrderID":"SO-F1","Status":"New"}"#)])
            + Self.changeSet("cs2", [Self.post("SalesOrders", #"{"OrderID":"SO-F2","Status":"New","Note":"\#(note)"}"#)])
            + Self.changeSet("cs3", [Self.post("SalesOrders", #"{"OrderID":"SO-F3","Status":"New"}"#)])
            + "--b1--\r\n"
        try await server.run(service) { client in
            let (reply, batch) = try await Self.sendBatch(body, variant: variant, root: root, client)
            #expect(batch.parts.count == 3, "\(reply.text.prefix(2_000))")
            for (index, part) in batch.parts.enumerated() {
                let applied: Bool
                switch part {
                case .changeSet(let set): applied = set.operations.allSatisfy { $0.message.status == 201 }
                case .operation(let operation): applied = (operation.message.status ?? 0) < 400
                }
                let stored = try await client.send("GET", root + "SalesOrders('SO-F\(index + 1)')").status == 200
                #expect(applied == stored, "change set \(index + 1): answered \(applied), stored \(stored)")
                if index == 1 { #expect(!applied, "the change set that fills the store failed") }
            }
        }
    }

    /// Consecutive change sets commit in one transaction, each in its own savepoint: the one
    /// that fails leaves nothing behind, those around it are applied, and each is answered as
    /// if alone. Without continue-on-error (V4), the batch stops at the failure.
    @Test(arguments: ["v2", "v4", "v4-stop"])
    func consecutiveChangeSetsFailAlone(_ variant: String) async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        let root = variant == "v2" ? "/odata/v2/" : "/odata/v4/"
        let changeSet = Self.changeSet, post = Self.post
        let body =
            changeSet("cs1", [post("SalesOrders", #"{"OrderID":"SO-G1","Status":"New"}"#)])
            + changeSet(
                "cs2",
                [
                    post("SalesOrders", #"{"OrderID":"SO-G2","Status":"New"}"#),
                    post("SalesOrders('SO-G2')/Items", #"{"OrderID":"SO-G2","ItemPosition":"ten","Quantity":1}"#),
                ])
            + changeSet(
                "cs3",
                [
                    post("SalesOrders", #"{"OrderID":"SO-G3","Status":"New"}"#),
                    post("SalesOrders('SO-G3')/Items", #"{"OrderID":"SO-G3","ItemPosition":10,"Quantity":1}"#),
                ])
            + "--b1--\r\n"
        try await server.run(service) { client in
            let (reply, batch) = try await Self.sendBatch(body, variant: variant, root: root, client)
            let answers = batch.parts.map { part -> [Int] in
                switch part {
                case .changeSet(let set): set.operations.map { $0.message.status ?? 0 }
                case .operation(let operation): [-(operation.message.status ?? 0)]
                }
            }
            #expect(answers == (variant == "v4-stop" ? [[201], [-400]] : [[201], [-400], [201, 201]]), "\(reply.text)")
            #expect(try await client.send("GET", root + "SalesOrders('SO-G1')").status == 200)
            #expect(try await client.send("GET", root + "SalesOrders('SO-G2')").status == 404)
            let third = try await client.send("GET", root + "SalesOrders('SO-G3')").status
            #expect(third == (variant == "v4-stop" ? 404 : 200))
            if variant != "v4-stop" {
                let items = try await client.send("GET", root + "SalesOrders('SO-G3')/Items/$count")
                #expect(items.text == "1")
            }
        }
    }

    @Test func deltaTracksInsertsUpdatesAndDeletes() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            let initial = try await client.send("GET", "/odata/v4/ProductCategories", headers: ["Prefer": "odata.track-changes"])
            let deltaLink = try #require(initial.json?["@odata.deltaLink"]?.stringValue)
            let relative = String(deltaLink.drop { $0 != "/" }.dropFirst(2).drop { $0 != "/" })
            #expect(try await client.send("POST", "/odata/v4/ProductCategories", body: #"{"CategoryID":"C99","Name":"New"}"#).status == 201)
            #expect(try await client.send("PATCH", "/odata/v4/ProductCategories('C1')", headers: ["If-Match": "*"], body: #"{"Name":"Screens 2"}"#).status == 204)
            #expect(try await client.send("DELETE", "/odata/v4/ProductCategories('C9')", headers: ["If-Match": "*"]).status == 204)
            let delta = try await client.send("GET", relative)
            #expect(delta.status == 200)
            let values = delta.json?["value"]?.arrayValue ?? []
            #expect(values.contains { $0["CategoryID"]?.stringValue == "C99" })
            #expect(values.contains { $0["Name"]?.stringValue == "Screens 2" })
            #expect(values.contains { $0["@odata.removed"] != nil && $0["CategoryID"]?.stringValue == "C9" })
            #expect(delta.json?["@odata.deltaLink"] != nil)
            // A link changed by $ref changes the dependent's foreign key: the contact is in the
            // next delta of Contacts, whichever way the link was changed.
            for (method, path, body) in [("PUT", "/odata/v4/Contacts(1)/Partner/$ref", #"{"@odata.id":"BusinessPartners('BP2')"}"#),
                                         ("DELETE", "/odata/v4/Contacts(1)/Partner/$ref", nil)] as [(String, String, String?)] {
                let contacts = try await client.send("GET", "/odata/v4/Contacts", headers: ["Prefer": "odata.track-changes"])
                let contactsLink = try #require(contacts.json?["@odata.deltaLink"]?.stringValue)
                #expect(try await client.send(method, path, body: body).status == 204)
                let changed = try await client.send("GET", String(contactsLink.drop { $0 != "/" }.dropFirst(2).drop { $0 != "/" }))
                let rows = changed.json?["value"]?.arrayValue ?? []
                #expect(rows.count == 1 && rows.first?["ContactID"]?.stringValue == nil && rows.first?["ContactID"] == .number("1"), "\(method): \(changed.text)")
            }
            // History pruned past the token: 410.
            try await service.pruneChangeHistory(keepingLast: 0)
            #expect(try await client.send("GET", relative).status == 410)
        }
    }

    /// The journal renders requests when it is read (issue 22: rendering parsed every `$batch`
    /// a second time); it keeps the newest `capacity`, oldest first, however the reads and
    /// records interleave, and renders large bodies early to bound its memory.
    @Test func theJournalKeepsTheNewestRequestsInOrder() async throws {
        let journal = RequestJournal(capacity: 3)
        for index in 1...5 { await journal.record(ServiceRequest(method: "GET", target: "R\(index)")) }
        #expect(await journal.requests() == ["GET R3", "GET R4", "GET R5"])
        for index in 6...7 { await journal.record(ServiceRequest(method: "GET", target: "R\(index)")) }
        #expect(await journal.requests() == ["GET R5", "GET R6", "GET R7"])
        let large = [UInt8](repeating: UInt8(ascii: "x"), count: 5 << 20)
        await journal.record(ServiceRequest(method: "POST", target: "Big", body: large))
        await journal.record(ServiceRequest(method: "GET", target: "R9"))
        let last = await journal.requests()
        #expect(last.count == 3 && last.first == "GET R7" && last.last == "GET R9", "\(last.map { $0.prefix(20) })")
        await journal.clear()
        #expect(await journal.requests().isEmpty)
    }

    /// Issue 22: a delta is paged like any collection (`Prefer: odata.maxpagesize`); each
    /// changed entity appears once, in the state of its last change; only the last page has
    /// a delta link, and it misses nothing changed after the read. V2 and V4.
    @Test(arguments: [false, true])
    func deltaResponsesArePaged(v2: Bool) async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            let root = v2 ? "/odata/v2/" : "/odata/v4/"
            func relative(_ link: String) -> String { String(link.drop { $0 != "/" }.dropFirst(2).drop { $0 != "/" }) }
            func links(_ json: JSONValue?) -> (next: String?, delta: String?) {
                v2 ? (json?["d"]?["__next"]?.stringValue, json?["d"]?["__delta"]?.stringValue)
                    : (json?["@odata.nextLink"]?.stringValue, json?["@odata.deltaLink"]?.stringValue)
            }
            let initial = try await client.send("GET", root + "Contacts", headers: ["Prefer": "odata.track-changes"])
            var link = try #require(links(initial.json).delta, "\(initial.text)")
            for index in 0..<5 {
                let reply = try await client.send("POST", "/odata/v4/Contacts", body: #"{"PartnerID":"BP0","FirstName":"P\#(index)"}"#)
                #expect(reply.status == 201)
            }
            // Changed twice: one entry, the last state.
            #expect(try await client.send("PATCH", "/odata/v4/Contacts(1)", headers: ["If-Match": "*"], body: #"{"FirstName":"Once"}"#).status == 204)
            #expect(try await client.send("PATCH", "/odata/v4/Contacts(1)", headers: ["If-Match": "*"], body: #"{"FirstName":"Twice"}"#).status == 204)
            var seen: [String] = []
            var pages: [Int] = []
            var next: String? = relative(link)
            var deltaLink: String?
            while let url = next {
                let page = try await client.send("GET", url, headers: ["Prefer": "odata.maxpagesize=2"])
                #expect(page.status == 200, "\(page.text)")
                let rows = (v2 ? page.json?["d"]?["results"]?.arrayValue : page.json?["value"]?.arrayValue) ?? []
                pages.append(rows.count)
                for row in rows {
                    seen.append(row["FirstName"]?.stringValue ?? "?")
                }
                let found = links(page.json)
                #expect(found.next == nil || found.delta == nil, "a page has a next link or a delta link")
                next = found.next.map(relative)
                deltaLink = found.delta
                #expect(pages.count < 10)
            }
            #expect(pages == [2, 2, 2])
            #expect(seen.sorted() == ["P0", "P1", "P2", "P3", "P4", "Twice"])
            link = try #require(deltaLink)
            #expect(try await client.send("PATCH", "/odata/v4/Contacts(2)", headers: ["If-Match": "*"], body: #"{"FirstName":"Later"}"#).status == 204)
            let later = try await client.send("GET", relative(link), headers: ["Prefer": "odata.maxpagesize=2"])
            let rows = (v2 ? later.json?["d"]?["results"]?.arrayValue : later.json?["value"]?.arrayValue) ?? []
            #expect(rows.map { $0["FirstName"]?.stringValue } == ["Later"], "\(later.text)")
            #expect(links(later.json).delta != nil)
        }
    }

    /// A delta reads changed entities by their recorded key text, which is as the writing
    /// request spelled it: a named key, a percent-encoded one, or the short form.
    @Test func aDeltaFindsEntitiesWhateverTheKeySpellingOfTheirChange() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            let initial = try await client.send("GET", "/odata/v4/BusinessPartners", headers: ["Prefer": "odata.track-changes"])
            let link = try #require(initial.json?["@odata.deltaLink"]?.stringValue)
            for (path, phone) in [("BusinessPartners(PartnerID='BP1')", "named"), ("BusinessPartners('BP%32')", "encoded"),
                                  ("BusinessPartners('BP0')", "short")] {
                let reply = try await client.send("PATCH", "/odata/v4/" + path, headers: ["If-Match": "*"], body: #"{"Phone":"\#(phone)"}"#)
                #expect(reply.status == 204, "\(path): \(reply.text)")
            }
            let delta = try await client.send("GET", String(link.drop { $0 != "/" }.dropFirst(2).drop { $0 != "/" }))
            let rows = delta.json?["value"]?.arrayValue ?? []
            #expect(!rows.contains { $0["@removed"] != nil || $0["@odata.removed"] != nil }, "\(delta.text)")
            let phones = Dictionary(uniqueKeysWithValues: rows.compactMap { row in
                row["PartnerID"]?.stringValue.map { ($0, row["Phone"]?.stringValue ?? "") }
            })
            #expect(phones == ["BP0": "short", "BP1": "named", "BP2": "encoded"], "\(delta.text)")
        }
    }

    /// Issue 19, defect 9: a delta answers changed entities in the shape of the tracked read
    /// (`$select`, `$expand`), V2 and V4; it answered every property.
    @Test(arguments: [false, true])
    func deltaKeepsTheSelectAndExpandOfTheTrackedRead(v2: Bool) async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            let root = v2 ? "/odata/v2/" : "/odata/v4/"
            let query = v2 ? "BusinessPartners?$select=PartnerID,CompanyName,Contacts/FirstName&$expand=Contacts&$filter=PartnerID ne 'BP9'"
                           : "BusinessPartners?$select=PartnerID,CompanyName&$expand=Contacts($select=FirstName)&$filter=PartnerID ne 'BP9'"
            let initial = try await client.send("GET", root + query, headers: ["Prefer": "odata.track-changes"])
            let link = try #require(v2 ? initial.json?["d"]?["__delta"]?.stringValue : initial.json?["@odata.deltaLink"]?.stringValue, "\(initial.text)")
            let relative = String(link.drop { $0 != "/" }.dropFirst(2).drop { $0 != "/" })
            #expect(try await client.send("PATCH", "/odata/v4/BusinessPartners('BP1')", headers: ["If-Match": "*"],
                                          body: #"{"CompanyName":"Renamed","Phone":"555"}"#).status == 204)
            let delta = try await client.send("GET", relative)
            #expect(delta.status == 200, "\(delta.text)")
            let rows = (v2 ? delta.json?["d"]?["results"]?.arrayValue : delta.json?["value"]?.arrayValue) ?? []
            let changed = try #require(rows.first { $0["PartnerID"]?.stringValue == "BP1" }, "\(delta.text)")
            #expect(changed["CompanyName"]?.stringValue == "Renamed")
            #expect(changed["Phone"] == nil, "\(changed)")
            let contacts = (v2 ? changed["Contacts"]?["results"]?.arrayValue : changed["Contacts"]?.arrayValue) ?? []
            #expect(!contacts.isEmpty, "\(changed)")
            for contact in contacts {
                #expect(contact["FirstName"] != nil && contact["LastName"] == nil, "\(contact)")
            }
        }
    }

    @Test func repeatedRequestsApplyOnceEvenAfterARestart() async throws {
        let server = TestServer()
        defer { server.remove() }
        let headers = ["Repeatability-Request-ID": "6f9619ff-8b86-d011-b42d-00c04fc964ff", "Repeatability-First-Sent": "Sat, 21 Nov 2026 06:00:00 GMT"]
        let first = try await server.service()
        try await server.run(first) { client in
            let a = try await client.send("POST", "/odata/v4/Contacts", headers: headers, body: #"{"PartnerID":"BP0","FirstName":"Once"}"#)
            let b = try await client.send("POST", "/odata/v4/Contacts", headers: headers, body: #"{"PartnerID":"BP0","FirstName":"Once"}"#)
            #expect(a.status == 201 && b.status == 201)
            #expect(b.header("Repeatability-Result") == "accepted")
            #expect(a.header("Location") == b.header("Location"))
        }
        first.store.close()
        let second = try await server.service(create: false)
        try await server.run(second) { client in
            let c = try await client.send("POST", "/odata/v4/Contacts", headers: headers, body: #"{"PartnerID":"BP0","FirstName":"Once"}"#)
            #expect(c.header("Repeatability-Result") == "accepted")
            let count = try await client.send("GET", "/odata/v4/Contacts/$count?$filter=FirstName eq 'Once'")
            #expect(count.text == "1")
            // Legacy headers too.
            let legacy = ["RequestID": "abc-123", "RepeatabilityCreation": "2026-11-21T06:00:00Z"]
            _ = try await client.send("POST", "/odata/v4/Contacts", headers: legacy, body: #"{"PartnerID":"BP0","FirstName":"Legacy"}"#)
            let again = try await client.send("POST", "/odata/v4/Contacts", headers: legacy, body: #"{"PartnerID":"BP0","FirstName":"Legacy"}"#)
            #expect(again.header("Repeatability-Result") == "accepted")
            #expect(try await client.send("GET", "/odata/v4/Contacts/$count?$filter=FirstName eq 'Legacy'").text == "1")
        }
        second.store.close()
    }

    @Test func malformedInputGets400NotACrash() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service()
        try await server.run(service) { client in
            let cases: [(String, String, String?, [String: String])] = [
                ("GET", "/odata/v4/Products?$filter=Price gt", nil, [:]),
                ("GET", "/odata/v4/Products?$top=-1", nil, [:]),
                ("GET", "/odata/v4/Products('P1'", nil, [:]),
                ("GET", "/odata/v4/Nope", nil, [:]),
                ("GET", "/odata/v4/Products?$filter=Name eq 5", nil, [:]),
                ("POST", "/odata/v4/Products", "{not json", [:]),
                ("POST", "/odata/v4/Products", #"{"ProductID":"X","Price":"cheap"}"#, [:]),
                ("POST", "/odata/v4/Products", #"{"Name":"no key"}"#, [:]),
                ("POST", "/odata/v4/$batch", "--x\r\nnot a batch", ["Content-Type": "multipart/mixed; boundary=x"]),
                ("POST", "/odata/v4/$batch", "{}", ["Content-Type": "application/json"]),
                ("POST", "/odata/v4/$batch", "hello", ["Content-Type": "text/plain"]),
                ("GET", "/odata/v4/Products?$filter=contains(Name,'%ZZ')", nil, [:]),
            ]
            for (method, uri, body, headers) in cases {
                let reply = try await client.send(method, uri, headers: headers, body: body)
                #expect(reply.status == 400, "\(method) \(uri): \(reply.status) \(reply.text)")
                #expect(reply.json?["error"]?["message"]?.stringValue?.isEmpty == false, "\(uri)")
            }
            #expect(try await client.send("PATCH", "/odata/v4/Products('nope')", body: "{}").status == 404)
            #expect(try await client.send("POST", "/odata/v4/Products", body: #"{"ProductID":"P1"}"#).status == 409)
        }
    }

    @Test func faultInjection() async throws {
        let server = TestServer()
        defer { server.remove() }
        let service = try await server.service(faults: [FaultRule(method: "POST", urlContains: "ProductCategories", status: 503, code: "Maintenance", message: "Down", times: 1)])
        try await server.run(service) { client in
            let failed = try await client.send("POST", "/odata/v4/ProductCategories", body: #"{"CategoryID":"F1"}"#)
            #expect(failed.status == 503)
            #expect(failed.json?["error"]?["code"]?.stringValue == "Maintenance")
            #expect(try await client.send("POST", "/odata/v4/ProductCategories", body: #"{"CategoryID":"F1"}"#).status == 201, "the rule fired once")
            // Rules through the admin endpoint: commit, then drop the connection.
            let rules = #"[{"method":"POST","urlContains":"ProductCategories","dropAfterCommit":true,"times":1}]"#
            #expect(try await client.send("PUT", "/_faults", body: rules).status == 204)
            await #expect(throws: (any Error).self) { try await client.send("POST", "/odata/v4/ProductCategories", body: #"{"CategoryID":"F2"}"#) }
        }
        // The change was committed although the response was lost.
        #expect(try await service.store.query("ProductCategories('F2')") != .entity(nil))
    }
}

@Suite struct SupportStoreTests {
    @Test func contentRangesAreReadStrictly() {
        #expect(SupportStores.contentRange("bytes 0-9/10")! == (0, 9, 10))
        #expect(SupportStores.contentRange("bytes 10-19/25")! == (10, 19, 25))
        for bad in ["bytes -1-5/10", "bytes 5-4/10", "bytes 0-10/10", "bytes 0-9", "0-9/10", "bytes a-b/c", "bytes 0--9/10", ""] {
            #expect(SupportStores.contentRange(bad) == nil, "\(bad)")
        }
    }
}
