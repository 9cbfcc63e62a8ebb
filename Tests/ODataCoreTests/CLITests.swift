import Foundation
import InteropSupport
import ODataCore
import Testing

/// Runs the built `oodata` tool as a user would.
@Suite struct CLITests {
    static var binary: URL? { ProcessLaunch.builtTool("oodata") }

    /// Runs `oodata` to its end on a dispatch queue: a process waited for on the two-thread
    /// concurrency pool would starve the in-process servers of other tests running meanwhile.
    func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> (status: Int32, out: String, err: String) {
        let tool = try #require(Self.binary, "oodata was not built next to the tests")
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                do {
                    continuation.resume(returning: try Self.runBlocking(tool, arguments, environment: environment))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    static func runBlocking(_ tool: URL, _ arguments: [String], environment: [String: String]) throws -> (status: Int32, out: String, err: String) {
        let process = Process()
        process.executableURL = tool
        process.arguments = arguments
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new } }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try ProcessLaunch.run(process)
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        let errData = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: outData, as: UTF8.self), String(decoding: errData, as: UTF8.self))
    }

    /// The README's main job: it must run on a fresh machine and show the whole round trip.
    @Test func demoRunsTheOfflineRoundTrip() async throws {
        let result = try await run(["demo"])
        #expect(result.status == 0, "demo failed: \(result.err)")
        #expect(result.out.split(separator: "\n").first == "OfflineOData \(PackageVersion.string) demo")
        #expect(result.out.contains("requestDidFail: request 4 PATCH SalesOrders('SO2') → HTTP 400 OrderLocked"))
        #expect(result.out.contains("ErrorArchive?$filter=HTTPStatusCode eq 400 → 1 row(s)"))
        #expect(result.out.contains("now reads the backend's ContactID="))
        #expect(result.out.contains("is named \"Renamed by another user\""))
        #expect(result.out.contains("local key PictureID='LOCAL~"), "\(result.out)")
        #expect(result.out.contains("now reads ProductPictures('PIC-DEMO'): 107 bytes, image/svg+xml"), "\(result.out)")
        #expect(result.out.contains("Type=Upload  Details=5 requests applied, 1 failed, 0 not sent"), "\(result.out)")
        #expect(result.out.contains("queue empty: true"))
    }

    /// Issue 34, item 19: a plain ODataStore file, a keyless entity type under `--strict` and
    /// the EventLog's help each say what they are.
    @Test func plainStoresKeylessTypesAndTheEventLogAreExplained() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-cli-19-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = folder.appendingPathComponent("plain.db").path
        let trippin = Conformance.url("metadata/v4/trippin-SampleService-Models-TripPin.xml").path
        #expect(try await run(["store", "init", "--metadata", trippin, "--store", store]).status == 0)
        let read = try await run(["offline", "read", "--store", store, "People"])
        #expect(read.status == 1)
        #expect(read.err.contains("is not an offline store"), "\(read.err)")
        #expect(read.err.contains("oodata store query"), "\(read.err)")
        #expect(!read.err.contains("oo_meta"), "\(read.err)")

        let keyless = folder.appendingPathComponent("keyless.xml")
        try Data("""
            <edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0"><edmx:DataServices>
            <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="K">
            <EntityType Name="Base" Abstract="true"><Property Name="Name" Type="Edm.String"/></EntityType>
            <EntityType Name="Thing"><Property Name="Name" Type="Edm.String"/></EntityType>
            <EntityContainer Name="C"><EntitySet Name="Things" EntityType="K.Thing"/></EntityContainer>
            </Schema></edmx:DataServices></edmx:Edmx>
            """.utf8).write(to: keyless)
        let strict = try await run(["metadata", "--strict", keyless.path])
        #expect(strict.status == 1)
        #expect(strict.err.contains("Entity type Thing has no key"), "\(strict.err)")
        #expect(!strict.err.contains("Base"), "an abstract type may have no key: \(strict.err)")
        #expect(try await run(["metadata", keyless.path]).status == 0, "without --strict it is read")

        let help = try await run(["offline", "events", "--help"])
        let overview = help.out.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        #expect(overview.contains("the last 100 opens, uploads, downloads and store sends"), "\(help.out)")
    }

    /// `oodata --version` names the tool and the package's version.
    @Test func versionIsPrinted() async throws {
        let result = try await run(["--version"])
        #expect(result.status == 0, "\(result.err)")
        #expect(result.out == "oodata (OfflineOData) \(PackageVersion.string)\n")
        #expect(PackageVersion.string.split(separator: ".").count == 3)
    }

    /// `demo --typed`: generated types, a live query that fires on a local change and on the
    /// upload's new ETags, and the sync status through the upload.
    @Test func typedDemoShowsObservationAndSyncStatus() async throws {
        let result = try await run(["demo", "--typed"])
        #expect(result.status == 0, "demo --typed failed: \(result.err)")
        #expect(result.out.contains("partners in DE: BP0 (Company 0)"), "\(result.out)")
        #expect(result.out.contains("observation fired → [SO0: \"Call before delivery\""), "\(result.out)")
        #expect(result.out.contains("sync status: pending 1, failed 0, last upload never"), "\(result.out)")
        #expect(result.out.contains("upload running (processingRequests)"), "\(result.out)")
        #expect(result.out.contains("the backend's SO0.note: \"Call before delivery\""), "\(result.out)")
        #expect(result.out.contains("observation results: 3;"), "\(result.out)")
    }

    /// Issue 56: `demo --gateway`, the server half: a throwaway PostgreSQL, a backend without
    /// delta links, two gateways, two devices; one backend read serves both devices, and a
    /// change reaches both by delta.
    @Test func gatewayDemoShowsBothHalves() async throws {
        let result = try await run(["demo", "--gateway"])
        #expect(result.status == 0, "demo --gateway failed: \(result.err)")
        #expect(result.out.split(separator: "\n").first == "OfflineOData \(PackageVersion.string) demo (sync gateway)")
        #expect(result.out.contains("device A: 5 business partners"), "\(result.out)")
        #expect(result.out.contains("device B: 5 business partners"), "\(result.out)")
        #expect(result.out.contains("the partners were read from the backend 1 time(s) for both devices"), "\(result.out)")
        #expect(result.out.contains("refresh scope 1 now → refreshed, 1 row changed"), "\(result.out)")
        #expect(result.out.contains("device A downloads (a delta from PostgreSQL): BP1 Phone = '+49 555 0100'"))
        #expect(result.out.contains("device B downloads (a delta from PostgreSQL): BP1 Phone = '+49 555 0100'"))
        #expect(result.out.contains("devices seen: 2"), "\(result.out)")
        #expect(result.out.contains("/readyz: ready"), "\(result.out)")
        #expect(!(try FileManager.default.contentsOfDirectory(atPath: NSTemporaryDirectory()).contains {
            $0.hasPrefix("oodata-demo-") && result.out.contains($0)
        }), "the demo removes its folder, PostgreSQL's included")
    }

    /// Starts `oodata serve --sample sales` with `arguments` on `port` (0: any free one), with
    /// `environment` added to the test's; its process and V4 and V2 roots.
    func serve(_ arguments: [String], port: Int = 0, environment: [String: String] = [:]) async throws
        -> (process: Process, v4: String, v2: String)
    {
        let tool = try #require(Self.binary, "oodata was not built next to the tests")
        let started = try await offPool { try Self.serveBlocking(tool, arguments, port: port, environment: environment) }
        return (started.process.value, started.v4, started.v2)
    }

    /// A value that crosses from the dispatch queue that made it (a started process).
    final class Handed<T>: @unchecked Sendable {
        let value: T
        init(_ value: T) { self.value = value }
    }

    /// Starts the server; its process, V4 and V2 roots, and the store file it printed.
    static func serveBlocking(_ tool: URL, _ arguments: [String], port: Int = 0, environment: [String: String] = [:]) throws
        -> (process: Handed<Process>, v4: String, v2: String, store: String)
    {
        let serve = Process()
        serve.executableURL = tool
        serve.arguments = ["serve", "--sample", "sales", "--port", "\(port)"] + arguments
        if !environment.isEmpty { serve.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new } }
        let out = Pipe()
        serve.standardOutput = out
        serve.standardError = FileHandle.nullDevice
        try ProcessLaunch.run(serve)
        var printed = ""
        let deadline = Date().addingTimeInterval(20)
        // Until the last line it prints on start, the store's, is whole.
        func started() -> Bool { printed.range(of: "store: ").map { printed[$0.upperBound...].contains("\n") } ?? false }
        while !started(), Date() < deadline {
            let data = out.fileHandleForReading.availableData
            // End of file: the server ended (a port taken, a bad argument).
            if data.isEmpty { break }
            printed += String(decoding: data, as: UTF8.self)
        }
        func root(_ label: String) throws -> String {
            let line = try #require(printed.split(separator: "\n").first { $0.hasPrefix(label) }, "serve printed: \(printed)")
            return String(line.dropFirst(label.count))
        }
        return (Handed(serve), try root("OData V4: "), try root("OData V2: "), try root("store: "))
    }

    /// Ends a server started by ``serve(_:port:environment:)`` (one that ended already is not
    /// signalled: its process number may belong to another process by now).
    func stop(_ process: Process) {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    /// `oodata offline …` against `oodata serve`, both as separate processes.
    @Test func offlineCommandsWorkAgainstTheServer() async throws {
        let supportFolder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-cli-support-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: supportFolder) }
        // Changes of BP4 and BP5 fail on the server: they fill the ErrorArchive.
        let faults = supportFolder.appendingPathExtension("faults.json")
        try Data(#"""
            [{"method": "PATCH", "urlContains": "BusinessPartners('BP4')", "status": 400, "code": "Refused", "message": "no"},
             {"method": "PATCH", "urlContains": "BusinessPartners('BP5')", "status": 400, "code": "Refused", "message": "no"}]
            """#.utf8).write(to: faults)
        defer { try? FileManager.default.removeItem(at: faults) }
        let (server, root, _) = try await serve(["--support-dir", supportFolder.path, "--faults", faults.path])
        defer { stop(server) }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = ["--store", folder.appendingPathComponent("cli.db").path, "--key", "cli-key"]

        // An index that names no property of the set is refused, and no store is made.
        let badIndex = try await run(["offline", "open", "--service", root, "--define", "P=BusinessPartners", "--index", "BusinessPartners=Nope"] + store)
        #expect(badIndex.status != 0 && badIndex.err.contains("Nope is not a primitive property of BusinessPartners"), "\(badIndex.err)")
        #expect(try await run(["offline", "open", "--service", root, "--index", "BusinessPartners"] + store).err.contains("must be SET=PROPERTY,PROPERTY"))
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("cli.db").path))
        let open = try await run(["offline", "open", "--service", root, "--define", "P=BusinessPartners", "--define", "O=SalesOrders?$expand=Items",
                                  "--index", "BusinessPartners=CompanyName,Email"] + store)
        #expect(open.status == 0, "\(open.err)")
        #expect(open.out.contains("P: 20 BusinessPartners"), "\(open.out)")
        let update = try await run(["offline", "update"] + store + ["BusinessPartners('BP1')", #"{"Phone":"cli"}"#])
        #expect(update.status == 0, "\(update.err)")
        #expect(try await run(["offline", "queue"] + store).out.contains("RequestMethod=PATCH  RequestURL=BusinessPartners('BP1')"))
        let upload = try await run(["offline", "upload"] + store)
        #expect(upload.out.contains("upload done; the queue is empty"), "\(upload.out) \(upload.err)")
        #expect(try await run(["offline", "errors"] + store).out.contains("the ErrorArchive is empty"))
        let read = try await run(["offline", "read"] + store + ["BusinessPartners('BP1')?$select=Phone"])
        #expect(read.out.contains(#""Phone":"cli""#), "\(read.out)")
        _ = try await run(["offline", "delete"] + store + ["BusinessPartners('BP2')"])
        #expect(try await run(["offline", "undo"] + store + ["BusinessPartners('BP2')"]).status == 0)
        // Queue algorithms: two updates of one entity become one; undo takes several entities.
        _ = try await run(["offline", "update"] + store + ["BusinessPartners('BP1')", #"{"Phone":"one"}"#])
        _ = try await run(["offline", "update"] + store + ["BusinessPartners('BP1')", #"{"Email":"two@example.com"}"#])
        _ = try await run(["offline", "update"] + store + ["BusinessPartners('BP3')", #"{"Phone":"three"}"#])
        let optimized = try await run(["offline", "queue", "--optimize-queue"] + store).out
        #expect(optimized.contains("the queue algorithms removed 1 requests"), "\(optimized)")
        #expect(optimized.contains(#"RequestBody={"Phone":"one","Email":"two@example.com"}"#), "\(optimized)")
        let undone = try await run(["offline", "undo"] + store + ["BusinessPartners('BP1')", "BusinessPartners('BP3')"]).out
        #expect(undone.contains("2 queued requests removed"), "\(undone)")
        #expect(try await run(["offline", "queue"] + store).out.contains("the request queue is empty"))
        #expect(try await run(["offline", "read"] + store + ["BusinessPartners('BP2')?$select=PartnerID"]).out.contains("BP2"))
        #expect(try await run(["offline", "events"] + store).out.contains("Type=Upload"))
        // --clear with individual deletion clears every entry (it used to remove only the first
        // and still print "cleared 2 entries").
        _ = try await run(["offline", "update"] + store + ["BusinessPartners('BP4')", #"{"Phone":"four"}"#])
        _ = try await run(["offline", "update"] + store + ["BusinessPartners('BP5')", #"{"Phone":"five"}"#])
        _ = try await run(["offline", "upload"] + store)
        let individual = store + ["--individual-error-deletion"]
        #expect(try await run(["offline", "errors"] + individual).out.components(separatedBy: "Code=Refused").count == 3)
        let cleared = try await run(["offline", "errors", "--clear"] + individual)
        #expect(cleared.out.contains("cleared 2 entries"), "\(cleared.out) \(cleared.err)")
        #expect(try await run(["offline", "errors"] + store).out.contains("the ErrorArchive is empty"))
        // A copy for support, re-keyed; without a support key a keyed store is not sent.
        let supportURL = root.replacingOccurrences(of: "/odata/v4/", with: "/support/stores/cli-copy.db")
        #expect(try await run(["offline", "send-store"] + store + ["--to", supportURL]).status != 0)
        let sent = try await run(["offline", "send-store"] + store + ["--to", supportURL, "--support-key", "support"])
        #expect(sent.out.contains("encrypted with the support key"), "\(sent.out) \(sent.err)")
        #expect(FileManager.default.fileExists(atPath: supportFolder.appendingPathComponent("cli-copy.db").path))
        // Media: a new stream from a file, read back to a file, uploaded.
        let pictures = ["--store", folder.appendingPathComponent("pictures.db").path]
        let openPictures = try await run(["offline", "open", "--service", root, "--define", "Pics=ProductPictures", "--streams", "Pics"] + pictures)
        #expect(openPictures.status == 0, "\(openPictures.err)")
        let picture = folder.appendingPathComponent("picture.bin")
        let bytes = Data((0..<300).map { UInt8($0 % 256) })
        try bytes.write(to: picture)
        let media = try await run(["offline", "media"] + pictures + ["ProductPictures('PIC1')/$value", "--file", picture.path, "--content-type", "image/png"])
        #expect(media.out.contains("replaced the stream of ProductPictures('PIC1') locally (300 bytes)"), "\(media.out) \(media.err)")
        let readBack = folder.appendingPathComponent("read.bin")
        let readMedia = try await run(["offline", "read"] + pictures + ["ProductPictures('PIC1')/$value", "--output", readBack.path])
        #expect(readMedia.out.contains("wrote 300 bytes (image/png)"), "\(readMedia.out) \(readMedia.err)")
        #expect(try Data(contentsOf: readBack) == bytes)
        #expect(try await run(["offline", "upload"] + pictures).out.contains("upload done; the queue is empty"))
        #expect(try await run(["offline", "media"] + pictures + ["ProductPictures('PIC1')/$value", "--file", folder.appendingPathComponent("missing").path]).err.contains("cannot be read"))
        let wrongKey = try await run(["offline", "read", "--store", folder.appendingPathComponent("cli.db").path, "--key", "wrong", "BusinessPartners"])
        #expect(wrongKey.status != 0)
        #expect(wrongKey.err.contains("cannot be opened with the given key"), "\(wrongKey.err)")
    }

    /// A backend as SAP Gateway is set up: Basic authentication and CSRF tokens, and no
    /// `$batch` for the client (`--no-batch`); the password comes from the environment.
    @Test func offlineCommandsWithCredentialsCSRFAndNoBatch() async throws {
        let (server, v4, v2) = try await serve(["--csrf", "--basic-auth", "alice:secret"])
        defer { stop(server) }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-cli-auth-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        for (name, root) in [("v4", v4), ("v2", v2)] {
            let store = ["--store", folder.appendingPathComponent(name + ".db").path]
            let anonymous = try await run(["offline", "open", "--service", root, "--define", "P=BusinessPartners"] + store)
            #expect(anonymous.status != 0)
            #expect(anonymous.err.contains("401 Unauthorized") && anonymous.err.contains("no authenticator"), "\(anonymous.err)")
            let wrong = try await run(["offline", "open", "--service", root, "--define", "P=BusinessPartners", "--user", "alice"] + store,
                                environment: ["OODATA_PASSWORD": "wrong"])
            #expect(wrong.err.contains("The credentials were not accepted"), "\(wrong.err)")
            let login = ["--user", "alice"]
            let password = ["OODATA_PASSWORD": "secret"]
            let open = try await run(["offline", "open", "--service", root, "--define", "P=BusinessPartners?$filter=Address/Country ne 'XX'"] + store + login,
                               environment: password)
            // The V2 round runs after the V4 round created a partner.
            let partners = name == "v4" ? 20 : 21
            #expect(open.status == 0 && open.out.contains("P: \(partners) BusinessPartners"), "\(name): \(open.out) \(open.err)")
            _ = try await run(["offline", "update"] + store + ["BusinessPartners('BP4')", #"{"Phone":"\#(name) csrf"}"#])
            _ = try await run(["offline", "create"] + store + ["BusinessPartners", #"{"PartnerID":"CLI-\#(name)","CompanyName":"No batch"}"#])
            let upload = try await run(["offline", "upload", "--no-batch"] + store + login, environment: password)
            #expect(upload.out.contains("upload done; the queue is empty"), "\(upload.out) \(upload.err)")
            #expect(try await run(["offline", "errors"] + store).out.contains("the ErrorArchive is empty"))
            let download = try await run(["offline", "download"] + store + login, environment: password)
            #expect(download.status == 0, "\(download.err)")
            let read = try await run(["offline", "read"] + store + ["BusinessPartners?$filter=PartnerID eq 'CLI-\(name)' or PartnerID eq 'BP4'&$select=Phone"])
            #expect(read.out.contains("\(name) csrf") && read.out.contains("CLI-\(name)"), "\(read.out)")
        }
    }

    @Test func metadataPrintsCounts() async throws {
        let file = Conformance.url("metadata/v4/trippin-SampleService-Models-TripPin.xml").path
        let result = try await run(["metadata", file])
        #expect(result.status == 0)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.out.utf8)) as? [String: Any])
        #expect(json["version"] as? String == "4.0")
        #expect(json["entitySets"] as? Int == 4)
        #expect(json["singletons"] as? Int == 1)
        for key in ["entityTypes", "complexTypes", "enumTypes", "navigationProperties", "functionImports", "actionImports", "functions", "actions"] {
            #expect(json[key] is Int, "\(key)")
        }
        let full = try await run(["metadata", "--full", file])
        #expect(full.status == 0)
        #expect(full.out.contains("\"schemas\""))
    }

    @Test func metadataRejectsBadInput() async throws {
        let bad = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-bad-\(UUID().uuidString).xml")
        try Data("<edmx:Edmx><broken".utf8).write(to: bad)
        defer { try? FileManager.default.removeItem(at: bad) }
        let result = try await run(["metadata", bad.path])
        #expect(result.status == 1)
        #expect(result.err.contains("line"))
        #expect(result.out.isEmpty)
        let missing = try await run(["metadata", "/nonexistent/file.xml"])
        #expect(missing.status == 1)
        let strict = try await run(["metadata", "--strict", Conformance.url("metadata/invalid/test1.xml").path])
        #expect(strict.status == 1)
        #expect(strict.err.contains("Key"))
    }

    @Test func urlPrintsTreesAndPositions() async throws {
        let ok = try await run(["url", "Products?$filter=Price gt 5&$top=2"])
        #expect(ok.status == 0)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(ok.out.utf8)) as? [String: Any])
        let request = try #require(json["request"] as? [String: Any])
        let query = try #require(request["query"] as? [String: Any])
        #expect(query["$top"] as? Int == 2)
        #expect((query["$filter"] as? [String: Any])?["operator"] as? String == "gt")
        let syntax = try await run(["url", "Products?$filter=Price gt"])
        #expect(syntax.status == 1)
        #expect(syntax.err.contains("offset 25"))
        let file = Conformance.url("metadata/v4/trippin-SampleService-Models-TripPin.xml").path
        let bound = try await run(["url", "--metadata", file, "People?$filter=FirstName eq 'x'"])
        #expect(bound.status == 0)
        #expect(bound.out.contains("\"bound\""))
        let binding = try await run(["url", "--metadata", file, "People?$filter=FirstName eq 5"])
        #expect(binding.status == 1)
        #expect(binding.err.contains("Cannot compare"))
        // Percent-encoded delimiters, as Python's requests sends them; V2 literals and A/B in V2.
        let encoded = try await run(["url", "--odata-version", "4.0", "SalesOrders?$expand=Items%2CPartner"])
        let expand = try #require(try JSONSerialization.jsonObject(with: Data(encoded.out.utf8)) as? [String: Any], "\(encoded.err)")
        #expect(((expand["request"] as? [String: Any])?["query"] as? [String: Any]).flatMap { $0["$expand"] as? [Any] }?.count == 2)
        let v2 = try await run(["url", "--odata-version", "2.0", "Customers?$filter=Amount gt 100M and substringof('a',Name)&$expand=Orders/Items"])
        #expect(v2.status == 0, "\(v2.err)")
        #expect(try await run(["url", "--odata-version", "4.01", "Customers?$filter=Amount gt 100M"]).status == 1)
    }

    @Test func payloadPrintsTypedEntities() async throws {
        let folder = "payloads/v4-json/olingo4-trippin-data/"
        let result = try await run(["payload", "--metadata", Conformance.url(folder + "trippin.xml").path, "--entity-set", "Airports", Conformance.url(folder + "airports.json").path])
        #expect(result.status == 0, "\(result.err)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.out.utf8)) as? [String: Any])
        let entities = try #require(json["entities"] as? [[String: Any]])
        #expect(!entities.isEmpty)
        #expect(entities.first?["type"] as? String == "Microsoft.OData.SampleService.Models.TripPin.Airport")
        let v2 = try await run(["payload", "--v2", Conformance.url("payloads/v2-json/olingo2/JsonTeamsWithCount.json").path])
        #expect(v2.status == 0)
        #expect(v2.out.contains("\"count\": 3"))
        let bad = try await run(["payload", Conformance.url("payloads/v2-json/olingo2/invalidSvcDocJson.json").path])
        #expect(bad.status == 1)
        #expect(bad.err.contains("byte"))
    }

    @Test func batchPrintsASummary() async throws {
        let result = try await run(["batch", Conformance.url("payloads/batch/olingo2-fit/changeset.batch").path])
        #expect(result.status == 0)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.out.utf8)) as? [String: Any])
        #expect(json["parts"] as? Int == 3)
        #expect(json["changeSets"] as? Int == 1)
        #expect(result.out.contains("\"contentID\": \"putRequest\""))
        let bad = try await run(["batch", Conformance.url("payloads/batch/olingo4-batchWithContent.batch").path])
        #expect(bad.status == 1)
        #expect(bad.err.contains("boundary"))
    }

    @Test func storeCommandsCreateImportQueryAndRekey() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("trippin.sqlite").path
        let folder = "payloads/v4-json/olingo4-trippin-data/"
        #expect(try await run(["store", "init", "--metadata", Conformance.url(folder + "trippin.xml").path, "--store", store, "--key", "k1"]).status == 0)
        let imported = try await run(["store", "import", "--store", store, "--key", "k1", "--entity-set", "People", Conformance.url(folder + "people.json").path])
        #expect(imported.status == 0, "\(imported.err)")
        #expect(imported.out.contains("imported 20"))
        let query = try await run(["store", "query", "--store", store, "--key", "k1", "People?$filter=FirstName eq 'Russell'&$select=UserName"])
        #expect(query.status == 0, "\(query.err)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(query.out.utf8)) as? [String: Any])
        #expect((json["value"] as? [[String: Any]])?.first?["UserName"] as? String == "russellwhyte")
        #expect(json["@odata.context"] as? String == "$metadata#People")
        let wrong = try await run(["store", "query", "--store", store, "--key", "nope", "People"])
        #expect(wrong.status == 1)
        #expect(wrong.err.contains("invalidEncryptionKey"))
        #expect(try await run(["store", "rekey", "--store", store, "--key", "k1", "--new-key", "k2"]).status == 0)
        let count = try await run(["store", "query", "--store", store, "--key", "k2", "People/$count"])
        #expect(count.out.trimmingCharacters(in: .whitespacesAndNewlines) == "20")
        let unsupported = try await run(["store", "query", "--store", store, "--key", "k2", "People?$filter=matchesPattern(FirstName,'^R')"])
        #expect(unsupported.status == 1)
        #expect(unsupported.err.contains("matchespattern"))
        // An unencrypted store has no key to change: rekey says so (it used to print "re-keyed"
        // and leave the file plaintext); encrypt encrypts it.
        let plain = dir.appendingPathComponent("plain.sqlite").path
        #expect(try await run(["store", "init", "--metadata", Conformance.url(folder + "trippin.xml").path, "--store", plain]).status == 0)
        _ = try await run(["store", "import", "--store", plain, "--entity-set", "People", Conformance.url(folder + "people.json").path])
        let refused = try await run(["store", "rekey", "--store", plain, "--new-key", "k3"])
        #expect(refused.status == 1 && refused.err.contains("is not encrypted"), "\(refused.out) \(refused.err)")
        #expect(!refused.out.contains("re-keyed"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: plain)).prefix(15) == Data("SQLite format 3".utf8))
        let encrypted = try await run(["store", "encrypt", "--store", plain, "--new-key", "k3"])
        #expect(encrypted.status == 0 && encrypted.out.contains("encrypted"), "\(encrypted.err)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: plain)).prefix(15) != Data("SQLite format 3".utf8))
        #expect(try await run(["store", "query", "--store", plain, "People/$count"]).status == 1)
        let keyed = try await run(["store", "query", "--store", plain, "--key", "k3", "People/$count"])
        #expect(keyed.out.trimmingCharacters(in: .whitespacesAndNewlines) == "20", "\(keyed.err)")
    }
}
