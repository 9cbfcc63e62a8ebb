import Foundation
import ODataCore
import ODataStore
import OfflineOData

/// One device: an offline provider with its own store, running random operations against its
/// own business partners (keys `J<device>-<n>`), three shared ones (`BP0`–`BP2`) and contacts
/// (server keys), and recording each in its history. After `until` it drains its queue, waits
/// for the controller's word, downloads once more and writes what it holds.
struct DeviceRun {
    var index: Int
    var root: String
    var folder: String
    var seed: UInt64
    var until: Double
    /// Seconds the final drain and download may take.
    var quietBound: Double
    /// A planted bug (`diverge`: a row removed from the store behind the provider's back).
    var plant: String?
    /// Whether downloads compare the gateway's scope checksums.
    var checksums: Bool

    static let shared = ["BP0", "BP1", "BP2"]

    var historyPath: String { folder + "/history-\(index).jsonl" }
    var finalPath: String { folder + "/final-\(index).json" }

    func parameters() -> OfflineODataParameters {
        var parameters = OfflineODataParameters()
        parameters.storePath = URL(fileURLWithPath: folder + "/device-\(index)")
        parameters.storeName = "store"
        parameters.timeoutInterval = 15
        parameters.verifiesScopeChecksums = checksums
        return parameters
    }

