import Foundation
import InteropSupport
import ODataCore
import ODataGateway
import ODataServer
import ODataStore
import OfflineOData
import Testing

/// Issue 37: a first open through the gateway takes a store file the gateway built with the
/// client's own code from the rows PostgreSQL keeps, checks it, encrypts it with the app's key,
/// and then downloads what the file lacks. Real PostgreSQL, gateways, providers and files.
@Suite(.serialized) struct GatewayStoreFileTests {
    typealias Recorder = GatewayProgressTests.Recorder

    /// A gateway that builds files with BusinessPartners as shared data and Contacts as the
    /// user's (prepopulate `mode`).
    static func start(
        v2: Bool, mode: Prepopulate = .yes, instances: Int = 2
    ) async throws
        -> GatewayDeltaTests.Setup
    {
        try await GatewayDeltaTests.start(
            v2: v2, instances: instances,
            configure: { configuration in
                for index in configuration.backends.indices {
                    configuration.backends[index].prepopulate = mode
                    configuration.backends[index].sharedQueries = ["BusinessPartners"]
                }
            })
    }

    /// One instance over a larger backend (1,500 orders with items), pages of 500: a file of
    /// more than one 1 MiB range.
    static func startLarger() async throws -> GatewayDeltaTests.Setup {
        try await GatewayDeltaTests.start(
            v2: false, instances: 1, scale: 150,
            configure: { configuration in
                configuration.pageSize = 500
                // The build reads every scope; the open's deltas right after it are answered from
                // PostgreSQL, not by reading 1,500 orders again in 7-row pages inside the device's
                // request (which outlasted its 60 s on a loaded machine).
                configuration.refreshInterval = 600
                for index in configuration.backends.indices {
                    configuration.backends[index].prepopulate = .yes
                    configuration.backends[index].sharedQueries = ["BusinessPartners"]
                }
            })
    }

    static func device(
        _ root: URL, folder: URL, name: String, key: String? = "device-key", accepts: Bool = true,
        recorder: Recorder? = nil, transport: (any Transport)? = nil, urlSuffix: String? = nil
    ) async throws -> OfflineODataProvider {
        var parameters = OfflineODataParameters()
        parameters.urlSuffix = urlSuffix
        parameters.storePath = folder
        parameters.storeName = name
        parameters.storeEncryptionKey = key
        parameters.acceptsServerBuiltStore = accepts
        let provider =
            if let transport {
                OfflineODataProvider(
                    serviceRoot: root, parameters: parameters, transport: transport, delegate: recorder)
            } else {
                OfflineODataProvider(serviceRoot: root, parameters: parameters, delegate: recorder)
            }
        for query in ["BusinessPartners", "Contacts"] {
            try await provider.add(definingQuery: OfflineODataDefiningQuery(name: query, query: query))
        }
        try await provider.open()
        return provider
    }

    /// Every row of the store's entity sets with every property and its ETag, in key order.
    static func rows(_ provider: OfflineODataProvider) async throws -> [String] {
        var rows: [String] = []
        for (set, key) in [("BusinessPartners", "PartnerID"), ("Contacts", "ContactID")] {
            for entity in try await provider.readEntities("\(set)?$orderby=\(key)") {
                rows.append("\(set) \(entity) etag=\(entity.control.etag ?? "-")")
            }
        }
        return rows
    }

    /// The open's progress: the file was downloaded (received = total > 0), within the steps
    /// of a first open through a gateway (the total grows once `$metadata` shows a gateway).
    static func downloadedAFile(_ recorder: Recorder) -> Bool {
        let open = recorder.progress.filter { $0.operation == .open }
        guard open.dropFirst().allSatisfy({ $0.totalSteps == OfflineODataProvider.gatewayOpenPlan.count }) else {
            return false
        }
        return open.contains { update in
            update.step == .downloadingEntityStore && update.parameters["totalBytes"] != "0"
                && update.parameters["receivedBytes"] == update.parameters["totalBytes"]
        }
    }

