import Foundation
import InteropSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Issue 58: `kill -9` of `oodata offline download --current-user bob` while it takes a shared
/// store over from alice (SPEC §16), at each step of the switch (`OODATA_CRASH_POINT`): after
/// alice's forced upload, after her requests were set aside, after bob's download. The next
/// open as bob finishes the switch; bob then reads only his rows; alice's changes are on the
/// backend exactly once (a request sent with bob's credentials would fail: bob cannot see BP0);
/// under `keep` they wait for alice and go when she opens again. Separate processes, V4 and V2.
extension CLITests {
    static let switchUsers = """
        {"users": [
          {"name": "alice", "credential": {"basic": {"user": "alice", "password": "alice-pw"}},
           "rowFilters": {"BusinessPartners": "PartnerID eq 'BP0'", "Contacts": "PartnerID eq 'BP0'"}},
          {"name": "bob", "credential": {"basic": {"user": "bob", "password": "bob-pw"}},
           "rowFilters": {"BusinessPartners": "PartnerID eq 'BP1'", "Contacts": "PartnerID eq 'BP1'"}}]}
        """

    /// A GET on the backend as alice; the body as text.
    func readAsAlice(_ url: String) async throws -> String {
        var request = URLRequest(url: try #require(URL(string: url.replacingOccurrences(of: " ", with: "%20"))))
        request.setValue(
            "Basic " + Data("alice:alice-pw".utf8).base64EncodedString(), forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        let (data, _) = try await URLSession.shared.data(for: request)
        return String(decoding: data, as: UTF8.self)
    }

    @Test(arguments: [false, true])
    func killNineDuringAUserSwitchLosesNothingAndSendsNothingAsTheWrongUser(v2: Bool) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "oodata-switch-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let usersFile = folder.appendingPathComponent("users.json")
        try Data(Self.switchUsers.utf8).write(to: usersFile)
        let (server, v4Root, v2Root) = try await serve([
            "--store", folder.appendingPathComponent("backend.db").path, "--scale", "3", "--users", usersFile.path,
        ])
        defer { stop(server) }
        let root = v2 ? v2Root : v4Root
        let alice = ["--current-user", "alice", "--user", "alice", "--password", "alice-pw"]
        let bob = ["--current-user", "bob", "--user", "bob", "--password", "bob-pw"]
        let forced = ["--force-upload-on-user-switch", "--user-credentials", "alice=alice:alice-pw"]
        let keep = ["--user-switch-policy", "keep"]
        let rounds: [(point: String, policy: [String])] = [
            ("user-switch-uploaded", forced), ("user-switch-parked", forced), ("user-switch-downloaded", forced),
            ("user-switch-parked", keep), ("user-switch-downloaded", keep),
        ]
        for (round, (point, policy)) in rounds.enumerated() {
            let tag = "S\(v2 ? 2 : 4)x\(round)"
            let store = ["--store", folder.appendingPathComponent("client\(round).db").path, "--key", "k"]
            let opened = try await run(
                ["offline", "open", "--service", root, "--define", "P=BusinessPartners", "--define", "C=Contacts"]
                    + store + alice)
            #expect(opened.status == 0, "\(opened.err)")
            let created = try await run(
                ["offline", "create"] + store + alice
                    + ["Contacts", #"{"FirstName":"Switch","LastName":"\#(tag)","PartnerID":"BP0"}"#])
            #expect(created.status == 0, "\(created.err)")
            let updated = try await run(
                ["offline", "update"] + store + alice + ["BusinessPartners('BP0')", #"{"Phone":"\#(tag)"}"#])
            #expect(updated.status == 0, "\(updated.err)")

            let killed = try await run(
                ["offline", "download"] + store + bob + policy, environment: ["OODATA_CRASH_POINT": point])
            #expect(killed.status == SIGKILL, "round \(round): not killed at \(point): \(killed.err)")
            let finished = try await run(["offline", "download"] + store + bob + policy)
            #expect(finished.status == 0, "round \(round) at \(point): \(finished.err)")
            for set in ["BusinessPartners", "Contacts", "RequestQueue", "ErrorArchive"] {
                let read = try await run(["offline", "read"] + store + bob + policy + [set])
                #expect(read.status == 0, "\(read.err)")
                for word in [tag, "BP0"] {
                    #expect(!read.out.contains(word), "round \(round) at \(point): bob reads \(word) in \(set)")
                }
                if set == "BusinessPartners" { #expect(read.out.contains("BP1"), "\(read.out)") }
            }
            let contacts = v4Root + "Contacts?$filter=LastName eq '\(tag)'&$count=true"
            if policy == keep {
                #expect(
                    !(try await readAsAlice(contacts)).contains(tag), "round \(round): alice's create waits for her")
                let back = try await run(["offline", "upload"] + store + alice + keep)
                #expect(back.out.contains("upload done; the queue is empty"), "round \(round): \(back.out) \(back.err)")
            }
            let made = try await readAsAlice(contacts)
            #expect(made.components(separatedBy: "\"LastName\":\"\(tag)\"").count == 2, "round \(round): \(made)")
            #expect(
                try await readAsAlice(v4Root + "BusinessPartners('BP0')").contains("\"Phone\":\"\(tag)\""),
                "round \(round) at \(point)")
        }
    }
}
