import Foundation
import InteropSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Issue 40: a download's transactions commit without waiting for the disk (they are redone
/// by the next download when lost); local changes still wait. `kill -9` of `oodata offline
/// download` while it applies a delta (right before and right after the apply's commit, by
/// `OODATA_CRASH_POINT`, and at fractions of an uncut download) loses no local change: the
/// queue keeps every change, a commit that returned before the kill is still there, the next
/// download equals the backend, and the upload applies each change once.
extension CLITests {
    @Test(arguments: [false, true])
    func killNineDuringADeltaLosesNoLocalChange(v2: Bool) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-dcrash-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        // Reads of contacts trickle, so that timed kills land inside the download.
        let faults = folder.appendingPathComponent("faults.json")
        try Data(#"[{"method": "GET", "urlContains": "Contacts", "trickleMilliseconds": 10}]"#.utf8).write(to: faults)
        let (server, v4Root, v2Root) = try await serve([
            "--store", folder.appendingPathComponent("backend.db").path, "--scale", "5", "--faults", faults.path,
        ])
        defer { stop(server) }
        let root = v2 ? v2Root : v4Root
        let path = folder.appendingPathComponent("client.db").path
        let store = ["--store", path, "--key", "k"]
        let opened = try await runOffPool(
            ["offline", "open", "--service", root, "--define", "P=BusinessPartners", "--define", "C=Contacts"] + store)
        #expect(opened.status == 0, "\(opened.err)")
        func queued() async throws -> Int {
            let read = try await runOffPool(["offline", "read"] + store + ["RequestQueue?$select=RequestID"])
            return read.out.components(separatedBy: "\"RequestID\"").count - 1
        }
        func companyName(_ key: String) async throws -> String {
            try await runOffPool(["offline", "read"] + store + ["BusinessPartners('\(key)')?$select=CompanyName"]).out
        }
        let uncut = try await millisecondsOffPool(["offline", "download"] + store)
        let points = ["delta-staged", "delta-applied"]
        let fractions = [0.3, 0.6, 0.9]
        for run in 0..<6 {
            let tag = "D\(v2 ? 2 : 4)x\(run)"
            // Two local changes per run, not uploaded until the end.
            let created = try await runOffPool(
                ["offline", "create"] + store + [
                    "Contacts", #"{"FirstName":"Delta","LastName":"\#(tag)","PartnerID":"BP2"}"#,
                ])
            #expect(created.status == 0, "\(created.err)")
            let updated = try await runOffPool(
                ["offline", "update"] + store + ["BusinessPartners('BP1')", #"{"Phone":"\#(tag)"}"#])
            #expect(updated.status == 0, "\(updated.err)")
            let expectedQueue = try await queued()
            #expect(expectedQueue >= run + 2, "run \(run): \(expectedQueue) queued")
            // Another user's changes make the delta.
            for key in ["BP3", "BP4"] {
                #expect(
                    try await backendPatch(v4Root + "BusinessPartners('\(key)')", #"{"CompanyName":"\#(tag)"}"#) < 300)
            }
            if run < points.count {
                let point = points[run]
                let killed = try await self.run(
                    ["offline", "download"] + store, environment: ["OODATA_CRASH_POINT": point])
                // Killed by the signal at that point (Foundation reports the signal's number).
                #expect(killed.status == SIGKILL, "run \(run): the download was not killed at \(point): \(killed.err)")
                // The apply's commit returned before the kill at delta-applied: it is there.
                let seen = try await companyName("BP3")
                #expect(seen.contains(tag) == (point == "delta-applied"), "run \(run) at \(point): \(seen)")
            } else {
                let fraction = fractions[(run - points.count) % fractions.count]
                try await runKilledOffPool(
                    ["offline", "download"] + store, afterMilliseconds: max(1, Int(Double(uncut) * fraction)))
            }
            #expect(try await queued() == expectedQueue, "run \(run): the queue lost a change")
            let again = try await runOffPool(["offline", "download"] + store)
            #expect(again.status == 0, "run \(run): \(again.err)")
            #expect(try await companyName("BP4").contains(tag), "run \(run)")
            #expect(try await queued() == expectedQueue, "run \(run): the queue lost a change")
        }
        let upload = try await runOffPool(["offline", "upload"] + store)
        #expect(upload.out.contains("upload done; the queue is empty"), "\(upload.out) \(upload.err)")
        for run in 0..<6 {
            let tag = "D\(v2 ? 2 : 4)x\(run)"
            let count = try await backendCountOffPool(v4Root, "Contacts/$count?$filter=LastName eq '\(tag)'")
            #expect(count == 1, "contact \(tag) is on the backend \(count ?? -1) times")
        }
        let partner = try await backendJSONOffPool(v4Root + "BusinessPartners('BP1')")
        #expect(partner["Phone"] as? String == "D\(v2 ? 2 : 4)x5", "\(partner)")
    }
}
