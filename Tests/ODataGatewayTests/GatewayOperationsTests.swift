import Foundation
import InteropSupport
import ODataCore
import ODataGateway
import ODataServer
import OfflineOData
import Testing

/// Issue 56: what the person who runs the gateway needs. Probes for load balancers, PostgreSQL
/// named within seconds, the admin API on its own port (refused to anyone without its
/// credentials), `oodata gateway status`. Real PostgreSQL, real backend, real providers.
@Suite(.serialized) struct GatewayOperationsTests {
    static let token = "admin-token-0123456789"

    /// A gateway with its admin API on a free port, beside the setup's.
    static func adminGateway(
        _ setup: GatewayDeltaTests.Setup, configure: (inout GatewayConfiguration) -> Void = { _ in }
    ) async throws -> RunningGateway {
        var configuration = GatewayConfiguration(backends: [GatewayBackend(url: setup.backendRoot)])
        configuration.refreshInterval = 0
        configuration.metadataCheckInterval = 0
        configuration.postgresTimeout = 30
        configuration.pageSize = 5
        configuration.admin = GatewayAdminAccess(token: token, user: "operator", password: "operator-password")
        configure(&configuration)
        return try await RunningGateway.start(
            configuration: configuration, postgresURL: setup.postgres.url, adminPort: 0)
    }

    static func get(_ url: String, headers: [(String, String)] = []) async throws -> TransportResponse {
        try await DefaultTransport.make().send(
            TransportRequest(method: "GET", url: url, headers: HTTPHeaders(headers)), timeout: 30)
    }

    static func admin(
        _ gateway: RunningGateway, _ method: String, _ path: String, body: String? = nil,
        authorization: String? = "Bearer \(token)"
    ) async throws -> TransportResponse {
        var headers = HTTPHeaders()
        if let authorization { headers["Authorization"] = authorization }
        if body != nil || method == "POST" { headers["Content-Type"] = "application/json" }
        let port = try #require(gateway.adminPort)
        return try await DefaultTransport.make().send(
            TransportRequest(
                method: method, url: "http://127.0.0.1:\(port)" + path, headers: headers,
                body: Array((body ?? "").utf8)), timeout: 60)
    }

    /// An admin request to `port` (a gateway process's admin port).
    static func adminRaw(
        _ port: Int, _ method: String, _ path: String, token: String? = token
    ) async throws
        -> TransportResponse
    {
        var headers = HTTPHeaders()
        if let token { headers["Authorization"] = "Bearer \(token)" }
        if method == "POST" { headers["Content-Type"] = "application/json" }
        return try await DefaultTransport.make().send(
            TransportRequest(method: method, url: "http://127.0.0.1:\(port)" + path, headers: headers), timeout: 60)
    }

    static func json(_ response: TransportResponse) throws -> JSONValue { try JSONValue.parse(response.body) }

