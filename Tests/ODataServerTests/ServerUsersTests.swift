import Foundation
import HTTPTypes
import JWTKit
import ODataCore
import ODataStore
import Testing
@testable import ODataServer

/// The reference service with users who see different rows (`Options.users`), over a loopback
/// port, in V2 and V4.
///
/// The sales sample at scale 10 has partners BP0…BP9 in DE (BP0, BP5), FR (BP1, BP4, BP6, BP9),
/// US (BP2, BP7) and JP (BP3, BP8); partner BPn has orders SO(10n)…SO(10n+9) and contacts 2n+1
/// and 2n+2.
@Suite(.serialized) struct ServerUsersTests {
    static let secretA = "idp-a-secret-0123456789-abcdefghijklmnopqrstuvwxyz-ABCDEFGHIJKLMN"
    static let secretB = "idp-b-secret-9876543210-zyxwvutsrqponmlkjihgfedcba-NMLKJIHGFEDCB"
    static let issuerA = "https://idp-a.example"
    static let issuerB = "https://idp-b.example"
    static let audience = "oodata-tests"

    static func partners(_ ids: [Int]) -> String { ids.map { "PartnerID eq 'BP\($0)'" }.joined(separator: " or ") }

    static let users = ServiceUsers(
        users: [
            ServiceUser(
                name: "alice", credential: .basic(user: "alice", password: "alice-pw"),
                rowFilters: [
                    "BusinessPartners": "Address/Country eq 'DE'", "SalesOrders": partners([0, 5]),
                    "Contacts": partners([0, 5]),
                    "SalesOrderItems": "Order/PartnerID eq 'BP0' or Order/PartnerID eq 'BP5'",
                    "ProductPictures": "ProductID eq 'P0'",
                ]),
            ServiceUser(
                name: "bob", credential: .apiKey("bob-key-123"),
                rowFilters: ["BusinessPartners": "Address/Country eq 'FR'", "SalesOrders": partners([1, 4, 6, 9])]),
            // All partners, BP2's orders, the products of category C1.
            ServiceUser(
                name: "carol", credential: .bearer("carol-token"),
                rowFilters: ["SalesOrders": partners([2]), "Products": "CategoryID eq 'C1'"]),
            ServiceUser(
                name: "dave-a", credential: .jwt(issuer: issuerA, subject: "u-1"),
                rowFilters: ["BusinessPartners": "Address/Country eq 'US'"]),
            ServiceUser(
                name: "dave-b", credential: .jwt(issuer: issuerB, subject: "u-1"),
                rowFilters: ["BusinessPartners": "Address/Country eq 'JP'"]),
        ],
        jwtIssuers: [issuerA: secretA, issuerB: secretB], jwtAudience: audience)

