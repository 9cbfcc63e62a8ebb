import Crypto
import Foundation
import PostgresNIO

/// A store file the gateway built (issue 37): its bytes are kept in PostgreSQL in chunks, so
/// that any instance serves any file, and a device resumes a download on another instance.
struct StoreFileRecord: Sendable {
    var id: String
    /// Whether every device may have it (shared data only), or only `owner`.
    var shared: Bool
    var owner: String
    var size: Int64
    var sha256: String
    /// The defining queries it holds, as `name\tquery` lines.
    var queries: [String]
    /// Seconds since it was built, by PostgreSQL's clock.
    var age: Double
}

extension GatewayStore {
    /// Bytes per chunk of a store file: a range request reads the chunks it covers.
    static let fileChunk = 1 << 20

    static let fileSchema = [
        """
        CREATE TABLE IF NOT EXISTS oodata_store_file (
          id TEXT PRIMARY KEY,
          backend TEXT NOT NULL,
          cache_key TEXT NOT NULL,
          shared BOOLEAN NOT NULL,
          owner TEXT NOT NULL,
          size BIGINT NOT NULL,
          sha256 TEXT NOT NULL,
          queries TEXT NOT NULL,
          created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())
        """,
        "CREATE INDEX IF NOT EXISTS oodata_store_file_key ON oodata_store_file (cache_key, created_at)",
        """
        CREATE TABLE IF NOT EXISTS oodata_store_chunk (
          file_id TEXT NOT NULL,
          n INTEGER NOT NULL,
          data BYTEA NOT NULL,
          created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
          PRIMARY KEY (file_id, n))
        """,
    ]

    /// The newest file built for `cacheKey` within `maxAge` seconds, if any.
    func storeFile(cacheKey: String, maxAge: Double) async throws -> StoreFileRecord? {
        let rows = try await client.query(
            """
            SELECT id, shared, owner, size, sha256, queries, extract(epoch FROM clock_timestamp() - created_at)::float8
            FROM oodata_store_file
            WHERE cache_key = \(cacheKey) AND created_at > clock_timestamp() - make_interval(secs => \(maxAge))
            ORDER BY created_at DESC LIMIT 1
            """, logger: logger)
        for try await (id, shared, owner, size, sha256, queries, age)
            in rows.decode((String, Bool, String, Int64, String, String, Double).self)
        {
            return StoreFileRecord(
                id: id, shared: shared, owner: owner, size: size, sha256: sha256,
                queries: queries.split(separator: "\n").map(String.init), age: age)
        }
        return nil
    }

    /// The file `id` of `backend`, if it is kept.
    func storeFile(id: String, backend: String) async throws -> StoreFileRecord? {
        let rows = try await client.query(
            """
            SELECT id, shared, owner, size, sha256, queries, extract(epoch FROM clock_timestamp() - created_at)::float8
            FROM oodata_store_file WHERE id = \(id) AND backend = \(backend)
            """, logger: logger)
        for try await (id, shared, owner, size, sha256, queries, age)
            in rows.decode((String, Bool, String, Int64, String, String, Double).self)
        {
            return StoreFileRecord(
                id: id, shared: shared, owner: owner, size: size, sha256: sha256,
                queries: queries.split(separator: "\n").map(String.init), age: age)
        }
        return nil
    }