    /// `/livez`, `/readyz` and `/health` answer with `OOData-Gateway`; `/readyz` names what is
    /// not ready: standby (set through the admin API), a backend that cannot be read, a table
    /// that went away.
    @Test(arguments: [false, true])
    func probesTellLivenessFromReadiness(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, instances: 0)
        do {
            let gateway = try await Self.adminGateway(setup)
            let root = gateway.root.absoluteString
            for path in ["livez", "readyz", "health", "metrics"] {
                let answer = try await Self.get(root + path)
                #expect(answer.status == 200, "\(path): \(String(decoding: answer.body, as: UTF8.self))")
                #expect(answer.headers["OOData-Gateway"] == "1", "\(path)")
            }
            let ready = try Self.json(try await Self.get(root + "readyz"))
            #expect(ready["ready"]?.jsonBool == true)
            #expect(ready["checks"]?.arrayValue?.isEmpty == true, "the details are the admin API's: \(ready)")
            let status = try Self.json(try await Self.admin(gateway, "GET", "/api/status"))
            #expect(
                status["readiness"]?["checks"]?.arrayValue?.count == 3, "standby, postgres, one backend: \(status)")
            // Standby: not ready, still serving.
            let switched = try await Self.admin(gateway, "POST", "/api/standby", body: #"{"standby":true}"#)
            #expect(switched.status == 200)
            #expect(try Self.json(switched)["standby"]?.jsonBool == true)
            let standby = try await Self.get(root + "readyz")
            #expect(standby.status == 503)
            #expect(standby.headers["Retry-After"] != nil)
            #expect(try Self.json(standby)["reason"]?.stringValue == "standby")
            #expect(try await Self.get(root + "health").status == 503, "/health is /readyz")
            #expect(try await Self.get(root + "livez").status == 200)
            #expect(try await Self.get(root + "BusinessPartners").status == 200, "standby still serves")
            #expect(try await Self.admin(gateway, "POST", "/api/standby", body: #"{"standby":false}"#).status == 200)
            #expect(try await Self.get(root + "readyz").status == 200)
            // A table that went away: named.
            try await setup.postgres.psql("ALTER TABLE oodata_device RENAME TO oodata_device_gone")
            // The admin API measures at once and names the table; the public probe answers
            // from its last second's report, with the check's name only.
            let missing = try Self.json(try await Self.admin(gateway, "GET", "/api/status"))
            #expect(missing["ready"]?.jsonBool == false)
            #expect(missing["readiness"]?["reason"]?.stringValue?.contains("oodata_device") == true, "\(missing)")
            let probe = try await Self.get(root + "readyz")
            #expect(probe.status == 503)
            #expect(try Self.json(probe)["reason"]?.stringValue == "postgres", "\(probe)")
            #expect(!String(decoding: probe.body, as: UTF8.self).contains("oodata_device"), "no details in public")
            try await setup.postgres.psql("ALTER TABLE oodata_device_gone RENAME TO oodata_device")
            try await Task.sleep(for: .milliseconds(1100))
            #expect(try await Self.get(root + "readyz").status == 200)
            await gateway.stop()
            // A backend nobody listens on: not ready, and the reason names it.
            let dead = "http://127.0.0.1:\(Spawn.freePort())/odata/"
            var configuration = GatewayConfiguration(backends: [GatewayBackend(url: dead)])
            configuration.postgresTimeout = 30
            let unready = try await RunningGateway.start(configuration: configuration, postgresURL: setup.postgres.url)
            let answer = try await Self.get(unready.root.absoluteString + "readyz")
            #expect(answer.status == 503)
            #expect(try Self.json(answer)["reason"]?.stringValue == "backend", "\(answer)")
            #expect(await unready.gateway.readiness().reason?.contains(dead) == true)
            await unready.stop()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A PostgreSQL the gateway cannot use is named at once (not after a pool's back-off):
    /// host, port, database, user and the server's own words.
    @Test func aPostgreSQLMistakeIsNamedWithinSeconds() async throws {
        let postgres = try await PostgresServer.start()
        let configuration = GatewayConfiguration(backends: [GatewayBackend(url: "http://127.0.0.1:9/odata/")])
        let refused = Spawn.freePort()
        let cases: [(String, [String])] = [
            (
                "postgres://nobody@127.0.0.1:\(postgres.port)/postgres",
                ["127.0.0.1:\(postgres.port)", "user nobody", #"role "nobody" does not exist"#, "28000"]
            ),
            (
                "postgres://postgres@127.0.0.1:\(postgres.port)/nodb",
                ["database nodb", #"database "nodb" does not exist"#, "3D000", "createdb"]
            ),
            ("postgres://postgres@127.0.0.1:\(refused)/postgres", ["127.0.0.1:\(refused)", "connection refused"]),
        ]
        for (url, words) in cases {
            let started = ContinuousClock.now
            do {
                let gateway = try await RunningGateway.start(configuration: configuration, postgresURL: url)
                await gateway.stop()
                Issue.record("\(url) started")
            } catch let error as GatewayError {
                for word in words { #expect(error.message.contains(word), "\(word) in \(error.message)") }
            }
            // Well within a pool's minute of back-off (a loaded machine is slow, not a minute slow).
            #expect(ContinuousClock.now - started < .seconds(20), "\(url)")
        }
        await postgres.stop()
    }

    /// The admin API answers only its own credentials: no credentials, a wrong token, a
    /// device's credentials and a wrong Basic password all get 401, and nothing of the data.
    /// The public port has no admin API. A gateway asked for an admin port without
    /// credentials does not start.
    @Test func theAdminAPIIsRefusedToAnyoneElse() async throws {
        let setup = try await GatewayDeltaTests.start(v2: false, instances: 0)
        do {
            let gateway = try await Self.adminGateway(setup)
            let basic = { (pair: String) in "Basic " + Data(pair.utf8).base64EncodedString() }
            for authorization in [
                nil, "Bearer wrong-token-0123456789", "Bearer \(Self.token)x", basic("operator:wrong-password"),
                basic("alice:alice-password"), "Token \(Self.token)",
            ] {
                for path in ["/api/scopes", "/api/requests/in-doubt", "/api/devices", "/api/config"] {
                    let answer = try await Self.admin(gateway, "GET", path, authorization: authorization)
                    #expect(answer.status == 401, "\(path) with \(authorization ?? "nothing")")
                    #expect(!String(decoding: answer.body, as: UTF8.self).contains("backend"))
                }
                let standby = try await Self.admin(
                    gateway, "POST", "/api/standby", body: #"{"standby":true}"#, authorization: authorization)
                #expect(standby.status == 401)
            }
            // With the right credentials but from another site's page (a browser holding the
            // Basic pair), or as a form rather than JSON: refused, nothing changes.
            let adminPort = try #require(gateway.adminPort)
            for extra in [
                ["Origin": "http://evil.example", "Content-Type": "application/json"],
                ["Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"],
                ["Origin": "null", "Content-Type": "application/json"],
                ["Content-Type": "text/plain"], ["Content-Type": "application/x-www-form-urlencoded"],
            ] {
                var headers = HTTPHeaders()
                headers["Authorization"] = "Bearer \(Self.token)"
                for (name, value) in extra { headers[name] = value }
                let answer = try await DefaultTransport.make().send(
                    TransportRequest(
                        method: "POST", url: "http://127.0.0.1:\(adminPort)/api/standby", headers: headers,
                        body: Array(#"{"standby":true}"#.utf8)), timeout: 30)
                #expect(answer.status == 403, "\(extra)")
            }
            #expect(await gateway.gateway.isOnStandby == false)
            #expect(
                try await Self.admin(gateway, "GET", "/api/scopes", authorization: basic("operator:operator-password"))
                    .status == 200)
            // The public port forwards /api/… to the backend like any path: no admin there.
            let publicAnswer = try await Self.get(gateway.root.absoluteString + "api/scopes")
            #expect(publicAnswer.status != 200)
            await gateway.stop()
            var configuration = GatewayConfiguration(backends: [GatewayBackend(url: setup.backendRoot)])
            configuration.postgresTimeout = 30
            await #expect(throws: GatewayError.self) {
                let running = try await RunningGateway.start(
                    configuration: configuration, postgresURL: setup.postgres.url, adminPort: 0)
                await running.stop()
            }
            configuration.admin = GatewayAdminAccess(token: "short")
            await #expect(throws: GatewayError.self) {
                let running = try await RunningGateway.start(
                    configuration: configuration, postgresURL: setup.postgres.url, adminPort: 0)
                await running.stop()
            }
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// The admin API shows the scopes with their lag, rows and last error, refreshes one now
    /// (a backend change reaches PostgreSQL without any device), lists the devices by the
    /// `Client-Instance-ID` the client sends (kept in its store: the same after a reopen), and
    /// the configuration without a secret in it.
    @Test(arguments: [false, true])
    func theAdminAPIShowsScopesDevicesAndConfiguration(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, instances: 0)
        do {
            let gateway = try await Self.adminGateway(setup) { configuration in
                configuration.backends[0].sharedAuthorization = "Basic c2hhcmVkOnNoYXJlZC1zZWNyZXQ="
                configuration.backends[0].sharedQueries = ["BusinessPartners"]
                configuration.backends[0].trackDeltas = .always
                configuration.backends[0].jwtVerification = [
                    JWTVerification(
                        issuer: "https://idp.example", audience: "app", hmacSecret: String(repeating: "s", count: 40))
                ]
            }
            var parameters = OfflineODataParameters()
            parameters.storePath = setup.folder
            parameters.storeName = "ops"
            parameters.applicationVersion = "field-app 3.1"
            func open() async throws -> OfflineODataProvider {
                let device = OfflineODataProvider(serviceRoot: gateway.root, parameters: parameters)
                for query in ["BusinessPartners", "Contacts"] {
                    try await device.add(definingQuery: OfflineODataDefiningQuery(name: query, query: query))
                }
                try await device.open()
                return device
            }
            var device = try await open()
            let scopes = try Self.json(try await Self.admin(gateway, "GET", "/api/scopes")).arrayValue ?? []
            #expect(scopes.count == 2, "\(scopes)")
            let partners = try #require(scopes.first { $0["query"]?.stringValue == "BusinessPartners" })
            #expect(partners["user"]?.stringValue == "shared")
            #expect(partners["rows"]?.jsonInt == 3)
            #expect((partners["lagSeconds"]?.jsonDouble ?? -1) >= 0)
            #expect(partners["lastError"] == nil || partners["lastError"] == .null)
            let id = try #require(partners["id"]?.jsonInt)
            // A change on the backend; "refresh now" reads it without a device.
            let patched = try await DefaultTransport.make().send(
                TransportRequest(
                    method: "PATCH", url: setup.backend.v4Root.absoluteString + "BusinessPartners('BP1')",
                    headers: HTTPHeaders([("Content-Type", "application/json"), ("If-Match", "*")]),
                    body: Array(#"{"Phone":"admin"}"#.utf8)),
                timeout: 30)
            #expect(patched.status < 300)
            await setup.backend.service.journal.clear()
            let refreshed = try Self.json(try await Self.admin(gateway, "POST", "/api/scopes/\(id)/refresh"))
            #expect(refreshed["outcome"]?.stringValue == "refreshed", "\(refreshed)")
            #expect(refreshed["changed"]?.jsonInt == 1)
            #expect(await setup.backend.service.journal.requests().contains { $0.contains("BusinessPartners") })
            // A user's scope this instance holds no credentials for (no refresh target here): due.
            let contacts = try #require(scopes.first { $0["query"]?.stringValue == "Contacts" }?["id"]?.jsonInt)
            let due = try await Self.admin(gateway, "POST", "/api/scopes/\(contacts)/refresh")
            #expect(due.status == 202)
            #expect(try Self.json(due)["outcome"]?.stringValue == "markedDue")
            let marked = try Self.json(try await Self.admin(gateway, "GET", "/api/scopes")).arrayValue ?? []
            #expect(marked.first { $0["id"]?.jsonInt == contacts }?["markedDue"]?.jsonBool == true)
            #expect(try await Self.admin(gateway, "POST", "/api/scopes/999999/refresh").status == 404)
            #expect(try await Self.admin(gateway, "POST", "/api/scopes/x/refresh").status == 400)
            // Devices, by Client-Instance-ID; the same ID after the store is opened again.
            try await device.download()
            let first = try Self.json(try await Self.admin(gateway, "GET", "/api/devices")).arrayValue ?? []
            #expect(first.count == 1, "\(first)")
            #expect(first.first?["appVersion"]?.stringValue == "field-app 3.1")
            #expect(first.first?["lastSync"]?.stringValue != nil)
            let instance = try #require(first.first?["clientInstanceID"]?.stringValue)
            await device.close()
            device = try await open()
            try await device.download()
            await device.close()
            // Devices are noted at most every 30 s and in the background: the reopened device is the same row.
            let again = try Self.json(try await Self.admin(gateway, "GET", "/api/devices")).arrayValue ?? []
            #expect(again.map { $0["clientInstanceID"]?.stringValue } == [instance])
            // The configuration in force, without the shared authorization or the JWT secret.
            let config = try await Self.admin(gateway, "GET", "/api/config")
            let text = String(decoding: config.body, as: UTF8.self)
            #expect(config.status == 200)
            #expect(text.contains("https://idp.example") && text.contains(#""sharedAuthorization":true"#), "\(text)")
            let secrets = [
                "c2hhcmVkOnNoYXJlZC1zZWNyZXQ=", String(repeating: "s", count: 40), Self.token, "operator-password",
            ]
            for secret in secrets { #expect(!text.contains(secret), "a secret in /api/config: \(text)") }
            let status = try Self.json(try await Self.admin(gateway, "GET", "/api/status"))
            #expect(status["ready"]?.jsonBool == true)
            await gateway.stop()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// Requests with made-up credentials (or none) and a `Client-Instance-ID` are refused and
    /// leave no device row: a device is noted only once the backend or the gateway's check took
    /// its credentials.
    @Test(arguments: [false, true])
    func madeUpCredentialsLeaveNoDeviceRow(v2: Bool) async throws {
        let setup = try await GatewayIsolationTests.start(v2: v2)
        do {
            let gateway = try await Self.adminGateway(setup)
            let root = gateway.root.absoluteString
            let wrong = [
                GatewayIsolationTests.basic("mallory", "guess"), GatewayIsolationTests.basic("alice", "wrong"), nil,
            ]
            for (index, authorization) in wrong.enumerated() {
                for tracked in [false, true] {
                    let answer = try await GatewayIsolationTests.send(
                        "GET", root + "Contacts", authorization: authorization,
                        headers: [("Client-Instance-ID", "made-up-\(index)-\(tracked)")], tracked: tracked)
                    #expect([401, 403].contains(answer.status), "\(index) \(tracked): \(answer.status)")
                }
            }
            let own = try await GatewayIsolationTests.send(
                "GET", root + "Contacts", authorization: GatewayIsolationTests.alice,
                headers: [("Client-Instance-ID", "alices-tablet")], tracked: true)
            #expect(own.status == 200)
            var devices: [JSONValue] = []
            for _ in 0..<50 {
                devices = try Self.json(try await Self.admin(gateway, "GET", "/api/devices")).arrayValue ?? []
                if !devices.isEmpty { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(devices.map { $0["clientInstanceID"]?.stringValue } == ["alices-tablet"], "\(devices)")
            await gateway.stop()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// `oodata gateway status`: 0 when all is well, 1 on standby, 3 with a wrong token, without
    /// one, or pointed at the public port (where it sends no credential); the text names the
    /// scopes and the checks.
    @Test func theStatusCommandHasExitCodesForScripts() async throws {
        let setup = try await GatewayDeltaTests.start(v2: false, instances: 0)
        do {
            let tool = try #require(ProcessLaunch.builtTool("oodata"), "oodata was not built next to the tests")
            let gateway = try await Self.adminGateway(setup) { $0.backends[0].trackDeltas = .always }
            _ = try await Self.get(
                gateway.root.absoluteString + "Contacts", headers: [("Prefer", "odata.track-changes")])
            let adminURL = "http://127.0.0.1:\(try #require(gateway.adminPort))"
            func status(_ extra: [String]) async throws -> (Int32, String) {
                let output = setup.folder.appendingPathComponent("status-\(UUID().uuidString).out").path
                let code = try await Spawn.waitOffPool(
                    [tool.path, "gateway", "status", "--admin", adminURL] + extra, outputFile: output)
                return (code, (try? String(contentsOfFile: output, encoding: .utf8)) ?? "")
            }
            let (ok, text) = try await status(["--token", Self.token])
            #expect(ok == 0, "\(text)")
            #expect(text.contains("OK, ready") && text.contains("| Contacts |"), "\(text)")
            _ = try await Self.admin(gateway, "POST", "/api/standby", body: #"{"standby":true}"#)
            let (warning, standbyText) = try await status(["--token", Self.token])
            #expect(warning == 1, "standby is chosen, a warning: \(standbyText)")
            #expect(standbyText.contains("WARNING, on standby"), "\(standbyText)")
            let (unknown, refused) = try await status(["--token", "wrong-token-0123456789"])
            #expect(unknown == 3, "\(refused)")
            #expect(refused.contains("401"))
            let (none, noneText) = try await status([])
            #expect(none == 3 && noneText.contains("needs credentials"), "\(noneText)")
            let publicPort = setup.folder.appendingPathComponent("public.out").path
            let (publicCode) = try await Spawn.waitOffPool(
                [tool.path, "gateway", "status", "--admin", gateway.root.absoluteString, "--token", Self.token],
                outputFile: publicPort)
            let publicText = (try? String(contentsOfFile: publicPort, encoding: .utf8)) ?? ""
            #expect(publicCode == 3 && publicText.contains("public port"), "\(publicText)")
            let (json, jsonText) = try await status(["--token", Self.token, "--json"])
            #expect(json == 1)
            #expect((try? JSONValue.parse(Array(jsonText.utf8)))?["verdict"]?.stringValue == "WARNING", "\(jsonText)")
            await gateway.stop()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}

extension GatewayOperationsTests {
    /// `oodata gateway diagnose`: one JSON file with the status, configuration, scopes, devices,
    /// metrics and the gateway's last warnings and errors, plus a log file's tail; no secret of
    /// the configuration, a device or a log line in it; 3 when the admin API refuses the tool.
    @Test func theDiagnoseBundleHasTheFactsAndNoSecrets() async throws {
        let setup = try await GatewayDeltaTests.start(v2: false, instances: 0)
        do {
            let tool = try #require(ProcessLaunch.builtTool("oodata"), "oodata was not built next to the tests")
            var configuration = GatewayConfiguration(backends: [GatewayBackend(url: setup.backendRoot)])
            configuration.refreshInterval = 0
            configuration.metadataCheckInterval = 0
            configuration.postgresTimeout = 30
            configuration.backends[0].sharedAuthorization = "Basic c2hhcmVkLXNlY3JldDpzaGFyZWQtcHc="
            configuration.backends[0].sharedQueries = ["Contacts"]
            configuration.backends[0].trackDeltas = .always
            configuration.admin = GatewayAdminAccess(token: Self.token, user: "operator", password: "operator-password")
            let gateway = try await RunningGateway.start(
                configuration: configuration, postgresURL: setup.postgres.url, adminPort: 0,
                reloadSource: {
                    struct Refused: Error, CustomStringConvertible {
                        var description: String { "line 7: jwt_hs_secret=hunter2-hunter2 is too short" }
                    }
                    throw Refused()
                })
            let contacts = try await Self.get(
                gateway.root.absoluteString + "Contacts",
                headers: [
                    ("Client-Instance-ID", "diagnosed-tablet"), ("Authorization", "Basic ZGV2aWNlOmRldmljZS1wdw=="),
                    ("Prefer", "odata.track-changes"),
                ])
            #expect(contacts.status == 200)
            // A refused reload: an error line whose text holds a secret.
            #expect(try await Self.admin(gateway, "POST", "/api/config/reload").status == 422)
            let log = setup.folder.appendingPathComponent("gateway.log").path
            let logText =
                (1...699).map { "line \($0)" }.joined(separator: "\n")
                + "\nstarted with --admin-token \(Self.token) by hand"
                + "\nforwarded with Authorization: Basic ZGV2aWNlOmRldmljZS1wdw== to http://ops:pw-in-url@backend/\n"
            try logText.write(toFile: log, atomically: true, encoding: .utf8)
            let adminURL = "http://127.0.0.1:\(try #require(gateway.adminPort))"
            let bundlePath = setup.folder.appendingPathComponent("bundle.json").path
            let output = setup.folder.appendingPathComponent("diagnose.out").path
            let code = try await Spawn.waitOffPool(
                [
                    tool.path, "gateway", "diagnose", "--admin", adminURL, "--token", Self.token, "--log", log,
                    "--log-lines", "100", "--output", bundlePath,
                ], outputFile: output)
            let said = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            #expect(code == 0, "\(said)")
            let text = try String(contentsOfFile: bundlePath, encoding: .utf8)
            let bundle = try JSONValue.parse(Array(text.utf8))
            #expect(bundle["status"]?["ready"]?.jsonBool == true, "\(text.prefix(500))")
            #expect(bundle["configuration"]?["backends"]?.arrayValue?.first?["url"]?.stringValue == setup.backendRoot)
            #expect(bundle["configuration"]?["backends"]?.arrayValue?.first?["sharedAuthorization"]?.jsonBool == true)
            #expect(bundle["scopes"]?.arrayValue?.first?["query"]?.stringValue == "Contacts")
            #expect(bundle["errors"]?.arrayValue?.isEmpty == true)
            #expect(bundle["metrics"]?.stringValue?.contains("oodata_gateway") == true)
            #expect(bundle["tool"]?["version"]?.stringValue?.hasPrefix("oodata") == true)
            let recent = bundle["recentLog"]?.arrayValue ?? []
            let refusal = recent.first { $0["message"]?.stringValue?.contains("reload refused") == true }
            #expect(refusal?["level"]?.stringValue == "error", "\(recent)")
            #expect(refusal?["message"]?.stringValue?.contains("jwt_hs_secret=•••") == true, "\(recent)")
            let lines = bundle["logFile"]?["lines"]?.arrayValue ?? []
            #expect(lines.count == 100)
            #expect(lines.first?.stringValue == "line 602")
            #expect(lines.dropLast().last?.stringValue == "started with --admin-token ••• by hand")
            #expect(lines.last?.stringValue == "forwarded with Authorization: Basic ••• to http://•••@backend/")
            for secret in ["hunter2", "c2hhcmVk", "ZGV2aWNl", "pw-in-url", Self.token, "operator-password"] {
                #expect(!text.contains(secret), "\(secret) is in the bundle")
            }
            let mode = try FileManager.default.attributesOfItem(atPath: bundlePath)[.posixPermissions] as? Int
            #expect(mode == 0o600)

            // The tool refused: 3 and no bundle.
            let refusedPath = setup.folder.appendingPathComponent("refused.json").path
            let refused = try await Spawn.waitOffPool(
                [
                    tool.path, "gateway", "diagnose", "--admin", adminURL, "--token", "wrong-token-0123456789",
                    "--output", refusedPath,
                ], outputFile: output)
            #expect(refused == 3)
            #expect(!FileManager.default.fileExists(atPath: refusedPath))
            // Anonymous and with a device's credentials, the parts it reads are refused too.
            for path in ["/api/log", "/api/metrics"] {
                #expect(try await Self.admin(gateway, "GET", path, authorization: nil).status == 401)
                #expect(
                    try await Self.admin(gateway, "GET", path, authorization: "Basic ZGV2aWNlOmRldmljZS1wdw==").status
                        == 401)
            }
            #expect(try await Self.get(gateway.root.absoluteString + "api/log").status != 200)
            await gateway.stop()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}

extension JSONValue {
    var jsonBool: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    var jsonInt: Int64? {
        if case .number(let text) = self { return Int64(text) }
        return nil
    }

    var jsonDouble: Double? {
        if case .number(let text) = self { return Double(text) }
        return nil
    }
}

extension GatewayOperationsTests {
    /// Shared credentials the backend refuses (a wrong `shared_authorization`): a device whose
    /// own credentials the backend takes gets 502 `SharedCredentialsRefused`, not a 401 that
    /// would send it to its login, and the operator finds an error in `/api/log` without the
    /// credential in it.
    @Test(arguments: [false, true])
    func refusedSharedCredentialsAreTheOperatorsToFix(v2: Bool) async throws {
        let setup = try await GatewayIsolationTests.start(v2: v2)
        do {
            let gateway = try await Self.adminGateway(setup) { configuration in
                configuration.backends[0].sharedAuthorization = GatewayIsolationTests.basic("alice", "not-her-pw")
                configuration.backends[0].sharedQueries = ["Contacts"]
                configuration.backends[0].trackDeltas = .always
            }
            let answer = try await GatewayIsolationTests.send(
                "GET", gateway.root.absoluteString + "Contacts", authorization: GatewayIsolationTests.alice,
                tracked: true)
            let text = GatewayIsolationTests.text(answer)
            #expect(answer.status == 502, "\(text)")
            #expect(text.contains("SharedCredentialsRefused") && text.contains("shared_authorization"), "\(text)")
            #expect(answer.headers["WWW-Authenticate"] == nil)
            // Her own read of data that is not shared still works.
            let own = try await GatewayIsolationTests.send(
                "GET", gateway.root.absoluteString + "BusinessPartners", authorization: GatewayIsolationTests.alice,
                tracked: true)
            #expect(own.status == 200)
            let log = try Self.json(try await Self.admin(gateway, "GET", "/api/log?limit=10")).arrayValue ?? []
            let refusal = log.first {
                $0["message"]?.stringValue?.contains("refused the shared credentials") == true
            }
            #expect(refusal?["level"]?.stringValue == "error", "\(log)")
            #expect(refusal?["message"]?.stringValue?.contains("Contacts") == true)
            let scopes = try Self.json(try await Self.admin(gateway, "GET", "/api/scopes")).arrayValue ?? []
            let contacts = scopes.first { $0["query"]?.stringValue == "Contacts" }
            let id = try #require(contacts?["id"]?.jsonInt)
            let refresh = try Self.json(try await Self.admin(gateway, "POST", "/api/scopes/\(id)/refresh"))
            #expect(refresh["error"]?.stringValue == "the backend answered 401 to shared_authorization", "\(refresh)")
            await gateway.stop()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}
