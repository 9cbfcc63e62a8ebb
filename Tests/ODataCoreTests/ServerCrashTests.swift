import Foundation
import InteropSupport
import Testing

/// Issue 40: the reference server commits the consecutive change sets of a `$batch` in one
/// transaction, with the repeatability record of each change in it. `kill -9` of `oodata serve`
/// right before that commit (`batch-applied`), right after it and before any answer went out
/// (`batch-committed`), and at random points of an upload; the server restarted on the same
/// store file and port, the client's uploads drain its queue, and the backend holds every change
/// exactly once.
extension CLITests {
    @Test(arguments: [false, true])
    func killNineOfTheServerDuringABatchAppliesEachChangeOnce(v2: Bool) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-scrash-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let backend = ["--store", folder.appendingPathComponent("backend.db").path, "--scale", "5"]
        // Below the range the system hands out for outgoing connections (32768 and up on
        // Linux), so that no connection takes the port while the server is down.
        let port = Int.random(in: 20_000..<32_000)
        let started = try await serve(backend, port: port)
        var server = started.process
        defer { stop(server) }
        let v4Root = started.v4, v2Root = started.v2
        let root = v2 ? v2Root : v4Root
        let store = ["--store", folder.appendingPathComponent("client.db").path, "--key", "k"]
        let opened = try await runOffPool(
            ["offline", "open", "--service", root, "--define", "P=BusinessPartners", "--define", "C=Contacts"] + store)
        #expect(opened.status == 0, "\(opened.err)")
        let tagPrefix = "S\(v2 ? 2 : 4)x"
        func onBackend(_ tag: String) async throws -> Int? {
            try await backendCountOffPool(v4Root, "Contacts/$count?$filter=LastName eq '\(tag)'")
        }
        /// Restarts the server on the same file and port (with a crash point, or none).
        func restart(crashingAt point: String?) async throws {
            stop(server)
            let environment = point.map { ["OODATA_CRASH_POINT": $0] } ?? [:]
            server = try await serve(backend, port: port, environment: environment).process
        }
        var random = SystemRandomNumberGenerator()
        var uploadTime = 0
        let rounds = 6
        for round in 0..<rounds {
            // Three change sets per upload: two new contacts and a change of a partner.
            for suffix in ["a", "b"] {
                let created = try await runOffPool(
                    ["offline", "create"] + store + [
                        "Contacts", #"{"FirstName":"Server","LastName":"\#(tagPrefix)\#(round)\#(suffix)","PartnerID":"BP1"}"#,
                    ])
                #expect(created.status == 0, "\(created.err)")
            }
            let updated = try await runOffPool(
                ["offline", "update"] + store + ["BusinessPartners('BP2')", #"{"Phone":"\#(tagPrefix)\#(round)"}"#])
            #expect(updated.status == 0, "\(updated.err)")
            switch round {
            case 0, 1:
                let point = round == 0 ? "batch-applied" : "batch-committed"
                try await restart(crashingAt: point)
                let killedUpload = try await runOffPool(["offline", "upload"] + store)
                #expect(!killedUpload.out.contains("the queue is empty"), "round \(round): \(killedUpload.out)")
                // Waited for a bounded time: a server that never reached the point fails the
                // test instead of hanging it.
                let killed = Handed(server)
                let exited = try await offPool { () -> Bool in
                    let deadline = Date().addingTimeInterval(30)
                    while killed.value.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
                    return !killed.value.isRunning
                }
                #expect(exited, "round \(round): the server did not stop at \(point)")
                #expect(!exited || server.terminationStatus == SIGKILL, "round \(round): the server was not killed at \(point)")
                try await restart(crashingAt: nil)
                // Before the commit nothing of the batch is there; after it, all of it is,
                // although no answer reached the client.
                let count = try await onBackend("\(tagPrefix)\(round)a")
                #expect(count == (point == "batch-committed" ? 1 : 0), "round \(round) at \(point): \(count ?? -1)")
            case 2:
                uploadTime = try await millisecondsOffPool(["offline", "upload"] + store)
            default:
                let upload = Task { try await self.runOffPool(["offline", "upload"] + store) }
                try await Task.sleep(nanoseconds: UInt64(Int.random(in: 0...max(1, uploadTime), using: &random)) * 1_000_000)
                stop(server)
                _ = try await upload.value
                try await restart(crashingAt: nil)
            }
            let drained = try await uploadUntilDrained(store)
            #expect(drained, "round \(round): the queue did not drain")
            #expect(try await runOffPool(["offline", "errors"] + store).out.contains("the ErrorArchive is empty"), "round \(round)")
        }
        for round in 0..<rounds {
            for suffix in ["a", "b"] {
                let count = try await onBackend("\(tagPrefix)\(round)\(suffix)")
                #expect(count == 1, "contact \(tagPrefix)\(round)\(suffix) is on the backend \(count ?? -1) times")
            }
        }
        let phone = try await backendJSONOffPool(v4Root + "BusinessPartners('BP2')")["Phone"] as? String
        #expect(phone == "\(tagPrefix)\(rounds - 1)", "\(phone ?? "nil")")
    }
}