    /// Copies the file at `path` into PostgreSQL, chunk by chunk (memory stays at one chunk),
    /// and records it last, so that a file is offered only once all of it is kept.
    func keepStoreFile(
        at path: String, backend: String, cacheKey: String, shared: Bool, owner: String, queries: [String]
    ) async throws -> StoreFileRecord {
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw GatewayError(status: 503, code: "StoreBuild", "The built store \(path) cannot be read")
        }
        defer { try? handle.close() }
        let id = UUID().uuidString.lowercased()
        var hasher = SHA256()
        var size: Int64 = 0
        var number: Int32 = 0
        while true {
            let data = try handle.read(upToCount: Self.fileChunk) ?? Data()
            if data.isEmpty { break }
            hasher.update(data: data)
            size += Int64(data.count)
            let bytes = ByteBuffer(bytes: data)
            try await client.query(
                "INSERT INTO oodata_store_chunk (file_id, n, data) VALUES (\(id), \(number), \(bytes))", logger: logger)
            number += 1
        }
        let sha256 = Self.hex(hasher.finalize())
        let names = queries.joined(separator: "\n")
        try await client.query(
            """
            INSERT INTO oodata_store_file (id, backend, cache_key, shared, owner, size, sha256, queries)
            VALUES (\(id), \(backend), \(cacheKey), \(shared), \(owner), \(size), \(sha256), \(names))
            """, logger: logger)
        return StoreFileRecord(
            id: id, shared: shared, owner: owner, size: size, sha256: sha256, queries: queries, age: 0)
    }

    /// The bytes `range` (offsets within the file, end excluded) of file `id`.
    func storeFileBytes(id: String, range: Range<Int64>) async throws -> [UInt8] {
        guard !range.isEmpty else { return [] }
        let chunk = Int64(Self.fileChunk)
        let first = Int32(range.lowerBound / chunk)
        let last = Int32((range.upperBound - 1) / chunk)
        let rows = try await client.query(
            """
            SELECT n, data FROM oodata_store_chunk WHERE file_id = \(id) AND n BETWEEN \(first) AND \(last) ORDER BY n
            """, logger: logger)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(range.count))
        var expected = first
        for try await (number, data) in rows.decode((Int32, ByteBuffer).self) {
            guard number == expected else { break }
            expected += 1
            let start = Int64(number) * chunk
            let from = max(range.lowerBound, start) - start
            let to = min(range.upperBound, start + Int64(data.readableBytes)) - start
            guard from < to, let part = data.getBytes(at: data.readerIndex + Int(from), length: Int(to - from)) else {
                continue
            }
            bytes += part
        }
        guard bytes.count == range.count else {
            throw GatewayError(status: 410, code: "StoreFileGone", "The store file \(id) is no longer kept whole")
        }
        return bytes
    }

    /// Whether a gateway holds the advisory lock `key` of `space` now (read from `pg_locks`,
    /// without taking it).
    func isLocked(space: Int32, key: String) async throws -> Bool {
        let rows = try await client.query(
            """
            SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = \(space)::int4::oid
              AND objid = hashtext(\(key))::oid AND objsubid = 2 AND granted)
            """, logger: logger)
        for try await locked in rows.decode(Bool.self) { return locked }
        return false
    }

    /// How many store files are kept: shared ones and users'.
    public func storeFileCounts() async throws -> (shared: Int, user: Int) {
        let rows = try await client.query(
            "SELECT count(*) FILTER (WHERE shared), count(*) FILTER (WHERE NOT shared) FROM oodata_store_file",
            logger: logger)
        for try await (shared, user) in rows.decode((Int64, Int64).self) { return (Int(shared), Int(user)) }
        return (0, 0)
    }

    /// Removes shared files built more than `sharedOlderThan` seconds ago and users' files
    /// built more than `userOlderThan` ago, and chunks without a file (a gateway that died while
    /// it kept one, or a removed file's) after an hour.
    func removeStoreFiles(sharedOlderThan shared: Double, userOlderThan user: Double) async throws {
        try await client.query(
            """
            DELETE FROM oodata_store_file
            WHERE created_at < clock_timestamp()
              - make_interval(secs => CASE WHEN shared THEN \(shared) ELSE \(user) END)
            """, logger: logger)
        try await client.query(
            """
            DELETE FROM oodata_store_chunk c
            WHERE c.created_at < clock_timestamp() - make_interval(secs => 3600)
              AND NOT EXISTS (SELECT 1 FROM oodata_store_file f WHERE f.id = c.file_id)
            """, logger: logger)
    }
}