    func main() async throws {
        try FileManager.default.createDirectory(atPath: folder + "/device-\(index)", withIntermediateDirectories: true)
        let history = try HistoryWriter(path: historyPath)
        // Numbers go on from the last run of this device (a restart after kill -9).
        let earlier = try readLines(HistoryEvent.self, path: historyPath)
        var number = (earlier.map(\.n).max() ?? 0) + 1
        var random = SeededRandom(seed: seed &+ UInt64(index) &* 7919 &+ UInt64(number) &* 104_729)
        func record(_ event: HistoryEvent) { history.append(event) }
        func invoke(_ op: String, key: String? = nil, value: String? = nil, phase: String) -> Int {
            defer { number += 1 }
            record(
                HistoryEvent(
                    type: "invoke", device: index, n: number, op: op, key: key, value: value, time: now(),
                    phase: phase))
            return number
        }
        func complete(
            _ n: Int, _ op: String, key: String? = nil, value: String? = nil, error: (any Error)?,
            values: [String: String]? = nil, contacts: [String]? = nil, phase: String
        ) {
            record(
                HistoryEvent(
                    type: "complete", device: index, n: n, op: op, key: key, value: value, time: now(),
                    ok: error == nil, error: error.map { "\($0)" }, values: values, contacts: contacts,
                    phase: phase))
        }

        let storeExists = FileManager.default.fileExists(atPath: parameters().storeFile)
        guard let url = URL(string: root) else { throw JepsenFailure("bad root \(root)") }
        var provider = OfflineODataProvider(serviceRoot: url, parameters: parameters())
        if !storeExists {
            for query in ["BusinessPartners", "Contacts"] {
                try await provider.add(definingQuery: OfflineODataDefiningQuery(name: query, query: query))
            }
        }
        // The first open needs the gateway; a fault may be in force: try again until it works.
        var opened = false
        while !opened {
            let phase = now() < until ? "run" : "quiet"
            let n = invoke("open", phase: phase)
            do {
                try await provider.open()
                opened = true
                complete(n, "open", error: nil, phase: phase)
            } catch {
                complete(n, "open", error: error, phase: phase)
                guard now() < until + quietBound else { throw JepsenFailure("device \(index) never opened: \(error)") }
                try await Task.sleep(nanoseconds: 500_000_000)
            }
        }
        /// Records the ErrorArchive and deletes it (every entry goes with the first).
        func clearArchive(phase: String) async {
            guard let entries = try? await provider.readEntities("ErrorArchive"), let first = entries.first,
                let id = first.int64("RequestID")
            else { return }
            let archived = entries.map {
                DeviceFinal.Archived(
                    code: $0.string("Code"), status: $0.int64("HTTPStatusCode").map(Int.init),
                    method: $0.string("RequestMethod"), url: $0.string("RequestURL"), body: $0.string("RequestBody"))
            }
            // Recorded before they are deleted: a kill in between loses none.
            defer { number += 1 }
            let n = number
            record(
                HistoryEvent(
                    type: "invoke", device: index, n: n, op: "archive", time: now(), phase: phase,
                    archived: archived))
            do {
                _ = try await provider.execute(method: "DELETE", url: "ErrorArchive(\(id))")
                record(
                    HistoryEvent(
                        type: "complete", device: index, n: n, op: "archive", time: now(), ok: true,
                        phase: phase))
            } catch {
                record(
                    HistoryEvent(
                        type: "complete", device: index, n: n, op: "archive", time: now(), ok: false,
                        error: "\(error)", phase: phase))
            }
        }
        /// The EventLog's scope-checksum mismatches not recorded yet (the EventLog keeps 100).
        var seenEvents = Set(
            (try? await provider.readEntities("EventLog"))?.compactMap { $0.int64("ID") } ?? [])
        func newMismatches() async -> [String]? {
            guard let entries = try? await provider.readEntities("EventLog") else { return nil }
            let fresh = entries.filter { entry in
                guard let id = entry.int64("ID"), !seenEvents.contains(id) else { return false }
                seenEvents.insert(id)
                return entry.string("Type") == "ScopeChecksumMismatch"
            }
            return fresh.isEmpty ? nil : fresh.map { $0.string("Details") ?? "" }
        }
        let prefix = "J\(index)-"
        var own = try await provider.readEntities("BusinessPartners?$filter=startswith(PartnerID,'\(prefix)')")
            .compactMap { $0.string("PartnerID") }

        // The workload.
        while now() < until {
            let roll = Int.random(in: 0..<100, using: &random)
            let value = "d\(index):\(number)"
            switch roll {
            case 0..<28:
                let n = invoke("read", phase: "run")
                do {
                    let partners = try await provider.readEntities(
                        "BusinessPartners?$filter=startswith(PartnerID,'\(prefix)') or startswith(PartnerID,'BP')")
                    var values: [String: String] = [:]
                    for partner in partners {
                        if let key = partner.string("PartnerID") { values[key] = partner.string("Phone") ?? "" }
                    }
                    let contacts = try await provider.readEntities("Contacts?$filter=startswith(LastName,'d\(index):')")
                        .compactMap { $0.string("LastName") }
                    complete(n, "read", error: nil, values: values, contacts: contacts, phase: "run")
                } catch {
                    complete(n, "read", error: error, phase: "run")
                }
            case 28..<38:
                let key = "J\(index)-\(number)"
                let n = invoke("create", key: key, value: value, phase: "run")
                let body = #"{"PartnerID":"\#(key)","CompanyName":"jepsen","Phone":"\#(value)"}"#
                do {
                    _ = try await provider.execute(method: "POST", url: "BusinessPartners", body: Array(body.utf8))
                    own.append(key)
                    complete(n, "create", key: key, value: value, error: nil, phase: "run")
                } catch {
                    complete(n, "create", key: key, value: value, error: error, phase: "run")
                }
            case 38..<58 where !own.isEmpty:
                let key = own[Int.random(in: 0..<own.count, using: &random)]
                let n = invoke("update", key: key, value: value, phase: "run")
                do {
                    _ = try await provider.execute(
                        method: "PATCH", url: "BusinessPartners('\(key)')", body: Array(#"{"Phone":"\#(value)"}"#.utf8))
                    complete(n, "update", key: key, value: value, error: nil, phase: "run")
                } catch {
                    complete(n, "update", key: key, value: value, error: error, phase: "run")
                }
            case 58..<66:
                let key = Self.shared[Int.random(in: 0..<Self.shared.count, using: &random)]
                let n = invoke("shared", key: key, value: value, phase: "run")
                do {
                    _ = try await provider.execute(
                        method: "PATCH", url: "BusinessPartners('\(key)')", body: Array(#"{"Phone":"\#(value)"}"#.utf8))
                    complete(n, "shared", key: key, value: value, error: nil, phase: "run")
                } catch {
                    complete(n, "shared", key: key, value: value, error: error, phase: "run")
                }
            case 66..<69 where own.count > 3:
                let position = Int.random(in: 0..<own.count, using: &random)
                let key = own[position]
                let n = invoke("delete", key: key, phase: "run")
                do {
                    _ = try await provider.execute(method: "DELETE", url: "BusinessPartners('\(key)')")
                    own.remove(at: position)
                    complete(n, "delete", key: key, error: nil, phase: "run")
                } catch {
                    complete(n, "delete", key: key, error: error, phase: "run")
                }
            case 69..<76:
                let n = invoke("contact", value: value, phase: "run")
                let body = #"{"PartnerID":"BP0","FirstName":"jepsen","LastName":"\#(value)"}"#
                do {
                    _ = try await provider.execute(method: "POST", url: "Contacts", body: Array(body.utf8))
                    complete(n, "contact", value: value, error: nil, phase: "run")
                } catch {
                    complete(n, "contact", value: value, error: error, phase: "run")
                }
            case 76..<90:
                let n = invoke("upload", phase: "run")
                do {
                    try await provider.upload()
                    complete(n, "upload", error: nil, phase: "run")
                } catch {
                    complete(n, "upload", error: error, phase: "run")
                }
                await clearArchive(phase: "run")
            case 90..<100:
                let n = invoke("download", phase: "run")
                do {
                    try await provider.download()
                    record(
                        HistoryEvent(
                            type: "complete", device: index, n: n, op: "download", time: now(), ok: true,
                            phase: "run", mismatches: await newMismatches()))
                } catch {
                    complete(n, "download", error: error, phase: "run")
                }
            default:
                continue
            }
            try await Task.sleep(nanoseconds: UInt64.random(in: 40_000_000...250_000_000, using: &random))
        }

        // The quiet phase: the faults are healed; the queue must drain within the bound.
        let drainStart = now()
        var drained = false
        while now() < drainStart + quietBound {
            let n = invoke("drain", phase: "quiet")
            do {
                try await provider.upload()
                complete(n, "drain", error: nil, phase: "quiet")
                await clearArchive(phase: "quiet")
                if try await provider.isRequestQueueEmpty {
                    drained = true
                    break
                }
            } catch {
                complete(n, "drain", error: error, phase: "quiet")
                await clearArchive(phase: "quiet")
                try await Task.sleep(nanoseconds: 1_000_000_000)
            }
        }
        let drainSeconds = now() - drainStart
        _ = FileManager.default.createFile(atPath: folder + "/drained-\(index)", contents: Data("\(drained)".utf8))
        // Every device's changes are on the backend: the controller says when to download.
        // A controller that went away does not leave its devices waiting for ever.
        let patience = until + 3 * quietBound + 120
        while !FileManager.default.fileExists(atPath: folder + "/final.go") {
            guard now() < patience else { throw JepsenFailure("device \(index): no word to download after the drain") }
            try await Task.sleep(nanoseconds: 200_000_000)
        }
        func finalDownload() async throws {
            let start = now()
            while true {
                let n = invoke("final", phase: "quiet")
                do {
                    try await provider.download()
                    record(
                        HistoryEvent(
                            type: "complete", device: index, n: n, op: "final", time: now(), ok: true,
                            phase: "quiet", mismatches: await newMismatches()))
                    return
                } catch {
                    complete(n, "final", error: error, phase: "quiet")
                    guard now() < start + quietBound else { throw error }
                    try await Task.sleep(nanoseconds: 1_000_000_000)
                }
            }
        }
        try await finalDownload()
        var planted: String?
        if plant == "diverge" && index == 0 {
            // A row goes from the store behind the provider's back: only the scope checksum
            // can tell the store no longer holds what the gateway sent.
            await provider.close()
            planted = try Self.removeRow(storeFile: parameters().storeFile, set: "BusinessPartner", key: "BP3")
            provider = OfflineODataProvider(serviceRoot: url, parameters: parameters())
            try await provider.open()
            try await finalDownload()
        }
        var partners: [String: String] = [:]
        for partner in try await provider.readEntities("BusinessPartners") {
            if let key = partner.string("PartnerID") { partners[key] = partner.string("Phone") ?? "" }
        }
        let contacts = try await provider.readEntities("Contacts").map {
            "\($0.int64("ContactID") ?? -1) \($0.string("LastName") ?? "")"
        }.sorted()
        let archive = try await provider.readEntities("ErrorArchive").map {
            DeviceFinal.Archived(
                code: $0.string("Code"), status: $0.int64("HTTPStatusCode").map(Int.init),
                method: $0.string("RequestMethod"), url: $0.string("RequestURL"), body: $0.string("RequestBody"))
        }
        let queued = try await provider.readEntities("RequestQueue").filter { $0.string("Status") != "failed" }.count
        let events = try await provider.readEntities("EventLog").filter { $0.string("Type") == "ScopeChecksumMismatch" }
            .map { $0.string("Details") ?? "" }
        await provider.close()
        let final = DeviceFinal(
            device: index, partners: partners, contacts: contacts, archive: archive, queued: queued,
            checksumEvents: events, drainSeconds: drainSeconds, drained: drained, planted: planted)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        try encoder.encode(final).write(to: URL(fileURLWithPath: finalPath))
    }

    /// Deletes the row of `key` from the table of entity type `set` in the store file, as a
    /// bug in the store or a restored backup would: returns what was removed.
    static func removeRow(storeFile: String, set: String, key: String) throws -> String {
        let connection = try Connection(path: storeFile)
        let tables = try connection.query(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ?", [.text("%\(set)%")])
        let names = tables.compactMap { row -> String? in
            if case .text(let name)? = row.first { return name }
            return nil
        }
        guard let table = names.first(where: { !$0.contains("_") }) ?? names.first else {
            throw JepsenFailure("no table for \(set) in \(storeFile): \(names)")
        }
        let removed = try connection.execute(
            "DELETE FROM \"\(table)\" WHERE \"PartnerID\" = ?", [.text(key)])
        connection.close()
        guard removed == 1 else { throw JepsenFailure("no row \(key) in \(table) to remove") }
        return "\(table) \(key)"
    }
}