    static func basic(_ user: String, _ password: String) -> String {
        "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }

    static let alice = basic("alice", "alice-pw")
    static let bob = basic("whoever", "bob-key-123")
    static let carol = "Bearer carol-token"

    // MARK: Fixture

    /// A client of one root, sending one user's credentials.
    struct Session: Sendable {
        let client: TestServer.Client
        let v2: Bool
        let authorization: String?

        var root: String { v2 ? "/odata/v2/" : "/odata/v4/" }

        func callAsFunction(
            _ method: String, _ path: String, headers: [String: String] = [:],
            body: String? = nil
        ) async throws -> TestServer.Reply {
            var headers = headers
            if let authorization, headers["Authorization"] == nil { headers["Authorization"] = authorization }
            return try await client.send(method, path.hasPrefix("/") ? path : root + path, headers: headers, body: body)
        }

        func `as`(_ authorization: String?) -> Session { Session(client: client, v2: v2, authorization: authorization) }

        /// The entities of a collection answer.
        func entities(_ reply: TestServer.Reply) -> [JSONValue] {
            (v2 ? reply.json?["d"]?["results"]?.arrayValue : reply.json?["value"]?.arrayValue) ?? []
        }

        /// One entity answer.
        func entity(_ reply: TestServer.Reply) -> JSONValue? { v2 ? reply.json?["d"] : reply.json }

        /// The values of `property` in a collection answer, in order.
        func values(_ reply: TestServer.Reply, _ property: String = "PartnerID") -> [String] {
            entities(reply).compactMap { $0[property]?.stringValue }
        }

        /// An expanded collection of an entity (V2: `{"results": […]}` or an array).
        func expanded(_ entity: JSONValue, _ name: String) -> [JSONValue] {
            entity[name]?.arrayValue ?? entity[name]?["results"]?.arrayValue ?? []
        }

        /// The next link of a page, relative to the server.
        func nextLink(_ reply: TestServer.Reply) -> String? {
            let link = v2 ? reply.json?["d"]?["__next"]?.stringValue : reply.json?["@odata.nextLink"]?.stringValue
            return link.map { String($0.drop { $0 != "/" }.dropFirst(2).drop { $0 != "/" }) }
        }

        /// The key literal of contact `id` in this root's syntax.
        func contact(_ id: Int) -> String { v2 ? "Contacts(\(id)L)" : "Contacts(\(id))" }

        /// A partial update: V2's MERGE, V4's PATCH.
        var update: String { v2 ? "MERGE" : "PATCH" }
    }

    /// Runs `body` against the sales sample (scale 10) served with ``users``.
    static func withServer(v2: Bool, _ body: @Sendable (Session, ODataService) async throws -> Void) async throws {
        let server = TestServer()
        defer { server.remove() }
        var options = ODataService.Options()
        options.pageSize = 50
        options.serverGeneratedKeys = SalesSample.serverGeneratedKeys
        options.users = users
        let store = try await Store.create(path: server.path, model: try SalesSample.model())
        let service = try await ODataService.open(store: store, options: options)
        try await service.load(SalesSample.data(scale: 10))
        try await server.run(service) { client in
            try await body(Session(client: client, v2: v2, authorization: nil), service)
        }
        store.close()
    }

    static func orders(of partners: [Int]) -> [String] {
        partners.flatMap { partner in (0..<10).map { "SO\(partner * 10 + $0)" } }
    }

    // MARK: JWTs

    struct Claims: JWTPayload {
        var iss: IssuerClaim
        var sub: SubjectClaim
        var exp: ExpirationClaim?
        var aud: AudienceClaim?
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    static func jwt(
        issuer: String, subject: String = "u-1", secret: String, digest: DigestAlgorithm = .sha256,
        expires: Date = Date().addingTimeInterval(3600), audience: String? = ServerUsersTests.audience
    ) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: digest)
        let claims = Claims(
            iss: IssuerClaim(value: issuer), sub: SubjectClaim(value: subject), exp: ExpirationClaim(value: expires),
            aud: audience.map { AudienceClaim(value: [$0]) })
        return "Bearer " + (try await keys.sign(claims))
    }

    // MARK: Reads

