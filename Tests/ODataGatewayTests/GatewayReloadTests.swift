import Foundation
import InteropSupport
import ODataCore
import ODataGateway
import OfflineOData
import Testing

/// Issue 56: the configuration reloaded on SIGHUP and through the admin API, in a real
/// `oodata gateway` process: checked whole, taken without dropping requests, refused with the
/// line and reason when wrong (the running one stays).
@Suite(.serialized) struct GatewayReloadTests {
    static func file(backend: String, throttle: String, shared: Bool, broken: Bool = false) -> String {
        """
        [admin]
        token=\(GatewayOperationsTests.token)

        [endpoint]
        name=sales
        url=\(backend)
        throttle_device=\(throttle)
        \(broken ? "colour=blue\n" : "")
        [defining_query]
        name=BusinessPartners
        is_shared_data=\(shared ? "Y" : "N")
        """
    }

    @Test func sighupAndTheAdminAPIReloadTheFileWhole() async throws {
        let setup = try await GatewayDeltaTests.start(v2: false, instances: 0)
        var process: Process?
        do {
            let tool = try #require(ProcessLaunch.builtTool("oodata"), "oodata was not built next to the tests")
            let ini = setup.folder.appendingPathComponent("gateway.ini")
            func write(_ text: String) throws { try Data(text.utf8).write(to: ini) }
            try write(Self.file(backend: setup.backendRoot, throttle: "100/s", shared: false))
            let port = Spawn.freePort()
            let adminPort = Spawn.freePort()
            let errors = setup.folder.appendingPathComponent("gateway.err")
            _ = FileManager.default.createFile(atPath: errors.path, contents: nil)
            let running = Process()
            running.executableURL = tool
            running.arguments = [
                "gateway", "--config", ini.path, "--postgres", setup.postgres.url, "--port", "\(port)",
                "--admin-port", "\(adminPort)", "--log-level", "error",
            ]
            running.standardOutput = FileHandle.nullDevice
            running.standardError = try FileHandle(forWritingTo: errors)
            try ProcessLaunch.run(running)
            process = running
            let admin = "http://127.0.0.1:\(adminPort)"
            func config() async throws -> JSONValue? {
                let answer = try? await GatewayOperationsTests.get(
                    admin + "/api/config", headers: [("Authorization", "Bearer \(GatewayOperationsTests.token)")])
                guard let answer, answer.status == 200 else { return nil }
                return try JSONValue.parse(answer.body)["backends"]?.arrayValue?.first
            }
            func waitFor(_ what: String, _ check: (JSONValue?) -> Bool) async throws {
                for _ in 0..<100 {
                    if check(try await config()) { return }
                    try await Task.sleep(for: .milliseconds(100))
                }
                Issue.record("timed out waiting for \(what)")
            }
            try await waitFor("the gateway") { $0 != nil }
            #expect(try await config()?["deviceThrottle"]?.stringValue == "100/s,burst=100")
            // Requests go on while the configuration changes under them.
            let load = Task { () -> [Int] in
                var statuses: [Int] = []
                for _ in 0..<40 {
                    let answer = try? await GatewayOperationsTests.get("http://127.0.0.1:\(port)/BusinessPartners")
                    statuses.append(answer?.status ?? 0)
                }
                return statuses
            }
            // SIGHUP takes a good file.
            try write(Self.file(backend: setup.backendRoot, throttle: "50/s,burst=60", shared: true))
            kill(running.processIdentifier, SIGHUP)
            try await waitFor("the SIGHUP reload") { $0?["deviceThrottle"]?.stringValue == "50/s,burst=60" }
            #expect(try await config()?["sharedQueries"]?.arrayValue?.map(\.stringValue) == ["BusinessPartners"])
            // A wrong file is refused with its line; the running configuration stays.
            try write(Self.file(backend: setup.backendRoot, throttle: "1/s", shared: false, broken: true))
            kill(running.processIdentifier, SIGHUP)
            var said = ""
            for _ in 0..<100 where !said.contains("reload refused") {
                try await Task.sleep(for: .milliseconds(100))
                said = (try? String(contentsOf: errors, encoding: .utf8)) ?? ""
            }
            #expect(
                said.contains("configuration reload refused") && said.contains("line 8: unknown key colour"), "\(said)")
            #expect(try await config()?["deviceThrottle"]?.stringValue == "50/s,burst=60")
            // The admin API says the same in its answer.
            let refused = try await GatewayOperationsTests.adminRaw(adminPort, "POST", "/api/config/reload")
            #expect(refused.status == 422)
            #expect(String(decoding: refused.body, as: UTF8.self).contains("line 8: unknown key colour"))
            #expect(
                try await GatewayOperationsTests.adminRaw(adminPort, "POST", "/api/config/reload", token: nil).status
                    == 401)
            try write(Self.file(backend: setup.backendRoot, throttle: "7/s", shared: false))
            let taken = try await GatewayOperationsTests.adminRaw(adminPort, "POST", "/api/config/reload")
            #expect(taken.status == 200)
            #expect(try JSONValue.parse(taken.body)["changed"]?.arrayValue?.map(\.stringValue) == ["backends"])
            #expect(try await config()?["deviceThrottle"]?.stringValue == "7/s,burst=7")
            let statuses = await load.value
            #expect(statuses.allSatisfy { $0 == 200 }, "no request dropped: \(statuses)")
            #expect(running.isRunning)
        } catch {
            Issue.record("\(error)")
        }
        if let process { GatewayCrashTests.killHard(process) }
        await setup.stop()
    }

    /// A reload that leaves the running admin API without credentials, or changes what only a
    /// restart changes, is refused.
    @Test func aReloadThatCannotBeTakenIsRefused() async throws {
        let setup = try await GatewayDeltaTests.start(v2: true, instances: 0)
        do {
            let gateway = try await GatewayOperationsTests.adminGateway(setup)
            var without = gateway.gateway.configuration
            without.admin = nil
            #expect(gateway.gateway.reload(without).applied == false)
            var slower = gateway.gateway.configuration
            slower.postgresTimeout = 99
            #expect(gateway.gateway.reload(slower).error?.contains("restart") == true)
            var none = gateway.gateway.configuration
            none.backends = []
            #expect(gateway.gateway.reload(none).applied == false)
            var longer = gateway.gateway.configuration
            longer.refreshInterval = 120
            let outcome = gateway.gateway.reload(longer)
            #expect(outcome.applied && outcome.changed == ["refreshInterval"], "\(outcome)")
            #expect(gateway.gateway.configuration.refreshInterval == 120)
            #expect(gateway.gateway.reloadFromSource().applied == false, "started without a source")
            await gateway.stop()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}
