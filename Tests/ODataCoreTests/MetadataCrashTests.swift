import Foundation
import InteropSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Issue 38: `kill -9` of `oodata offline download` while it migrates the store to a changed
/// `$metadata` (SPEC §14), additive and breaking, V4 and V2, against `oodata serve` whose model
/// is switched at run time (`PUT /_model`). Afterwards the next download completes, nothing of
/// the migration is left beside the store, and every queued change reaches the backend exactly
/// once (or, for the one that no longer fits, is in the ErrorArchive): 0 changes lost.
extension CLITests {
    /// Switches the running `oodata serve` to the model `text` (a CSDL document).
    func switchModel(_ root: String, _ text: String) async throws {
        let base = try #require(root.range(of: "/odata/")).lowerBound
        var request = URLRequest(url: try #require(URL(string: String(root[..<base]) + "/_model")))
        request.httpMethod = "PUT"
        request.httpBody = Data(text.utf8)
        let (data, response) = try await URLSession.shared.data(for: request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        #expect(status == 204, "PUT /_model: \(status) \(String(decoding: data, as: UTF8.self))")
    }

    @Test(arguments: [false, true])
    func killNineDuringAMetadataMigrationLosesNoQueuedChange(v2: Bool) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-mdcrash-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        // Reads of partners trickle, so that kills land inside the migration's download.
        let faults = folder.appendingPathComponent("faults.json")
        try Data(#"[{"method": "GET", "urlContains": "BusinessPartners", "trickleMilliseconds": 15}]"#.utf8)
            .write(to: faults)
        let (server, v4Root, v2Root) = try await serve([
            "--store", folder.appendingPathComponent("backend.db").path, "--scale", "5", "--faults", faults.path,
        ])
        defer { stop(server) }
        let root = v2 ? v2Root : v4Root
        let original = String(
            decoding: try await offPool { try Data(contentsOf: try #require(URL(string: v4Root + "$metadata"))) },
            as: UTF8.self)
        let phone = #"<Property Name="Phone" Type="Edm.String"/>"#
        let email = #"<Property Name="CompanyName" Type="Edm.String"/><Property Name="Email" Type="Edm.String"/>"#
        #expect(original.contains(phone) && original.contains(email))
        let additive = original.replacingOccurrences(
            of: phone, with: phone + #"<Property Name="Rating" Type="Edm.Int32"/>"#)
        let breaking = original.replacingOccurrences(
            of: email, with: #"<Property Name="CompanyName" Type="Edm.String"/>"#)
        let define = [
            "--service", root, "--define", "P=BusinessPartners", "--define", "O=SalesOrders?$expand=Items",
            "--define", "C=Contacts",
        ]
        var timing: [Bool: Int] = [:]
        // Additive kills cut the download at these fractions of its uncut time (the migration
        // is one transaction inside it). Breaking ones happen at each window of the migration:
        // the process kills itself there (`OODATA_CRASH_POINT`, `kill -9` of its own pid).
        let fractions = [0.3, 0.45, 0.6, 0.75, 0.9]
        let points = [
            "migration-filled", "migration-carried", "migration-checkpointed", "migration-old-closed",
            "migration-renamed",
        ]
        for run in 0..<12 {
            let isBreaking = run % 2 == 1
            let tag = "M\(v2 ? 2 : 4)x\(run)"
            try await switchModel(v4Root, original)
            let path = folder.appendingPathComponent("client-\(run).db").path
            let store = ["--store", path, "--key", "k"]
            let opened = try await runOffPool(["offline", "open"] + define + store)
            #expect(opened.status == 0, "run \(run): \(opened.err)")
            // Three queued changes: one that the breaking model no longer takes, two that fit.
            let email = try await runOffPool(
                ["offline", "update"] + store + ["BusinessPartners('BP1')", #"{"Email":"\#(tag)@example.com"}"#])
            #expect(email.status == 0, "\(email.err)")
            let created = try await runOffPool(
                ["offline", "create"] + store + [
                    "Contacts", #"{"FirstName":"Crash","LastName":"\#(tag)","PartnerID":"BP2"}"#,
                ])
            #expect(created.status == 0, "\(created.err)")
            let updated = try await runOffPool(
                ["offline", "update"] + store + ["BusinessPartners('BP2')", #"{"Phone":"\#(tag)"}"#])
            #expect(updated.status == 0, "\(updated.err)")
            try await switchModel(v4Root, isBreaking ? breaking : additive)
            if let time = timing[isBreaking] {
                let round = (run / 2 - 1) % fractions.count
                if isBreaking {
                    let killed = try await self.run(
                        ["offline", "download"] + store, environment: ["OODATA_CRASH_POINT": points[round]])
                    #expect(killed.status != 0, "run \(run): the download was not killed at \(points[round])")
                    #expect(
                        FileManager.default.fileExists(atPath: path + "-migration"),
                        "run \(run): killed at \(points[round]), the migration's marker must be there")
                } else {
                    try await runKilledOffPool(
                        ["offline", "download"] + store, afterMilliseconds: max(1, Int(Double(time) * fractions[round]))
                    )
                }
                let again = try await runOffPool(["offline", "download"] + store)
                #expect(again.status == 0, "run \(run): \(again.err)")
            } else {
                // The first run of each kind is not killed: it times the migration and shows its report.
                let started = Date()
                let download = try await runOffPool(["offline", "download"] + store)
                timing[isBreaking] = Int(Date().timeIntervalSince(started) * 1000)
                #expect(download.status == 0, "run \(run): \(download.err)")
                #expect(
                    download.out.contains("the backend's $metadata changed (\(isBreaking ? "breaking" : "additive"))"),
                    "\(download.out)")
            }
            for leftover in [path + "-migrating", path + "-migration"] {
                #expect(!FileManager.default.fileExists(atPath: leftover), "run \(run): \(leftover) is left")
            }
            let upload = try await runOffPool(["offline", "upload"] + store)
            #expect(upload.out.contains("upload done; the queue is empty"), "run \(run): \(upload.out) \(upload.err)")
            let errors = try await runOffPool(["offline", "errors"] + store)
            if isBreaking {
                #expect(errors.out.contains("MetadataChanged"), "run \(run): \(errors.out)")
                #expect(errors.out.components(separatedBy: "MetadataChanged").count == 2, "run \(run): \(errors.out)")
                #expect(!errors.out.contains("DependencyFailed"), "run \(run): \(errors.out)")
            } else {
                #expect(errors.out.contains("the ErrorArchive is empty"), "run \(run): \(errors.out)")
                let rating = try await runOffPool(
                    ["offline", "read"] + store + ["BusinessPartners('BP1')?$select=Rating"])
                #expect(rating.status == 0 && rating.out.contains("Rating"), "run \(run): \(rating.out) \(rating.err)")
            }
            let count = try await backendCountOffPool(v4Root, "Contacts/$count?$filter=LastName eq '\(tag)'")
            #expect(count == 1, "run \(run): contact \(tag) is on the backend \(count ?? -1) times")
            let partner = try await backendJSONOffPool(v4Root + "BusinessPartners('BP2')")
            #expect(partner["Phone"] as? String == tag, "run \(run): \(partner)")
            if !isBreaking {
                let first = try await backendJSONOffPool(v4Root + "BusinessPartners('BP1')")
                #expect(first["Email"] as? String == "\(tag)@example.com", "run \(run): \(first)")
            }
        }
    }
}
