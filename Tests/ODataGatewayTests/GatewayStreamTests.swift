import Foundation
import ODataCore
import ODataServer
import OfflineOData
import Testing

@testable import ODataGateway

/// Issue 57: a scope's first read is streamed. Devices page through the chunks the gateway
/// commits while it still reads the backend (each backend page after the first is slowed here),
/// from the instance that reads it (memory) or any other (PostgreSQL), and end with the same
/// rows and a delta link that follows on. Real PostgreSQL, the reference server without change
/// tracking, V2 and V4.
@Suite(.serialized) struct GatewayStreamTests {
    /// One page of a tracked read as a device sees it: rows by key, removed keys, the links.
    struct Page {
        var rows: [(key: String, lastName: String)] = []
        var removed: [String] = []
        var next: String?
        var delta: String?
    }

    static func parse(_ response: TransportResponse, v2: Bool) throws -> Page {
        let json = try JSONValue.parse(response.body)
        var page = Page()
        let items = (v2 ? json["d"]?["results"]?.arrayValue : json["value"]?.arrayValue) ?? []
        for item in items {
            let key = item["ContactID"]?.serializedNumber ?? item["ContactID"]?.stringValue ?? "?"
            if item["@removed"] != nil || item["__deleted"] != nil {
                page.removed.append(key)
            } else {
                page.rows.append((key, item["LastName"]?.stringValue ?? "-"))
            }
        }
        page.next = v2 ? json["d"]?["__next"]?.stringValue : json["@odata.nextLink"]?.stringValue
        page.delta = v2 ? json["d"]?["__delta"]?.stringValue : json["@odata.deltaLink"]?.stringValue
        return page
    }

    static func get(_ url: String, authorization: String? = nil) async throws -> TransportResponse {
        try await GatewayIsolationTests.send("GET", url, authorization: authorization, tracked: true)
    }

    /// The backend's contacts as `ID LastName`, sorted by ID.
    static func truth(_ setup: GatewayDeltaTests.Setup) async throws -> [String] {
        try await GatewayDeltaTests.truth(setup).filter { !$0.hasPrefix("BP") }.map {
            let parts = $0.split(separator: " ")
            return "\(parts[0]) \(parts[1])"
        }
    }

    static func sorted(_ rows: [String: String]) -> [String] {
        rows.sorted { (Int($0.key) ?? 0) < (Int($1.key) ?? 0) }.map { "\($0.key) \($0.value)" }
    }

    static func scope(_ setup: GatewayDeltaTests.Setup, _ query: String) async throws -> Int64 {
        try await setup.gateways[0].gateway.store.scope(
            backend: setup.backendRoot, query: query, user: "", interval: 1e9
        ).id
    }

    /// Slows every backend page after the first (a next link's `$skiptoken`).
    static func slowPages(_ setup: GatewayDeltaTests.Setup, milliseconds: Int) async {
        await setup.backend.service.faults.set([FaultRule(urlContains: "skiptoken", delayMilliseconds: milliseconds)])
    }

