import Foundation
import ODataCore
import ODataServer
import OfflineOData
import Testing

@testable import ODataGateway

/// Issue 54: uploads through the gateway are written through into the scopes before the device
/// is answered, scopes are refreshed once per refresh target off the request path, and a device
/// reads its own writes whatever the target. Real PostgreSQL, gateway instances and providers.
@Suite(.serialized) struct GatewayWriteThroughTests {
    // MARK: The plan, without PostgreSQL or HTTP

    static let root = "http://backend.test/odata/v4/"
    static let gatewayRoot = "http://gateway.test/"

    static func plan(_ applied: [AppliedRequest]) throws -> WriteThroughPlan {
        WriteThroughPlan(applied: applied, gatewayRoot: gatewayRoot, backendRoot: root, model: try SalesSample.model())
    }

    @Test func thePlanNamesEachEntityAnUploadChanged() throws {
        let plan = try Self.plan([
            AppliedRequest(method: "PATCH", url: "BusinessPartners('BP1')", status: 204),
            AppliedRequest(method: "PUT", url: Self.gatewayRoot + "Contacts(7)/LastName", status: 204),
            AppliedRequest(
                method: "POST", url: "Contacts", status: 201, location: Self.root + "Contacts(42)", contentID: "1"),
            AppliedRequest(method: "PATCH", url: "$1", status: 204),
            AppliedRequest(method: "DELETE", url: "Contacts(9)", status: 204),
            AppliedRequest(method: "PATCH", url: "Contacts(10)", status: 412),
            AppliedRequest(method: "PATCH", url: "SalesOrderItems(OrderID='3',ItemPosition=2)", status: 204),
        ])
        #expect(!plan.unknown)
        let named = plan.entities.map { entity in
            entity.set + "(" + entity.key.map { Literal.payloadText($0.value) }.joined(separator: ",") + ")"
                + (entity.deleted ? " deleted" : "")
        }
        // The refused request (412) changed nothing; `$1` is the create's entity.
        #expect(
            named == [
                "BusinessPartners(BP1)", "Contacts(7)", "Contacts(42)", "Contacts(9) deleted",
                "SalesOrderItems(3,2)",
            ])
        // A row's key in either JSON spelling (V2 writes an Int64 as a string).
        try #require(plan.entities.count == 5)
        #expect(plan.entities[1].rowKeys == [#""7""#, "7"])
        #expect(plan.entities[4].rowKeys == [#""3","2""#, #""3",2"#])
        #expect(plan.entities[0].rowKeys == [#""BP1""#])
    }

    @Test func changesThePlanCannotNameMakeScopesDue() throws {
        for request in [
            AppliedRequest(method: "POST", url: "Contacts", status: 201),
            AppliedRequest(method: "POST", url: "$batch", status: 200),
            AppliedRequest(method: "PUT", url: "Contacts(7)/Partner/$ref", status: 204),
            AppliedRequest(method: "POST", url: "SomeAction", status: 204),
        ] {
            let plan = try Self.plan([request])
            #expect(plan.unknown, "\(request)")
            let actions = plan.actions(
                for: [GatewayStore.ScopeEntry(id: 1, query: "Products", user: "")], uploader: "",
                isShared: { _ in false })
            #expect(actions == [.due(scope: 1)], "\(request)")
        }
        #expect(try Self.plan([AppliedRequest(method: "GET", url: "Contacts", status: 404)]).isEmpty)
    }

    @Test func eachScopeGetsTheEntitiesOfItsSetAndExpandingScopesBecomeDue() throws {
        let plan = try Self.plan([
            AppliedRequest(method: "PATCH", url: "Contacts(7)", status: 204),
            AppliedRequest(method: "DELETE", url: "Contacts(8)", status: 204),
        ])
        let scopes = [
            GatewayStore.ScopeEntry(id: 1, query: "Contacts", user: "u"),
            GatewayStore.ScopeEntry(id: 2, query: "Contacts?$filter=LastName%20ne%20'X'", user: ""),
            GatewayStore.ScopeEntry(id: 3, query: "BusinessPartners?$expand=Contacts", user: "u"),
            GatewayStore.ScopeEntry(id: 4, query: "Products", user: "u"),
            // An anonymous device's scope: never read with another user's credentials.
            GatewayStore.ScopeEntry(id: 5, query: "Contacts", user: ""),
            GatewayStore.ScopeEntry(id: 6, query: "Contacts?$expand=Partner", user: "u"),
        ]
        let actions = plan.actions(for: scopes, uploader: "u", isShared: { $0.hasPrefix("Contacts?$filter") })
        #expect(
            actions == [
                .write(scope: 1, set: "Contacts", entities: plan.entities),
                .write(scope: 2, set: "Contacts", entities: plan.entities),
                .due(scope: 3), .due(scope: 5),
                // Its own rows written, and due for the nested ones.
                .write(scope: 6, set: "Contacts", entities: plan.entities), .due(scope: 6),
            ])
        // The anonymous uploader's own anonymous scope is written.
        #expect(
            plan.actions(for: [scopes[4]], uploader: "", isShared: { _ in false })
                == [.write(scope: 5, set: "Contacts", entities: plan.entities)])
        // The read: the scope's own filter as it was sent, and the keys, written by the literal
        // writer.
        let target = try #require(
            WriteThroughPlan.target(query: scopes[1].query, entities: plan.entities, version: .v4))
        #expect(
            target == "Contacts?$filter=(LastName%20ne%20'X')%20and%20(ContactID%20eq%207%20or%20ContactID%20eq%208)")
        // A `+` in the scope's filter stays a `+` (a space to many backends, as in its refresh).
        let plus = try #require(
            WriteThroughPlan.target(
                query: "Contacts?$filter=LastName%20eq%20'a+b'", entities: [plan.entities[0]], version: .v4))
        #expect(plus == "Contacts?$filter=(LastName%20eq%20'a+b')%20and%20(ContactID%20eq%207)")
        let quoted = try Self.plan([AppliedRequest(method: "PATCH", url: "BusinessPartners('a''b')", status: 204)])
        let text = try #require(
            WriteThroughPlan.target(
                query: "BusinessPartners?$top=5&$select=Phone", entities: quoted.entities, version: .v4))
        #expect(text.removingPercentEncoding == "BusinessPartners?$select=Phone&$filter=PartnerID eq 'a''b'")
    }

    /// Scopes are named by their query with only the spellings that mean the same made one:
    /// `+` and `%2B` (a space and a plus to many backends) are two queries, two scopes.
    @Test func scopeNamesJoinOnlySpellingsThatMeanTheSame() throws {
        func name(_ target: String) throws -> String { try TrackedQuery(target: target).canonical }
        #expect(try name("Contacts?$filter=LastName eq 'a+b'") != name("Contacts?$filter=LastName eq 'a%2Bb'"))
        #expect(try name("Contacts?$filter=LastName eq 'a%2bb'") == name("Contacts?$filter=LastName eq 'a%2Bb'"))
        #expect(try name("Contacts?$filter=LastName%20eq%20'~A'") == name("Contacts?$filter=LastName eq '%7e%41'"))
        #expect(try name("Contacts?$select=LastName&$top=5") == name("Contacts?$top=5&$select=LastName"))
        #expect(try name("Contacts?$filter=LastName eq 'a+b'") == "Contacts?$filter=LastName%20eq%20'a+b'")
        #expect(try name("Contacts?$filter=LastName eq 'ä'") == "Contacts?$filter=LastName%20eq%20'%C3%A4'")
    }

    @Test func theRefresherRunsAheadOfTheTarget() {
        #expect(RefreshSchedule.isDue(age: nil, marked: false, interval: 60))
        #expect(!RefreshSchedule.isDue(age: 47, marked: false, interval: 60))
        #expect(RefreshSchedule.isDue(age: 48, marked: false, interval: 60))
        #expect(RefreshSchedule.isDue(age: 1, marked: true, interval: 60))
        // A target of 0 refreshes at each download: the refresher leaves such scopes alone.
        #expect(!RefreshSchedule.isDue(age: 500, marked: true, interval: 0))
    }

    /// A deadline counts PostgreSQL's time, not the time this process could not run: a timer
    /// that woke late (0.8 s) waits as long again, a timer on time ends at once, and one that
    /// always wakes late ends after three more waits.
    @Test(arguments: [([800, 0], 2), ([0], 1), ([100], 1), ([900, 900, 900, 900, 900], 4)])
    func aDeadlineWaitsAgainWhenItsTimerWokeLate(lateness: [Int], sleeps: Int) async {
        actor Wakes {
            var asked: [ContinuousClock.Instant] = []
            func note(_ wake: ContinuousClock.Instant) -> Int {
                asked.append(wake)
                return asked.count - 1
            }
        }
        let wakes = Wakes()
        let ended = await DeadlineClient.waitOut(0.2) { wake in
            let round = await wakes.note(wake)
            return wake + .milliseconds(lateness[min(round, lateness.count - 1)])
        }
        #expect(ended)
        let asked = await wakes.asked
        #expect(asked.count == sleeps)
        for (index, wake) in asked.enumerated().dropFirst() {
            // Woke `late` after the last wake asked for, then waits `late` more.
            let late = Duration.milliseconds(lateness[index - 1])
            #expect(wake == asked[index - 1] + late + late)
        }
        // Cancelled while it sleeps: not a deadline that passed.
        let cancelled = await DeadlineClient.waitOut(0.2) { _ in throw CancellationError() }
        #expect(!cancelled)
    }

    @Test func anInvalidPortIsRefused() async {
        for port in [-1, 65536, 99999] {
            do {
                _ = try await RunningGateway.start(
                    configuration: GatewayConfiguration(backends: [GatewayBackend(url: Self.root)]),
                    postgresURL: "postgres://postgres@127.0.0.1:9/x", port: port)
                Issue.record("port \(port) was taken")
            } catch let error as GatewayError {
                // Refused for the port itself, before PostgreSQL is tried.
                #expect(error.code == "Configuration" && error.message.contains("\(port) is not a TCP port"))
            } catch {
                Issue.record("\(error)")
            }
        }
    }

    /// A PostgreSQL that cannot be reached at start fails the start within seconds, naming
    /// the server and the database.
    @Test func anUnreachablePostgreSQLFailsTheStartNamingIt() async throws {
        let started = ContinuousClock.now
        var configuration = GatewayConfiguration(backends: [GatewayBackend(url: Self.root)])
        configuration.postgresTimeout = 3
        do {
            _ = try await RunningGateway.start(
                configuration: configuration, postgresURL: "postgres://postgres@127.0.0.1:9/inventory")
            Issue.record("the gateway started")
        } catch let error as GatewayError {
            #expect(error.message.contains("127.0.0.1:9") && error.message.contains("database inventory"), "\(error)")
            // Nothing listens on port 9: refused at once (issue 56), or, where a firewall drops
            // the connection, no answer within the deadline.
            #expect(
                error.message.contains("connection refused") || error.message.contains("did not answer within 3"),
                "\(error)")
        }
        #expect(ContinuousClock.now - started < .seconds(20))
    }

    /// Requests in flight while PostgreSQL is down (stopped `-m immediate`, then `-m fast`)
    /// are answered within the deadline (503 with `Retry-After`); once it is back, the same
    /// gateway answers again with new connections.
    @Test(arguments: ["immediate", "fast"])
    func requestsWhilePostgreSQLIsDownAreAnswered(mode: String) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: false, instances: 1, configure: { $0.postgresTimeout = 3 })
        do {
            let device = try await GatewayDeltaTests.device(setup, gateway: 0, name: "pg-\(mode)")
            let url = setup.gateways[0].root.absoluteString + "Contacts"
            var headers = HTTPHeaders()
            headers["Prefer"] = "odata.track-changes"
            headers["Accept"] = "application/json"
            let sent = headers
            try await setup.postgres.halt(mode: mode)
            let started = ContinuousClock.now
            let answers = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<4 {
                    group.addTask {
                        let answer = try await DefaultTransport.make().send(
                            TransportRequest(method: "GET", url: url, headers: sent), timeout: 60)
                        #expect(answer.headers["Retry-After"] != nil || answer.status != 503)
                        return answer.status
                    }
                }
                var statuses: [Int] = []
                for try await status in group { statuses.append(status) }
                return statuses
            }
            #expect(answers == [503, 503, 503, 503])
            #expect(ContinuousClock.now - started < .seconds(30))
            try await setup.postgres.startAgain()
            var status = 0
            for _ in 0..<20 where status != 200 {
                status = try await DefaultTransport.make().send(
                    TransportRequest(method: "GET", url: url, headers: headers), timeout: 60
                ).status
                if status != 200 { try await Task.sleep(nanoseconds: 500_000_000) }
            }
            #expect(status == 200)
            try await device.download()
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    // MARK: Through real gateways

    /// Backend reads of whole entity sets (refreshes), as the backend's journal has them:
    /// neither the credential probes (`$top=0`), nor the reads narrowed by key.
    static func refreshReads(_ setup: GatewayDeltaTests.Setup) async -> [String] {
        await setup.backend.service.journal.requests().filter { line in
            (line.hasPrefix("GET BusinessPartners") || line.hasPrefix("GET Contacts")) && !line.contains("top=0")
                && !line.contains("filter") && !line.contains("(") && !line.contains("orderby")
        }
    }

    static func start(v2: Bool, instances: Int = 2, interval: Double) async throws -> GatewayDeltaTests.Setup {
        try await GatewayDeltaTests.start(
            v2: v2, instances: instances,
            backendOptions: {
                // A backend without ETags or repeatability: the gateway's ETags and records.
                $0.sendsETags = false
                $0.honorsRepeatableRequests = false
            }, configure: { $0.refreshInterval = interval })
    }

    /// Within a long refresh target, a device's own changes (an update, a create, a delete) are
    /// in its next download with their new ETags, its next change of them is accepted (no false
    /// 412), and a device on another instance sees them: without a refresh.
    @Test(arguments: [false, true])
    func aDeviceReadsItsOwnWritesWithinTheRefreshTarget(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2, interval: 600)
        do {
            let writer = try await GatewayDeltaTests.device(setup, gateway: 0, name: "writer")
            let reader = try await GatewayDeltaTests.device(setup, gateway: 1, name: "reader")
            let contacts = try await writer.readEntities("Contacts?$orderby=ContactID").compactMap {
                $0.int64("ContactID")
            }
            try #require(contacts.count >= 2)
            await setup.backend.service.journal.clear()
            for round in 1...3 {
                _ = try await writer.execute(
                    method: "PATCH", url: "BusinessPartners('BP1')",
                    body: GatewayUploadTests.body(#"{"Phone":"own \#(round)"}"#))
                try await writer.upload()
                try await writer.download()
                #expect(try await writer.readEntities("ErrorArchive").isEmpty, "round \(round)")
                let phone = try await writer.readEntities("BusinessPartners('BP1')").first?.string("Phone")
                #expect(phone == "own \(round)", "round \(round)")
            }
            _ = try await writer.execute(
                method: "POST", url: "Contacts",
                body: GatewayUploadTests.body(#"{"ContactID":9001,"PartnerID":"BP1","LastName":"New"}"#))
            _ = try await writer.execute(method: "DELETE", url: "Contacts(\(contacts[0]))")
            _ = try await writer.execute(
                method: "PATCH", url: "Contacts(\(contacts[1]))", body: GatewayUploadTests.body(#"{"LastName":"Own"}"#))
            try await writer.upload()
            try await writer.download()
            try await reader.download()
            #expect(try await writer.readEntities("ErrorArchive").isEmpty)
            let truth = try await GatewayDeltaTests.truth(setup)
            #expect(try await GatewayDeltaTests.held(writer) == truth)
            #expect(try await GatewayDeltaTests.held(reader) == truth)
            #expect(truth.contains("9001 New BP1") && truth.contains { $0.hasPrefix("\(contacts[1]) Own") })
            // No refresh: every row came from write-through.
            let reads = await Self.refreshReads(setup)
            #expect(reads.isEmpty, "\(reads)")
            await writer.close()
            await reader.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// An update that moves an entity out of a device's filtered defining query removes it
    /// from the device at its next download; a change of it before then is checked by key,
    /// not refused as gone.
    @Test(arguments: [false, true])
    func anEntityThatLeavesAFilteredQueryLeavesTheDevice(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2, instances: 1, interval: 600)
        do {
            var parameters = OfflineODataParameters()
            parameters.storePath = setup.folder
            parameters.storeName = "filtered"
            let device = OfflineODataProvider(serviceRoot: setup.gateways[0].root, parameters: parameters)
            try await device.add(
                definingQuery: OfflineODataDefiningQuery(name: "kept", query: "Contacts?$filter=LastName ne 'Gone'"))
            try await device.open()
            let id = try #require(
                try await device.readEntities("Contacts?$orderby=ContactID").first?.int64("ContactID"))
            _ = try await device.execute(
                method: "PATCH", url: "Contacts(\(id))", body: GatewayUploadTests.body(#"{"LastName":"Gone"}"#))
            try await device.upload()
            _ = try await device.execute(
                method: "PATCH", url: "Contacts(\(id))", body: GatewayUploadTests.body(#"{"FirstName":"Still"}"#))
            try await device.upload()
            #expect(try await device.readEntities("ErrorArchive").isEmpty)
            try await device.download()
            #expect(try await device.readEntities("Contacts(\(id))").isEmpty)
            let remaining = try await device.readEntities("Contacts").count
            let expected = try await GatewayUploadTests.backendRows(setup, "Contacts?$filter=LastName ne 'Gone'").count
            #expect(remaining == expected)
            #expect(
                try await GatewayUploadTests.backendEntity(setup, "Contacts(\(id))")["FirstName"]?.stringValue
                    == "Still")
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A device's `$metadata` check at each download is answered by the gateway (a 304 to the
    /// ETag it gave), without a backend request; credentials the backend never accepted, and
    /// none at all, get the backend's answer instead.
    @Test(arguments: [false, true])
    func metadataChecksAreAnsweredByTheGateway(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2, instances: 1,
            backendOptions: { $0.requiredCredentials = .basic(user: "alice", password: "secret") },
            configure: {
                $0.refreshInterval = 600
                $0.metadataCheckInterval = 600
            })
        do {
            let good = "Basic " + Data("alice:secret".utf8).base64EncodedString()
            var parameters = OfflineODataParameters()
            parameters.storePath = setup.folder
            parameters.storeName = "metadata"
            parameters.customHeaders["Authorization"] = good
            let device = OfflineODataProvider(serviceRoot: setup.gateways[0].root, parameters: parameters)
            try await device.add(definingQuery: OfflineODataDefiningQuery(name: "c", query: "Contacts"))
            try await device.open()
            try await device.download()
            await setup.backend.service.journal.clear()
            for _ in 0..<3 { try await device.download() }
            let lines = await setup.backend.service.journal.requests()
            #expect(!lines.contains { $0.contains("$metadata") }, "\(lines)")
            let url = setup.gateways[0].root.absoluteString + "$metadata"
            let served = try await GatewayScopeTests.get(url, authorization: good)
            #expect(served.status == 200)
            let etag = try #require(served.headers["ETag"])
            #expect(String(decoding: served.body, as: UTF8.self).contains("EntityType"))
            var headers = HTTPHeaders()
            headers["Authorization"] = good
            headers["If-None-Match"] = etag
            let again = try await DefaultTransport.make().send(
                TransportRequest(method: "GET", url: url, headers: headers), timeout: 30)
            #expect(again.status == 304)
            for authorization in ["Basic " + Data("alice:wrong".utf8).base64EncodedString(), nil] {
                let refused = try await GatewayScopeTests.get(url, authorization: authorization)
                #expect(refused.status == 401, "\(authorization ?? "anonymous")")
                #expect(!String(decoding: refused.body, as: UTF8.self).contains("EntityType"))
            }
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A refresh the backend refuses (4xx) reaches the device as the backend gave it; a page
    /// that is no page of entities is 502 `BackendPayload`, not a 5xx of the gateway's own.
    @Test(arguments: [false, true])
    func aRefreshKeepsTheBackendsWordsAndABadPageIs502(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, instances: 1)
        do {
            let url = setup.gateways[0].root.absoluteString + "Contacts"
            var headers = HTTPHeaders()
            headers["Prefer"] = "odata.track-changes"
            headers["Accept"] = "application/json"
            let sent = headers
            func get() async throws -> TransportResponse {
                try await DefaultTransport.make().send(
                    TransportRequest(method: "GET", url: url, headers: sent), timeout: 30)
            }
            #expect(try await get().status == 200)
            await setup.backend.service.faults.set([
                FaultRule(
                    method: "GET", urlContains: "Contacts", status: 400, code: "BadFilter",
                    message: "Property Nme is not defined", times: 1)
            ])
            let refused = try await get()
            #expect(refused.status == 400)
            #expect(String(decoding: refused.body, as: UTF8.self).contains("Nme"))
            await setup.backend.service.faults.set([
                FaultRule(method: "GET", urlContains: "Contacts", times: 1, answer: #"{"value":5,"d":5}"#)
            ])
            let bad = try await get()
            #expect(bad.status == 502)
            #expect(String(decoding: bad.body, as: UTF8.self).contains("BackendPayload"))
            // A next link to another host is not followed: it would carry the credentials there.
            let away =
                v2
                ? #"{"d":{"results":[],"__next":"http://127.0.0.2:9/steal"}}"#
                : #"{"value":[],"@odata.nextLink":"http://127.0.0.2:9/steal"}"#
            await setup.backend.service.faults.set([
                FaultRule(method: "GET", urlContains: "Contacts", times: 1, answer: away)
            ])
            let leaving = try await get()
            #expect(leaving.status == 502)
            #expect(String(decoding: leaving.body, as: UTF8.self).contains("leaves its service root"))
            #expect(try await get().status == 200)
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// Devices within a refresh target share one refresh however many ask, on any instance; and
    /// the refresher refreshes a scope when its target runs out, with no device waiting.
    @Test(arguments: [false, true])
    func backendReadsFollowScopesNotDevices(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2, interval: 600)
        do {
            let first = try await GatewayDeltaTests.device(setup, gateway: 0, name: "first")
            let one = await Self.refreshReads(setup).count
            #expect(one > 0)
            var devices = [first]
            for index in 1..<6 {
                devices.append(try await GatewayDeltaTests.device(setup, gateway: index % 2, name: "d\(index)"))
            }
            for device in devices { try await device.download() }
            // Six devices, two instances, seven downloads each: the one refresh of each scope.
            #expect(await Self.refreshReads(setup).count == one)
            for device in devices { await device.close() }
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    @Test(arguments: [false, true])
    func theRefresherRefreshesWhenTheTargetRunsOut(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2, instances: 2, interval: 3)
        do {
            let device = try await GatewayDeltaTests.device(setup, gateway: 0, name: "refreshed")
            #expect(
                try await GatewayDeltaTests.backendSend(setup, "PATCH", "BusinessPartners('BP2')", #"{"Phone":"bg"}"#)
                    < 300)
            await setup.backend.service.journal.clear()
            let store = setup.gateways[0].gateway.store
            let before = try await store.scopes(backend: setup.backendRoot, user: "")
            var published: [Int64: Int64] = [:]
            for scope in before { published[scope.id] = try await store.scope(id: scope.id)?.published }
            // No device asks; the refresher (of either instance) reads each scope once its
            // target is 80 % gone.
            try await Task.sleep(nanoseconds: 4_500_000_000)
            let reads = await Self.refreshReads(setup)
            #expect(
                reads.contains { $0.hasPrefix("GET BusinessPartners") }
                    && reads.contains { $0.hasPrefix("GET Contacts") })
            for scope in before {
                let now = try #require(try await store.scope(id: scope.id)).published
                #expect(now > (published[scope.id] ?? 0), "\(scope.query)")
            }
            // Each scope at most once per 80 % of the target, whatever the instances.
            #expect(reads.filter { $0 == "GET Contacts" }.count <= 2, "\(reads)")
            try await device.download()
            #expect(try await device.readEntities("BusinessPartners('BP2')").first?.string("Phone") == "bg")
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A refresh that reads the backend slowly (its page trickles in) while a device's upload
    /// changes a row it already read: the upload's write-through waits for the refresh, and the
    /// older copy the refresh read never stays over the newer one.
    @Test(arguments: [false, true])
    func aSlowRefreshNeverPutsAnOlderCopyOverAWrittenThroughChange(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2, instances: 2, interval: 0)
        do {
            let writer = try await GatewayDeltaTests.device(setup, gateway: 0, name: "writer")
            let reader = try await GatewayDeltaTests.device(setup, gateway: 1, name: "reader")
            await setup.backend.service.journal.clear()
            await setup.backend.service.faults.set([
                FaultRule(method: "GET", urlContains: "BusinessPartners", trickleMilliseconds: 250, times: 1)
            ])
            let slow = Task { try await reader.download() }
            // The refresh has read the page (it trickles to the gateway) before the upload.
            for _ in 0..<100 {
                if await setup.backend.service.journal.requests().contains("GET BusinessPartners") { break }
                try await Task.sleep(nanoseconds: 20_000_000)
            }
            #expect(await setup.backend.service.journal.requests().contains("GET BusinessPartners"))
            _ = try await writer.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: GatewayUploadTests.body(#"{"Phone":"newer"}"#))
            try await writer.upload()
            try await slow.value
            // What PostgreSQL holds now, read without a refresh.
            let store = setup.gateways[0].gateway.store
            let scope = try #require(
                try await store.scopes(backend: setup.backendRoot, user: "").first { $0.query == "BusinessPartners" })
            let rows = try await store.fullPage(scope: scope.id, after: "", limit: 1000)
            let bp1 = try #require(rows.first { $0.key == #""BP1""# })
            #expect(bp1.payload?.contains("newer") == true, "\(bp1.payload ?? "-")")
            try await writer.download()
            #expect(try await writer.readEntities("BusinessPartners('BP1')").first?.string("Phone") == "newer")
            #expect(try await writer.readEntities("ErrorArchive").isEmpty)
            await writer.close()
            await reader.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// An update whose backend answer was lost, resolved as applied by reading the backend on
    /// the device's repeat, is answered with the entity's current ETag: the device's next
    /// change of it is accepted, not refused 412.
    @Test(arguments: [false, true])
    func anUpdateResolvedAsAppliedCarriesTheNewETag(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2, instances: 1, interval: 600)
        do {
            let device = try await GatewayDeltaTests.device(setup, gateway: 0, name: "doubt")
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: GatewayUploadTests.body(#"{"Phone":"lost"}"#))
            await setup.backend.service.faults.set([
                FaultRule(method: "POST", urlContains: "$batch", dropAfterCommit: true, times: 1),
                FaultRule(method: "GET", urlContains: "BusinessPartners('BP1')", status: 503, times: 1),
            ])
            await #expect(throws: (any Error).self) { try await device.upload() }
            try await device.upload()
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: GatewayUploadTests.body(#"{"Phone":"next"}"#))
            try await device.upload()
            #expect(try await device.readEntities("ErrorArchive").isEmpty)
            #expect(
                try await GatewayUploadTests.backendEntity(setup, "BusinessPartners('BP1')")["Phone"]?.stringValue
                    == "next")
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}
