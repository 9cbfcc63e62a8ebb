import Foundation
import ODataCore
import ODataStore
import OfflineOData
import Testing

@testable import ODataGateway

private typealias Ops = GatewayOperationsTests
private typealias Users = GatewayIsolationTests

/// Issue 56: support stores. A device's `sendStore(to: "$oodata/support/<name>")` goes to the
/// gateway, which keeps it in PostgreSQL per identity within a size limit and a retention;
/// only the admin port lists and serves it.
@Suite(.serialized) struct GatewaySupportStoreTests {
    static func post(
        _ url: String, authorization: String?, range: String?, body: [UInt8]
    ) async throws -> TransportResponse {
        var headers = HTTPHeaders()
        headers["Content-Type"] = "application/octet-stream"
        if let authorization { headers["Authorization"] = authorization }
        if let range { headers["Content-Range"] = range }
        return try await DefaultTransport.make().send(
            TransportRequest(method: "POST", url: url, headers: headers, body: body), timeout: 30)
    }

    /// Alice's encrypted store, sent in chunks through the gateway re-keyed with a support key,
    /// is listed on the admin port with her device and downloaded whole: it opens with the
    /// support key only and has her rows and her queued change. Nobody else can add to it,
    /// read it or send a store without credentials the backend takes; a store over the limit is
    /// refused before any byte is kept, and so is one that would take the endpoint's stores past
    /// their total; an identity keeps at most three; retention removes them.
    @Test(arguments: [false, true])
    func aDevicesStoreReachesTheOperatorOnly(v2: Bool) async throws {
        let setup = try await Users.start(v2: v2)
        do {
            let gateway = try await Ops.adminGateway(setup) { $0.backends[0].supportStoreTotalLimit = 4 << 20 }
            let root = gateway.root.absoluteString
            var parameters = OfflineODataParameters()
            parameters.storePath = setup.folder
            parameters.storeName = "alice-support"
            parameters.storeEncryptionKey = "alices-app-key"
            parameters.applicationVersion = "field-app 4.0"
            parameters.authenticator = StaticCredentials(.basic(user: "alice", password: "alice-pw"))
            let device = OfflineODataProvider(serviceRoot: gateway.root, parameters: parameters)
            try await device.add(definingQuery: OfflineODataDefiningQuery(name: "Contacts", query: "Contacts"))
            try await device.open()
            let contacts = try await device.readEntities("Contacts")
            let first = try #require(contacts.first?.int64("ContactID"))
            _ = try await device.execute(
                method: "PATCH", url: "Contacts(\(first))", body: Array(#"{"LastName":"Queued"}"#.utf8))
            try await device.sendStore(
                to: "$oodata/support/alice-tablet.db", supportKey: "support-key", chunkSize: 16_384)
            // The device's Client-Instance-ID, as the gateway noted it (in the background).
            var instance: String?
            for _ in 0..<50 where instance == nil {
                let devices = try Ops.json(try await Ops.admin(gateway, "GET", "/api/devices")).arrayValue ?? []
                instance = devices.first?["clientInstanceID"]?.stringValue
                if instance == nil { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(instance != nil)

            let listed = try Ops.json(try await Ops.admin(gateway, "GET", "/api/support")).arrayValue ?? []
            #expect(listed.count == 1, "\(listed)")
            let entry = try #require(listed.first)
            #expect(entry["name"]?.stringValue == "alice-tablet.db")
            #expect(entry["complete"]?.jsonBool == true)
            #expect(entry["clientInstanceID"]?.stringValue == instance)
            #expect(entry["appVersion"]?.stringValue == "field-app 4.0")
            #expect(entry["user"]?.stringValue?.hasPrefix("basic:") == true)
            #expect(entry["user"]?.stringValue?.contains("alice") == false, "no names: \(entry)")
            let size = try #require(entry["size"]?.jsonInt)
            #expect(size > 16_384, "several chunks")
            let id = try #require(entry["id"]?.jsonInt)

            // Others: no credentials the backend takes, another user adding to Alice's name (his
            // own namespace has no such store), a device reading it, the public port.
            let chunk = [UInt8](repeating: 7, count: 10)
            let support = root + "$oodata/support/alice-tablet.db"
            for authorization in [nil, Users.basic("mallory", "guess"), Users.basic("alice", "wrong")] {
                let answer = try await Self.post(support, authorization: authorization, range: nil, body: chunk)
                #expect([401, 403].contains(answer.status), "\(authorization ?? "anonymous"): \(answer.status)")
                if authorization == nil {
                    #expect(String(decoding: answer.body, as: UTF8.self).contains("SupportNeedsCredentials"))
                }
            }
            let bobs = try await Self.post(
                support, authorization: Users.bob, range: "bytes \(size - 10)-\(size - 1)/\(size)", body: chunk)
            #expect(bobs.status == 416, "\(bobs.status)")
            let read = try await Ops.get(support, headers: [("Authorization", Users.alice)])
            #expect(read.status == 405)
            #expect(try await Ops.get(root + "api/support").status != 200)
            #expect(
                try await Ops.admin(gateway, "GET", "/api/support/\(id)", authorization: Users.alice).status == 401)
            // A store over the limit (32 MiB by default) is refused at its first chunk.
            let large = try await Self.post(
                root + "$oodata/support/large", authorization: Users.alice, range: "bytes 0-9/\(40 << 20)", body: chunk)
            #expect(large.status == 413)
            #expect(String(decoding: large.body, as: UTF8.self).contains("support_store_max_mb"))
            for range in ["bytes 0-3/10", "bytes 0--9/10", "bytes +0-9/10", "bytes 0-9/+10", "bytes 0-9/", "0-9/10"] {
                let bad = try await Self.post(support, authorization: Users.alice, range: range, body: chunk)
                #expect(bad.status == 400, "\(range): \(bad.status)")
            }
            #expect(
                try await Self.post(
                    root + "$oodata/support/..%2Fescape", authorization: Users.alice, range: nil, body: chunk
                ).status == 400)

            // The operator downloads it: the support key opens it, the app's does not.
            let download = try await Ops.admin(gateway, "GET", "/api/support/\(id)")
            #expect(download.status == 200)
            #expect(download.body.count == Int(size))
            #expect(download.headers["Content-Disposition"]?.contains("alice-tablet.db") == true)
            let file = setup.folder.appendingPathComponent("downloaded-\(v2).db").path
            try Data(download.body).write(to: URL(fileURLWithPath: file))
            #expect(throws: DatabaseError.self) {
                try Connection(path: file, options: Connection.Options(key: "alices-app-key"))
            }
            let copy = try Connection(path: file, options: Connection.Options(key: "support-key"))
            let rows = try copy.query("SELECT count(*) FROM \"es_Contacts\"").first?.first
            #expect(rows == .integer(Int64(contacts.count)))
            let queued = try copy.query("SELECT method, url FROM oo_queue")
            // V2 writes an Edm.Int64 key with its suffix: Contacts(1L).
            #expect(queued == [[.text("PATCH"), .text(v2 ? "Contacts(\(first)L)" : "Contacts(\(first))")]])
            copy.close()
            #expect(try await Ops.admin(gateway, "GET", "/api/support/\(id + 1000)").status == 404)

            // At most three per identity: the oldest goes.
            for name in ["s1", "s2", "s3"] {
                let answer = try await Self.post(
                    root + "$oodata/support/" + name, authorization: Users.alice, range: nil, body: chunk)
                #expect(answer.status == 200, "\(name): \(String(decoding: answer.body, as: UTF8.self))")
            }
            // Two first chunks of one store at once are taken one after the other.
            async let one = Self.post(
                root + "$oodata/support/bobs", authorization: Users.bob, range: nil, body: chunk)
            async let other = Self.post(
                root + "$oodata/support/bobs", authorization: Users.bob, range: nil, body: chunk)
            let bobs1 = try await one
            let bobs2 = try await other
            #expect(bobs1.status == 200 && bobs2.status == 200, "\(bobs1.status) \(bobs2.status)")
            // A store that would take the endpoint's stores past support_store_total_mb (4 MiB
            // here) is refused, and Alice's oldest, which it would have replaced, stays.
            let full = try await Self.post(
                root + "$oodata/support/s4", authorization: Users.alice, range: "bytes 0-9/\(4 << 20)", body: chunk)
            #expect(full.status == 413)
            #expect(String(decoding: full.body, as: UTF8.self).contains("support_store_total_mb"))
            let kept = try Ops.json(try await Ops.admin(gateway, "GET", "/api/support")).arrayValue ?? []
            #expect(Set(kept.compactMap { $0["name"]?.stringValue }) == ["s1", "s2", "s3", "bobs"], "\(kept)")
            // The page lists them with a download link.
            let page = try await Ops.get(
                "http://127.0.0.1:\(try #require(gateway.adminPort))/",
                headers: [("Authorization", "Bearer \(Ops.token)")])
            #expect(String(decoding: page.body, as: UTF8.self).contains("Download</a>"))
            // Removed by the operator, and by retention.
            let s1 = try #require(kept.first { $0["name"]?.stringValue == "s1" }?["id"]?.jsonInt)
            var headers = HTTPHeaders()
            headers["Authorization"] = "Bearer \(Ops.token)"
            headers["Content-Type"] = "application/json"
            let removed = try await DefaultTransport.make().send(
                TransportRequest(
                    method: "DELETE", url: "http://127.0.0.1:\(try #require(gateway.adminPort))/api/support/\(s1)",
                    headers: headers), timeout: 30)
            #expect(removed.status == 200)
            let notAnID = try await DefaultTransport.make().send(
                TransportRequest(
                    method: "DELETE", url: "http://127.0.0.1:\(try #require(gateway.adminPort))/api/support/abc",
                    headers: headers), timeout: 30)
            #expect(notAnID.status == 400)
            try await gateway.gateway.store.removeSupportStores(backend: setup.backendRoot, olderThan: 0)
            #expect(try await gateway.gateway.store.supportStores().isEmpty)
            await device.close()
            await gateway.stop()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}
