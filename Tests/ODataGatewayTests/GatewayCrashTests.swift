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
    static var binary: URL? {
        var url = Bundle.main.bundleURL
        for _ in 0..<3 {
            let candidate = url.appendingPathComponent("oodata")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            url.deleteLastPathComponent()
        }
        return nil
    }

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

    @Test(arguments: [false, true])
    func killingTheGatewayDuringRefreshesAndDownloadsLosesNothing(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(v2: v2, instances: 0)
        let port = PostgresServer.freePort()
        var gateway: Process?
        var device: OfflineODataProvider?
        do {
            gateway = try await Self.spawn(backend: setup.backendRoot, postgres: setup.postgres.url, port: port)
            var parameters = OfflineODataParameters()
            parameters.storePath = setup.folder
            parameters.storeName = "crash"
            let provider = OfflineODataProvider(
                serviceRoot: try #require(URL(string: "http://127.0.0.1:\(port)/")), parameters: parameters)
            device = provider
            for query in ["BusinessPartners", "Contacts"] {
                try await provider.add(definingQuery: OfflineODataDefiningQuery(name: query, query: query))
            }
            try await provider.open()
            #expect(try await GatewayDeltaTests.held(provider) == (try await GatewayDeltaTests.truth(setup)))
            // Each backend page takes a while, so kills land inside refreshes and inside the
            // device's paging alike.
            await setup.backend.service.faults.set([FaultRule(method: "GET", urlContains: "Contacts", delayMilliseconds: 150)])
            for (round, killAfter) in [60, 250, 450, 700, 1000].enumerated() {
                #expect(try await GatewayDeltaTests.backendSend(
                    setup, "POST", "Contacts", #"{"PartnerID":"BP1","FirstName":"K","LastName":"kill\#(round)"}"#) < 300)
                #expect(try await GatewayDeltaTests.backendSend(
                    setup, "PATCH", "BusinessPartners('BP2')", #"{"Phone":"k\#(round)"}"#) < 300)
                let download = Task { try await provider.download() }
                try await Task.sleep(nanoseconds: UInt64(killAfter) * 1_000_000)
                if let running = gateway { Self.killHard(running) }
                _ = await download.result
                gateway = try await Self.spawn(backend: setup.backendRoot, postgres: setup.postgres.url, port: port)
                try await provider.download()
                let held = try await GatewayDeltaTests.held(provider)
                #expect(held == (try await GatewayDeltaTests.truth(setup)), "kill after \(killAfter) ms")
            }
        } catch {
            Issue.record("\(error)")
        }
        if let device { await device.close() }
        if let gateway { Self.killHard(gateway) }
        await setup.stop()
    }
}
