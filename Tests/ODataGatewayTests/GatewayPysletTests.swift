import Foundation
import InteropSupport
import ODataCore
import ODataGateway
import OfflineOData
import Testing

/// Issue 35: a third-party V2 backend without delta links or `$batch` behind the gateway:
/// pyslet's in-memory server from PyPI (`Tests/Interop/pyslet_producer.py`, pages of 4). A
/// device downloads through the gateway and gets deltas the backend cannot give.
@Suite(.serialized) struct GatewayPysletTests {
    static func send(
        _ root: String, _ method: String, _ url: String, _ body: String? = nil
    ) async throws
        -> TransportResponse
    {
        var headers = HTTPHeaders()
        headers["Accept"] = "application/json"
        if body != nil { headers["Content-Type"] = "application/json" }
        return try await DefaultTransport.make().send(
            TransportRequest(method: method, url: root + url, headers: headers, body: Array((body ?? "").utf8)),
            timeout: 30)
    }

    /// Every entity of `set` from pyslet, following its `{"uri": …}` next links.
    static func truth(_ root: String, _ set: String, key: String, field: String) async throws -> [String] {
        var rows: [JSONValue] = []
        var next: String? = root + set
        while let current = next {
            let response = try await DefaultTransport.make().send(
                TransportRequest(method: "GET", url: current, headers: HTTPHeaders([("Accept", "application/json")])),
                timeout: 30)
            let json = try JSONValue.parse(response.body)
            rows += json["d"]?["results"]?.arrayValue ?? []
            next = (json["d"]?["__next"]?["uri"] ?? json["d"]?["__next"])?.stringValue
        }
        return rows.map { "\($0[key]?.serializedNumber ?? "?") \($0[field]?.serializedNumber ?? "-")" }.sorted()
    }

    static func held(
        _ provider: OfflineODataProvider, _ set: String, key: String, field: String
    ) async throws -> [String] {
        try await provider.readEntities(set).map { entity -> String in
            let id = entity.string(key) ?? entity.int64(key).map(String.init) ?? "?"
            let value = entity.string(field) ?? entity.decimal(field).map { "\($0)" } ?? "-"
            return "\(id) \(value)"
        }.sorted()
    }

