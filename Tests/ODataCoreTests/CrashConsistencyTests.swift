import Foundation
import InteropSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Testing

/// Issue 19: `kill -9` of `oodata offline open`, `upload` and `download` at 20 random points
/// each, against `oodata serve` with a persistent store. Afterwards the store opens, the queue
/// drains, and the backend holds every change exactly once. The backend trickles its answers
/// (`trickleMilliseconds`), so many kills land after it committed and before the client did.
extension CLITests {
    /// Runs blocking work (processes, sleeps, socket reads) on a thread of its own: the
    /// concurrency pool has two threads here, and in-process servers of other tests need them.
    func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                do { continuation.resume(returning: try body()) } catch { continuation.resume(throwing: error) }
            }
        }
    }

    /// Runs `oodata arguments` and kills it with SIGKILL after `milliseconds` (if still running).
    func runKilled(_ arguments: [String], afterMilliseconds milliseconds: Int) throws {
        let tool = try #require(Self.binary, "oodata was not built next to the tests")
        let process = Process()
        process.executableURL = tool
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try ProcessLaunch.run(process)
        Thread.sleep(forTimeInterval: Double(milliseconds) / 1000)
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// GET from the backend, as JSON.
    func backendJSON(_ url: String) throws -> [String: Any] {
        let data = try Data(contentsOf: try #require(URL(string: url.replacingOccurrences(of: " ", with: "%20"))))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any], "\(url)")
    }

    func backendCount(_ root: String, _ path: String) throws -> Int? {
        let data = try Data(contentsOf: try #require(URL(string: root + path.replacingOccurrences(of: " ", with: "%20"))))
        return Int(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// PATCH on the backend as another user (If-Match: *).
    func backendPatch(_ url: String, _ body: String) async throws -> Int {
        var request = URLRequest(url: try #require(URL(string: url)))
        request.httpMethod = "PATCH"
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.setValue("*", forHTTPHeaderField: "If-Match")
        request.httpBody = Data(body.utf8)
        let (_, response) = try await URLSession.shared.data(for: request)
        return (response as? HTTPURLResponse)?.statusCode ?? 0
    }

    func runOffPool(_ arguments: [String]) async throws -> (status: Int32, out: String, err: String) {
        try await run(arguments)
    }
    func runKilledOffPool(_ arguments: [String], afterMilliseconds milliseconds: Int) async throws {
        try await offPool { try self.runKilled(arguments, afterMilliseconds: milliseconds) }
    }
    func backendCountOffPool(_ root: String, _ path: String) async throws -> Int? {
        try await offPool { try self.backendCount(root, path) }
    }
    func backendJSONOffPool(_ url: String) async throws -> [String: any Sendable] {
        try await offPool { try self.backendJSON(url).mapValues { "\($0)" } }
    }

    /// Uploads up to three times until the queue is empty (after a kill, the first upload may
    /// meet a resend's answer or a restarting server); whether it emptied.
    func uploadUntilDrained(_ store: [String]) async throws -> Bool {
        for _ in 0..<3 {
            let upload = try await runOffPool(["offline", "upload"] + store)
            if upload.out.contains("upload done; the queue is empty") { return true }
        }
        return false
    }

    /// Milliseconds `oodata arguments` takes, for choosing kill points within it.
    func millisecondsOffPool(_ arguments: [String]) async throws -> Int {
        let start = Date()
        _ = try await runOffPool(arguments)
        return Int(Date().timeIntervalSince(start) * 1000)
    }

    @Test func killNineAtRandomPointsLosesNothingAndAppliesEachChangeOnce() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-crash-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let faults = folder.appendingPathComponent("faults.json")
        try Data(#"[{"urlContains": "$batch", "trickleMilliseconds": 40}, {"method": "GET", "urlContains": "Products", "trickleMilliseconds": 20}]"#
            .utf8).write(to: faults)
        let (server, root, _) = try await serve(["--store", folder.appendingPathComponent("backend.db").path, "--scale", "5",
                                           "--faults", faults.path])
        defer { stop(server) }
        var random = SystemRandomNumberGenerator()
        let define = ["--service", root, "--define", "P=BusinessPartners", "--define", "O=SalesOrders?$expand=Items",
                      "--define", "C=Contacts", "--define", "R=Products"]
        let partners = try #require(try await backendCountOffPool(root, "BusinessPartners/$count"))
        let contactsBefore = try #require(try await backendCountOffPool(root, "Contacts/$count"))

        // 1. The first open, killed: a rerun finishes it completely.
        var openTime = 0
        for run in 0..<20 {
            let store = ["--store", folder.appendingPathComponent("open-\(run).db").path, "--key", "k"]
            if run == 0 {
                openTime = try await millisecondsOffPool(["offline", "open"] + define + store)
                try? FileManager.default.removeItem(atPath: folder.appendingPathComponent("open-0.db").path)
            }
            try await runKilledOffPool(["offline", "open"] + define + store, afterMilliseconds: Int.random(in: 0...max(1, openTime), using: &random))
            // A read of the store the kill left either finishes the fill or says what is wrong:
            // never an empty answer from a half-filled store.
            let early = try await runOffPool(["offline", "read"] + store + ["Contacts/$count"])
            if early.status == 0 {
                #expect(early.out.trimmingCharacters(in: .whitespacesAndNewlines) == String(contactsBefore), "open \(run): \(early.out)")
            } else {
                #expect(!early.err.isEmpty, "open \(run): a failed read must say why")
            }
            let again = try await runOffPool(["offline", "open"] + define + store)
            #expect(again.status == 0, "open \(run): \(again.err)")
            #expect(again.out.contains("P: \(partners) BusinessPartners"), "open \(run): \(again.out)")
            let contacts = try await runOffPool(["offline", "read"] + store + ["Contacts/$count"])
            #expect(contacts.out.trimmingCharacters(in: .whitespacesAndNewlines) == String(contactsBefore), "open \(run): \(contacts.out)")
        }

        // 2. Uploads, killed: every queued change reaches the backend exactly once.
        let store = ["--store", folder.appendingPathComponent("client.db").path, "--key", "k"]
        #expect(try await runOffPool(["offline", "open"] + define + store).status == 0)
        var uploadTime = 0
        for run in 0..<20 {
            let tag = "K\(run)"
            let created = try await runOffPool(["offline", "create"] + store + ["Contacts", #"{"FirstName":"Crash","LastName":"\#(tag)","PartnerID":"BP1"}"#])
            #expect(created.status == 0, "\(created.err)")
            _ = try await runOffPool(["offline", "update"] + store + ["BusinessPartners('BP\(run % partners)')", #"{"Phone":"\#(tag)"}"#])
            if run == 0 {
                uploadTime = try await millisecondsOffPool(["offline", "upload"] + store)
                continue
            }
            try await runKilledOffPool(["offline", "upload"] + store, afterMilliseconds: Int.random(in: 0...max(1, uploadTime), using: &random))
            let drained = try await uploadUntilDrained(store)
            #expect(drained, "upload \(run): the queue did not drain")
            #expect(try await runOffPool(["offline", "errors"] + store).out.contains("the ErrorArchive is empty"), "upload \(run)")
        }
        for run in 0..<20 {
            let count = try await backendCountOffPool(root, "Contacts/$count?$filter=LastName eq 'K\(run)'")
            #expect(count == 1, "contact K\(run) is on the backend \(count ?? -1) times")
        }
        #expect(try await backendCountOffPool(root, "Contacts/$count") == contactsBefore + 20)
        let lastPhone = try await backendJSONOffPool(root + "BusinessPartners('BP\(19 % partners)')")["Phone"] as? String
        #expect(lastPhone == "K19", "\(lastPhone ?? "nil")")

        // 3. Downloads, killed: the next download brings the store to the backend's state.
        var downloadTime = 0
        for run in 0..<20 {
            let name = "Renamed \(run)"
            #expect(try await backendPatch(root + "Products('P\(run % 10)')", #"{"Name":"\#(name)"}"#) < 300)
            if run == 0 {
                downloadTime = try await millisecondsOffPool(["offline", "download"] + store)
            } else {
                try await runKilledOffPool(["offline", "download"] + store, afterMilliseconds: Int.random(in: 0...max(1, downloadTime), using: &random))
                let download = try await runOffPool(["offline", "download"] + store)
                #expect(download.status == 0, "download \(run): \(download.err)")
            }
            let local = try await runOffPool(["offline", "read"] + store + ["Products('P\(run % 10)')?$select=Name"])
            #expect(local.out.contains(#""Name":"\#(name)""#), "download \(run): \(local.out) \(local.err)")
        }
        let localContacts = try await runOffPool(["offline", "read"] + store + ["Contacts/$count"])
        #expect(localContacts.out.trimmingCharacters(in: .whitespacesAndNewlines) == String(contactsBefore + 20))
    }
}
