import Foundation
import JWTKit
import ODataCore
import ODataGateway
import ODataServer
import OfflineOData
import Testing

/// Issue 52: every user sees only their own data. The backend is the reference server with users
/// who see different rows (Basic with passwords, API-key Basic, JWTs of two issuers with the same
/// `sub`); the tests try every gateway endpoint as another user and anonymously, and assert that
/// none of the first user's keys or values appear. V4 and V2, real PostgreSQL.
@Suite(.serialized) struct GatewayIsolationTests {
    static let issuerA = "https://idp-a.test/"
    static let issuerB = "https://idp-b.test/"
    static let secretA = "secret-of-issuer-a-0123456789abcdef"
    static let secretB = "secret-of-issuer-b-0123456789abcdef"
    static let audience = "sales"

    static func rows(_ partner: String) -> [String: String] {
        ["BusinessPartners": "PartnerID eq '\(partner)'", "Contacts": "PartnerID eq '\(partner)'"]
    }

    static let users = ServiceUsers(
        users: [
            ServiceUser(
                name: "alice", credential: .basic(user: "alice", password: "alice-pw"), rowFilters: rows("BP0")),
            ServiceUser(name: "bob", credential: .basic(user: "bob", password: "bob-pw"), rowFilters: rows("BP1")),
            // Alice's new password, while the backend still takes the old one (a rotation).
            ServiceUser(
                name: "alice-new", credential: .basic(user: "alice", password: "alice-new"), rowFilters: rows("BP0")),
            ServiceUser(name: "carol", credential: .apiKey("carol-key"), rowFilters: rows("BP2")),
            ServiceUser(name: "dave", credential: .apiKey("dave-key"), rowFilters: rows("BP3")),
            ServiceUser(name: "erin-a", credential: .jwt(issuer: issuerA, subject: "erin"), rowFilters: rows("BP0")),
            ServiceUser(name: "erin-b", credential: .jwt(issuer: issuerB, subject: "erin"), rowFilters: rows("BP1")),
        ],
        jwtIssuers: [issuerA: secretA, issuerB: secretB], jwtAudience: audience)