    @Test func aDeviceGetsDeltasThroughTheGatewayFromPyslet() async throws {
        let producer = try await Interop.Server.start(
            script: Interop.script("pyslet_producer.py"), arguments: ["0", "4"])
        let postgres = try await PostgresServer.start()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-gw-pyslet-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        var gateway: RunningGateway?
        var device: OfflineODataProvider?
        do {
            let backend = producer.serviceRoot.absoluteString
            var configuration = GatewayConfiguration.refreshingAtEachRead([GatewayBackend(url: backend)])
            configuration.pageSize = 3
            let running = try await RunningGateway.start(configuration: configuration, postgresURL: postgres.url)
            gateway = running
            var parameters = OfflineODataParameters()
            parameters.storePath = folder
            parameters.storeName = "pyslet"
            let provider = OfflineODataProvider(serviceRoot: running.root, parameters: parameters)
            device = provider
            for set in ["Customers", "Orders"] {
                try await provider.add(definingQuery: OfflineODataDefiningQuery(name: set, query: set))
            }
            try await provider.open()
            func check(_ when: String) async throws {
                #expect(
                    try await Self.held(provider, "Customers", key: "CustomerID", field: "Name")
                        == (try await Self.truth(backend, "Customers", key: "CustomerID", field: "Name")), "\(when)")
                #expect(
                    try await Self.held(provider, "Orders", key: "OrderID", field: "CustomerID")
                        == (try await Self.truth(backend, "Orders", key: "OrderID", field: "CustomerID")), "\(when)")
            }
            try await check("after the open")
            #expect(
                try await Self.truth(backend, "Orders", key: "OrderID", field: "CustomerID").count > 4, "pyslet pages")
            // Changes on the backend, then a download through the gateway: a delta.
            #expect(
                try await Self.send(backend, "MERGE", "Customers('C1')", #"{"Name":"Changed by the office"}"#).status
                    < 300)
            #expect(
                try await Self.send(
                    backend, "POST", "Customers", #"{"CustomerID":"C8","Name":"Eight","Country":"Peru"}"#
                )
                .status < 300)
            try await provider.download()
            try await check("after the download")
            // The device's next download is a delta of the gateway: nothing changed, nothing comes.
            var headers = HTTPHeaders()
            headers["Accept"] = "application/json"
            headers["Prefer"] = "odata.track-changes"
            let first = try await DefaultTransport.make().send(
                TransportRequest(method: "GET", url: running.root.absoluteString + "Customers", headers: headers),
                timeout: 30)
            var json = try JSONValue.parse(first.body)
            while let next = json["d"]?["__next"]?.stringValue {
                json = try JSONValue.parse(
                    try await DefaultTransport.make().send(
                        TransportRequest(method: "GET", url: next, headers: headers), timeout: 30
                    ).body)
            }
            let delta = try #require(json["d"]?["__delta"]?.stringValue)
            #expect(try await Self.send(backend, "MERGE", "Customers('C2')", #"{"Name":"Two again"}"#).status < 300)
            let changes = try JSONValue.parse(
                try await DefaultTransport.make().send(
                    TransportRequest(method: "GET", url: delta, headers: headers), timeout: 30
                ).body)
            let rows = changes["d"]?["results"]?.arrayValue ?? []
            #expect(rows.map { $0["CustomerID"]?.stringValue } == ["C2"], "\(changes.serialized.prefix(500))")
        } catch {
            Issue.record("\(error)")
        }
        if let device { await device.close() }
        if let gateway { await gateway.stop() }
        producer.stop()
        await postgres.stop()
        try? FileManager.default.removeItem(at: folder)
    }

    /// Issue 36 with a third-party backend that ignores repeatable-request headers and has no
    /// `$batch` or ETags: a device sends request by request through the gateway, or (`batches`)
    /// a `$batch` that the gateway, told the backend has none, sends on request by request; each
    /// request is recorded; the same create sent again (its answer lost) gets the recorded 201,
    /// not pyslet's 409; another user's change under the device's update is caught with the
    /// gateway's ETag.
    @Test(arguments: [false, true])
    func uploadsThroughTheGatewayToPysletAreAppliedOnce(batches: Bool) async throws {
        let producer = try await Interop.Server.start(
            script: Interop.script("pyslet_producer.py"), arguments: ["0", "4"])
        let postgres = try await PostgresServer.start()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-gw-pyslet-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        var gateway: RunningGateway?
        var device: OfflineODataProvider?
        do {
            let backend = producer.serviceRoot.absoluteString
            var served = GatewayBackend(url: backend)
            served.supportsBatch = false
            let running = try await RunningGateway.start(
                configuration: GatewayConfiguration.refreshingAtEachRead([served]), postgresURL: postgres.url)
            gateway = running
            var parameters = OfflineODataParameters()
            parameters.storePath = folder
            parameters.storeName = "pyslet-upload"
            parameters.backendSupportsBatch = batches
            let provider = OfflineODataProvider(serviceRoot: running.root, parameters: parameters)
            device = provider
            try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "Customers", query: "Customers"))
            try await provider.open()
            // Another user renames C2 on pyslet; the device renames C2 and C3, and creates C9.
            #expect(try await Self.send(backend, "MERGE", "Customers('C2')", #"{"Name":"By the office"}"#).status < 300)
            _ = try await provider.execute(
                method: "PATCH", url: "Customers('C2')", body: Array(#"{"Name":"By the field"}"#.utf8))
            _ = try await provider.execute(
                method: "PATCH", url: "Customers('C3')", body: Array(#"{"Name":"Three"}"#.utf8))
            _ = try await provider.execute(
                method: "POST", url: "Customers",
                body: Array(#"{"CustomerID":"C9","Name":"Nine","Country":"Chile"}"#.utf8))
            try await provider.upload()
            let failures = try await provider.readEntities("ErrorArchive")
            #expect(failures.map { $0.int64("HTTPStatusCode") } == [412], "\(failures)")
            let names = try await Self.truth(backend, "Customers", key: "CustomerID", field: "Name")
            #expect(
                names.contains("C2 By the office") && names.contains("C3 Three") && names.contains("C9 Nine"),
                "\(names)")
            // The create again, as a device whose answer was lost sends it: the recorded answer.
            let id = UUID().uuidString
            var headers = HTTPHeaders()
            headers["Accept"] = "application/json"
            headers["Content-Type"] = "application/json"
            headers["RequestID"] = id
            headers["RepeatabilityCreation"] = GatewayUploadTests.anHourAgo
            let body = Array(#"{"CustomerID":"C10","Name":"Ten","Country":"Chile"}"#.utf8)
            let first = try await DefaultTransport.make().send(
                TransportRequest(
                    method: "POST", url: running.root.absoluteString + "Customers", headers: headers, body: body),
                timeout: 30)
            let again = try await DefaultTransport.make().send(
                TransportRequest(
                    method: "POST", url: running.root.absoluteString + "Customers", headers: headers, body: body),
                timeout: 30)
            #expect(first.status == 201)
            #expect(again.status == 201, "\(String(decoding: again.body, as: UTF8.self))")
            #expect(again.headers["Repeatability-Result"] == "accepted")
            #expect(
                try await Self.truth(backend, "Customers", key: "CustomerID", field: "Name").filter {
                    $0.hasPrefix("C10 ")
                }
                    == ["C10 Ten"])
        } catch {
            Issue.record("\(error)")
        }
        if let device { await device.close() }
        if let gateway { await gateway.stop() }
        producer.stop()
        await postgres.stop()
        try? FileManager.default.removeItem(at: folder)
    }

    /// Conflicts (SPEC §15) with a third-party backend that has no ETags, through the gateway's:
    /// disjoint changes of one customer merge (`mergeDisjoint`), and the customer's next change
    /// goes through; overlapping ones are archived with pyslet's copy and the gateway's ETag of
    /// it. With and without the device's `$batch` (pyslet has none; the gateway sends on one by
    /// one either way).
    @Test(arguments: [false, true])
    func conflictsWithPysletAreResolvedThroughTheGateway(batches: Bool) async throws {
        let producer = try await Interop.Server.start(
            script: Interop.script("pyslet_producer.py"), arguments: ["0", "4"])
        let postgres = try await PostgresServer.start()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-gw-pyslet-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        var gateway: RunningGateway?
        var device: OfflineODataProvider?
        do {
            let backend = producer.serviceRoot.absoluteString
            var served = GatewayBackend(url: backend)
            served.supportsBatch = false
            let running = try await RunningGateway.start(
                configuration: GatewayConfiguration.refreshingAtEachRead([served]), postgresURL: postgres.url)
            gateway = running
            var parameters = OfflineODataParameters()
            parameters.storePath = folder
            parameters.storeName = "pyslet-conflicts"
            parameters.backendSupportsBatch = batches
            parameters.conflictPolicy = .mergeDisjoint
            let provider = OfflineODataProvider(serviceRoot: running.root, parameters: parameters)
            device = provider
            try await provider.add(definingQuery: OfflineODataDefiningQuery(name: "Customers", query: "Customers"))
            try await provider.open()
            func customer(_ key: String) async throws -> JSONValue? {
                let json = try JSONValue.parse(try await Self.send(backend, "GET", "Customers('\(key)')").body)
                return json["d"]
            }
            // The office moves C2 to another country; the device renames it: disjoint.
            #expect(try await Self.send(backend, "MERGE", "Customers('C2')", #"{"Country":"Peru"}"#).status < 300)
            _ = try await provider.execute(
                method: "PATCH", url: "Customers('C2')", body: Array(#"{"Name":"By the field"}"#.utf8))
            try await provider.upload()
            #expect(try await provider.readEntities("ErrorArchive").isEmpty)
            var c2 = try await customer("C2")
            #expect(c2?["Name"]?.stringValue == "By the field" && c2?["Country"]?.stringValue == "Peru", "\(c2 as Any)")
            let local = try await provider.readEntities("Customers('C2')").first
            #expect(local?.string("Country") == "Peru")
            #expect(local?.control.etag?.hasPrefix("W/\"gw.") == true, "\(local?.control.etag ?? "nil")")
            _ = try await provider.execute(
                method: "PATCH", url: "Customers('C2')", body: Array(#"{"Name":"Again"}"#.utf8))
            try await provider.upload()
            #expect(try await provider.readEntities("ErrorArchive").isEmpty)
            c2 = try await customer("C2")
            #expect(c2?["Name"]?.stringValue == "Again")
            // Both rename C3: archived, with pyslet's copy.
            #expect(try await Self.send(backend, "MERGE", "Customers('C3')", #"{"Name":"Office"}"#).status < 300)
            _ = try await provider.execute(
                method: "PATCH", url: "Customers('C3')", body: Array(#"{"Name":"Field"}"#.utf8))
            try await provider.upload()
            let failures = try await provider.readEntities("ErrorArchive?$expand=BackendEntity")
            #expect(failures.map { $0.int64("HTTPStatusCode") } == [412], "\(failures)")
            let copy = failures.first?.navigation.first { $0.name == "BackendEntity" }?.inline.flatMap {
                inline -> Entity? in
                if case .entity(let entity) = inline { return entity }
                return nil
            }
            #expect(copy?.string("Name") == "Office")
            #expect(copy?.control.etag?.hasPrefix("W/\"gw.") == true)
            #expect(try await customer("C3")?["Name"]?.stringValue == "Office")
        } catch {
            Issue.record("\(error)")
        }
        if let device { await device.close() }
        if let gateway { await gateway.stop() }
        producer.stop()
        await postgres.stop()
        try? FileManager.default.removeItem(at: folder)
    }
}
