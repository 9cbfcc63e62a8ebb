import Foundation
import ODataCore
import ODataGateway
import ODataServer
import OfflineOData
import Testing

/// Issue 36, item 3: while an upload or download waits on the gateway, the device pulls the
/// gateway's status every `cloudProgressPullInterval` ms and reports the server's steps, with
/// step numbers that never go back. Without a gateway, nothing is pulled.
@Suite(.serialized) struct GatewayProgressTests {
    final class Recorder: OfflineODataDelegate, @unchecked Sendable {
        private let lock = NSLock()
        private var updates: [OfflineODataProgress] = []
        var progress: [OfflineODataProgress] { lock.withLock { updates } }
        func offlineODataProvider(didUpdate progress: OfflineODataProgress) {
            lock.withLock { updates.append(progress) }
        }
        func offlineODataProvider(requestDidFail request: OfflineODataFailedRequest) {}
    }

    static func device(_ root: URL, folder: URL, name: String, recorder: Recorder) async throws -> OfflineODataProvider
    {
        var parameters = OfflineODataParameters()
        parameters.storePath = folder
        parameters.storeName = name
        parameters.cloudProgressPullInterval = 100  // below the floor: 500 ms
        let provider = OfflineODataProvider(serviceRoot: root, parameters: parameters, delegate: recorder)
        try await provider.add(
            definingQuery: OfflineODataDefiningQuery(name: "BusinessPartners", query: "BusinessPartners"))
        try await provider.open()
        return provider
    }

    static func neverBack(_ updates: [OfflineODataProgress], _ operation: OfflineODataOperation) -> Bool {
        let numbers = updates.filter { $0.operation == operation }.map(\.stepNumber)
        return zip(numbers, numbers.dropFirst()).allSatisfy { $0 <= $1 }
    }

    @Test(arguments: [false, true])
    func aDeviceSeesTheGatewaysStepsDuringASlowUploadAndDownload(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2, instances: 1,
            backendOptions: {
                $0.honorsRepeatableRequests = false
            })
        do {
            let recorder = Recorder()
            let device = try await Self.device(
                setup.gateways[0].root, folder: setup.folder, name: "progress",
                recorder: recorder)
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"1"}"#.utf8))
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"2"}"#.utf8))
            // A slow backend: the $batch takes 1.6 s, the refresh's read 1.6 s.
            await setup.backend.service.faults.set([
                FaultRule(method: "POST", urlContains: "$batch", delayMilliseconds: 1600),
                FaultRule(method: "GET", urlContains: "BusinessPartners", delayMilliseconds: 1600),
            ])
            try await device.upload()
            let upload = recorder.progress.filter { $0.operation == .upload }
            let sending = try #require(upload.first { $0.step == .sendingDataToServer })
            let server = upload.filter { $0.parameters["server"] == "true" }
            #expect(
                server.contains { $0.step == .processingRequests && $0.parameters["count"] == "2" },
                "\(upload.map { "\($0.stepNumber) \($0.step) \($0.parameters)" })")
            // The gateway's steps come under the step the device is at, never moving it back.
            #expect(
                server.allSatisfy { $0.stepNumber == sending.stepNumber - 1 || $0.stepNumber == sending.stepNumber })
            #expect(Self.neverBack(recorder.progress, .upload))
            try await device.download()
            let download = recorder.progress.filter { $0.operation == .download && $0.parameters["server"] == "true" }
            #expect(download.contains { $0.step == .waitingForDownload }, "\(download)")
            #expect(Self.neverBack(recorder.progress, .download))
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// The same slow upload straight to the backend: no progress is pulled from it.
    @Test func aPlainBackendIsNeverAskedForProgress() async throws {
        let setup = try await GatewayDeltaTests.start(v2: false, instances: 0)
        do {
            let recorder = Recorder()
            let device = try await Self.device(
                setup.backend.v4Root, folder: setup.folder, name: "plain", recorder: recorder)
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"1"}"#.utf8))
            await setup.backend.service.faults.set([
                FaultRule(method: "POST", urlContains: "$batch", delayMilliseconds: 1600)
            ])
            await setup.backend.service.journal.clear()
            try await device.upload()
            let sent = await setup.backend.service.journal.requests()
            #expect(!sent.contains { $0.contains("$oodata") }, "\(sent)")
            #expect(!recorder.progress.contains { $0.parameters["server"] == "true" })
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}