    /// V2 and V4: a first open through a built file holds exactly what a paged first open
    /// holds (row by row, ETags included), encrypted with the device's key; a second device
    /// reuses the files; then local writes, upload and a delta download behave alike.
    @Test(arguments: [false, true])
    func aFirstOpenFromABuiltStoreEqualsAPagedOne(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2)
        var devices: [OfflineODataProvider] = []
        do {
            let recorder = Recorder()
            let filed = try await Self.device(
                setup.gateways[0].root, folder: setup.folder, name: "filed", recorder: recorder)
            devices.append(filed)
            #expect(Self.downloadedAFile(recorder), "\(recorder.progress.map { "\($0.stepNumber) \($0.step)" })")
            let paged = try await Self.device(
                setup.gateways[1].root, folder: setup.folder, name: "paged", accepts: false)
            devices.append(paged)
            let truth = try await GatewayDeltaTests.truth(setup)
            #expect(try await GatewayDeltaTests.held(filed) == truth)
            #expect(try await Self.rows(filed) == (try await Self.rows(paged)))
            #expect(try await Self.rows(filed).count == truth.count)
            // The file was encrypted with the device's key on the device.
            var wrong = OfflineODataParameters()
            wrong.storePath = setup.folder
            wrong.storeName = "filed"
            wrong.storeEncryptionKey = "another-key"
            await #expect(throws: OfflineODataError.self) {
                _ = try await OfflineODataProvider.storedSummary(parameters: wrong)
            }
            #expect(
                !FileManager.default.fileExists(atPath: setup.folder.appendingPathComponent("filed.db-download").path))
            // A second device of the same user: the shared file and the user's are reused. (A
            // file is made for the root devices reach the gateway at, the root it holds; the
            // instances here listen on two ports, so the other one would make its own.)
            let again = Recorder()
            let second = try await Self.device(
                setup.gateways[0].root, folder: setup.folder, name: "second", recorder: again)
            devices.append(second)
            #expect(Self.downloadedAFile(again))
            #expect(try await Self.rows(second) == (try await Self.rows(paged)))
            let counts = try await setup.gateways[0].gateway.store.storeFileCounts()
            #expect(counts.shared == 1 && counts.user == 1, "\(counts)")
            // Writes, upload and a delta download behave as after a paged open.
            for (device, phone) in [(filed, "filed"), (paged, "paged")] {
                _ = try await device.execute(
                    method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"\#(phone)"}"#.utf8))
            }
            try await filed.upload()
            try await paged.upload()
            #expect(try await filed.readEntities("ErrorArchive").isEmpty)
            // The second upload of BP1 meets the first one's change: 412, as after any open.
            #expect(try await paged.readEntities("ErrorArchive").count == 1)
            _ = try await paged.execute(method: "DELETE", url: "ErrorArchive(1)")
            #expect(
                try await GatewayDeltaTests.backendSend(
                    setup, "PATCH", "BusinessPartners('BP2')", #"{"Phone":"office"}"#) < 300)
            let contact = try #require(
                try await paged.readEntities("Contacts?$orderby=ContactID&$top=1").first?.int64("ContactID"))
            #expect(try await GatewayDeltaTests.backendSend(setup, "DELETE", "Contacts(\(contact))") < 300)
            for device in devices { try await device.download() }
            let after = try await GatewayDeltaTests.truth(setup)
            #expect(after != truth)
            for device in devices { #expect(try await GatewayDeltaTests.held(device) == after) }
            #expect(try await Self.rows(filed) == (try await Self.rows(paged)))
        } catch {
            Issue.record("\(error)")
        }
        for device in devices { await device.close() }
        await setup.stop()
    }

    /// V2 and V4: a device's URL suffix (`sap-client`) goes with the file's build and with
    /// every later read; the gateway's links carry it already, and the device does not add it
    /// twice (a gateway token with it twice belonged to "another query").
    @Test(arguments: [false, true])
    func aURLSuffixGoesWithTheFileAndEveryDelta(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2, instances: 1)
        var devices: [OfflineODataProvider] = []
        do {
            let recorder = Recorder()
            let filed = try await Self.device(
                setup.gateways[0].root, folder: setup.folder, name: "suffixed", recorder: recorder,
                urlSuffix: "sap-client=100")
            devices.append(filed)
            #expect(Self.downloadedAFile(recorder))
            let paged = try await Self.device(
                setup.gateways[0].root, folder: setup.folder, name: "suffixed-paged", accepts: false,
                urlSuffix: "sap-client=100")
            devices.append(paged)
            for round in 0..<2 {
                #expect(
                    try await GatewayDeltaTests.backendSend(
                        setup, "PATCH", "BusinessPartners('BP1')", #"{"Phone":"round \#(round)"}"#) < 300)
                for device in devices { try await device.download() }
                let truth = try await GatewayDeltaTests.truth(setup)
                for device in devices { #expect(try await GatewayDeltaTests.held(device) == truth, "round \(round)") }
            }
        } catch {
            Issue.record("\(error)")
        }
        for device in devices { await device.close() }
        await setup.stop()
    }

    /// `SHARED-ONLY`: the file holds the shared query; the user's comes by the paged download
    /// of the same open. `N`: no file, the open pages.
    @Test func sharedOnlyAndNoFiles() async throws {
        for mode in [Prepopulate.sharedOnly, .no] {
            let setup = try await Self.start(v2: false, mode: mode, instances: 1)
            do {
                let recorder = Recorder()
                let device = try await Self.device(
                    setup.gateways[0].root, folder: setup.folder, name: "device", recorder: recorder)
                #expect(Self.downloadedAFile(recorder) == (mode == .sharedOnly), "\(mode)")
                #expect(try await GatewayDeltaTests.held(device) == (try await GatewayDeltaTests.truth(setup)))
                let counts = try await setup.gateways[0].gateway.store.storeFileCounts()
                #expect(counts.shared == (mode == .sharedOnly ? 1 : 0) && counts.user == 0, "\(mode): \(counts)")
                await device.close()
            } catch {
                Issue.record("\(mode): \(error)")
            }
            await setup.stop()
        }
    }

    /// A transport that spoils the store file the gateway serves: a flipped byte, a short
    /// answer, or another store's bytes (offered with that store's size and SHA-256).
    final class Spoiler: Transport, @unchecked Sendable {
        enum Mode { case corrupt, truncated, foreign([UInt8]) }
        let mode: Mode
        let inner = DefaultTransport.make()
        init(_ mode: Mode) { self.mode = mode }

        func send(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse {
            var response = try await inner.send(request, timeout: timeout)
            guard request.url.contains("$oodata/store") else { return response }
            switch mode {
            case .corrupt:
                if request.method == "GET", response.body.count > 100 { response.body[response.body.count / 2] ^= 0xFF }
            case .truncated:
                if request.method == "GET" { response.body = Array(response.body.dropLast(100)) }
            case .foreign(let bytes):
                if request.method == "POST", var json = try? JSONValue.parse(response.body),
                    case .object(var members) = json
                {
                    members.removeAll { $0.name == "size" || $0.name == "sha256" }
                    members.append(.init("size", .number(String(bytes.count))))
                    members.append(.init("sha256", .string(ServerBuiltStoreTesting.sha256(bytes))))
                    json = .object(members)
                    response.body = Array(json.serialized.utf8)
                } else if request.method == "GET", let range = request.headers["Range"] {
                    let parts = range.dropFirst("bytes=".count).split(separator: "-").compactMap { Int($0) }
                    guard parts.count == 2 else { return response }
                    let end = min(bytes.count - 1, parts[1])
                    response.body = Array(bytes[parts[0]...end])
                    response.headers["Content-Range"] = "bytes \(parts[0])-\(end)/\(bytes.count)"
                }
            }
            return response
        }
    }

    /// V2 and V4: a corrupt, a truncated and a foreign file (a store made straight against the
    /// backend: another service root) are refused, and the open pages instead: the store
    /// equals the backend, and nothing of the refused file is left (a part kept for a resume
    /// goes once the paged open completes).
    @Test(arguments: [false, true])
    func aSpoiledFileIsRefusedAndTheOpenPages(v2: Bool) async throws {
        let setup = try await Self.start(v2: v2, instances: 1)
        do {
            // A store of the same model made for the backend itself, without a key.
            let direct = try await Self.device(
                URL(string: setup.backendRoot) ?? setup.gateways[0].root, folder: setup.folder, name: "direct",
                key: nil)
            await direct.close()
            let foreign = try #require(
                FileManager.default.contents(atPath: setup.folder.appendingPathComponent("direct.db").path))
            for (name, mode) in [
                ("corrupt", Spoiler.Mode.corrupt), ("truncated", .truncated), ("foreign", .foreign(Array(foreign))),
            ] {
                let recorder = Recorder()
                let device = try await Self.device(
                    setup.gateways[0].root, folder: setup.folder, name: name, recorder: recorder,
                    transport: Spoiler(mode))
                let steps = recorder.progress.filter { $0.operation == .open }.map(\.step)
                #expect(steps.contains(.downloadingEntityStore), "\(name)")
                #expect(steps.contains(.creatingRequestQueueDatabase), "\(name): paged after the refusal")
                #expect(
                    try await GatewayDeltaTests.held(device) == (try await GatewayDeltaTests.truth(setup)), "\(name)")
                for suffix in ["-download", "-download.json"] {
                    #expect(
                        !FileManager.default.fileExists(
                            atPath: setup.folder.appendingPathComponent("\(name).db\(suffix)").path), "\(name)\(suffix)"
                    )
                }
                await device.close()
            }
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}

