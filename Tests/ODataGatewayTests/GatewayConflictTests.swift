import Foundation
import ODataCore
import ODataServer
import OfflineOData
import Testing

/// Conflicts through the gateway (SPEC §13, §15): the device reads the backend's copy through
/// the gateway, which gives its own ETag for a backend without ETags, so that a resend is
/// checked as every change is and the entity's next change goes through.
@Suite(.serialized) struct GatewayConflictTests {
    final class Listener: OfflineODataDelegate, @unchecked Sendable {
        private let lock = NSLock()
        private var _resolved: [OfflineODataConflictResolved] = []
        private var _failures: [OfflineODataFailedRequest] = []
        var resolved: [OfflineODataConflictResolved] { lock.withLock { _resolved } }
        var failures: [OfflineODataFailedRequest] { lock.withLock { _failures } }
        func offlineODataProvider(
            _ provider: OfflineODataProvider, didResolveConflict resolution: OfflineODataConflictResolved
        ) {
            lock.withLock { _resolved.append(resolution) }
        }
        func offlineODataProvider(requestDidFail request: OfflineODataFailedRequest) {
            lock.withLock { _failures.append(request) }
        }
    }

    static func backend(_ setup: GatewayDeltaTests.Setup, _ key: String) async throws -> JSONValue? {
        try await GatewayUploadTests.backendRows(setup, "BusinessPartners?$filter=PartnerID eq '\(key)'").first
    }

    static func phone(_ provider: OfflineODataProvider, _ key: String) async throws -> Entity? {
        try await provider.readEntities("BusinessPartners('\(key)')").first
    }