    @Test(arguments: [false, true])
    func eachUserSeesItsRowsInCollectionsCountsAndSingleReads(v2: Bool) async throws {
        try await Self.withServer(v2: v2) { session, _ in
            let alice = session.as(Self.alice), bob = session.as(Self.bob), carol = session.as(Self.carol)
            let aliceAll = try await alice("GET", "BusinessPartners?$orderby=PartnerID")
            #expect(aliceAll.status == 200)
            #expect(alice.values(aliceAll) == ["BP0", "BP5"])
            #expect(!aliceAll.text.contains("BP1") && !aliceAll.text.contains("Paris"), "\(aliceAll.text.prefix(400))")
            #expect(
                bob.values(try await bob("GET", "BusinessPartners?$orderby=PartnerID")) == ["BP1", "BP4", "BP6", "BP9"])
            // A set not named in the user's filters is wholly visible.
            #expect(carol.values(try await carol("GET", "BusinessPartners?$orderby=PartnerID")).count == 10)
            // The request's own filter is joined to the user's.
            let own = try await alice(
                "GET", "SalesOrders?$filter=PartnerID eq 'BP5' or PartnerID eq 'BP1'&$orderby=OrderID")
            #expect(alice.values(own, "OrderID") == Self.orders(of: [5]).sorted())
            // However the request spells its filter, the user's is joined to it.
            var spellings = ["%24filter=true", "$FILTER=true", "$filter=true%20or%20true", "$filter=(true)"]
            if !v2 { spellings.append("filter=true") }
            for spelling in spellings {
                let reply = try await alice("GET", "BusinessPartners?" + spelling + "&$orderby=PartnerID")
                #expect(
                    alice.values(reply) == ["BP0", "BP5"], "\(spelling): \(reply.status) \(reply.text.prefix(200))")
            }
            #expect(try await alice("GET", "BusinessPartners?$filter=true) or (true").status == 400)
            // $count, $top, $skip, $orderby and the inline count.
            #expect(try await alice("GET", "SalesOrders/$count").text == "20")
            #expect(try await bob("GET", "SalesOrders/$count").text == "40")
            #expect(try await alice("GET", "SalesOrders/$count?$filter=PartnerID eq 'BP1'").text == "0")
            #expect(try await alice("GET", "BusinessPartners('BP0')/SalesOrders/$count").text == "10")
            let mine = Self.orders(of: [0, 5]).sorted(by: >)
            let page = try await alice(
                "GET",
                "SalesOrders?$orderby=OrderID desc&$top=3&$skip=1" + (v2 ? "&$inlinecount=allpages" : "&$count=true"))
            #expect(alice.values(page, "OrderID") == Array(mine.dropFirst().prefix(3)))
            let inlineCount =
                v2 ? page.json?["d"]?["__count"]?.stringValue : page.json?["@odata.count"].map { $0.serialized }
            #expect(inlineCount == "20")
            // Single reads of another user's rows are 404, as if they did not exist.
            #expect(try await alice("GET", "BusinessPartners('BP0')").status == 200)
            #expect(
                alice.entity(try await alice("GET", "BusinessPartners('BP5')"))?["CompanyName"]?.stringValue
                    == "Company 5")
            let hidden = try await alice("GET", "BusinessPartners('BP1')")
            #expect(hidden.status == 404)
            #expect(!hidden.text.contains("Company 1"))
            #expect(try await bob("GET", "BusinessPartners('BP1')").status == 200)
            #expect(try await alice("GET", "BusinessPartners('BP1')/CompanyName").status == 404)
            #expect(try await alice("GET", "BusinessPartners('BP1')/CompanyName/$value").status == 404)
            #expect(try await alice("GET", "BusinessPartners('BP1')/Address").status == 404)
            #expect(try await alice("GET", "BusinessPartners('BP0')/CompanyName/$value").text == "Company 0")
            #expect(try await alice("GET", "SalesOrders('SO10')").status == 404)
            #expect(try await alice("GET", "SalesOrders('SO55')").status == 200)
            #expect(try await alice("GET", alice.contact(3)).status == 404)
            #expect(try await alice("GET", alice.contact(11)).status == 200)
            #expect(try await bob("GET", alice.contact(3)).status == 200)
            // The service document and $metadata need a user too, and are the same for all.
            #expect(try await alice("GET", "$metadata").status == 200)
            // A function import's result is filtered too: carol sees the products of C1 only.
            func function(_ category: String) -> String {
                v2
                    ? "GetProductsByCategory?CategoryID='\(category)'"
                    : "GetProductsByCategory(CategoryID='\(category)')"
            }
            let c1 = try await carol("GET", function("C1"))
            #expect(carol.values(c1, "ProductID") == ["P1", "P11"], "\(c1.text.prefix(300))")
            #expect(carol.values(try await carol("GET", function("C2")), "ProductID").isEmpty)
            #expect(alice.values(try await alice("GET", function("C2")), "ProductID") == ["P12", "P2"])
        }
    }

    @Test(arguments: [false, true])
    func filtersApplyToNavigationExpandAndNextLinks(v2: Bool) async throws {
        try await Self.withServer(v2: v2) { session, _ in
            let alice = session.as(Self.alice), carol = session.as(Self.carol)
            // Navigation from a visible entity to a filtered set; from an invisible one, 404.
            let bp0Orders = try await alice("GET", "BusinessPartners('BP0')/SalesOrders?$orderby=OrderID")
            #expect(alice.values(bp0Orders, "OrderID") == Self.orders(of: [0]).sorted())
            #expect(try await alice("GET", "BusinessPartners('BP1')/SalesOrders").status == 404)
            #expect(try await alice("GET", "SalesOrders('SO10')/Items").status == 404)
            #expect(try await alice("GET", "SalesOrders('SO10')/Partner").status == 404)
            #expect(
                alice.entity(try await alice("GET", "SalesOrders('SO51')/Partner"))?["PartnerID"]?.stringValue == "BP5")
            // Carol sees every partner, and of the orders only BP2's.
            let bp1Orders = try await carol("GET", "BusinessPartners('BP1')/SalesOrders")
            #expect(bp1Orders.status == 200)
            #expect(carol.values(bp1Orders, "OrderID").isEmpty)
            // References (V2 `$links`) of a filtered set: the user's only.
            let references = try await carol(
                "GET", v2 ? "BusinessPartners('BP2')/$links/SalesOrders" : "BusinessPartners('BP2')/SalesOrders/$ref")
            let uris = carol.entities(references).compactMap {
                ($0[v2 ? "uri" : "@odata.id"] ?? $0["@id"])?.stringValue
            }
            #expect(uris.count == 10, "\(references.text.prefix(300))")
            #expect(uris.allSatisfy { uri in Self.orders(of: [2]).contains { uri.hasSuffix("('\($0)')") } }, "\(uris)")
            let noReferences = try await carol(
                "GET", v2 ? "BusinessPartners('BP1')/$links/SalesOrders" : "BusinessPartners('BP1')/SalesOrders/$ref")
            #expect(noReferences.status == 200)
            #expect(carol.entities(noReferences).isEmpty, "\(noReferences.text.prefix(300))")
            #expect(
                carol.values(try await carol("GET", "BusinessPartners('BP2')/SalesOrders?$orderby=OrderID"), "OrderID")
                    == Self.orders(of: [2]).sorted())
            // $expand of a filtered collection: each partner carries only the user's orders.
            let expanded = try await carol("GET", "BusinessPartners?$expand=SalesOrders&$orderby=PartnerID")
            let byPartner = Dictionary(
                uniqueKeysWithValues: carol.entities(expanded).compactMap { partner in
                    partner["PartnerID"]?.stringValue.map {
                        ($0, carol.expanded(partner, "SalesOrders").compactMap { $0["OrderID"]?.stringValue })
                    }
                })
            #expect(byPartner.count == 10)
            #expect(byPartner["BP2"]?.sorted() == Self.orders(of: [2]).sorted())
            #expect(byPartner["BP0"] == [])
            #expect(byPartner["BP7"] == [])
            #expect(!expanded.text.contains("\"SO0\"") && !expanded.text.contains("\"SO70\""))
            // $expand of a single entity of a filtered set: none when the user cannot see it.
            let items = try await carol(
                "GET",
                "SalesOrderItems?$filter=OrderID eq 'SO20' or OrderID eq 'SO21' or OrderID eq 'SO22'&$expand=Product")
            let itemList = carol.entities(items)
            #expect(!itemList.isEmpty)
            for item in itemList {
                let productID = item["ProductID"]?.stringValue ?? ""
                let inCategoryC1 = (Int(productID.dropFirst()) ?? -1) % 10 == 1
                let inline = item["Product"]?["ProductID"]?.stringValue
                #expect(
                    inline == (inCategoryC1 ? productID : nil), "\(productID): \(item["Product"]?.serialized ?? "none")"
                )
            }
            // Expanding the items of alice's orders (items filtered through their order).
            let withItems = try await alice("GET", "SalesOrders?$filter=OrderID eq 'SO5'&$expand=Items")
            #expect(alice.entities(withItems).count == 1)
            let itemOrders = Set(
                alice.entities(withItems).flatMap { alice.expanded($0, "Items") }.compactMap {
                    $0["OrderID"]?.stringValue
                })
            #expect(itemOrders == ["SO5"])
            // Next links: every page holds the user's rows only, and the links carry the
            // client's query (not the user's filter).
            var path: String? = "SalesOrders?$orderby=OrderID&$filter=GrossAmount gt 0"
            var seen: [String] = []
            var pages = 0
            while let next = path, pages < 20 {
                let reply = try await alice("GET", next, headers: ["Prefer": "odata.maxpagesize=6"])
                #expect(reply.status == 200, "\(reply.text.prefix(300))")
                seen += alice.values(reply, "OrderID")
                path = alice.nextLink(reply)
                if let link = path { #expect(!link.contains("BP0") && !link.contains("PartnerID"), "\(link)") }
                pages += 1
            }
            #expect(pages == 4)
            #expect(seen == Self.orders(of: [0, 5]).sorted())
        }
    }

    // MARK: Credentials

    @Test(arguments: [false, true])
    func credentialsDecideTheUser(v2: Bool) async throws {
        try await Self.withServer(v2: v2) { session, _ in
            func partners(_ authorization: String?) async throws -> (Int, [String]) {
                let reply = try await session.as(authorization)("GET", "BusinessPartners?$orderby=PartnerID")
                return (reply.status, session.values(reply))
            }
            // Anonymous, and wrong passwords: 401 with a challenge for each scheme in use.
            let anonymous = try await session("GET", "BusinessPartners")
            #expect(anonymous.status == 401)
            let challenges = anonymous.headers[values: .wwwAuthenticate]
            #expect(
                challenges.contains { $0.hasPrefix("Basic") } && challenges.contains { $0.hasPrefix("Bearer") },
                "\(challenges)")
            #expect(try await session("GET", "$metadata").status == 401)
            #expect(try await session("GET", "").status == 401)
            #expect(try await partners(Self.basic("alice", "wrong")).0 == 401)
            #expect(try await partners(Self.basic("bob", "alice-pw")).0 == 401)
            #expect(try await partners("Bearer wrong-token").0 == 401)
            #expect(try await partners("Bearer ").0 == 401)
            // API-key Basic: any user name, the key decides: alice's name with bob's key is bob.
            #expect(try await partners(Self.basic("alice", "bob-key-123")) == (200, ["BP1", "BP4", "BP6", "BP9"]))
            #expect(try await partners(Self.alice) == (200, ["BP0", "BP5"]))
            #expect(try await partners(Self.carol).1.count == 10)
            // Two issuers' JWTs with the same subject are two users.
            let daveA = try await Self.jwt(issuer: Self.issuerA, secret: Self.secretA)
            let daveB = try await Self.jwt(issuer: Self.issuerB, secret: Self.secretB)
            #expect(try await partners(daveA) == (200, ["BP2", "BP7"]))
            #expect(try await partners(daveB) == (200, ["BP3", "BP8"]))
            // Forged or unfit JWTs: 401.
            let forged: [(String, String)] = [
                ("wrong secret", try await Self.jwt(issuer: Self.issuerA, secret: String(repeating: "x", count: 64))),
                ("the other issuer's secret", try await Self.jwt(issuer: Self.issuerA, secret: Self.secretB)),
                (
                    "expired",
                    try await Self.jwt(
                        issuer: Self.issuerA, secret: Self.secretA, expires: Date().addingTimeInterval(-60))
                ),
                (
                    "wrong audience",
                    try await Self.jwt(issuer: Self.issuerA, secret: Self.secretA, audience: "someone-else")
                ),
                ("no audience", try await Self.jwt(issuer: Self.issuerA, secret: Self.secretA, audience: nil)),
                ("unknown issuer", try await Self.jwt(issuer: "https://idp-c.example", secret: Self.secretA)),
                ("unknown subject", try await Self.jwt(issuer: Self.issuerA, subject: "u-2", secret: Self.secretA)),
                ("HS384", try await Self.jwt(issuer: Self.issuerA, secret: Self.secretA, digest: .sha384)),
                ("as Basic", "Basic " + String(daveA.dropFirst("Bearer ".count))),
            ]
            let unsecured = JWTKeyCollection()
            await unsecured.addUnsecuredNone()
            let none = try await unsecured.sign(
                Claims(
                    iss: IssuerClaim(value: Self.issuerA), sub: SubjectClaim(value: "u-1"),
                    exp: ExpirationClaim(value: Date().addingTimeInterval(3600)),
                    aud: AudienceClaim(value: [Self.audience])))
            // The payload of a good token with the signature of another (a tampered subject).
            let parts = String(daveA.dropFirst("Bearer ".count)).split(separator: ".")
            let tampered = try await Self.jwt(issuer: Self.issuerB, secret: Self.secretA)
            let spliced =
                String(tampered.dropFirst("Bearer ".count)).split(separator: ".")[0...1].joined(separator: ".") + "."
                + parts[2]
            for (name, token) in forged + [("alg none", "Bearer " + none), ("spliced", "Bearer " + spliced)] {
                let (status, rows) = try await partners(token)
                #expect(status == 401, "\(name): \(status) \(rows)")
            }
        }
    }

    // MARK: Writes

    @Test(arguments: [false, true])
    func changesToAnotherUsersRowsAre404(v2: Bool) async throws {
        try await Self.withServer(v2: v2) { session, _ in
            let alice = session.as(Self.alice), bob = session.as(Self.bob)
            let anyMatch = ["If-Match": "*"]
            // Bob's partner BP1 and order SO10: not there for alice, and unchanged.
            #expect(
                try await alice(
                    alice.update, "BusinessPartners('BP1')", headers: anyMatch, body: #"{"CompanyName":"Alice's"}"#
                ).status == 404)
            #expect(
                try await alice(
                    "PUT", "BusinessPartners('BP1')", headers: anyMatch,
                    body: #"{"PartnerID":"BP1","CompanyName":"Alice's"}"#
                ).status == 404)
            #expect(try await alice("DELETE", "SalesOrders('SO10')", headers: anyMatch).status == 404)
            #expect(try await alice("DELETE", alice.contact(3), headers: anyMatch).status == 404)
            #expect(
                try await alice(alice.update, "SalesOrders('SO10')", headers: anyMatch, body: #"{"Note":"Alice's"}"#)
                    .status == 404)
            #expect(
                bob.entity(try await bob("GET", "BusinessPartners('BP1')"))?["CompanyName"]?.stringValue == "Company 1")
            #expect(try await bob("GET", "SalesOrders('SO10')").status == 200)
            #expect(bob.entity(try await bob("GET", "SalesOrders('SO10')"))?["Note"] == .null)
            #expect(try await bob("GET", alice.contact(3)).status == 200)
            // Her own rows she changes; creates are allowed.
            #expect(
                try await alice(
                    alice.update, "BusinessPartners('BP0')", headers: anyMatch, body: #"{"CompanyName":"Alice's"}"#
                ).status == 204)
            #expect(
                alice.entity(try await alice("GET", "BusinessPartners('BP0')"))?["CompanyName"]?.stringValue
                    == "Alice's")
            let created = try await alice(
                "POST", "Contacts", body: #"{"PartnerID":"BP0","FirstName":"Zoe","LastName":"Quinn"}"#)
            #expect(created.status == 201, "\(created.text.prefix(300))")
            #expect(try await alice("DELETE", alice.contact(1), headers: anyMatch).status == 204)
            #expect(try await alice("GET", alice.contact(1)).status == 404)
            // An action on another user's order: not there for her.
            func confirm(_ order: String) -> (String, String?) {
                v2 ? ("ConfirmOrder?OrderID='\(order)'", nil) : ("ConfirmOrder", #"{"OrderID":"\#(order)"}"#)
            }
            let before = try await bob("GET", "SalesOrders('SO10')").header("ETag")
            #expect(before != nil)
            #expect(try await alice("POST", confirm("SO10").0, body: confirm("SO10").1).status == 404)
            #expect(try await bob("GET", "SalesOrders('SO10')").header("ETag") == before)
            let confirmed = try await alice("POST", confirm("SO50").0, body: confirm("SO50").1)
            #expect(confirmed.status == 200, "\(confirmed.text.prefix(300))")
            // Media: a stream of an entity she cannot see is not there for her.
            let stream = ["If-Match": "*", "Content-Type": "text/plain"]
            #expect(
                try await bob("PUT", "ProductPictures('PIC0')/$value", headers: stream, body: "picture 0").status == 204
            )
            #expect(
                try await bob("PUT", "ProductPictures('PIC1')/$value", headers: stream, body: "picture 1").status == 204
            )
            #expect(try await alice("GET", "ProductPictures('PIC0')/$value").text == "picture 0")
            #expect(try await alice("GET", "ProductPictures('PIC1')/$value").status == 404)
            #expect(try await alice("GET", "ProductPictures('PIC1')").status == 404)
            #expect(
                try await alice("PUT", "ProductPictures('PIC1')/$value", headers: stream, body: "alice's").status == 404
            )
            #expect(try await bob("GET", "ProductPictures('PIC1')/$value").text == "picture 1")
        }
    }

    @Test(arguments: [false, true])
    func batchPartsRunAsTheBatchUser(v2: Bool) async throws {
        try await Self.withServer(v2: v2) { session, _ in
            let alice = session.as(Self.alice), bob = session.as(Self.bob)
            let patch = v2 ? "MERGE" : "PATCH"
            // Each part names bob's credentials: they do not count, the batch's user does.
            func batch(_ company: String) -> String {
                """
                --b1\r
                Content-Type: application/http\r
                \r
                GET BusinessPartners?$orderby=PartnerID HTTP/1.1\r
                Authorization: \(Self.bob)\r
                Accept: application/json\r
                \r
                \r
                --b1\r
                Content-Type: multipart/mixed; boundary=cs1\r
                \r
                --cs1\r
                Content-Type: application/http\r
                Content-ID: 1\r
                \r
                \(patch) BusinessPartners('BP1') HTTP/1.1\r
                Content-Type: application/json\r
                If-Match: *\r
                Authorization: \(Self.bob)\r
                \r
                {"CompanyName":"\(company)"}\r
                --cs1--\r
                --b1\r
                Content-Type: application/http\r
                \r
                GET BusinessPartners('BP1') HTTP/1.1\r
                Authorization: \(Self.bob)\r
                Accept: application/json\r
                \r
                \r
                --b1--\r

                """
            }
            var headers = ["Content-Type": "multipart/mixed; boundary=b1"]
            if !v2 { headers["Prefer"] = "odata.continue-on-error" }
            let reply = try await alice("POST", "$batch", headers: headers, body: batch("Taken by alice"))
            #expect(reply.status == (v2 ? 202 : 200))
            let parts = try MultipartBatch.read(reply.body).parts
            #expect(parts.count == 3, "\(reply.text.prefix(1_000))")
            guard parts.count == 3 else { return }
            if case .operation(let read) = parts[0] {
                #expect(read.message.status == 200)
                let rows = try JSONValue.parse(read.message.body)
                let ids = ((v2 ? rows["d"]?["results"] : rows["value"])?.arrayValue ?? []).compactMap {
                    $0["PartnerID"]?.stringValue
                }
                #expect(ids == ["BP0", "BP5"])
            } else {
                Issue.record("part 1 is not an operation")
            }
            if case .operation(let failed) = parts[1] {
                #expect(failed.message.status == 404)
            } else {
                Issue.record("the change set succeeded for alice")
            }
            if case .operation(let read) = parts[2] {
                #expect(read.message.status == 404)
            } else {
                Issue.record("part 3")
            }
            #expect(
                bob.entity(try await bob("GET", "BusinessPartners('BP1')"))?["CompanyName"]?.stringValue == "Company 1")
            // The same batch from bob changes his partner.
            let bobs = try await bob("POST", "$batch", headers: headers, body: batch("Bob's own"))
            let bobParts = try MultipartBatch.read(bobs.body).parts
            if bobParts.count == 3, case .changeSet(let set) = bobParts[1] {
                #expect(set.operations.map(\.message.status) == [204])
            } else {
                Issue.record("bob's change set failed: \(bobs.text.prefix(1_000))")
            }
            #expect(
                bob.entity(try await bob("GET", "BusinessPartners('BP1')"))?["CompanyName"]?.stringValue == "Bob's own")
        }
    }

    // MARK: Delta

    @Test(arguments: [false, true])
    func deltasShowOnlyTheUsersRows(v2: Bool) async throws {
        try await Self.withServer(v2: v2) { session, service in
            let alice = session.as(Self.alice), bob = session.as(Self.bob)
            let model = service.store.model
            func deltaLink(_ reply: TestServer.Reply) -> String? {
                let link = v2 ? reply.json?["d"]?["__delta"]?.stringValue : reply.json?["@odata.deltaLink"]?.stringValue
                return link.map { String($0.drop { $0 != "/" }.dropFirst(2).drop { $0 != "/" }) }
            }
            func changes(_ user: Session, _ link: String) async throws -> (changed: [String], removed: [String]) {
                let reply = try await user("GET", link)
                #expect(reply.status == 200, "\(reply.text.prefix(300))")
                let collection =
                    v2
                    ? try V2JSONReader(model: model).readCollection(reply.body, entityType: "Sales.SalesOrder")
                    : try V4JSONReader(model: model).readCollection(reply.body, entityType: "Sales.SalesOrder")
                let changed = collection.entities.compactMap { entity -> String? in
                    if case .primitive(.string(let id))? = entity["OrderID"] { return id }
                    return nil
                }
                let removed = collection.deleted.compactMap { deleted in
                    deleted.id.flatMap { id in
                        id.range(of: "SalesOrders(").map { String(id[$0.upperBound...].prefix { $0 != ")" }) }
                    }
                }
                return (changed.sorted(), removed.sorted())
            }
            let tracked = ["Prefer": "odata.track-changes"]
            let aliceLink = try #require(deltaLink(try await alice("GET", "SalesOrders", headers: tracked)))
            let bobLink = try #require(deltaLink(try await bob("GET", "SalesOrders", headers: tracked)))
            let anyMatch = ["If-Match": "*"]
            // Alice changes SO0, gives SO1 to bob's BP1 and deletes SO2; bob changes SO10.
            #expect(
                try await alice(alice.update, "SalesOrders('SO0')", headers: anyMatch, body: #"{"Note":"changed"}"#)
                    .status == 204)
            #expect(
                try await alice(alice.update, "SalesOrders('SO1')", headers: anyMatch, body: #"{"PartnerID":"BP1"}"#)
                    .status == 204)
            #expect(try await alice("DELETE", "SalesOrders('SO2')", headers: anyMatch).status == 204)
            #expect(
                try await bob(bob.update, "SalesOrders('SO10')", headers: anyMatch, body: #"{"Note":"changed"}"#).status
                    == 204)
            let aliceChanges = try await changes(alice, aliceLink)
            #expect(aliceChanges.changed == ["SO0"])
            #expect(aliceChanges.removed == ["'SO1'", "'SO2'"])
            let bobChanges = try await changes(bob, bobLink)
            #expect(bobChanges.changed == ["SO1", "SO10"])
            #expect(bobChanges.removed.isEmpty, "\(bobChanges.removed)")
        }
    }

    // MARK: The users file

    @Test func usersFileIsReadAndBadFilesAreRefused() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-users-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        func write(_ text: String) throws -> String {
            let path = directory.appendingPathComponent("users-\(UUID().uuidString).json").path
            try Data(text.utf8).write(to: URL(fileURLWithPath: path))
            return path
        }
        let good = try write(
            """
            {"jwtIssuers": {"https://idp-a.example": "\(Self.secretA)"}, "jwtAudience": "oodata-tests",
             "users": [
               {"name": "alice", "credential": {"basic": {"user": "alice", "password": "pw"}},
                "rowFilters": {"BusinessPartners": "Address/Country eq 'DE'"}},
               {"name": "bob", "credential": {"apiKey": "bob-key"}},
               {"name": "carol", "credential": {"bearer": "carol-token"}},
               {"name": "dave", "credential": {"jwt": {"issuer": "https://idp-a.example", "subject": "u-1"}}}]}
            """)
        let users = try ServiceUsers.load(path: good)
        #expect(users.users.map(\.name) == ["alice", "bob", "carol", "dave"])
        #expect(users.users[0].credential == .basic(user: "alice", password: "pw"))
        #expect(users.users[1].credential == .apiKey("bob-key"))
        #expect(users.users[1].rowFilters.isEmpty)
        #expect(users.users[3].credential == .jwt(issuer: "https://idp-a.example", subject: "u-1"))
        #expect(users.jwtAudience == "oodata-tests")
        #expect(try JSONDecoder().decode(ServiceUsers.self, from: JSONEncoder().encode(users)) == users)
        #expect(!"\(users.users[0].credential)".contains("pw"))
        try users.check(against: try SalesSample.model())
        let bad: [(String, String)] = [
            (
                #"{"users": [{"name": "a", "credential": {"basic": {"user": "a", "password": "p"}}, "rowFilter": {}}]}"#,
                "rowFilter"
            ),
            (#"{"users": [{"name": "a", "credential": {"token": "x"}}]}"#, "token"),
            (#"{"users": [{"name": "a", "credential": {"jwt": {"issuer": "i", "subject": "s"}}}]}"#, "no secret"),
            (
                #"{"users": [{"name": "a", "credential": {"jwt": {"issuer": "i", "subject": "s"}}}], "jwtIssuers": {"i": "short"}}"#,
                "32"
            ),
            (
                #"{"users": [{"name": "a", "credential": {"apiKey": "k"}}, {"name": "a", "credential": {"apiKey": "l"}}]}"#,
                "two users"
            ),
            (#"{"users": [{"name": "a"}]}"#, "credential"),
            (#"{"users": "#, "not valid JSON"),
        ]
        for (text, expected) in bad {
            let path = try write(text)
            let error = #expect(throws: ServiceUsersError.self) { try ServiceUsers.load(path: path) }
            let message = error?.message ?? ""
            #expect(message.contains(path) && message.contains(expected), "\(message)")
        }
        #expect(throws: ServiceUsersError.self) {
            try ServiceUsers.load(path: directory.appendingPathComponent("missing.json").path)
        }
        // Filters are checked against the model: an unknown set or property, not an expression.
        let model = try SalesSample.model()
        for filters in [
            ["Customers": "ID eq 1"], ["SalesOrders": "Nope eq 1"], ["SalesOrders": "PartnerID eq"],
            ["SalesOrders": "PartnerID eq 'BP0') or (true"],
        ] {
            let users = ServiceUsers(users: [ServiceUser(name: "a", credential: .apiKey("k"), rowFilters: filters)])
            #expect(throws: ServiceUsersError.self, "\(filters)") { try users.check(against: model) }
        }
    }
}