/// Issue 37, item 3: a download cut after its first range leaves the part beside the store
/// (and no store); the next first open asks for the rest only (an HTTP range from where the
/// part ends) and completes.
@Suite(.serialized) struct GatewayStoreFileResumeTests {
    /// Passes requests on and records the `Range` of each store file request; with `cutAfter`,
    /// every request after that many ranges fails as a dropped connection.
    final class Cutter: Transport, @unchecked Sendable {
        private let lock = NSLock()
        private var seen: [String] = []
        let cutAfter: Int?
        let inner = DefaultTransport.make()
        init(cutAfter: Int?) { self.cutAfter = cutAfter }
        var ranges: [String] { lock.withLock { seen } }
        private var answers: [String] = []
        /// What the store offers were answered with (for a failure's message).
        var offers: [String] { lock.withLock { answers } }

        func send(_ request: TransportRequest, timeout: TimeInterval?) async throws -> TransportResponse {
            let cut = lock.withLock { () -> Bool in
                if let cutAfter, seen.count >= cutAfter { return true }
                if request.url.contains("$oodata/store/") { seen.append(request.headers["Range"] ?? "none") }
                return false
            }
            if cut { throw TransportError("connection cut by the test", url: request.url) }
            let response: TransportResponse
            do {
                response = try await inner.send(request, timeout: timeout)
            } catch {
                if request.method == "POST", request.url.contains("$oodata/store") {
                    lock.withLock { answers.append("\(error)") }
                }
                throw error
            }
            if request.method == "POST", request.url.contains("$oodata/store") {
                let text = String(decoding: response.body.prefix(300), as: UTF8.self)
                lock.withLock { answers.append("\(response.status) \(text)") }
            }
            return response
        }
    }

