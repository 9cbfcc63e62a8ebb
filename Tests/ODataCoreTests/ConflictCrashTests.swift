import Foundation
import InteropSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Issue 39: `kill -9` of `oodata offline upload --conflicts client-wins` right after the
/// backend took the resend of a conflicting request and before the client recorded it
/// (`OODATA_CRASH_POINT=conflict-resent`). The next upload sends the request again: its resend
/// is recognized as the same request, so the change is applied once (the backend's ETag does
/// not move again) and nothing is lost.
extension CLITests {
    @Test(arguments: [false, true])
    func killNineDuringAConflictResolutionAppliesTheChangeOnce(v2: Bool) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-cfcrash-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let (server, v4Root, v2Root) = try await serve(["--store", folder.appendingPathComponent("backend.db").path])
        defer { stop(server) }
        let root = v2 ? v2Root : v4Root
        let store = ["--store", folder.appendingPathComponent("client.db").path, "--key", "k"]
        let opened = try await runOffPool(
            ["offline", "open", "--service", root, "--define", "P=BusinessPartners"] + store)
        #expect(opened.status == 0, "\(opened.err)")
        let update = try await runOffPool(
            ["offline", "update"] + store + ["BusinessPartners('BP1')", #"{"Phone":"field"}"#])
        #expect(update.status == 0, "\(update.err)")
        #expect(try await backendPatch(v4Root + "BusinessPartners('BP1')", #"{"Phone":"office"}"#) < 300)

        let killed = try await self.run(
            ["offline", "upload", "--conflicts", "client-wins"] + store,
            environment: ["OODATA_CRASH_POINT": "conflict-resent"])
        #expect(killed.status != 0, "the upload was not killed at its resend")
        let afterCrash = try await backendJSONOffPool(v4Root + "BusinessPartners('BP1')")
        #expect(afterCrash["Phone"] as? String == "field", "the resend reached the backend before the kill")
        let etag = afterCrash["@odata.etag"] as? String
        #expect(etag != nil)

        let again = try await runOffPool(["offline", "upload", "--conflicts", "client-wins"] + store)
        #expect(again.out.contains("upload done; the queue is empty"), "\(again.out) \(again.err)")
        #expect(again.out.contains("conflict resolved"), "\(again.out)")
        let after = try await backendJSONOffPool(v4Root + "BusinessPartners('BP1')")
        #expect(after["Phone"] as? String == "field")
        #expect(after["@odata.etag"] as? String == etag, "the resend was applied again")
        let errors = try await runOffPool(["offline", "errors"] + store)
        #expect(errors.out.contains("the ErrorArchive is empty"), "\(errors.out)")
    }

    /// `oodata offline errors` shows the properties in which a conflict's three copies differ,
    /// side by side; `--conflicts mergeDisjoint` (or `merge-disjoint`) resolves disjoint changes and says so.
    @Test(arguments: [false, true])
    func theCLIShowsAConflictsCopiesSideBySide(v2: Bool) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-cfcli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let (server, v4Root, v2Root) = try await serve(["--store", folder.appendingPathComponent("backend.db").path])
        defer { stop(server) }
        let root = v2 ? v2Root : v4Root
        let store = ["--store", folder.appendingPathComponent("client.db").path, "--key", "k"]
        let opened = try await runOffPool(
            ["offline", "open", "--service", root, "--define", "P=BusinessPartners"] + store)
        #expect(opened.status == 0, "\(opened.err)")
        let before = try await backendJSONOffPool(v4Root + "BusinessPartners('BP1')")
        let phone = try #require(before["Phone"] as? String)
        // Overlapping: both change BP1's phone; archived.
        _ = try await runOffPool(["offline", "update"] + store + ["BusinessPartners('BP1')", #"{"Phone":"field"}"#])
        #expect(try await backendPatch(v4Root + "BusinessPartners('BP1')", #"{"Phone":"office"}"#) < 300)
        let archived = try await runOffPool(["offline", "upload", "--conflicts", "merge-disjoint"] + store)
        #expect(archived.status == 0, "\(archived.err)")
        let errors = try await runOffPool(["offline", "errors"] + store)
        #expect(errors.out.contains("conflict: property | original | local | backend"), "\(errors.out)")
        #expect(errors.out.contains("Phone | '\(phone)' | 'field' | 'office'"), "\(errors.out)")
        #expect(!errors.out.contains("CompanyName |"), "unchanged properties are left out: \(errors.out)")
        #expect(errors.out.contains("backend ETag "), "\(errors.out)")
        // Disjoint: the device changes BP2's phone, the office its e-mail; merged.
        _ = try await runOffPool(["offline", "update"] + store + ["BusinessPartners('BP2')", #"{"Phone":"field"}"#])
        #expect(try await backendPatch(v4Root + "BusinessPartners('BP2')", #"{"Email":"o@example.com"}"#) < 300)
        // The SPEC's name works as the dashed one does.
        let merged = try await runOffPool(["offline", "upload", "--conflicts", "mergeDisjoint"] + store)
        #expect(merged.out.contains("conflict resolved"), "\(merged.out) \(merged.err)")
        let bp2 = try await backendJSONOffPool(v4Root + "BusinessPartners('BP2')")
        #expect(bp2["Phone"] as? String == "field" && bp2["Email"] as? String == "o@example.com")
    }
}
