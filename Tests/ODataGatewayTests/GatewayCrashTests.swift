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
    static func spawn(backend: String, postgres: String, port: Int, extra: [String] = []) async throws -> Process {
        let tool = try #require(Self.binary, "oodata was not built next to the tests")
        let process = Process()
        process.executableURL = tool
        process.arguments =
            [
                "gateway", "--backend", backend, "--postgres", postgres, "--port", "\(port)",
                "--page-size", "4", "--log-level", "error",
            ] + (extra.contains("--refresh-interval") ? [] : ["--refresh-interval", "0"]) + extra
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try ProcessLaunch.run(process)
        for _ in 0..<200 {
            if let answer = try? await DefaultTransport.make().send(
                TransportRequest(method: "GET", url: "http://127.0.0.1:\(port)/health"), timeout: 2),
                answer.status == 200
            {
                return process
            }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        process.terminate()
        throw PostgresServer.Failure(description: "oodata gateway did not answer /health on port \(port)")
    }

    /// Kills with SIGKILL and reaps within 10 s (``Interop/killAndReap(_:)``).
    static func killHard(_ process: Process) { Interop.killAndReap(process) }

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
                gateways.append(
                    try await Self.spawn(backend: setup.backendRoot, postgres: setup.postgres.url, port: port))
            }
            for (index, port) in ports.enumerated() {
                devices.append(try await Self.device(setup, port: port, name: "crash\(index)"))
            }
            for device in devices {
                #expect(try await GatewayDeltaTests.held(device) == (try await GatewayDeltaTests.truth(setup)))
            }
            // Each backend page takes a while, so kills land inside refreshes and inside the
            // device's paging alike.
            await setup.backend.service.faults.set([
                FaultRule(method: "GET", urlContains: "Contacts", delayMilliseconds: 150)
            ])
            for (round, killAfter) in [60, 250, 450, 700, 1000].enumerated() {
                #expect(
                    try await GatewayDeltaTests.backendSend(
                        setup, "POST", "Contacts", #"{"PartnerID":"BP1","FirstName":"K","LastName":"kill\#(round)"}"#)
                        < 300)
                #expect(
                    try await GatewayDeltaTests.backendSend(
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
                    #expect(
                        try await GatewayDeltaTests.held(device) == truth,
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

/// Issue 36: `kill -9` of the gateway process a device uploads through, at several points of
/// forwarding (the backend is slow, so kills land before, during and after it commits). The
/// device sends again through the other instance. Every keyed change is on the backend once,
/// a server-keyed create is there once or in the ErrorArchive as `RequestInDoubt` (never
/// twice), and the queue ends empty. The backend ignores repeatable-request headers. V4 and V2.
@Suite(.serialized) struct GatewayUploadCrashTests {
    static func provider(_ setup: GatewayDeltaTests.Setup, port: Int, fresh: Bool) async throws -> OfflineODataProvider
    {
        var parameters = OfflineODataParameters()
        parameters.storePath = setup.folder
        parameters.storeName = "upload-crash"
        let provider = OfflineODataProvider(
            serviceRoot: try #require(URL(string: "http://127.0.0.1:\(port)/")), parameters: parameters)
        if fresh {
            for query in ["BusinessPartners", "Contacts"] {
                try await provider.add(definingQuery: OfflineODataDefiningQuery(name: query, query: query))
            }
        }
        try await provider.open()
        return provider
    }

    /// Reading the backend may conclude "not applied" 2 s after forwarding (its slowest answer
    /// here takes 0.4 s).
    static let flags = ["--in-doubt-after", "2"]

    static func count(_ setup: GatewayDeltaTests.Setup, _ url: String) async throws -> Int {
        try await GatewayUploadTests.backendRows(setup, url).count
    }

    @Test(arguments: [false, true])
    func killingTheGatewayWhileItForwardsAppliesNothingTwice(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2, instances: 0, backendOptions: { $0.honorsRepeatableRequests = false })
        let ports = [PostgresServer.freePort(), PostgresServer.freePort()]
        var gateways: [Process] = []
        var inDoubt = 0
        do {
            for port in ports {
                gateways.append(
                    try await GatewayCrashTests.spawn(
                        backend: setup.backendRoot, postgres: setup.postgres.url, port: port, extra: Self.flags))
            }
            var device = try await Self.provider(setup, port: ports[0], fresh: true)
            await setup.backend.service.faults.set([
                FaultRule(method: "POST", urlContains: "$batch", delayMilliseconds: 400)
            ])
            for (round, killAfter) in [30, 200, 380, 450, 650, 900].enumerated() {
                let through = round % 2
                _ = try await device.execute(
                    method: "POST", url: "BusinessPartners",
                    body: Array(#"{"PartnerID":"K\#(round)","CompanyName":"kill \#(round)"}"#.utf8))
                _ = try await device.execute(
                    method: "PATCH", url: "BusinessPartners('BP1')",
                    body: Array(#"{"Phone":"round \#(round)"}"#.utf8))
                _ = try await device.execute(
                    method: "POST", url: "Contacts",
                    body: Array(#"{"PartnerID":"BP0","FirstName":"C\#(round)"}"#.utf8))
                let uploading = device
                let upload = Task { try await uploading.upload() }
                try await Task.sleep(nanoseconds: UInt64(killAfter) * 1_000_000)
                GatewayCrashTests.killHard(gateways[through])
                _ = await upload.result
                // The device goes on through the other instance; the killed one comes back.
                await device.close()
                device = try await Self.provider(setup, port: ports[1 - through], fresh: false)
                gateways[through] = try await GatewayCrashTests.spawn(
                    backend: setup.backendRoot, postgres: setup.postgres.url, port: ports[through], extra: Self.flags)
                // A request in doubt that the backend does not show applied waits out
                // --in-doubt-after (the backend may still be applying it): the upload is
                // refused meanwhile, and the device sends again.
                var refusals = 0
                while true {
                    do {
                        try await device.upload()
                        break
                    } catch {
                        refusals += 1
                        guard refusals < 40 else { throw error }
                        try await Task.sleep(nanoseconds: 250_000_000)
                    }
                }
                // Requests still to send (the RequestQueue lists archived ones too, as failed).
                let queued = try await device.readEntities("RequestQueue").filter { $0.string("Status") != "failed" }
                let archive = try await device.readEntities("ErrorArchive")
                #expect(queued.isEmpty, "round \(round): \(queued) archive: \(archive)")
                #expect(
                    try await Self.count(setup, "BusinessPartners?$filter=PartnerID eq 'K\(round)'") == 1,
                    "round \(round), killed after \(killAfter) ms")
                let phone = try await GatewayUploadTests.backendRows(
                    setup, "BusinessPartners?$filter=PartnerID eq 'BP1'")
                #expect(phone.first?["Phone"]?.stringValue == "round \(round)")
                let contacts = try await Self.count(setup, "Contacts?$filter=FirstName eq 'C\(round)'")
                let archived = try await device.readEntities("ErrorArchive").filter {
                    $0.string("Code") == "RequestInDoubt" && $0.string("RequestBody")?.contains("C\(round)") == true
                }
                #expect(contacts <= 1, "round \(round): the contact was created \(contacts) times")
                #expect(
                    contacts == 1 || archived.count == 1, "round \(round): the contact is neither there nor archived")
                inDoubt += archived.count
            }
            print("GatewayUploadCrashTests (\(v2 ? "V2" : "V4")): \(inDoubt) of 6 server-keyed creates in doubt")
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        for gateway in gateways { GatewayCrashTests.killHard(gateway) }
        await setup.stop()
    }
}