    static func basic(_ user: String, _ password: String) -> String {
        "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }
    static let alice = basic("alice", "alice-pw")
    static let bob = basic("bob", "bob-pw")

    struct Claims: JWTPayload {
        var iss: IssuerClaim
        var sub: SubjectClaim
        var aud: AudienceClaim
        var exp: ExpirationClaim
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    /// A JWT signed HS256 with `secret`.
    static func jwt(
        issuer: String, subject: String = "erin", secret: String, audience: String = audience, expiresIn: Double = 600
    ) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        let claims = Claims(
            iss: IssuerClaim(value: issuer), sub: SubjectClaim(value: subject), aud: AudienceClaim(value: [audience]),
            exp: ExpirationClaim(value: Date().addingTimeInterval(expiresIn)))
        return try await keys.sign(claims)
    }

    static func start(
        v2: Bool, interval: Double = 600, verifyJWT: Bool = true,
        backendOptions: (inout ODataService.Options) -> Void = { _ in },
        configure: (inout GatewayConfiguration) -> Void = { _ in }
    ) async throws -> GatewayDeltaTests.Setup {
        try await GatewayDeltaTests.start(
            v2: v2, instances: 1, scale: 4,
            backendOptions: { options in
                options.users = users
                backendOptions(&options)
            },
            configure: { configuration in
                configuration.refreshInterval = interval
                if verifyJWT {
                    configuration.backends[0].jwtVerification = [
                        JWTVerification(issuer: issuerA, audience: audience, hmacSecret: secretA),
                        JWTVerification(issuer: issuerB, audience: audience, hmacSecret: secretB),
                    ]
                }
                configure(&configuration)
            })
    }

    static func send(
        _ method: String, _ url: String, authorization: String?, headers extra: [(String, String)] = [],
        body: String = "", tracked: Bool = false
    ) async throws -> TransportResponse {
        var headers = HTTPHeaders()
        headers["Accept"] = "application/json"
        if tracked { headers["Prefer"] = "odata.track-changes" }
        if !body.isEmpty { headers["Content-Type"] = "application/json" }
        if let authorization { headers["Authorization"] = authorization }
        for (name, value) in extra { headers[name] = value }
        return try await DefaultTransport.make().send(
            TransportRequest(method: method, url: url, headers: headers, body: Array(body.utf8)), timeout: 30)
    }

    static func text(_ response: TransportResponse) -> String { String(decoding: response.body, as: UTF8.self) }

    /// Every page of a tracked read through the gateway: the rows, the next link of the first
    /// page (when there is one) and the delta link.
    static func read(
        _ url: String, authorization: String?, v2: Bool
    ) async throws
        -> (rows: [JSONValue], next: String?, delta: String?, status: Int)
    {
        var rows: [JSONValue] = []
        var next: String? = url
        var firstNext: String?
        var delta: String?
        while let current = next {
            let response = try await send("GET", current, authorization: authorization, tracked: true)
            guard response.status == 200 else { return (rows, nil, nil, response.status) }
            let json = try JSONValue.parse(response.body)
            rows += (v2 ? json["d"]?["results"]?.arrayValue : json["value"]?.arrayValue) ?? []
            next = v2 ? json["d"]?["__next"]?.stringValue : json["@odata.nextLink"]?.stringValue
            if firstNext == nil { firstNext = next }
            delta = v2 ? json["d"]?["__delta"]?.stringValue : json["@odata.deltaLink"]?.stringValue
        }
        return (rows, firstNext, delta, 200)
    }

    /// What a user may read of Contacts, straight from the backend: `"ContactID LastName"` each.
    static func backendContacts(_ setup: GatewayDeltaTests.Setup, _ authorization: String) async throws -> [String] {
        var found: [String] = []
        var next: String? = setup.backend.v4Root.absoluteString + "Contacts?$orderby=ContactID"
        while let current = next {
            let response = try await send("GET", current, authorization: authorization)
            #expect(response.status == 200, "\(text(response))")
            let json = try JSONValue.parse(response.body)
            for row in json["value"]?.arrayValue ?? [] {
                found.append(
                    "\(row["ContactID"]?.serializedNumber ?? row["ContactID"]?.stringValue ?? "?") "
                        + (row["LastName"]?.stringValue ?? "?"))
            }
            next = json["@odata.nextLink"]?.stringValue
        }
        return found
    }

    static func contacts(_ rows: [JSONValue]) -> [String] {
        rows.map {
            "\($0["ContactID"]?.serializedNumber ?? $0["ContactID"]?.stringValue ?? "?") "
                + ($0["LastName"]?.stringValue ?? "?")
        }.sorted { (Int($0.prefix { $0 != " " }) ?? 0) < (Int($1.prefix { $0 != " " }) ?? 0) }
    }

    /// Whether `body` holds any of `secrets` (`"ID Name"` strings: the ID as a JSON number or a
    /// V2 string, and the name).
    static func leaks(_ body: String, _ secrets: [String]) -> [String] {
        secrets.filter { secret in
            let parts = secret.split(separator: " ", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { return false }
            return body.contains("\"ContactID\":\(parts[0])") || body.contains("\"ContactID\":\"\(parts[0])\"")
                || body.contains("\"\(parts[1])\"")
        }
    }

    // MARK: Scopes and tokens

    /// Doors 1 and 2 of issue 52, and the tokens: each identity gets exactly its backend rows;
    /// another user, a wrong password, no credentials, `alice:<bob's key>`-style API-key Basic,
    /// the same `sub` from another issuer, forged JWTs and foreign or forged tokens get none of them.
    @Test(arguments: [false, true])
    func scopesBelongToVerifiedIdentities(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2, configure: { $0.pageSize = 1 })
        do {
            let root = setup.gateways[0].root.absoluteString
            let aliceRows = try await Self.backendContacts(setup, Self.alice)
            let bobRows = try await Self.backendContacts(setup, Self.bob)
            #expect(!aliceRows.isEmpty && !bobRows.isEmpty && Set(aliceRows).isDisjoint(with: bobRows))
            let alice = try await Self.read(root + "Contacts", authorization: Self.alice, v2: v2)
            #expect(Self.contacts(alice.rows) == aliceRows)
            let next = try #require(alice.next, "pages of 1: alice's read has a next link")
            let delta = try #require(alice.delta)
            let bob = try await Self.read(root + "Contacts", authorization: Self.bob, v2: v2)
            #expect(Self.contacts(bob.rows) == bobRows)

            // Alice's tokens as bob, with a wrong password, anonymously: never her rows.
            let wrong = Self.basic("alice", "guess")
            for (url, authorization, expected) in [
                (next, Self.bob, 410), (delta, Self.bob, 410), (next, wrong, 401), (delta, wrong, 401),
                (next, nil, 401), (delta, nil, 401), (root + "Contacts", wrong, 401), (root + "Contacts", nil, 401),
            ] as [(String, String?, Int)] {
                let response = try await Self.send("GET", url, authorization: authorization, tracked: true)
                #expect(
                    response.status == expected, "\(url) as \(authorization ?? "anonymous"): \(Self.text(response))")
                #expect(Self.leaks(Self.text(response), aliceRows).isEmpty, "\(url): \(Self.text(response))")
            }
            // A token option the gateway does not know (spelt in capitals) is the backend's to
            // judge: its 4xx, not a 5xx, and none of her rows.
            let capitals = try await Self.send(
                "GET", root + "Contacts?$DELTATOKEN=gd.1.8", authorization: Self.bob, tracked: true)
            #expect((400..<500).contains(capitals.status), "\(capitals.status) \(Self.text(capitals))")
            #expect(Self.leaks(Self.text(capitals), aliceRows).isEmpty)
            // Forged tokens: alice's scope number with bob's scope's link shape, and back.
            let bobDelta = try #require(bob.delta)
            func scope(_ link: String) -> String? {
                let decoded = link.removingPercentEncoding ?? link
                guard let range = decoded.range(of: "gd.") else { return nil }
                return String(decoded[range.upperBound...].prefix { $0 != "." })
            }
            let aliceScope = try #require(scope(delta))
            let bobScope = try #require(scope(bobDelta))
            #expect(aliceScope != bobScope)
            for forged in [
                bobDelta.replacingOccurrences(of: "gd.\(bobScope).", with: "gd.\(aliceScope)."),
                bobDelta.replacingOccurrences(of: "gd.\(bobScope).", with: "gd.\(aliceScope).0.999999.0."),
                root + "Contacts?$skiptoken=gp.\(aliceScope).1.MA",
            ] {
                let response = try await Self.send("GET", forged, authorization: Self.bob, tracked: true)
                #expect([400, 410].contains(response.status), "\(forged): \(Self.text(response))")
                #expect(Self.leaks(Self.text(response), aliceRows).isEmpty, "\(forged): \(Self.text(response))")
            }

            // API-key Basic: the backend checks only the key; carol's name with dave's key is dave.
            let carol = Self.basic("carol", "carol-key")
            let carolRows = try await Self.backendContacts(setup, carol)
            let daveRows = try await Self.backendContacts(setup, Self.basic("dave", "dave-key"))
            #expect(
                Self.contacts(try await Self.read(root + "Contacts", authorization: carol, v2: v2).rows) == carolRows)
            let impostor = try await Self.read(
                root + "Contacts", authorization: Self.basic("carol", "dave-key"), v2: v2)
            #expect(Self.contacts(impostor.rows) == daveRows)
            #expect(Set(Self.contacts(impostor.rows)).isDisjoint(with: carolRows))

            // The same sub from two issuers: two identities.
            let erinA = try await Self.jwt(issuer: Self.issuerA, secret: Self.secretA)
            let erinB = try await Self.jwt(issuer: Self.issuerB, secret: Self.secretB)
            let erinARows = try await Self.backendContacts(setup, "Bearer " + erinA)
            let erinBRows = try await Self.backendContacts(setup, "Bearer " + erinB)
            #expect(Set(erinARows).isDisjoint(with: erinBRows))
            let readA = try await Self.read(root + "Contacts", authorization: "Bearer " + erinA, v2: v2)
            #expect(Self.contacts(readA.rows) == erinARows)
            let readB = try await Self.read(root + "Contacts", authorization: "Bearer " + erinB, v2: v2)
            #expect(Self.contacts(readB.rows) == erinBRows)
            // A rotated token of the same (iss, sub) keeps its scope: its delta link still serves it.
            let rotated = try await Self.jwt(issuer: Self.issuerA, secret: Self.secretA, expiresIn: 900)
            #expect(rotated != erinA)
            let followed = try await Self.send(
                "GET", try #require(readA.delta), authorization: "Bearer " + rotated, tracked: true)
            #expect(followed.status == 200, "\(Self.text(followed))")
            #expect(
                try await Self.send("GET", try #require(readA.delta), authorization: "Bearer " + erinB, tracked: true)
                    .status == 410)

            // Forged JWTs: issuer A's claims signed with B's secret, an unknown issuer, another
            // audience, an expired token, `alg: none`.
            let header = Data(#"{"alg":"none","typ":"JWT"}"#.utf8).base64EncodedString()
            let payload = Data(
                #"{"iss":"\#(Self.issuerA)","sub":"erin","aud":"sales","exp":\#(Int(Date().timeIntervalSince1970) + 600)}"#
                    .utf8
            ).base64EncodedString()
            let unsigned =
                [header, payload].map {
                    $0.replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-")
                        .replacingOccurrences(of: "/", with: "_")
                }.joined(separator: ".") + "."
            let forgedTokens = [
                try await Self.jwt(issuer: Self.issuerA, secret: Self.secretB),
                try await Self.jwt(issuer: "https://idp-c.test/", secret: Self.secretA),
                try await Self.jwt(issuer: Self.issuerA, secret: Self.secretA, audience: "other"),
                try await Self.jwt(issuer: Self.issuerA, secret: Self.secretA, expiresIn: -120),
                unsigned,
            ]
            for token in forgedTokens {
                for url in [root + "Contacts", try #require(readA.delta)] {
                    let response = try await Self.send("GET", url, authorization: "Bearer " + token, tracked: true)
                    #expect(response.status == 401, "\(token.prefix(40)): \(Self.text(response))")
                    #expect(Self.leaks(Self.text(response), erinARows).isEmpty)
                }
            }
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// Door 1 with a refresh at every read: another issuer's token with the same `sub` refreshes
    /// a scope of its own; the first one's delta shows no removal of her rows. Also without JWT
    /// verification (each token its own identity).
    @Test(arguments: [false, true])
    func anotherIssuersSubjectNeverTouchesTheFirstsScope(v2: Bool) async throws {
        for verify in [true, false] {
            let setup = try await Self.start(v2: v2, interval: 0, verifyJWT: verify)
            do {
                let root = setup.gateways[0].root.absoluteString
                let erinA = "Bearer " + (try await Self.jwt(issuer: Self.issuerA, secret: Self.secretA))
                let erinB = "Bearer " + (try await Self.jwt(issuer: Self.issuerB, secret: Self.secretB))
                let aRows = try await Self.backendContacts(setup, erinA)
                let first = try await Self.read(root + "Contacts", authorization: erinA, v2: v2)
                #expect(Self.contacts(first.rows) == aRows)
                let other = try await Self.read(root + "Contacts", authorization: erinB, v2: v2)
                #expect(Set(Self.contacts(other.rows)).isDisjoint(with: aRows))
                let delta = try await Self.send(
                    "GET", try #require(first.delta), authorization: erinA, tracked: true)
                #expect(delta.status == 200)
                let body = Self.text(delta)
                #expect(!body.contains("removed") && !body.contains("__deleted"), "verify \(verify): \(body)")
                let again = try await Self.read(root + "Contacts", authorization: erinA, v2: v2)
                #expect(Self.contacts(again.rows) == aRows)
            } catch {
                Issue.record("verify \(verify): \(error)")
            }
            await setup.stop()
        }
    }

    /// A device whose password changed is a new identity: its next download gets 410 for the
    /// old scope's tokens, reads again, and holds exactly its rows, never another's; its change
    /// uploads under the new identity.
    @Test(arguments: [false, true])
    func aDeviceWhosePasswordChangedReadsAgain(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2)
        do {
            let aliceRows = try await Self.backendContacts(setup, Self.alice)
            func device(_ authorization: String) async throws -> OfflineODataProvider {
                try await GatewayDeltaTests.device(setup, gateway: 0, name: "rotating") { parameters in
                    parameters.customHeaders["Authorization"] = authorization
                }
            }
            func held(_ provider: OfflineODataProvider) async throws -> [String] {
                try await provider.readEntities("Contacts?$orderby=ContactID").map {
                    "\($0.int64("ContactID") ?? -1) \($0.string("LastName") ?? "?")"
                }
            }
            let first = try await device(Self.alice)
            #expect(try await held(first) == aliceRows)
            await first.close()
            await setup.backend.service.journal.clear()
            let rotated = try await device(Self.basic("alice", "alice-new"))
            try await rotated.download()
            #expect(try await held(rotated) == aliceRows)
            // The download read the backend again for the new identity's scope.
            let reads = await setup.backend.service.journal.requests().filter {
                $0.hasPrefix("GET Contacts") && !$0.contains("$top=0")
            }
            #expect(!reads.isEmpty, "the new identity's scope was read from the backend")
            _ = try await rotated.execute(
                method: "PATCH", url: "Contacts(\(aliceRows[0].prefix { $0 != " " })\(v2 ? "L" : ""))",
                body: Array(#"{"LastName":"Rotated"}"#.utf8))
            try await rotated.upload()
            try await rotated.download()
            #expect(try await held(rotated).contains { $0.hasSuffix(" Rotated") })
            #expect(try await Self.backendContacts(setup, Self.alice).contains { $0.hasSuffix(" Rotated") })
            await rotated.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    // MARK: Recorded answers

    /// Door 3: a recorded upload answer goes only to the identity that sent the request. Another
    /// user, a wrong password, no credentials and another token get 409 with a code of their own,
    /// on their own and in a `$batch`; nothing reaches the backend again; the owner's repeat gets
    /// the record.
    @Test(arguments: [false, true])
    func recordedAnswersGoOnlyToTheirOwner(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2)
        do {
            let root = setup.gateways[0].root.absoluteString
            let id = UUID().uuidString
            let body =
                v2
                ? #"{"ContactID":"9001","PartnerID":"BP0","LastName":"Privatealice"}"#
                : #"{"ContactID":9001,"PartnerID":"BP0","LastName":"Privatealice"}"#
            let headers = [
                ("Repeatability-Request-ID", id),
                ("Repeatability-First-Sent", HTTPDate.format(secondsSince1970: Int64(Date().timeIntervalSince1970))),
            ]
            await setup.backend.service.journal.clear()
            let created = try await Self.send(
                "POST", root + "Contacts", authorization: Self.alice, headers: headers, body: body)
            #expect(created.status == 201, "\(Self.text(created))")
            let secret = ["9001 Privatealice"]
            let erin = "Bearer " + (try await Self.jwt(issuer: Self.issuerA, secret: Self.secretA))
            for authorization in [Self.bob, Self.basic("alice", "guess"), nil, erin] as [String?] {
                let repeatResponse = try await Self.send(
                    "POST", root + "Contacts", authorization: authorization, headers: headers, body: body)
                #expect(repeatResponse.status == 409, "\(authorization ?? "anonymous"): \(Self.text(repeatResponse))")
                #expect((try? ODataError.parse(repeatResponse.body).code) == "RequestOfOtherCredentials")
                #expect(repeatResponse.headers["Repeatability-Result"] == nil)
                #expect(Self.leaks(Self.text(repeatResponse), secret).isEmpty, "\(Self.text(repeatResponse))")
            }
            // The same ID in bob's $batch: that part gets 409, no record shown.
            let boundary = "batch_isolation"
            let changeSet = "changeset_isolation"
            let part = [
                "--\(boundary)", "Content-Type: multipart/mixed; boundary=\(changeSet)", "",
                "--\(changeSet)", "Content-Type: application/http", "Content-Transfer-Encoding: binary",
                "Content-ID: 1", "", "POST Contacts HTTP/1.1", "Content-Type: application/json",
                "Repeatability-Request-ID: \(id)", "", body, "--\(changeSet)--", "--\(boundary)--", "",
            ].joined(separator: "\r\n")
            let batch = try await Self.send(
                "POST", root + "$batch", authorization: Self.bob,
                headers: [("Content-Type", "multipart/mixed; boundary=\(boundary)")], body: part)
            let batchText = Self.text(batch)
            #expect(
                batch.status < 300 && batchText.contains("409") && batchText.contains("RequestOfOtherCredentials"),
                "\(batch.status) \(batchText)")
            #expect(Self.leaks(batchText, secret).isEmpty, "\(batchText)")
            #expect(!batchText.contains("Repeatability-Result"))
            // A JSON $batch is not recorded by the gateway: one whose requests carry IDs is refused
            // (415), never forwarded.
            let json = JSONValue.object([
                .init(
                    "requests",
                    .array([
                        .object([
                            .init("id", .string("1")), .init("method", .string("POST")),
                            .init("url", .string("Contacts")),
                            .init(
                                "headers",
                                .object([
                                    .init("content-type", .string("application/json")),
                                    .init("repeatability-request-id", .string(id)),
                                ])),
                            .init("body", try JSONValue.parse(Array(body.utf8))),
                        ])
                    ]))
            ]).serialized
            if !v2 {
                let refusedJSON = try await Self.send(
                    "POST", root + "$batch", authorization: Self.bob, headers: [("Content-Type", "application/json")],
                    body: json)
                #expect(refusedJSON.status == 415, "\(refusedJSON.status) \(Self.text(refusedJSON))")
                #expect(Self.leaks(Self.text(refusedJSON), secret).isEmpty)
            }
            // The owner's repeat: the record, accepted.
            let mine = try await Self.send(
                "POST", root + "Contacts", authorization: Self.alice, headers: headers, body: body)
            #expect(mine.status == 201 && mine.headers["Repeatability-Result"] == "accepted", "\(Self.text(mine))")
            #expect(Self.text(mine).contains("Privatealice"))
            let posts = await setup.backend.service.journal.requests().filter { $0.hasPrefix("POST") }
            #expect(posts.count == 1, "the create reached the backend once: \(posts)")
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    // MARK: ETag checks and conditional reads

    /// Door 4: the gateway's ETag check reads with a `$filter` built from the parsed key. Another
    /// user's ETag, an ETag of one's own scope on another's row, and predicates that are not the
    /// key all get the one 412 every refusal gets; nothing is forwarded. A conditional read of
    /// another's row gets what the backend gives that user (404), never a 304 or her values.
    @Test(arguments: [false, true])
    func etagChecksTellNothingOfOthersRows(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2, backendOptions: { $0.sendsETags = false })
        do {
            let root = setup.gateways[0].root.absoluteString
            let aliceRows = try await Self.backendContacts(setup, Self.alice)
            let alice = try await Self.read(root + "Contacts", authorization: Self.alice, v2: v2)
            let bob = try await Self.read(root + "Contacts", authorization: Self.bob, v2: v2)
            func etag(_ row: JSONValue) -> String? {
                v2 ? row["__metadata"]?["etag"]?.stringValue : row["@odata.etag"]?.stringValue
            }
            let target = try #require(alice.rows.first)
            let targetID = try #require(target["ContactID"]?.serializedNumber ?? target["ContactID"]?.stringValue)
            let key = v2 ? "\(targetID)L" : targetID
            let aliceETag = try #require(etag(target))
            let bobETag = try #require(bob.rows.first.flatMap(etag))
            let bobRow = try #require(bob.rows.first)
            let bobID = try #require(bobRow["ContactID"]?.serializedNumber ?? bobRow["ContactID"]?.stringValue)
            let bobKey = v2 ? "\(bobID)L" : bobID
            // Bob's scope with the hash of her row as it is: refused only if bob cannot read it.
            let parsed = try #require(aliceETag.split(separator: ".").last.map { String($0.dropLast()) })
            let bobScope = try #require(bobETag.split(separator: ".").dropFirst().first)
            let forged = "W/\"gw.\(bobScope).\(parsed)\""
            await setup.backend.service.journal.clear()
            let patch = #"{"LastName":"Overwritten"}"#
            var messages: Set<String> = []
            for (url, ifMatch) in [
                ("Contacts(\(key))", aliceETag),  // her row, her ETag, as bob
                ("Contacts(\(key))", bobETag),  // her row, bob's scope
                ("Contacts(\(key))", forged),  // her row, bob's scope, her row's true hash
                ("Contacts(\(key)%20or%20true)", bobETag),  // a predicate that is no key
                ("Contacts(ContactID=\(key),LastName='x')", bobETag),
                ("Contacts(99999)", bobETag),  // a row that does not exist
                ("Contacts(\(bobKey))", "W/\"gw.1.0000\""),  // his own row, an ETag spelt like ours but malformed
            ] {
                let response = try await Self.send(
                    "PATCH", root + url, authorization: Self.bob,
                    headers: [("If-Match", ifMatch), ("Repeatability-Request-ID", UUID().uuidString)], body: patch)
                #expect(response.status == 412, "\(url): \(Self.text(response))")
                let error = try ODataError.parse(response.body)
                #expect(error.code == "PreconditionFailed")
                #expect(Self.leaks(Self.text(response), aliceRows).isEmpty)
                // The same words whatever the reason (the request's own URL and ETag taken out).
                messages.insert(
                    error.message.replacingOccurrences(of: url, with: "URL").replacingOccurrences(
                        of: ifMatch, with: "E"))
            }
            #expect(messages.count == 1, "\(messages)")
            let patches = await setup.backend.service.journal.requests().filter { $0.hasPrefix("PATCH") }
            #expect(patches.isEmpty, "nothing was forwarded: \(patches)")
            // Conditional reads of her row as bob and anonymously.
            for authorization in [Self.bob, nil] as [String?] {
                let read = try await Self.send(
                    "GET", root + "Contacts(\(key))", authorization: authorization,
                    headers: [("If-None-Match", aliceETag)])
                #expect(read.status != 304 && read.status != 200, "\(read.status) \(Self.text(read))")
                #expect(Self.leaks(Self.text(read), aliceRows).isEmpty, "\(Self.text(read))")
            }
            // Her own change still goes, with her ETag.
            let own = try await Self.send(
                "PATCH", root + "Contacts(\(key))", authorization: Self.alice,
                headers: [("If-Match", aliceETag), ("Repeatability-Request-ID", UUID().uuidString)], body: patch)
            #expect(own.status < 300, "\(Self.text(own))")
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    // MARK: Progress and store files

    /// Progress records and store files (and their Range reads) answer only their owner.
    @Test(arguments: [false, true])
    func progressAndStoreFilesAnswerOnlyTheirOwner(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2, interval: 0, configure: { $0.backends[0].prepopulate = .yes })
        do {
            let root = setup.gateways[0].root.absoluteString
            let aliceRows = try await Self.backendContacts(setup, Self.alice)
            let operation = UUID().uuidString
            let read = try await Self.send(
                "GET", root + "Contacts", authorization: Self.alice, headers: [("OOData-Operation", operation)],
                tracked: true)
            #expect(read.status == 200)
            func step(_ authorization: String?) async throws -> JSONValue? {
                var found: JSONValue?
                for _ in 0..<50 {
                    let answer = try await Self.send(
                        "GET", root + "$oodata/progress/" + operation, authorization: authorization)
                    found = try JSONValue.parse(answer.body)["step"]
                    if authorization != Self.alice || found?.stringValue != nil { break }
                    try await Task.sleep(for: .milliseconds(100))
                }
                return found
            }
            #expect(try await step(Self.alice)?.stringValue == "waitingForDownload")
            // Bob writes progress under the same operation ID: it is not hers.
            let bobWrite = try await Self.send(
                "PATCH", root + "Contacts(99999\(v2 ? "L" : ""))", authorization: Self.bob,
                headers: [("OOData-Operation", operation), ("Repeatability-Request-ID", UUID().uuidString)],
                body: #"{"LastName":"x"}"#)
            #expect(bobWrite.status >= 400)
            // So does alice's name with a wrong password (the backend refuses it; the gateway's
            // record of its step must not be hers).
            let guessed = try await Self.send(
                "GET", root + "BusinessPartners", authorization: Self.basic("alice", "guess"),
                headers: [("OOData-Operation", operation)], tracked: true)
            #expect(guessed.status == 401)
            let guessedWrite = try await Self.send(
                "PATCH", root + "Contacts(99999\(v2 ? "L" : ""))", authorization: Self.basic("alice", "guess"),
                headers: [("OOData-Operation", operation), ("Repeatability-Request-ID", UUID().uuidString)],
                body: #"{"LastName":"x"}"#)
            #expect(guessedWrite.status >= 400)
            for authorization in [Self.bob, Self.basic("alice", "guess"), nil] as [String?] {
                #expect(try await step(authorization) == .null, "\(authorization ?? "anonymous")")
            }
            #expect(try await step(Self.alice)?.stringValue == "waitingForDownload")

            // A store file of alice's.
            let ask =
                #"{"definingQueries":[{"name":"Contacts","query":"Contacts"}],"format":"\#(ServerBuiltStore.format)"}"#
            let offer = try await Self.send("POST", root + "$oodata/store", authorization: Self.alice, body: ask)
            #expect(offer.status == 200, "\(Self.text(offer))")
            let id = try #require(try JSONValue.parse(offer.body)["id"]?.stringValue)
            for authorization in [Self.bob, Self.basic("alice", "guess"), nil] as [String?] {
                for range in [nil, "bytes=0-1023", "bytes=-100"] as [String?] {
                    let answer = try await Self.send(
                        "GET", root + "$oodata/store/" + id, authorization: authorization,
                        headers: range.map { [("Range", $0)] } ?? [])
                    #expect(
                        [401, 404].contains(answer.status),
                        "\(authorization ?? "anonymous") \(range ?? ""): \(answer.status)")
                    #expect(answer.body.count < 400 && Self.leaks(Self.text(answer), aliceRows).isEmpty)
                }
            }
            let mine = try await Self.send(
                "GET", root + "$oodata/store/" + id, authorization: Self.alice, headers: [("Range", "bytes=0-15")])
            #expect(mine.status == 206 && Array(mine.body.prefix(15)) == Array("SQLite format 3".utf8))
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    // MARK: Paths

    /// Door 5: behind a hop that decodes and removes dot segments, no path leaves the backend's
    /// service root: plain and encoded dot segments, encoded slashes, absolute URLs of other hosts
    /// and absolute paths, on their own, with request IDs, as `$batch` parts (multipart and JSON,
    /// forwarded as a batch and one by one) and as a store build's query. Each gets 400 and the
    /// proxy forwards nothing outside the root.
    @Test(arguments: [false, true])
    func noPathLeavesTheServiceRoot(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2, instances: 0, scale: 2, backendOptions: { $0.requireIfMatch = false })
        let proxy = try await NormalizingProxy.start(target: "http://127.0.0.1:\(setup.backend.port)")
        var gateways: [RunningGateway] = []
        do {
            let rootPath = v2 ? "/odata/v2/" : "/odata/v4/"
            for supportsBatch in [true, false] {
                var backend = GatewayBackend(url: "http://127.0.0.1:\(proxy.port)\(rootPath)")
                backend.supportsBatch = supportsBatch
                backend.prepopulate = .yes
                gateways.append(
                    try await RunningGateway.start(
                        configuration: GatewayConfiguration.refreshingAtEachRead([backend]),
                        postgresURL: setup.postgres.url))
            }
            let other = v2 ? "v4" : "v2"
            // An entity of the other root, in its own syntax.
            let entity = v2 ? "Contacts(1)" : "Contacts(1L)"
            let escapes = [
                "../\(other)/\(entity)", "%2e%2e/\(other)/\(entity)", "%2E%2E/\(other)/\(entity)",
                ".%2e/\(other)/\(entity)", "%252e%252e/\(other)/\(entity)", "..;/\(other)/\(entity)",
                "Contacts/../../\(other)/\(entity)", "Contacts%2F..%2F..%2F\(other)%2F\(entity)",
                "Contacts%5C..%5C..%5C\(other)%5C\(entity)", "./\(entity)", "Contacts//x",
                // (Paths that decode to bytes that are not UTF-8, `x%ff/%2e%2e/…` and `%c0%ae…`, are
                // in LeavingPathTests: this HTTP client sends its service root for them instead.)
                "x%25ff/%252e%252e/%252e%252e/\(other)/\(entity)",
            ]
            for gateway in gateways {
                let root = gateway.root.absoluteString
                // The proxy works: a plain read goes through it.
                #expect(try await Self.send("GET", root + "Contacts", authorization: nil).status == 200)
                for escape in escapes {
                    for method in ["GET", "PATCH"] {
                        let headers: [(String, String)] =
                            method == "PATCH" ? [("Repeatability-Request-ID", UUID().uuidString)] : []
                        let response = try await Self.send(
                            method, root + escape, authorization: nil, headers: headers,
                            body: method == "PATCH" ? #"{"LastName":"escaped"}"# : "")
                        #expect(
                            response.status == 400, "\(method) \(escape): \(response.status) \(Self.text(response))")
                        #expect((try? ODataError.parse(response.body).code) == "BadPath")
                    }
                }
                // $batch parts: relative escapes, other hosts, absolute paths; with and without IDs.
                let partURLs =
                    escapes.prefix(6).map { $0 } + [
                        "http://127.0.0.1:\(setup.backend.port)/odata/\(other)/\(entity)", "//evil.test/x",
                        "/../odata/\(other)/\(entity)", "file:///etc/passwd",
                    ]
                for url in partURLs {
                    for withID in [true, false] {
                        let boundary = "b_paths"
                        let id = withID ? "Repeatability-Request-ID: \(UUID().uuidString)\r\n" : ""
                        let body =
                            "--\(boundary)\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n"
                            + "PATCH \(url) HTTP/1.1\r\nContent-Type: application/json\r\n\(id)\r\n"
                            + #"{"LastName":"escaped"}"# + "\r\n--\(boundary)--\r\n"
                        let response = try await Self.send(
                            "POST", root + "$batch", authorization: nil,
                            headers: [("Content-Type", "multipart/mixed; boundary=\(boundary)")], body: body)
                        #expect(response.status == 400, "part \(url): \(response.status) \(Self.text(response))")
                    }
                    if !v2 {
                        let json = JSONValue.object([
                            .init(
                                "requests",
                                .array([
                                    .object([
                                        .init("id", .string("1")), .init("method", .string("GET")),
                                        .init("url", .string(url)),
                                    ])
                                ]))
                        ]).serialized
                        let response = try await Self.send(
                            "POST", root + "$batch", authorization: nil,
                            headers: [("Content-Type", "application/json")],
                            body: json)
                        #expect(response.status == 400, "JSON part \(url): \(response.status) \(Self.text(response))")
                    }
                }
                // An absolute path in a part, on a gateway at the root: it names the gateway's root,
                // and the backend gets it relative to its own, never as a path of its host.
                let absolute = "/odata/\(other)/\(entity)"
                let multipart =
                    "--b_abs\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n"
                    + "GET \(absolute) HTTP/1.1\r\nAccept: application/json\r\n\r\n\r\n--b_abs--\r\n"
                let viaMultipart = try await Self.send(
                    "POST", root + "$batch", authorization: nil,
                    headers: [("Content-Type", "multipart/mixed; boundary=b_abs")], body: multipart)
                #expect(
                    viaMultipart.status < 300 && !Self.text(viaMultipart).contains("HTTP/1.1 200")
                        && !Self.text(viaMultipart).contains("ContactID"), "\(Self.text(viaMultipart))")
                if !v2 {
                    let json = #"{"requests":[{"id":"1","method":"GET","url":"\#(absolute)"}]}"#
                    let viaJSON = try await Self.send(
                        "POST", root + "$batch", authorization: nil, headers: [("Content-Type", "application/json")],
                        body: json)
                    let answer = try JSONValue.parse(viaJSON.body)
                    let status = answer["responses"]?.arrayValue?.first?["status"]?.serializedNumber.flatMap { Int($0) }
                    // Read inside the backend's root (where it is no entity), not at its host's path.
                    #expect(status.map { (400..<500).contains($0) } == true, "\(Self.text(viaJSON))")
                    #expect(!Self.text(viaJSON).contains("ContactID"), "\(Self.text(viaJSON))")
                }
                // `$batch` spelt otherwise, so that a hop that decodes it would read unchecked parts.
                for spelling in ["%24batch", "%24BATCH", "$BATCH"] {
                    let boundary = "b_spelt"
                    let body =
                        "--\(boundary)\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n"
                        + "PATCH ../\(other)/\(entity) HTTP/1.1\r\nContent-Type: application/json\r\n\r\n"
                        + #"{"LastName":"escaped"}"# + "\r\n--\(boundary)--\r\n"
                    let response = try await Self.send(
                        "POST", root + spelling, authorization: nil,
                        headers: [("Content-Type", "multipart/mixed; boundary=\(boundary)")], body: body)
                    #expect(response.status == 400, "\(spelling): \(response.status) \(Self.text(response))")
                }
                // A store build's query.
                let ask =
                    #"{"definingQueries":[{"name":"X","query":"../\#(other)/Contacts"}],"#
                    + #""format":"\#(ServerBuiltStore.format)"}"#
                let build = try await Self.send("POST", root + "$oodata/store", authorization: nil, body: ask)
                #expect(build.status == 400, "\(Self.text(build))")
            }
            let paths = await proxy.paths()
            #expect(!paths.isEmpty)
            #expect(
                paths.allSatisfy { $0.hasPrefix(rootPath) },
                "left the root: \(paths.filter { !$0.hasPrefix(rootPath) })")
            let journal = await setup.backend.service.journal.requests()
            #expect(!journal.contains { $0.hasPrefix("PATCH") }, "\(journal)")
        } catch {
            Issue.record("\(error)")
        }
        for gateway in gateways { await gateway.stop() }
        await proxy.stop()
        await setup.stop()
    }
}