    static func device(_ setup: GatewayDeltaTests.Setup, transport: Cutter) -> OfflineODataProvider {
        var parameters = OfflineODataParameters()
        parameters.storePath = setup.folder
        parameters.storeName = "resumed"
        // Without a key: with one, the part (not encrypted) goes when an open fails; it stays
        // for a resume only after the process was killed.
        return OfflineODataProvider(serviceRoot: setup.gateways[0].root, parameters: parameters, transport: transport)
    }

    @Test func aCutDownloadResumesFromWhereItsPartEnds() async throws {
        let setup = try await GatewayStoreFileTests.startLarger()
        let queries = [
            "BusinessPartners": "BusinessPartners", "Contacts": "Contacts", "Orders": "SalesOrders?$expand=Items",
        ]
        do {
            let cutting = Cutter(cutAfter: 1)
            let first = Self.device(setup, transport: cutting)
            for (name, query) in queries.sorted(by: { $0.key < $1.key }) {
                try await first.add(definingQuery: OfflineODataDefiningQuery(name: name, query: query))
            }
            await #expect(throws: (any Error).self, "offers: \(cutting.offers)") { try await first.open() }
            let store = setup.folder.appendingPathComponent("resumed.db").path
            #expect(!FileManager.default.fileExists(atPath: store))
            let part = try FileManager.default.attributesOfItem(atPath: store + "-download")[.size] as? NSNumber
            #expect(part?.intValue == 1 << 20, "the first range is kept: \(String(describing: part))")
            #expect(cutting.ranges == ["bytes=0-1048575"])
            let resuming = Cutter(cutAfter: nil)
            let second = Self.device(setup, transport: resuming)
            for (name, query) in queries.sorted(by: { $0.key < $1.key }) {
                try await second.add(definingQuery: OfflineODataDefiningQuery(name: name, query: query))
            }
            try await second.open()
            #expect(resuming.ranges.first?.hasPrefix("bytes=1048576-") == true, "\(resuming.ranges)")
            #expect(try await GatewayDeltaTests.held(second) == (try await GatewayDeltaTests.truth(setup)))
            #expect(!FileManager.default.fileExists(atPath: store + "-download"))
            await second.close()
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}

/// SHA-256 as the gateway writes it, for tests that make their own offers.
enum ServerBuiltStoreTesting {
    static func sha256(_ bytes: [UInt8]) -> String {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("sha-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        _ = FileManager.default.createFile(atPath: folder.path, contents: Data(bytes))
        return (try? ServerBuiltStore.sha256(ofFile: folder.path)) ?? ""
    }
}

/// Issue 37, crash safety: `kill -9` of a spawned `oodata offline open` while it downloads the
/// store file, and while it encrypts it; the next open completes, and the store equals the
/// backend. Never a store that reads as complete and is not.
@Suite(.serialized) struct GatewayStoreFileCrashTests {
    /// Spawns `oodata offline open` through `root` into `store`; with `killAt`, kills it as soon
    /// as that file exists (polled every half millisecond). True when it was killed. Without,
    /// expects the open to succeed having downloaded a store file (its progress says so).
    static func open(root: String, store: String, killAt marker: String?) async throws -> Bool {
        // The child talks to this process's gateway: waiting for it on the two-thread
        // concurrency pool could starve the gateway that must answer it. It waits on a
        // dispatch thread instead, and the expectations are checked back here.
        let (killed, status, printed) = try await withCheckedThrowingContinuation {
            (continuation: CheckedContinuation<(Bool, Int32, String), any Error>) in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try Self.runOpen(root: root, store: store, killAt: marker) })
            }
        }
        if marker == nil {
            #expect(status == 0, "the open after the kill failed")
            #expect(printed.contains("Downloading entity store"), "the open after the kill paged: \(printed.suffix(500))")
        }
        return killed
    }

