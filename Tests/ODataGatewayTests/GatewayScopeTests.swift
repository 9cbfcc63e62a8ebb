import Foundation
import ODataCore
@testable import ODataGateway
import ODataServer
import OfflineOData
import Testing

/// Issue 35: one backend read serves every device of a scope; users' scopes are apart. Real
/// PostgreSQL, the reference server without change tracking as the backend, V4 and V2.
@Suite(.serialized) struct GatewayScopeTests {
    static func get(_ url: String, authorization: String? = nil) async throws -> TransportResponse {
        var headers = HTTPHeaders()
        headers["Accept"] = "application/json"
        headers["Prefer"] = "odata.track-changes"
        if let authorization { headers["Authorization"] = authorization }
        // Room for a loaded machine: eight devices on a slow backend outlasted 30 s twice in the
        // full suite (the tests count backend reads, not seconds).
        return try await DefaultTransport.make().send(
            TransportRequest(method: "GET", url: url, headers: headers), timeout: 120)
    }

    /// Reads of `set` the backend began: first pages, not the next links a read follows nor the
    /// `$top=0` probes that check a device's credentials.
    static func backendReads(_ setup: GatewayDeltaTests.Setup, of set: String) async -> Int {
        await setup.backend.service.journal.requests().filter {
            $0.hasPrefix("GET \(set)") && !$0.contains("skiptoken") && !$0.contains("$top=0")
        }.count
    }

