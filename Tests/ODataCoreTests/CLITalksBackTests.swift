import Foundation
import InteropSupport
import Testing

/// The CLI says what it is doing and what went wrong: live progress, mistyped subcommands,
/// reopened stores, reads outside the defining queries; local writes carry every option.
extension CLITests {
    @Test func mistypedSubcommandsAreNamed() async throws {
        let typo = try await run(["offline", "uplaod", "--store", "x.db"])
        #expect(typo.status == 1)
        #expect(
            typo.err.contains("'uplaod' is not a subcommand of 'oodata offline'. Did you mean 'upload'?"), "\(typo.err)"
        )
        #expect(typo.err.contains("send-store") && typo.err.contains("media"), "\(typo.err)")
        let top = try await run(["ofline", "read"])
        #expect(top.err.contains("'ofline' is not a subcommand of 'oodata'. Did you mean 'offline'?"), "\(top.err)")
        let far = try await run(["store", "zzzzzz"])
        #expect(
            far.err.contains("'zzzzzz' is not a subcommand of 'oodata store'.") && !far.err.contains("Did you mean"),
            "\(far.err)")
        let optionFirst = try await run(["offline", "--store", "x.db"])
        #expect(optionFirst.status != 0)
        #expect(optionFirst.err.contains("'oodata offline' needs a subcommand before --store"), "\(optionFirst.err)")
    }

    @Test func reopeningAndReadingOutsideTheDefiningQueriesIsExplained() async throws {
        let (server, v4, v2) = try await serve([])
        defer { stop(server) }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-cli-talk-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        for (name, root) in [("v4", v4), ("v2", v2)] {
            let store = ["--store", folder.appendingPathComponent(name + ".db").path]
            let first = try await run(["offline", "open", "--service", root, "--define", "P=BusinessPartners"] + store)
            #expect(first.status == 0 && !first.err.contains("note:"), "\(first.err)")
            // A set no defining query downloads reads as empty, and the CLI says why.
            let uncovered = try await run(["offline", "read"] + store + ["Products?$top=1"])
            #expect(uncovered.status == 0)
            #expect(uncovered.err.contains("no defining query downloads Products"), "\(uncovered.err)")
            #expect(try await run(["offline", "read"] + store + ["BusinessPartners?$top=1"]).err.isEmpty)
            #expect(try await run(["offline", "read"] + store + ["ErrorArchive"]).err.isEmpty)
            // A new defining query on a reopen: a download fills it.
            let reopened = try await run(
                ["offline", "open", "--service", root, "--define", "P=BusinessPartners", "--define", "C=Contacts"]
                    + store)
            #expect(reopened.status == 0, "\(reopened.err)")
            #expect(reopened.err.contains("note: C is a new defining query of an existing store"), "\(reopened.err)")
            #expect(reopened.out.contains("C: 0 Contacts"), "\(reopened.out)")
            #expect(!reopened.err.contains("note: P"), "\(reopened.err)")
            let downloaded = try await run(["offline", "download"] + store)
            #expect(downloaded.status == 0, "\(downloaded.err)")
            let contacts = try await run(["offline", "read"] + store + ["Contacts/$count"])
            #expect(
                contacts.status == 0 && (Int(contacts.out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0) > 0,
                "\(contacts)")
            // Another service for an existing store: a warning, and the store's service is kept.
            let elsewhere = try await run(
                ["offline", "open", "--service", "http://127.0.0.1:9/odata/", "--define", "P=BusinessPartners"] + store)
            #expect(elsewhere.status == 0, "\(elsewhere.err)")
            #expect(elsewhere.err.contains("was made for \(root)"), "\(elsewhere.err)")
            #expect(elsewhere.err.contains("--service http://127.0.0.1:9/odata/ is ignored"), "\(elsewhere.err)")
        }
    }

    @Test func localWritesCarryTransactionCategoryAndTag() async throws {
        let (server, v4, _) = try await serve([])
        defer { stop(server) }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-cli-write-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = ["--store", folder.appendingPathComponent("w.db").path]
        #expect(
            try await run(["offline", "open", "--service", v4, "--define", "P=BusinessPartners"] + store).status == 0)
        let update = try await run(
            ["offline", "update"] + store
                + [
                    "BusinessPartners('BP1')", #"{"Phone":"t1"}"#, "--transaction-id", "T1", "--category", "urgent",
                    "--tag", "first",
                ])
        #expect(update.status == 0, "\(update.err)")
        _ = try await run(
            ["offline", "create"] + store
                + [
                    "BusinessPartners", #"{"PartnerID":"BPX","CompanyName":"X"}"#, "--transaction-id", "T1",
                    "--category", "later",
                ])
        _ = try await run(
            ["offline", "delete"] + store + ["BusinessPartners('BP3')", "--category", "later", "--tag", "gone"])
        let queue = try await run(["offline", "queue"] + store).out
        #expect(queue.contains("RequestMethod=PATCH  RequestURL=BusinessPartners('BP1')"), "\(queue)")
        #expect(queue.contains("TransactionID=T1  CustomTag=first  UploadCategory=urgent"), "\(queue)")
        #expect(queue.contains("TransactionID=T1  UploadCategory=later"), "\(queue)")
        #expect(queue.contains("CustomTag=gone  UploadCategory=later"), "\(queue)")
        // Only the urgent category goes.
        let urgent = try await run(["offline", "upload", "--category", "urgent"] + store)
        #expect(urgent.out.contains("requests remain queued"), "\(urgent.out) \(urgent.err)")
        let left = try await run(["offline", "queue"] + store).out
        #expect(
            !left.contains("UploadCategory=urgent") && left.components(separatedBy: "UploadCategory=later").count == 3,
            "\(left)")
    }

    @Test func missingEntitiesFailedUploadsAndBusyPortsAreSaid() async throws {
        let faults = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-cli-said-\(UUID().uuidString).json")
        try Data(
            #"[{"method": "PATCH", "urlContains": "BusinessPartners('BP4')", "status": 400, "code": "Refused", "message": "no"}]"#
                .utf8
        )
        .write(to: faults)
        defer { try? FileManager.default.removeItem(at: faults) }
        let (server, v4, _) = try await serve(["--faults", faults.path])
        defer { stop(server) }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-cli-said-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = ["--store", folder.appendingPathComponent("s.db").path]
        #expect(
            try await run(["offline", "open", "--service", v4, "--define", "P=BusinessPartners"] + store).status == 0)
        let missing = try await run(["offline", "read"] + store + ["BusinessPartners('ZZZ')"])
        #expect(
            missing.status == 1 && missing.err.contains("BusinessPartners('ZZZ'): the offline store has no such entity (404)"),
            "\(missing)")
        _ = try await run(["offline", "update"] + store + ["BusinessPartners('BP4')", #"{"Phone":"x"}"#])
        let upload = try await run(["offline", "upload"] + store)
        #expect(upload.out.contains("upload done; the queue is empty; 1 failed in the ErrorArchive"), "\(upload.out)")
        let both = try await run(["offline", "errors", "--clear", "--delete", "1"] + store)
        #expect(both.status != 0 && both.err.contains("either --clear or --delete ID"), "\(both.err)")
        // Another server on the port this one holds.
        let port = try #require(URLComponents(string: v4)?.port)
        let busy = try await run(["serve", "--sample", "sales", "--port", "\(port)"])
        #expect(busy.status == 1)
        #expect(busy.err.contains("cannot listen on 127.0.0.1:\(port): the address is already in use"), "\(busy.err)")
    }

    @Test func progressShowsWhileASlowDownloadRuns() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-cli-progress-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let faults = folder.appendingPathComponent("faults.json")
        try Data(#"[{"method": "GET", "urlContains": "BusinessPartners", "delayMilliseconds": 2500}]"#.utf8).write(
            to: faults)
        let (server, v4, _) = try await serve(["--faults", faults.path])
        defer { stop(server) }
        let tool = try #require(Self.binary)
        let arguments = [
            "offline", "open", "--service", v4, "--define", "P=BusinessPartners", "--store",
            folder.appendingPathComponent("p.db").path,
        ]
        // The first thing the open prints arrives while the backend still holds the data back,
        // on its own: not in one piece with the result at the end.
        let first = try await offPool { () -> String in
            let process = Process()
            process.executableURL = tool
            process.arguments = arguments
            let out = Pipe()
            process.standardOutput = out
            process.standardError = FileHandle.nullDevice
            try ProcessLaunch.run(process)
            let chunk = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)
            _ = out.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return chunk
        }
        #expect(first.contains("metadata") || first.contains("Metadata"), "\(first)")
        #expect(!first.contains("P: 20 BusinessPartners"), "the progress came only with the result: \(first)")
    }

    @Test func serveWithoutAStoreRemovesItsFilesWhenItStops() async throws {
        let tool = try #require(Self.binary)
        let path = try await offPool { () -> String in
            let started = try Self.serveBlocking(tool, [])
            let existed =
                FileManager.default.fileExists(atPath: started.store)
                && FileManager.default.fileExists(atPath: started.store + "-wal")
            kill(started.process.value.processIdentifier, SIGINT)
            started.process.value.waitUntilExit()
            return existed ? started.store : "not made: \(started.store)"
        }
        #expect(path.hasPrefix("/"), "\(path)")
        for suffix in ["", "-wal", "-shm"] {
            #expect(!FileManager.default.fileExists(atPath: path + suffix), "\(path + suffix) is left")
        }
    }
}