    /// Runs the open (blocking); returns whether it was killed, its exit status and its output.
    static func runOpen(root: String, store: String, killAt marker: String?) throws -> (Bool, Int32, String) {
        let tool = try #require(GatewayCrashTests.binary, "oodata was not built next to the tests")
        let process = Process()
        process.executableURL = tool
        process.arguments = [
            "offline", "open", "--service", root, "--store", store, "--key", "crash-key",
            "--define", "BusinessPartners=BusinessPartners", "--define", "Contacts=Contacts",
            "--define", "Orders=SalesOrders?$expand=Items",
        ]
        let output = Pipe()
        process.standardOutput = marker == nil ? output : FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try ProcessLaunch.run(process)
        guard let marker else {
            let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return (false, process.terminationStatus, printed)
        }
        while process.isRunning {
            if FileManager.default.fileExists(atPath: marker) {
                GatewayCrashTests.killHard(process)
                return (true, 0, "")
            }
            usleep(500)
        }
        return (false, process.terminationStatus, "")
    }

    @Test func killedWhileDownloadingOrEncryptingTheFileTheNextOpenCompletes() async throws {
        let setup = try await GatewayStoreFileTests.startLarger()
        do {
            let root = setup.gateways[0].root.absoluteString
            var killed: [String: Int] = [:]
            // The download has begun; the file is being encrypted; it is in place, marked
            // unfinished, while the open downloads what it lacks.
            for (phase, suffix) in [
                ("download", ".db-download"), ("encryption", ".db-download.encrypting"), ("installed", ".db-filling"),
            ] {
                for attempt in 0..<3 {
                    let name = "\(phase)\(attempt)"
                    let store = setup.folder.appendingPathComponent("\(name).db").path
                    guard try await Self.open(root: root, store: store, killAt: store.dropLast(3) + suffix) else { continue }
                    killed[phase, default: 0] += 1
                    // A store may be in place only with its mark (the next open makes it again).
                    #expect(
                        !FileManager.default.fileExists(atPath: store)
                            || FileManager.default.fileExists(atPath: String(store.dropLast(3)) + ".db-filling"),
                        "\(name): a store without its mark after the kill")
                    _ = try await Self.open(root: root, store: store, killAt: nil)
                    var parameters = OfflineODataParameters()
                    parameters.storePath = setup.folder
                    parameters.storeName = name
                    parameters.storeEncryptionKey = "crash-key"
                    let provider = OfflineODataProvider(serviceRoot: setup.gateways[0].root, parameters: parameters)
                    try await provider.open()
                    #expect(try await GatewayDeltaTests.held(provider) == (try await GatewayDeltaTests.truth(setup)))
                    #expect(try await provider.readEntities("SalesOrders").count > 100)
                    await provider.close()
                    for leftover in [".db-download", ".db-download.json", ".db-filling"] {
                        #expect(
                            !FileManager.default.fileExists(
                                atPath: setup.folder.appendingPathComponent(name + leftover).path))
                    }
                }
            }
            print("store file kills: \(killed)")
            #expect(
                killed["download", default: 0] > 0 && killed["encryption", default: 0] > 0
                    && killed["installed", default: 0] > 0, "\(killed)")
        } catch {
            Issue.record("\(error)")
        }
        await setup.stop()
    }
}
