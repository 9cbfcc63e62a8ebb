import Foundation
import InteropSupport
import ODataCore
import ODataGateway
import ODataServer
import OfflineOData
import Testing

/// Issue 35: `kill -9` of an `oodata gateway` process during a refresh and during a device's
/// download, at several points. A new gateway process on the same port and PostgreSQL takes
/// over; the device's next download leaves it equal to the backend (no row lost or twice), and
/// the scope's refresh completes. V4 and V2.
@Suite(.serialized) struct GatewayCrashTests {
    /// `oodata`, built beside the tests.
    static var binary: URL? { ProcessLaunch.builtTool("oodata") }

    /// Starts `oodata gateway` on `port` and waits until `/health` answers.
    static func spawn(backend: String, postgres: String, port: Int) async throws -> Process {
        let tool = try #require(Self.binary, "oodata was not built next to the tests")
        let process = Process()
        process.executableURL = tool
        process.arguments = ["gateway", "--backend", backend, "--postgres", postgres, "--port", "\(port)",
                             "--page-size", "4", "--log-level", "error"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try ProcessLaunch.run(process)
        for _ in 0..<200 {
            if let answer = try? await DefaultTransport.make().send(
                TransportRequest(method: "GET", url: "http://127.0.0.1:\(port)/health"), timeout: 2), answer.status == 200
            {
                return process
            }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        process.terminate()
        throw PostgresServer.Failure(description: "oodata gateway did not answer /health on port \(port)")
    }

    static func killHard(_ process: Process) {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    static func device(_ setup: GatewayDeltaTests.Setup, port: Int, name: String) async throws -> OfflineODataProvider {
        var parameters = OfflineODataParameters()
        parameters.storePath = setup.folder
        parameters.storeName = name
        let provider = OfflineODataProvider(
            serviceRoot: try #require(URL(string: "http://127.0.0.1:\(port)/")), parameters: parameters)
        for query in ["BusinessPartners", "Contacts"] {
            try await provider.add(definingQuery: OfflineODataDefiningQuery(name: query, query: query))
        }
        try await provider.open()
        return provider
    }

    /// Two gateway processes on one PostgreSQL, a device on each. At each round both download
    /// at once and one process is killed at a different point (inside a refresh, or inside its
    /// device's paging); the other goes on. A new process on the killed one's port takes over.
    /// Both devices equal the backend after every round.
    @Test(arguments: [false, true])
    func killingTheGatewayDuringRefreshesAndDownloadsLosesNothing(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, instances: 0)
        let ports = [PostgresServer.freePort(), PostgresServer.freePort()]
        var gateways: [Process] = []
        var devices: [OfflineODataProvider] = []
        do {
            for port in ports {
                gateways.append(try await Self.spawn(backend: setup.backendRoot, postgres: setup.postgres.url, port: port))
            }
            for (index, port) in ports.enumerated() {
                devices.append(try await Self.device(setup, port: port, name: "crash\(index)"))
            }
            for device in devices {
                #expect(try await GatewayDeltaTests.held(device) == (try await GatewayDeltaTests.truth(setup)))
            }
            // Each backend page takes a while, so kills land inside refreshes and inside the
            // device's paging alike.
            await setup.backend.service.faults.set([FaultRule(method: "GET", urlContains: "Contacts", delayMilliseconds: 150)])
            for (round, killAfter) in [60, 250, 450, 700, 1000].enumerated() {
                #expect(try await GatewayDeltaTests.backendSend(
                    setup, "POST", "Contacts", #"{"PartnerID":"BP1","FirstName":"K","LastName":"kill\#(round)"}"#) < 300)
                #expect(try await GatewayDeltaTests.backendSend(
                    setup, "PATCH", "BusinessPartners('BP2')", #"{"Phone":"k\#(round)"}"#) < 300)
                let downloads = devices.map { device in Task { try await device.download() } }
                try await Task.sleep(nanoseconds: UInt64(killAfter) * 1_000_000)
                let victim = round % 2
                Self.killHard(gateways[victim])
                for download in downloads { _ = await download.result }
                gateways[victim] = try await Self.spawn(
                    backend: setup.backendRoot, postgres: setup.postgres.url, port: ports[victim])
                let truth = try await GatewayDeltaTests.truth(setup)
                for (index, device) in devices.enumerated() {
                    try await device.download()
                    #expect(try await GatewayDeltaTests.held(device) == truth,
                            "round \(round): instance \(victim) killed after \(killAfter) ms, device \(index)")
                }
            }
        } catch {
            Issue.record("\(error)")
        }
        for device in devices { await device.close() }
        for gateway in gateways { Self.killHard(gateway) }
        await setup.stop()
    }
}
