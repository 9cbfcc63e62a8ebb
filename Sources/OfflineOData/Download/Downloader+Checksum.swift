import Crypto
import Foundation
import ODataCore
import ODataStore

/// Scope checksums (SPEC §13): a sync gateway sends, with the last page of a defining query
/// it tracks, `OOData-Scope-Checksum: rows=N;sum=S`: how many rows the scope holds and the
/// sum, modulo 2^64, of the first 60 bits of the MD5 of each row's ETag. After the download
/// is applied, the store's rows of that query are summed the same way. When they differ, the
/// query's delta link is forgotten and it is read again in full (the full read's local diff
/// removes what the gateway no longer has and brings back what the store lost), and an
/// EventLog entry of type `ScopeChecksumMismatch` says so.
///
/// Compared only where the store's rows of the set are exactly the query's: a defining query
/// that is its entity set alone (no options), the only one on that set, every row with an
/// ETag, no defining query with `$expand`, and nothing queued or failed in the request queue
/// (local changes and their kept state are not the gateway's rows).
extension Downloader {
    static let checksumHeader = "OOData-Scope-Checksum"
    static let mismatchEvent = "ScopeChecksumMismatch"

    /// The checksum a gateway sent: `rows=N;sum=S`.
    static func parseChecksum(_ text: String) -> (rows: Int, sum: UInt64)? {
        var rows: Int?
        var sum: UInt64?
        for part in text.split(separator: ";") {
            let pair = part.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2 else { return nil }
            switch pair[0] {
            case "rows": rows = Int(pair[1])
            case "sum": sum = UInt64(pair[1])
            default: continue
            }
        }
        guard let rows, let sum, rows >= 0 else { return nil }
        return (rows, sum)
    }

    /// A row's term: the first 60 bits of the MD5 of its ETag.
    static func checksumTerm(_ etag: String) -> UInt64 {
        var term: UInt64 = 0
        for byte in Insecure.MD5.hash(data: Array(etag.utf8)).prefix(8) { term = term << 8 | UInt64(byte) }
        return term >> 4
    }

    /// The store's checksum of `set`, or nil when it cannot be compared (see above).
    static func localChecksum(of set: String, store: Store) async throws -> (rows: Int, sum: UInt64)? {
        guard let table = store.schema.table(forEntitySet: set) else { return nil }
        return try await store.read { reader -> (rows: Int, sum: UInt64)? in
            let queued = try reader.connection.query("SELECT EXISTS (SELECT 1 FROM oo_queue)").first?.first
            guard queued == .integer(0) else { return nil }
            let quoted = "\"" + table.name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
            var rows = 0
            var sum: UInt64 = 0
            for row in try reader.connection.query("SELECT _etag FROM \(quoted)") {
                guard case .text(let etag)? = row.first else { return nil }
                rows += 1
                sum &+= checksumTerm(etag)
            }
            return (rows, sum)
        }
    }

    /// The queries of `selected` whose store rows differ from the checksum their gateway sent
    /// (`received`, by query name), each with what was compared.
    func mismatchedChecksums(
        _ selected: [OfflineODataDefiningQuery], received: [String: String], all: [OfflineODataDefiningQuery],
        store: Store
    ) async throws -> [(name: String, details: String)] {
        var result: [(name: String, details: String)] = []
        // A query's `$expand` puts rows in other sets' tables: those are no one query's alone.
        guard !all.contains(where: { $0.query.contains("$expand") }) else { return [] }
        for query in selected {
            guard let text = received[query.name], let sent = Self.parseChecksum(text),
                !query.query.contains("?"), !query.query.contains("("),
                let set = try? DefiningQueries.entitySet(of: query.query, model: store.model), set == query.query,
                all.filter({ (try? DefiningQueries.entitySet(of: $0.query, model: store.model)) == set }).count == 1,
                // A failure to read the store skips the check: the download is already applied.
                let held = try? await Self.localChecksum(of: set, store: store)
            else { continue }
            if held.rows != sent.rows || held.sum != sent.sum {
                result.append(
                    (
                        query.name,
                        "Defining query \(query.name): the store holds \(held.rows) rows (checksum \(held.sum)), the "
                            + "gateway's scope \(sent.rows) (checksum \(sent.sum)); read again in full"
                    ))
            }
        }
        return result
    }
}
