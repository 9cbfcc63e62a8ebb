import Foundation
import InteropSupport
import ODataCore
import OfflineOData
import Testing

/// Issue 58 through the gateway: `kill -9` of `oodata offline download --current-user bob`
/// (a separate process) at each step of a user switch on a shared store, under each policy that
/// does something with alice's requests: after her forced upload, after the backup of
/// `discardAfterBackup`, after the hand-over, after bob's re-read. The next open as bob
/// finishes the switch; bob then reads only his rows; every `$batch` the backend received
/// carried alice's credentials; her changes are on the backend once (forced, and kept once she
/// uploads) or never (discarded). Real PostgreSQL, V4 and V2.
@Suite(.serialized) struct UserSwitchGatewayCrashTests {
    /// Runs `oodata` with `arguments` to its end, off the concurrency pool.
    static func oodata(
        _ arguments: [String], environment: [String: String] = [:]
    ) async throws -> (status: Int32, out: String, err: String) {
        let tool = try #require(ProcessLaunch.builtTool("oodata"), "oodata was not built next to the tests")
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                do {
                    let process = Process()
                    process.executableURL = tool
                    process.arguments = arguments
                    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
                    let out = Pipe()
                    // Standard error goes to a file, so that neither stream can fill and block.
                    let errPath = FileManager.default.temporaryDirectory.appendingPathComponent(
                        "oodata-err-\(UUID().uuidString)")
                    _ = FileManager.default.createFile(atPath: errPath.path, contents: nil)
                    defer { try? FileManager.default.removeItem(at: errPath) }
                    let err = try FileHandle(forWritingTo: errPath)
                    process.standardOutput = out
                    process.standardError = err
                    try ProcessLaunch.run(process)
                    let outData = out.fileHandleForReading.readDataToEndOfFile()
                    process.waitUntilExit()
                    try? err.close()
                    let errData = (try? Data(contentsOf: errPath)) ?? Data()
                    continuation.resume(
                        returning: (
                            process.terminationStatus, String(decoding: outData, as: UTF8.self),
                            String(decoding: errData, as: UTF8.self)
                        ))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    @Test(arguments: [false, true])
    func killNineDuringASwitchThroughTheGateway(v2: Bool) async throws {
        try await SharedDeviceTests.withDevice(v2: v2, gateway: true) { device in
            let root = device.root
            let alice = ["--current-user", "alice", "--user", "alice", "--password", "alice-pw"]
            let bob = ["--current-user", "bob", "--user", "bob", "--password", "bob-pw"]
            let forced = ["--force-upload-on-user-switch", "--user-credentials", "alice=alice:alice-pw"]
            let keep = ["--user-switch-policy", "keep"]
            let discard = ["--user-switch-policy", "discard", "--user-switch-backup-key", "operators-key"]
            let rounds: [(point: String, policy: [String])] = [
                ("user-switch-uploaded", forced), ("user-switch-parked", forced), ("user-switch-downloaded", forced),
                ("user-switch-parked", keep), ("user-switch-backed-up", discard), ("user-switch-parked", discard),
            ]
            for (round, (point, policy)) in rounds.enumerated() {
                let tag = "G\(v2 ? 2 : 4)x\(round)"
                let store = [
                    "--store", device.setup.folder.appendingPathComponent("cli\(round).db").path, "--key", "k",
                ]
                let opened = try await Self.oodata(
                    ["offline", "open", "--service", root, "--define", "P=BusinessPartners", "--define", "C=Contacts"]
                        + store + alice)
                #expect(opened.status == 0, "\(opened.err)")
                let created = try await Self.oodata(
                    ["offline", "create"] + store + alice
                        + ["Contacts", #"{"FirstName":"Switch","LastName":"\#(tag)","PartnerID":"BP0"}"#])
                #expect(created.status == 0, "\(created.err)")
                await device.setup.backend.service.journal.clear()

                let killed = try await Self.oodata(
                    ["offline", "download"] + store + bob + policy, environment: ["OODATA_CRASH_POINT": point])
                #expect(killed.status == SIGKILL, "round \(round): not killed at \(point): \(killed.err)")
                let finished = try await Self.oodata(["offline", "download"] + store + bob + policy)
                #expect(finished.status == 0, "round \(round) at \(point): \(finished.err)")
                for set in ["BusinessPartners", "Contacts", "RequestQueue", "ErrorArchive"] {
                    let read = try await Self.oodata(["offline", "read"] + store + bob + policy + [set])
                    #expect(read.status == 0, "\(read.err)")
                    for word in [tag, "BP0"] {
                        #expect(!read.out.contains(word), "round \(round) at \(point): bob reads \(word) in \(set)")
                    }
                }
                let sent = await device.batchAuthorizations()
                #expect(
                    sent.allSatisfy { $0 == SharedDeviceTests.alice.credentials.authorization },
                    "round \(round) at \(point): a $batch went with other credentials: \(sent)")
                if policy == keep {
                    #expect(!(try await device.truth(SharedDeviceTests.alice)).contains { $0.contains(tag) })
                    let back = try await Self.oodata(["offline", "upload"] + store + alice + keep)
                    #expect(back.out.contains("the queue is empty"), "round \(round): \(back.out) \(back.err)")
                }
                let made = try await device.truth(SharedDeviceTests.alice).filter { $0.contains(" \(tag) ") }
                #expect(made.count == (policy == discard ? 0 : 1), "round \(round) at \(point): \(made)")
            }
        }
    }
}