    /// The first page comes while the gateway still reads the backend; the next pages come
    /// from both instances in turn (the other one reads PostgreSQL); every contact once, and
    /// the delta link follows on with a change. Gateway pages of 5 rows (backend pages of 7: read
    /// from PostgreSQL) and of 50 (whole chunks from memory). A device's open streams the
    /// partners' scope and equals the backend.
    @Test(arguments: [(false, 5), (true, 5), (false, 50), (true, 50)])
    func aFirstReadIsServedWhileTheBackendIsStillRead(v2: Bool, pageSize: Int) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, scale: 30, configure: { $0.pageSize = pageSize })
        do {
            // The backend's second page takes 1.5 s: the state is read while it waits.
            await setup.backend.service.faults.set([
                FaultRule(urlContains: "skiptoken", delayMilliseconds: 1500, times: 1),
                FaultRule(urlContains: "skiptoken", delayMilliseconds: 100),
            ])
            let roots = setup.gateways.map(\.root.absoluteString)
            let first = try await Self.get(roots[0] + "Contacts")
            #expect(first.status == 200, "\(GatewayIsolationTests.text(first))")
            let state = try await setup.gateways[0].gateway.store.streamState(
                scope: try await Self.scope(setup, "Contacts"))
            #expect(state?.published == 0, "the first page came before the backend's last one")
            #expect(state?.generation != nil)
            var page = try Self.parse(first, v2: v2)
            #expect(page.next?.contains("gs.") == true, "\(page.next ?? "no next link")")
            var keys = page.rows.map(\.key)
            var rows = Dictionary(page.rows, uniquingKeysWith: { _, b in b })
            var pages = 1
            while let next = page.next {
                let url = next.replacingOccurrences(of: roots[0], with: roots[pages % 2])
                let response = try await Self.get(url)
                #expect(response.status == 200, "\(GatewayIsolationTests.text(response))")
                page = try Self.parse(response, v2: v2)
                keys += page.rows.map(\.key)
                for row in page.rows { rows[row.key] = row.lastName }
                pages += 1
                guard pages < 200 else { break }
            }
            #expect(keys.count == Set(keys).count, "each contact once")
            #expect(Self.sorted(rows) == (try await Self.truth(setup)))
            let delta = try #require(page.delta)
            #expect(delta.contains("gd."), "\(delta)")
            // The delta link from the stream's end follows on.
            let changed = try #require(rows.keys.compactMap { Int($0) }.max())
            #expect(
                try await GatewayDeltaTests.backendSend(
                    setup, "PATCH", "Contacts(\(changed))", #"{"LastName":"streamed"}"#) < 300)
            let answer = try await Self.get(delta.replacingOccurrences(of: roots[0], with: roots[1]))
            #expect(answer.status == 200)
            let changes = try Self.parse(answer, v2: v2)
            #expect(changes.rows.map(\.key) == ["\(changed)"])
            #expect(changes.rows.first?.lastName == "streamed")
            // A device's open: its partners' scope is read for the first time, streamed.
            let device = try await GatewayDeltaTests.device(setup, gateway: 1, name: "streamed")
            #expect(try await GatewayDeltaTests.held(device) == (try await GatewayDeltaTests.truth(setup)))
            let partners = try await setup.gateways[0].gateway.store.streamState(
                scope: try await Self.scope(setup, "BusinessPartners"))
            #expect(partners?.generation != nil && partners?.published != 0)
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A stream's next link is the user's alone: another user and an anonymous device get no
    /// rows from it; the user goes on and gets their rows, and the other user theirs.
    @Test(arguments: [false, true])
    func anotherUserGetsNoRowsOfAStream(v2: Bool) async throws {
        // Each user reads two contacts: pages of 1.
        let setup = try await GatewayIsolationTests.start(v2: v2) { $0.pageSize = 1 }
        do {
            await Self.slowPages(setup, milliseconds: 150)
            let root = setup.gateways[0].root.absoluteString
            let first = try await Self.get(root + "Contacts", authorization: GatewayIsolationTests.alice)
            #expect(first.status == 200, "\(GatewayIsolationTests.text(first))")
            var page = try Self.parse(first, v2: v2)
            let link = try #require(page.next)
            #expect(link.contains("gs."))
            for other in [GatewayIsolationTests.bob, GatewayIsolationTests.basic("alice", "guess"), nil] {
                let stolen = try await Self.get(link, authorization: other)
                #expect(stolen.status >= 400, "\(other ?? "anonymous"): \(GatewayIsolationTests.text(stolen))")
                #expect(
                    (try? Self.parse(stolen, v2: v2).rows.isEmpty) ?? true, "\(GatewayIsolationTests.text(stolen))")
            }
            var rows: [String] = page.rows.map { "\($0.key) \($0.lastName)" }
            while let next = page.next {
                let response = try await Self.get(next, authorization: GatewayIsolationTests.alice)
                #expect(response.status == 200)
                page = try Self.parse(response, v2: v2)
                rows += page.rows.map { "\($0.key) \($0.lastName)" }
            }
            let aliceRows = try await GatewayIsolationTests.backendContacts(setup, GatewayIsolationTests.alice)
            #expect(rows.sorted() == aliceRows.sorted())
            let bob = try await GatewayIsolationTests.read(
                root + "Contacts", authorization: GatewayIsolationTests.bob, v2: v2)
            let bobRows = bob.rows.map {
                "\($0["ContactID"]?.serializedNumber ?? $0["ContactID"]?.stringValue ?? "?") "
                    + ($0["LastName"]?.stringValue ?? "?")
            }
            let bobTruth = try await GatewayIsolationTests.backendContacts(setup, GatewayIsolationTests.bob)
            #expect(bobRows.sorted() == bobTruth.sorted())
            #expect(Set(bobRows) != Set(aliceRows), "the two users see different contacts")
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// With a refresh target (data up to 10 minutes old), a device arriving while another's
    /// first read streams joins that stream at another instance: one backend read for both,
    /// and both hold every contact.
    @Test(arguments: [false, true])
    func aDeviceArrivingDuringAStreamJoinsIt(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, scale: 30, configure: { $0.refreshInterval = 600 })
        do {
            await setup.backend.service.faults.set([
                FaultRule(urlContains: "skiptoken", delayMilliseconds: 1500, times: 1),
                FaultRule(urlContains: "skiptoken", delayMilliseconds: 50),
            ])
            await setup.backend.service.journal.clear()
            let roots = setup.gateways.map(\.root.absoluteString)
            let first = try Self.parse(try await Self.get(roots[0] + "Contacts"), v2: v2)
            let joined = try Self.parse(try await Self.get(roots[1] + "Contacts"), v2: v2)
            let token = { (link: String?) in link.flatMap { $0.range(of: "gs.") }.map { link?[$0.lowerBound...] } }
            let firstToken = try #require(token(first.next) ?? nil)
            let joinedToken = try #require(token(joined.next) ?? nil)
            // The same scope and generation: `gs.<scope>.<generation>.`.
            #expect(firstToken.split(separator: ".").prefix(3) == joinedToken.split(separator: ".").prefix(3))
            for (start, root) in [(first, roots[0]), (joined, roots[1])] {
                var page = start
                var rows = Dictionary(page.rows, uniquingKeysWith: { _, b in b })
                while let next = page.next {
                    #expect(next.hasPrefix(root))
                    page = try Self.parse(try await Self.get(next), v2: v2)
                    for row in page.rows { rows[row.key] = row.lastName }
                }
                #expect(page.delta != nil)
                #expect(Self.sorted(rows) == (try await Self.truth(setup)))
            }
            // The gateway's reads (the test's own reads of the backend are sorted).
            let reads = await setup.backend.service.journal.requests().filter {
                $0.hasPrefix("GET Contacts") && !$0.contains("skiptoken") && !$0.contains("$top=0")
                    && !$0.contains("orderby")
            }
            #expect(reads.count == 1, "one backend read for both: \(reads)")
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A backend that gives one key on two pages (its first page holds a contact that a later
    /// page holds again, changed): the stream keeps the later one, once.
    @Test(arguments: [false, true])
    func aKeyOnTwoPagesIsKeptOnceAsTheLaterPageHasIt(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, scale: 10)
        do {
            var headers = HTTPHeaders()
            headers["Accept"] = "application/json"
            let backendRoot = setup.backendRoot
            let sample = try await DefaultTransport.make().send(
                TransportRequest(
                    method: "GET", url: backendRoot + "Contacts?$orderby=ContactID&$top=1", headers: headers),
                timeout: 30)
            let json = try JSONValue.parse(sample.body)
            guard case .object(var members)? = (v2 ? json["d"]?["results"] : json["value"])?.arrayValue?.first else {
                throw PostgresServer.Failure(description: "no contact on the backend")
            }
            for index in members.indices where members[index].name == "LastName" {
                members[index].value = .string("fake")
            }
            let row = JSONValue.object(members).serialized
            let next = JSONValue.string(backendRoot + "Contacts?$orderby=ContactID").serialized
            let body =
                v2
                ? #"{"d":{"results":[\#(row)],"__next":\#(next)}}"# : #"{"value":[\#(row)],"@odata.nextLink":\#(next)}"#
            await setup.backend.service.faults.set([FaultRule(urlContains: "orderby=LastName", answer: body)])
            let root = setup.gateways[0].root.absoluteString
            var page = Page(next: root + "Contacts?$orderby=LastName")
            var keys: [String] = []
            var rows: [String: String] = [:]
            while let url = page.next {
                let response = try await Self.get(url)
                #expect(response.status == 200, "\(GatewayIsolationTests.text(response))")
                page = try Self.parse(response, v2: v2)
                keys += page.rows.map(\.key)
                for row in page.rows { rows[row.key] = row.lastName }
            }
            #expect(page.delta != nil)
            #expect(Self.sorted(rows) == (try await Self.truth(setup)))
            #expect(!rows.values.contains("fake"))
            // The repeated contact comes once or twice (before and after its second page was
            // read); every other contact once.
            #expect(keys.count - Set(keys).count <= 1)
            let state = try await setup.gateways[0].gateway.store.streamState(
                scope: try await Self.scope(setup, "Contacts?$orderby=LastName"))
            #expect(state?.generation != nil && state?.published != 0, "the read was streamed")
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A refresh after the stream changes and deletes contacts the device has not read yet,
    /// while the device still pages through the stream: those rows are no longer in the
    /// stream's pages, and the delta link from its end brings the change and the deletion.
    @Test(arguments: [false, true])
    func aRefreshDuringTheDevicesPagingReachesItByTheDelta(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, scale: 30)
        do {
            await Self.slowPages(setup, milliseconds: 60)
            let roots = setup.gateways.map(\.root.absoluteString)
            var page = try Self.parse(try await Self.get(roots[0] + "Contacts"), v2: v2)
            var rows = Dictionary(page.rows, uniquingKeysWith: { _, b in b })
            let scope = try await Self.scope(setup, "Contacts")
            let store = setup.gateways[0].gateway.store
            for _ in 0..<400 where (try await store.streamState(scope: scope))?.published == 0 {
                try await Task.sleep(for: .milliseconds(25))
            }
            #expect((try await store.streamState(scope: scope))?.published != 0)
            let truth = try await Self.truth(setup)
            let last = try #require(truth.last.map { String($0.prefix { $0 != " " }) })
            let gone = try #require(truth.dropLast().last.map { String($0.prefix { $0 != " " }) })
            #expect(rows[last] == nil && rows[gone] == nil, "the last contacts are on later pages")
            #expect(
                try await GatewayDeltaTests.backendSend(
                    setup, "PATCH", "Contacts(\(last))", #"{"LastName":"later"}"#) < 300)
            #expect(
                try await GatewayDeltaTests.backendSend(setup, "DELETE", "Contacts(\(gone))") < 300)
            await setup.backend.service.faults.set([])
            // Another device's read refreshes the published scope.
            let other = try await Self.get(roots[1] + "Contacts")
            #expect(other.status == 200)
            while let next = page.next {
                page = try Self.parse(try await Self.get(next), v2: v2)
                for row in page.rows { rows[row.key] = row.lastName }
            }
            #expect(rows[last] != "later", "the stream's pages hold what it read")
            var delta = page.delta
            while let link = delta {
                let changes = try Self.parse(try await Self.get(link), v2: v2)
                for row in changes.rows { rows[row.key] = row.lastName }
                for key in changes.removed { rows[key] = nil }
                delta = changes.next
            }
            #expect(Self.sorted(rows) == (try await Self.truth(setup)))
            #expect(rows[last] == "later" && rows[gone] == nil)
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// `kill -9` of the gateway process that streams a first read: the device's next page at
    /// another instance is an error (never a short read), a new first read there streams again
    /// from nothing, and the old link then gets 410.
    @Test(arguments: [false, true])
    func aStreamCutByKillingItsGatewayIsReadAgain(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, instances: 1, scale: 30)
        let port = PostgresServer.freePort()
        var process: Process?
        do {
            // The backend's second page takes 3 s: the kill lands while the stream waits for it.
            await setup.backend.service.faults.set([
                FaultRule(urlContains: "skiptoken", delayMilliseconds: 3000, times: 1),
                FaultRule(urlContains: "skiptoken", delayMilliseconds: 300),
            ])
            let spawned = try await GatewayCrashTests.spawn(
                backend: setup.backendRoot, postgres: setup.postgres.url, port: port)
            process = spawned
            let killed = "http://127.0.0.1:\(port)/"
            let first = try await Self.get(killed + "Contacts")
            #expect(first.status == 200, "\(GatewayIsolationTests.text(first))")
            let link = try #require(try Self.parse(first, v2: v2).next)
            #expect(link.contains("gs."))
            GatewayCrashTests.killHard(spawned)
            process = nil
            let root = setup.gateways[0].root.absoluteString
            let moved = link.replacingOccurrences(of: killed, with: root)
            var cut = try await Self.get(moved)
            for _ in 0..<100 where cut.status == 200 {
                // Pages the killed process committed before it died may still come.
                let page = try Self.parse(cut, v2: v2)
                #expect(page.delta == nil, "no delta link from a stream that did not end")
                guard let next = page.next else { break }
                cut = try await Self.get(next)
            }
            #expect(cut.status == 502, "\(GatewayIsolationTests.text(cut))")
            await setup.backend.service.faults.set([])
            let device = try await GatewayDeltaTests.device(setup, gateway: 0, name: "after-kill")
            #expect(try await GatewayDeltaTests.held(device) == (try await GatewayDeltaTests.truth(setup)))
            await device.close()
            let stale = try await Self.get(moved)
            #expect(stale.status == 410, "\(GatewayIsolationTests.text(stale))")
        } catch {
            Issue.record("\(error)")
        }
        if let process { GatewayCrashTests.killHard(process) }
        await setup.stop()
    }
}