    /// Disjoint changes merge through the gateway, on a backend without ETags (the gateway's)
    /// and on one with its own: the resend carries the ETag the copy came with, the entity
    /// takes an ETag its next change passes with, and overlapping changes are archived with
    /// the backend's copy and its ETag.
    @Test(arguments: [(false, false), (true, false), (false, true), (true, true)])
    func mergeDisjointThroughTheGateway(v2: Bool, backendETags: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2, instances: 1,
            backendOptions: {
                $0.sendsETags = backendETags
                $0.honorsRepeatableRequests = false
            })
        let listener = Listener()
        do {
            let device = try await GatewayDeltaTests.device(
                setup, gateway: 0, name: "merge", delegate: listener, configure: { $0.conflictPolicy = .mergeDisjoint })
            let first = try await Self.phone(device, "BP1")?.control.etag
            #expect(first?.hasPrefix("W/\"gw.") == !backendETags, "\(first ?? "nil")")
            // Another user changes the e-mail; the device the phone: disjoint.
            #expect(
                try await GatewayDeltaTests.backendSend(
                    setup, "PATCH", "BusinessPartners('BP1')", #"{"Email":"office@example.com"}"#) < 300)
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"field"}"#.utf8))
            try await device.upload()
            #expect(listener.failures.isEmpty, "\(listener.failures)")
            #expect(listener.resolved.map(\.outcome) == [.resent])
            #expect(listener.resolved.first?.backendChanges == ["Email"])
            var bp1 = try await Self.backend(setup, "BP1")
            #expect(bp1?["Email"]?.stringValue == "office@example.com")
            #expect(bp1?["Phone"]?.stringValue == "field")
            let local = try await Self.phone(device, "BP1")
            #expect(local?.string("Email") == "office@example.com" && local?.string("Phone") == "field")
            let merged = local?.control.etag
            #expect(merged != nil && merged != first, "\(merged ?? "nil")")
            #expect(merged?.hasPrefix("W/\"gw.") == !backendETags, "\(merged ?? "nil")")
            // The entity's next change goes through with the ETag it took: no conflict.
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"second"}"#.utf8))
            try await device.upload()
            #expect(listener.failures.isEmpty, "\(listener.failures)")
            #expect(listener.resolved.count == 1)
            bp1 = try await Self.backend(setup, "BP1")
            #expect(bp1?["Phone"]?.stringValue == "second")
            // Overlapping changes are archived, with the backend's copy and its ETag.
            #expect(
                try await GatewayDeltaTests.backendSend(
                    setup, "PATCH", "BusinessPartners('BP1')", #"{"Phone":"office"}"#) < 300)
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"third"}"#.utf8))
            try await device.upload()
            #expect(listener.failures.map(\.httpStatus) == [412])
            let id = try #require(listener.failures.first?.requestID)
            let copies = try #require(try await device.conflictCopies(forRequest: id))
            #expect(copies.backend?.string("Phone") == "office")
            #expect(copies.original?.string("Phone") == "second")
            #expect(copies.local?.string("Phone") == "third")
            #expect(copies.backend?.control.etag?.hasPrefix("W/\"gw.") == !backendETags)
            #expect(copies.backend?.control.etag != merged)
            bp1 = try await Self.backend(setup, "BP1")
            #expect(bp1?["Phone"]?.stringValue == "office")
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// Two gateway instances on one PostgreSQL, a backend without ETags: a device's change made
    /// through the second instance is caught by the first when another device's older copy
    /// comes in there (the gateway's ETags are the scopes', kept in PostgreSQL, not in an
    /// instance), and `mergeDisjoint` resolves it through the first; an overlapping change is
    /// archived. Both devices end with what the backend holds.
    @Test(arguments: [false, true])
    func aChangeThroughAnotherInstanceIsCaughtThere(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2, instances: 2,
            backendOptions: {
                $0.sendsETags = false
                $0.honorsRepeatableRequests = false
            })
        let listener = Listener()
        do {
            let first = try await GatewayDeltaTests.device(
                setup, gateway: 0, name: "first", delegate: listener,
                configure: { $0.conflictPolicy = .mergeDisjoint })
            let second = try await GatewayDeltaTests.device(setup, gateway: 1, name: "second")
            let seen = try await Self.phone(first, "BP2")?.control.etag
            #expect(seen?.hasPrefix("W/\"gw.") == true, "\(seen ?? "nil")")
            #expect(try await Self.phone(second, "BP2")?.control.etag == seen, "one scope, one ETag")
            // The second device changes the e-mail through the second instance: it passes.
            _ = try await second.execute(
                method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Email":"second@example.com"}"#.utf8))
            try await second.upload()
            #expect(try await Self.backend(setup, "BP2")?["Email"]?.stringValue == "second@example.com")
            // The first device's phone, sent with the ETag it read before: 412 on the first
            // instance, the copy read there, merged and sent again.
            _ = try await first.execute(
                method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"first"}"#.utf8))
            try await first.upload()
            #expect(listener.failures.isEmpty, "\(listener.failures)")
            #expect(listener.resolved.map(\.outcome) == [.resent])
            #expect(listener.resolved.first?.backendChanges == ["Email"])
            var row = try await Self.backend(setup, "BP2")
            #expect(row?["Email"]?.stringValue == "second@example.com" && row?["Phone"]?.stringValue == "first")
            // The second device changes the phone again, from its old copy: the second instance
            // refuses it (the first device's change came in since), and without a policy it is
            // archived with the backend's copy.
            _ = try await second.execute(
                method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"second"}"#.utf8))
            try await second.upload()
            #expect(try await second.readEntities("ErrorArchive?$filter=HTTPStatusCode eq 412").count == 1)
            row = try await Self.backend(setup, "BP2")
            #expect(row?["Phone"]?.stringValue == "first", "the refused change was not applied")
            // A download brings both devices to the backend's row.
            try await first.download()
            #expect(try await Self.phone(first, "BP2")?.string("Phone") == "first")
            #expect(try await Self.phone(first, "BP2")?.string("Email") == "second@example.com")
            await first.close()
            await second.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A third user's change made while the device resolves is caught: the resend carries the
    /// gateway's ETag of the copy the resolver saw, and the gateway refuses it (412, archived).
    /// Then `backendWins`: the entity takes the backend's copy with the gateway's ETag, and its
    /// next change goes through.
    @Test(arguments: [false, true])
    func aResendIsCheckedAndBackendWinsKeepsTheGatewaysETag(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2, instances: 1,
            backendOptions: {
                $0.sendsETags = false
                $0.honorsRepeatableRequests = false
            })
        let listener = Listener()
        let root = setup.backendRoot
        do {
            let device = try await GatewayDeltaTests.device(
                setup, gateway: 0, name: "resend", delegate: listener,
                configure: { parameters in
                    parameters.conflictPolicies["BusinessPartners"] = .custom { conflict in
                        guard conflict.url == "BusinessPartners('BP1')" else { return .takeBackend }
                        // A third user changes the entity while the device decides.
                        var headers = HTTPHeaders()
                        headers["Content-Type"] = "application/json"
                        headers["If-Match"] = "*"
                        _ = try? await DefaultTransport.make().send(
                            TransportRequest(
                                method: "PATCH", url: root + "BusinessPartners('BP1')", headers: headers,
                                body: Array(#"{"CompanyName":"third user"}"#.utf8)),
                            timeout: 30)
                        return .resend
                    }
                })
            #expect(
                try await GatewayDeltaTests.backendSend(
                    setup, "PATCH", "BusinessPartners('BP1')", #"{"Email":"office@example.com"}"#) < 300)
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"field"}"#.utf8))
            try await device.upload()
            #expect(listener.resolved.isEmpty, "\(listener.resolved)")
            #expect(listener.failures.map(\.httpStatus) == [412])
            // The resend was sent, with the gateway's ETag of the copy the resolver saw, and the
            // gateway refused it: the third user's change came after that copy.
            #expect(
                listener.failures.first?.message.contains("does not match the ETag the gateway gave") == true,
                "\(listener.failures)")
            let refused = try #require(listener.failures.first?.requestID)
            let seen = try await device.conflictCopies(forRequest: refused)
            #expect(seen?.backend?.control.etag?.hasPrefix("W/\"gw.") == true)
            var bp1 = try await Self.backend(setup, "BP1")
            #expect(bp1?["CompanyName"]?.stringValue == "third user")
            #expect(bp1?["Phone"]?.stringValue != "field")

            // backendWins on BP2: the local change is dropped, the entity takes the backend's
            // copy and the gateway's ETag of it.
            #expect(
                try await GatewayDeltaTests.backendSend(
                    setup, "PATCH", "BusinessPartners('BP2')", #"{"Phone":"office"}"#) < 300)
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"field"}"#.utf8))
            try await device.upload()
            #expect(listener.resolved.map(\.outcome) == [.backendWins])
            #expect(listener.failures.count == 1)
            let bp2 = try await Self.phone(device, "BP2")
            #expect(bp2?.string("Phone") == "office")
            #expect(bp2?.control.etag?.hasPrefix("W/\"gw.") == true, "\(bp2?.control.etag ?? "nil")")
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"after"}"#.utf8))
            try await device.upload()
            #expect(listener.failures.count == 1, "\(listener.failures)")
            bp1 = try await Self.backend(setup, "BP2")
            #expect(bp1?["Phone"]?.stringValue == "after")
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// The gateway's conditional read of one entity, as any client sees it: `304` while the
    /// row still has the named ETag, the entity with the gateway's new ETag once it changed.
    @Test(arguments: [false, true])
    func aConditionalReadNamesTheGatewaysETag(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2, instances: 1, backendOptions: { $0.sendsETags = false })
        do {
            let device = try await GatewayDeltaTests.device(setup, gateway: 0, name: "read")
            let etag = try #require(try await Self.phone(device, "BP1")?.control.etag)
            await device.close()
            func read(_ condition: String?) async throws -> TransportResponse {
                var headers = HTTPHeaders()
                headers["Accept"] = "application/json"
                if let condition { headers["If-None-Match"] = condition }
                return try await DefaultTransport.make().send(
                    TransportRequest(
                        method: "GET", url: setup.gateways[0].root.absoluteString + "BusinessPartners('BP1')",
                        headers: headers),
                    timeout: 30)
            }
            let unchanged = try await read(etag)
            #expect(unchanged.status == 304)
            #expect(unchanged.headers["ETag"] == etag)
            #expect(
                try await GatewayDeltaTests.backendSend(
                    setup, "PATCH", "BusinessPartners('BP1')", #"{"Phone":"office"}"#) < 300)
            let changed = try await read(etag)
            #expect(changed.status == 200)
            let newETag = try #require(changed.headers["ETag"])
            #expect(newETag.hasPrefix("W/\"gw.") && newETag != etag)
            let json = try JSONValue.parse(changed.body)
            let entity = v2 ? json["d"] : json
            #expect(entity?["Phone"]?.stringValue == "office")
            let inBody = v2 ? entity?["__metadata"]?["etag"]?.stringValue : entity?["@odata.etag"]?.stringValue
            #expect(inBody == newETag)
            if !v2 {
                #expect(json["@odata.context"]?.stringValue?.hasSuffix("$metadata#BusinessPartners/$entity") == true)
            }
            // Without the condition the backend's answer goes as it came: no ETag.
            let plain = try await read(nil)
            #expect(plain.status == 200 && plain.headers["ETag"] == nil)
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A 412 for an entity that did not change (here the backend refuses once for its own
    /// reasons): the copy's conditional read is `304` with the gateway's ETag, the device reads
    /// the entity again and keeps that ETag, and `clientWins` resends with it (checked, never
    /// `*` unchecked). Requests one by one, so the backend's refusal is the device's answer.
    @Test(arguments: [false, true])
    func aNotModifiedCopyKeepsTheGatewaysETag(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2, instances: 1,
            backendOptions: {
                $0.sendsETags = false
                $0.honorsRepeatableRequests = false
            })
        let listener = Listener()
        do {
            let device = try await GatewayDeltaTests.device(
                setup, gateway: 0, name: "unchanged", delegate: listener,
                configure: {
                    $0.conflictPolicy = .clientWins
                    $0.backendSupportsBatch = false
                })
            let etag = try #require(try await Self.phone(device, "BP1")?.control.etag)
            _ = try await device.execute(
                method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"field"}"#.utf8))
            await setup.backend.service.faults.set([
                FaultRule(bodyContains: "field", status: 412, code: "PreconditionFailed", times: 1)
            ])
            await setup.backend.service.journal.clear()
            try await device.upload()
            #expect(listener.failures.isEmpty, "\(listener.failures)")
            #expect(listener.resolved.map(\.outcome) == [.resent])
            #expect(try await Self.backend(setup, "BP1")?["Phone"]?.stringValue == "field")
            // Both sendings went through the gateway's check: the backend saw `If-Match: *`
            // (the gateway's, after a passed check) each time.
            let sent = await setup.backend.service.journal.requestHeaders().filter {
                !$0.request.hasPrefix("GET") && $0.request.contains("BP1")
            }
            #expect(sent.count == 2 && sent.allSatisfy { $0.headers["If-Match"] == "*" }, "\(sent)")
            let local = try await Self.phone(device, "BP1")?.control.etag
            #expect(local?.hasPrefix("W/\"gw.") == true && local != etag, "\(local ?? "nil")")
            await device.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }

    /// A conditional read naming another user's scope is answered as the backend answers,
    /// without the gateway's ETag; the scope's own user gets `304`.
    @Test(arguments: [false, true])
    func anotherUsersScopeIsNotUsedForAConditionalRead(v2: Bool) async throws {
        let setup = try await GatewayDeltaTests.start(
            v2: v2, instances: 1, backendOptions: { $0.sendsETags = false })
        do {
            let root = setup.gateways[0].root.absoluteString
            func get(_ url: String, as user: String, condition: String? = nil) async throws -> TransportResponse {
                var headers = HTTPHeaders()
                headers["Accept"] = "application/json"
                headers["Authorization"] = "Bearer " + user
                if let condition {
                    headers["If-None-Match"] = condition
                } else {
                    headers["Prefer"] = "odata.track-changes"
                }
                return try await DefaultTransport.make().send(
                    TransportRequest(method: "GET", url: root + url, headers: headers), timeout: 30)
            }
            let page = try JSONValue.parse(try await get("BusinessPartners", as: "alice").body)
            let rows = (v2 ? page["d"]?["results"]?.arrayValue : page["value"]?.arrayValue) ?? []
            let bp1 = try #require(rows.first { $0["PartnerID"]?.stringValue == "BP1" })
            let etag = try #require(
                v2 ? bp1["__metadata"]?["etag"]?.stringValue : bp1["@odata.etag"]?.stringValue)
            #expect(etag.hasPrefix("W/\"gw."))
            let bob = try await get("BusinessPartners('BP1')", as: "bob", condition: etag)
            #expect(bob.status == 200 && bob.headers["ETag"] == nil, "\(bob.status) \(bob.headers)")
            #expect(!String(decoding: bob.body, as: UTF8.self).contains("gw."))
            let alice = try await get("BusinessPartners('BP1')", as: "alice", condition: etag)
            #expect(alice.status == 304 && alice.headers["ETag"] == etag)
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}
