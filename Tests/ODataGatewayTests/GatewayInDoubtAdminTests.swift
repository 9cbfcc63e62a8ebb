import Foundation
import InteropSupport
import ODataCore
import ODataGateway
import ODataServer
import OfflineOData
import Testing

/// Issue 56: requests in doubt as an operator sees and settles them through the admin API. A
/// request whose forwarding was cut (a gateway process killed with `kill -9` while the backend
/// works on it) and one the device got back as `RequestInDoubt`; the operator's word reaches the
/// device (its repeat, or its ErrorArchive at the next download) and no other identity.
@Suite(.serialized) struct GatewayInDoubtAdminTests {
    typealias Ops = GatewayOperationsTests

    static func inDoubt(_ gateway: RunningGateway) async throws -> [JSONValue] {
        try Ops.json(try await Ops.admin(gateway, "GET", "/api/requests/in-doubt")).arrayValue ?? []
    }

    static func resolve(_ gateway: RunningGateway, backend: String, id: String, applied: Bool) async throws -> Int {
        try await Ops.admin(
            gateway, "POST", "/api/requests/in-doubt/resolve",
            body: #"{"backend":"\#(backend)","requestID":"\#(id)","applied":\#(applied)}"#
        ).status
    }

    /// A device's create whose answer the backend lost lands in its ErrorArchive as
    /// `RequestInDoubt`. The admin API lists it with what the gateway saw; the operator marks it
    /// applied; the device's next download writes that into the ErrorArchive entry. Only the
    /// device's identity can read the resolution: another user and an anonymous request get 404.
    @Test(arguments: [false, true])
    func anOperatorsWordReachesTheDevicesErrorArchive(v2: Bool) async throws {
        let setup = try await GatewayUploadTests.start(v2: v2, instances: 0)
        do {
            let gateway = try await Ops.adminGateway(setup)
            var parameters = OfflineODataParameters()
            parameters.storePath = setup.folder
            parameters.storeName = "alice"
            parameters.authenticator = StaticCredentials(.basic(user: "alice", password: "alice-password"))
            let device = OfflineODataProvider(serviceRoot: gateway.root, parameters: parameters)
            try await device.add(definingQuery: OfflineODataDefiningQuery(name: "Contacts", query: "Contacts"))
            try await device.open()
            _ = try await device.execute(
                method: "POST", url: "Contacts",
                body: GatewayUploadTests.body(#"{"PartnerID":"BP0","FirstName":"Doubt","LastName":"Admin"}"#))
            await setup.backend.service.faults.set([
                FaultRule(method: "POST", urlContains: "$batch", dropAfterCommit: true, times: 1)
            ])
            try await device.upload()
            let archived = try await device.readEntities("ErrorArchive")
            #expect(archived.first?.string("Code") == "RequestInDoubt", "\(archived)")
            let listed = try await Self.inDoubt(gateway)
            #expect(listed.count == 1, "\(listed)")
            let entry = try #require(listed.first)
            #expect(entry["state"]?.stringValue == "answered-in-doubt")
            #expect(entry["request"]?.stringValue?.hasPrefix("POST ") == true, "\(entry)")
            #expect(entry["request"]?.stringValue?.contains("Contacts") == true, "\(entry)")
            #expect(entry["user"]?.stringValue?.hasPrefix("basic:") == true, "\(entry)")
            #expect(entry["user"]?.stringValue?.contains("alice") == false)
            let id = try #require(entry["requestID"]?.stringValue)
            // Not yet decided: the device's own identity gets 404 too.
            let root = gateway.root.absoluteString
            func resolution(_ authorization: String?) async throws -> TransportResponse {
                try await Ops.get(
                    root + "$oodata/requests/" + id, headers: authorization.map { [("Authorization", $0)] } ?? [])
            }
            let alice = "Basic " + Data("alice:alice-password".utf8).base64EncodedString()
            #expect(try await resolution(alice).status == 404)
            // Bad words are refused, an unknown request is 404; then the operator decides.
            let bad = try await Ops.admin(gateway, "POST", "/api/requests/in-doubt/resolve", body: #"{"applied":1}"#)
            #expect(bad.status == 400)
            #expect(try await Self.resolve(gateway, backend: setup.backendRoot, id: "no-such", applied: true) == 404)
            #expect(try await Self.resolve(gateway, backend: setup.backendRoot, id: id, applied: true) == 200)
            let mallory = "Basic " + Data("mallory:alice-password".utf8).base64EncodedString()
            for other in [nil, mallory, "Basic " + Data("alice:other-password".utf8).base64EncodedString()] {
                let answer = try await resolution(other)
                #expect(answer.status == 404, "\(other ?? "anonymous")")
                #expect(!String(decoding: answer.body, as: UTF8.self).contains("applied"))
            }
            let own = try await resolution(alice)
            #expect(own.status == 200)
            #expect(try Ops.json(own)["resolution"]?.stringValue == "applied")
            #expect((try await Self.inDoubt(gateway)).first?["resolution"]?.stringValue == "applied")
            // The device's next download says so in the ErrorArchive entry, once.
            try await device.download()
            try await device.download()
            let after = try await device.readEntities("ErrorArchive")
            #expect(after.count == 1)
            let message = after.first?.string("Message") ?? ""
            #expect(message.hasPrefix("Resolved by the gateway's operator as applied"), "\(message)")
            #expect(message.components(separatedBy: "Resolved by").count == 2, "once: \(message)")
            #expect(message.contains("cannot tell whether request"), "the gateway's words are kept: \(message)")
            #expect(try await GatewayUploadTests.backendRows(setup, "Contacts?$filter=FirstName eq 'Doubt'").count == 1)
            await device.close()
            await gateway.stop()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// `kill -9` of a gateway process while the backend works on a forwarded request leaves its
    /// record without an answer and without a forwarder: the admin API lists it as
    /// `forwarding-cut`. Marked applied, its repeat is answered without reaching the backend (a
    /// create: 409 saying it was applied). Marked not applied (the backend refused it), its repeat
    /// is forwarded and applied once.
    @Test(arguments: [false, true])
    func aRequestCutOffByAKilledGatewayIsSettledByTheOperator(v2: Bool) async throws {
        let setup = try await GatewayUploadTests.start(v2: v2, instances: 0)
        var processes: [Process] = []
        do {
            let gateway = try await Ops.adminGateway(setup)
            let root = gateway.root.absoluteString
            /// Sends `batch` through a gateway process killed while the backend delays.
            func cutOff(_ batch: MultipartBatch, fault: FaultRule) async throws {
                let port = Spawn.freePort()
                let process = try await GatewayCrashTests.spawn(
                    backend: setup.backendRoot, postgres: setup.postgres.url, port: port)
                processes.append(process)
                await setup.backend.service.faults.set([fault])
                await setup.backend.service.journal.clear()
                let sending = Task { try? await GatewayUploadTests.send(batch, to: "http://127.0.0.1:\(port)/") }
                // The kill lands while the backend holds the forwarded batch: not after a fixed
                // time, which a loaded machine can spend before the gateway forwards at all.
                var waited = 0
                while await GatewayUploadTests.batches(setup) == 0 {
                    guard waited < 1500 else {
                        throw PostgresServer.Failure(description: "the backend never received the forwarded batch")
                    }
                    waited += 1
                    try await Task.sleep(for: .milliseconds(20))
                }
                try await Task.sleep(for: .milliseconds(200))
                GatewayCrashTests.killHard(process)
                _ = await sending.value
                // The backend finishes its delay (and commits or refuses) after the kill.
                try await Task.sleep(for: .milliseconds(2500))
                await setup.backend.service.faults.set([])
            }
            func listed(_ id: String) async throws -> JSONValue? {
                // PostgreSQL ends the killed process's session (and its locks) at once; allow it a moment.
                for _ in 0..<50 {
                    if let found = try await Self.inDoubt(gateway).first(where: { $0["requestID"]?.stringValue == id })
                    {
                        return found
                    }
                    try await Task.sleep(for: .milliseconds(100))
                }
                return nil
            }
            // Applied: the backend committed after the gateway died.
            let created = GatewayUploadTests.batch(id: "cut-\(UUID().uuidString)", name: "CutApplied")
            let createdID = try #require(created.operations.first?.message.headers["Repeatability-Request-ID"])
            try await cutOff(
                created, fault: FaultRule(method: "POST", urlContains: "$batch", delayMilliseconds: 2500, times: 1))
            let entry = try #require(try await listed(createdID), "the cut request is listed")
            #expect(entry["state"]?.stringValue == "forwarding-cut")
            #expect(entry["request"]?.stringValue?.hasPrefix("POST ") == true, "\(entry)")
            #expect(
                try await GatewayUploadTests.backendRows(setup, "Contacts?$filter=FirstName eq 'CutApplied'").count == 1
            )
            #expect(try await Self.resolve(gateway, backend: setup.backendRoot, id: createdID, applied: true) == 200)
            await setup.backend.service.journal.clear()
            let (repeated, answer) = try await GatewayUploadTests.send(created, to: root)
            #expect(repeated.status < 300)
            let message = answer?.operations.first?.message
            #expect(message?.status == 409)
            let said = String(decoding: message?.body ?? [], as: UTF8.self)
            #expect(said.contains("An operator confirmed"), "\(said)")
            #expect(await GatewayUploadTests.batches(setup) == 0, "the repeat did not reach the backend")
            #expect(
                try await GatewayUploadTests.backendRows(setup, "Contacts?$filter=FirstName eq 'CutApplied'").count == 1
            )
            // Not applied: the backend refused it after its delay.
            let refused = GatewayUploadTests.batch(id: "cut-\(UUID().uuidString)", name: "CutRefused")
            let refusedID = try #require(refused.operations.first?.message.headers["Repeatability-Request-ID"])
            try await cutOff(
                refused,
                fault: FaultRule(
                    method: "POST", urlContains: "$batch", status: 503, code: "Busy", message: "busy",
                    delayMilliseconds: 2500, times: 1))
            #expect(try await listed(refusedID)?["state"]?.stringValue == "forwarding-cut")
            #expect(
                try await GatewayUploadTests.backendRows(setup, "Contacts?$filter=FirstName eq 'CutRefused'").isEmpty)
            #expect(try await Self.resolve(gateway, backend: setup.backendRoot, id: refusedID, applied: false) == 200)
            let settled = try await Self.inDoubt(gateway)
            #expect(!settled.contains { $0["requestID"]?.stringValue == refusedID }, "settled: no longer in doubt")
            let (again, againAnswer) = try await GatewayUploadTests.send(refused, to: root)
            #expect(again.status < 300)
            #expect(againAnswer?.operations.first?.message.status == 201)
            #expect(
                try await GatewayUploadTests.backendRows(setup, "Contacts?$filter=FirstName eq 'CutRefused'").count == 1
            )
            await gateway.stop()
        } catch {
            Issue.record("\(error)")
        }
        for process in processes where process.isRunning { GatewayCrashTests.killHard(process) }
        await setup.stop()
    }
}