    /// Eight devices asking for a shared scope at once, over two instances, while the backend is
    /// slow: one or two backend reads, not eight (a request is answered from another's refresh
    /// only when that one began reading after it arrived). Then, inside the refresh interval,
    /// more devices: no read at all.
    @Test(arguments: [false, true])
    func devicesOfASharedScopeShareBackendReads(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2,
            configure: { configuration in
                configuration.backends[0].sharedQueries = ["Products"]
                configuration.backends[0].queryRefreshInterval = ["Contacts": 600]
            })
        do {
            await setup.backend.service.faults.set([
                FaultRule(method: "GET", urlContains: "Products", delayMilliseconds: 600)
            ])
            await setup.backend.service.journal.clear()
            let roots = setup.gateways.map(\.root.absoluteString)
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<8 {
                    group.addTask {
                        try await Self.get(roots[index % 2] + "Products", authorization: "Bearer device\(index)").status
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses == Array(repeating: 200, count: 8))
            let journal = await setup.backend.service.journal.requests().filter { $0.hasPrefix("GET") }
            let reads = await Self.backendReads(setup, of: "Products")
            #expect((1...2).contains(reads), "\(journal)")
            // /metrics of both instances: one refresh ran, seven requests were answered from it.
            var refreshes = 0
            var shared = 0
            for root in roots {
                let text = String(
                    decoding: try await DefaultTransport.make().send(
                        TransportRequest(method: "GET", url: root + "metrics"), timeout: 10
                    ).body, as: UTF8.self)
                #expect(text.contains("oodata_gateway_backend_requests_total"), "\(text.prefix(400))")
                for line in text.split(separator: "\n") where !line.hasPrefix("#") {
                    let parts = line.split(separator: " ")
                    guard parts.count == 2, let value = Int(parts[1]) else { continue }
                    if parts[0] == "oodata_gateway_refreshes_total" { refreshes += value }
                    if parts[0] == "oodata_gateway_refreshes_shared_total" { shared += value }
                }
            }
            #expect(
                refreshes == reads && refreshes + shared == 8,
                "refreshes \(refreshes), answered from another's refresh \(shared)")
            // A refresh interval: devices inside it are answered without a backend read.
            await setup.backend.service.journal.clear()
            for index in 0..<4 { #expect(try await Self.get(roots[index % 2] + "Contacts").status == 200) }
            #expect(await Self.backendReads(setup, of: "Contacts") == 1)
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// Two users (bearer tokens) have a scope each for the same query; one user's delta link
    /// is refused to the other (410, never the other's rows).
    @Test(arguments: [false, true])
    func usersHaveScopesOfTheirOwn(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, instances: 1)
        do {
            let root = setup.gateways[0].root.absoluteString
            await setup.backend.service.journal.clear()
            let alice = try await Self.get(root + "BusinessPartners", authorization: "Bearer alice")
            let bob = try await Self.get(root + "BusinessPartners", authorization: "Bearer bob")
            #expect(alice.status == 200 && bob.status == 200)
            #expect(await Self.backendReads(setup, of: "BusinessPartners") == 2, "one refresh per user")
            func link(_ response: TransportResponse) throws -> String {
                let json = try JSONValue.parse(response.body)
                return (v2 ? json["d"]?["__delta"]?.stringValue : json["@odata.deltaLink"]?.stringValue) ?? ""
            }
            let aliceLink = try link(alice)
            #expect(aliceLink != (try link(bob)), "each scope gives its own tokens")
            let stolen = try await Self.get(aliceLink, authorization: "Bearer bob")
            // The same query under other credentials: 410 (a rotated token reads again), no rows.
            #expect(stolen.status == 410, "\(String(decoding: stolen.body, as: UTF8.self))")
            #expect(try ODataError.parse(stolen.body).code == "DeltaTokenExpired")
            #expect(try await Self.get(aliceLink, authorization: "Bearer alice").status == 200)
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A delta token older than the retention gets 410, and a device recovers by reading the
    /// scope again: its store equals the backend afterwards.
    @Test(arguments: [false, true])
    func aTokenPastRetentionIs410AndTheDeviceRecovers(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2, instances: 1, configure: { $0.tombstoneRetention = 0.000_001 })
        do {
            let device = try await GatewayDeltaTests.device(setup, gateway: 0, name: "retention")
            let contacts = try await GatewayDeltaTests.truth(setup).filter { !$0.hasPrefix("BP") }
            let victim = try #require(contacts.first?.split(separator: " ").first)
            #expect(try await GatewayDeltaTests.backendSend(setup, "DELETE", "Contacts(\(victim))") < 300)
            // The device's delta token is from before a refresh whose deletions are already purged.
            let root = setup.gateways[0].root.absoluteString
            let first = try await Self.get(root + "Contacts")
            let json = try JSONValue.parse(first.body)
            var next = v2 ? json["d"]?["__next"]?.stringValue : json["@odata.nextLink"]?.stringValue
            var last = json
            while let current = next {
                last = try JSONValue.parse(try await Self.get(current).body)
                next = v2 ? last["d"]?["__next"]?.stringValue : last["@odata.nextLink"]?.stringValue
            }
            let oldLink = try #require(v2 ? last["d"]?["__delta"]?.stringValue : last["@odata.deltaLink"]?.stringValue)
            #expect(
                try await GatewayDeltaTests.backendSend(setup, "PATCH", "BusinessPartners('BP0')", #"{"Phone":"x"}"#)
                    < 300)
            #expect(
                try await GatewayDeltaTests.backendSend(
                    setup, "DELETE", "Contacts(\(contacts[1].split(separator: " ")[0]))") < 300)
            _ = try await Self.get(root + "Contacts")  // a refresh that tombstones and purges at once
            let expired = try await Self.get(oldLink)
            #expect(expired.status == 410, "\(String(decoding: expired.body, as: UTF8.self))")
            try await device.download()
            #expect(try await GatewayDeltaTests.held(device) == (try await GatewayDeltaTests.truth(setup)))
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A scope no device read (nor refreshed) for the scope retention goes with its rows,
    /// removed by the housekeeping after another scope's refresh; a device that still holds
    /// its tokens gets 410, reads again and equals the backend. The device's instance keeps
    /// scopes 30 days; a second instance on the same PostgreSQL, with a retention of 1 s,
    /// does the removing (once: it gets one request), so nothing races the device's reads.
    @Test(arguments: [false, true])
    func unusedScopesGoAndTheirDevicesReadAgain(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, instances: 1)
        var janitor: RunningGateway?
        do {
            let device = try await GatewayDeltaTests.device(setup, gateway: 0, name: "unused")
            let store = setup.gateways[0].gateway.store
            #expect(try await store.scopeCount() == 2)
            var configuration = GatewayConfiguration.refreshingAtEachRead([GatewayBackend(url: setup.backendRoot)])
            configuration.scopeRetention = 4
            let running = try await RunningGateway.start(configuration: configuration, postgresURL: setup.postgres.url)
            janitor = running
            try await Task.sleep(nanoseconds: 5_000_000_000)
            // A small query of its own: a refresh that outlasts the retention would see its own
            // new scope removed (503). 1,500 orders outlasted 1 s on a loaded machine, and so
            // did this query once in CI; 4 s leaves room.
            let other = try await Self.get(
                running.root.absoluteString + "BusinessPartners?$filter=PartnerID%20eq%20'BP1'")
            #expect(other.status == 200)
            #expect(try await store.scopeCount() == 1)
            // The removed scopes' rows went with them (no foreign key does it).
            var orphans: Int64 = -1
            for try await count in try await store.client.query(
                "SELECT count(*) FROM oodata_row WHERE scope_id NOT IN (SELECT id FROM oodata_scope)"
            ).decode(Int64.self) {
                orphans = count
            }
            #expect(orphans == 0)
            #expect(
                try await GatewayDeltaTests.backendSend(setup, "PATCH", "BusinessPartners('BP2')", #"{"Phone":"gc"}"#)
                    < 300)
            await setup.backend.service.journal.clear()
            try await device.download()
            let held = try await GatewayDeltaTests.held(device)
            #expect(held == (try await GatewayDeltaTests.truth(setup)))
            #expect(held.contains { $0.hasSuffix(" gc") })
            #expect(try await store.scopeCount() == 3)
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        if let janitor { await janitor.stop() }
        await setup.stop()
    }

    /// Rows kept in PostgreSQL go only to devices the backend accepts: a wrong password gets the
    /// backend's 401 inside a refresh interval and on a paging or delta link, never rows.
    @Test(arguments: [false, true])
    func aWrongPasswordGetsNoRowsFromPostgreSQL(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2, instances: 1,
            backendOptions: { $0.requiredCredentials = .basic(user: "alice", password: "secret") },
            configure: { $0.refreshInterval = 600 })
        do {
            let root = setup.gateways[0].root.absoluteString
            let good = "Basic " + Data("alice:secret".utf8).base64EncodedString()
            let wrong = "Basic " + Data("alice:wrong".utf8).base64EncodedString()
            let first = try await Self.get(root + "Contacts", authorization: good)
            #expect(first.status == 200)
            let json = try JSONValue.parse(first.body)
            let next = try #require(v2 ? json["d"]?["__next"]?.stringValue : json["@odata.nextLink"]?.stringValue)
            for (url, authorization) in [(root + "Contacts", wrong), (next, wrong), (root + "Contacts", nil)] {
                let refused = try await Self.get(url, authorization: authorization)
                #expect(refused.status == 401, "\(url): \(String(decoding: refused.body, as: UTF8.self))")
                #expect(!String(decoding: refused.body, as: UTF8.self).contains("ContactID"))
            }
            #expect(try await Self.get(next, authorization: good).status == 200)
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}
