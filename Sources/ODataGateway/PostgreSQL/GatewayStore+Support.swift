public import Foundation
import PostgresNIO

/// A store a device sent for support (`$oodata/support`), as the admin API lists it.
public struct SupportStoreSummary: Sendable, Codable, Equatable {
    public var id: Int64
    public var backend: String
    /// The name the device gave (the last part of its URL), per identity.
    public var name: String
    /// Whose it is: the kind and 12 characters of the identity digest, never a name.
    public var user: String
    public var clientInstanceID: String?
    public var appVersion: String?
    /// Bytes announced; `received` of them arrived.
    public var size: Int64
    public var received: Int64
    public var complete: Bool
    public var createdAt: Date
}

/// Where a support store's chunk landed.
struct SupportChunkOutcome: Sendable {
    var received: Int64
    var total: Int64
}

extension GatewayStore {
    static let supportSchema = [
        """
        CREATE TABLE IF NOT EXISTS oodata_support_store (
          id BIGSERIAL PRIMARY KEY,
          backend TEXT NOT NULL,
          user_name TEXT NOT NULL,
          name TEXT NOT NULL,
          instance_id TEXT,
          app_version TEXT,
          total BIGINT NOT NULL,
          received BIGINT NOT NULL DEFAULT 0,
          created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
          completed_at TIMESTAMPTZ,
          UNIQUE (backend, user_name, name)
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS oodata_support_chunk (
          store_id BIGINT NOT NULL REFERENCES oodata_support_store (id) ON DELETE CASCADE,
          start_at BIGINT NOT NULL,
          bytes BYTEA NOT NULL,
          PRIMARY KEY (store_id, start_at)
        )
        """,
    ]

    /// The most support stores one identity keeps per backend: a new one beyond replaces the
    /// oldest, so a device cannot fill the database.
    static let supportStoresPerUser = 3

    /// Takes bytes `start...` of a support store of `total` bytes: a chunk at 0 begins it anew
    /// (replacing one of the same name of this identity); a later one must continue it (a
    /// chunk already taken is taken again without change, a retry). Nil: it does not continue
    /// the store (a gap, another total, no store begun).
    func takeSupportChunk(
        backend: String, user: String, name: String, instance: String?, appVersion: String?,
        start: Int64, total: Int64, bytes: [UInt8]
    ) async throws -> SupportChunkOutcome? {
        try await client.withTransaction(logger: logger) { connection in
            let end = start + Int64(bytes.count)
            if start == 0 {
                try await connection.query(
                    """
                    DELETE FROM oodata_support_store
                    WHERE backend = \(backend) AND user_name = \(user) AND name = \(name)
                    """, logger: logger)
                let keep = Self.supportStoresPerUser - 1
                try await connection.query(
                    """
                    DELETE FROM oodata_support_store WHERE id IN (
                      SELECT id FROM oodata_support_store WHERE backend = \(backend) AND user_name = \(user)
                      ORDER BY created_at DESC OFFSET \(keep))
                    """, logger: logger)
                let rows = try await connection.query(
                    """
                    INSERT INTO oodata_support_store
                      (backend, user_name, name, instance_id, app_version, total, received)
                    VALUES (\(backend), \(user), \(name), \(instance), \(appVersion), \(total), \(end))
                    RETURNING id
                    """, logger: logger)
                var id: Int64?
                for try await value in rows.decode(Int64.self) { id = value }
                guard let id else { return nil }
                try await connection.query(
                    """
                    INSERT INTO oodata_support_chunk (store_id, start_at, bytes)
                    VALUES (\(id), 0, \(ByteBuffer(bytes: bytes)))
                    """,
                    logger: logger)
                if end == total {
                    try await connection.query(
                        "UPDATE oodata_support_store SET completed_at = clock_timestamp() WHERE id = \(id)",
                        logger: logger)
                }
                return SupportChunkOutcome(received: end, total: total)
            }
            let rows = try await connection.query(
                """
                SELECT id, total, received FROM oodata_support_store
                WHERE backend = \(backend) AND user_name = \(user) AND name = \(name) FOR UPDATE
                """, logger: logger)
            var found: (Int64, Int64, Int64)?
            for try await row in rows.decode((Int64, Int64, Int64).self) { found = row }
            guard let (id, known, received) = found, known == total else { return nil }
            if end <= received { return SupportChunkOutcome(received: received, total: total) }
            guard start == received else { return nil }
            try await connection.query(
                """
                INSERT INTO oodata_support_chunk (store_id, start_at, bytes)
                VALUES (\(id), \(start), \(ByteBuffer(bytes: bytes)))
                """, logger: logger)
            try await connection.query(
                """
                UPDATE oodata_support_store SET received = \(end),
                  completed_at = CASE WHEN \(end) = total THEN clock_timestamp() END
                WHERE id = \(id)
                """, logger: logger)
            return SupportChunkOutcome(received: end, total: total)
        }
    }

    /// The support stores, newest first.
    public func supportStores(limit: Int = 1000) async throws -> [SupportStoreSummary] {
        let rows = try await client.query(
            """
            SELECT id, backend, name, user_name, instance_id, app_version, total, received, completed_at IS NOT NULL,
                   created_at
            FROM oodata_support_store ORDER BY created_at DESC, id DESC LIMIT \(limit)
            """, logger: logger)
        var result: [SupportStoreSummary] = []
        for try await (id, backend, name, user, instance, version, total, received, complete, created)
            in rows.decode((Int64, String, String, String, String?, String?, Int64, Int64, Bool, Date).self)
        {
            result.append(
                SupportStoreSummary(
                    id: id, backend: backend, name: name, user: Self.shownUser(user), clientInstanceID: instance,
                    appVersion: version, size: total, received: received, complete: complete, createdAt: created))
        }
        return result
    }

    /// A whole support store's bytes, nil when there is none or it is not complete.
    public func supportStoreContent(id: Int64) async throws -> (summary: SupportStoreSummary, bytes: [UInt8])? {
        guard let summary = try await supportStore(id: id), summary.complete else { return nil }
        let rows = try await client.query(
            "SELECT bytes FROM oodata_support_chunk WHERE store_id = \(id) ORDER BY start_at", logger: logger)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(summary.size))
        for try await chunk in rows.decode(ByteBuffer.self) { bytes.append(contentsOf: chunk.readableBytesView) }
        guard Int64(bytes.count) == summary.size else { return nil }
        return (summary, bytes)
    }

    func supportStore(id: Int64) async throws -> SupportStoreSummary? {
        let rows = try await client.query(
            """
            SELECT id, backend, name, user_name, instance_id, app_version, total, received, completed_at IS NOT NULL,
                   created_at
            FROM oodata_support_store WHERE id = \(id)
            """, logger: logger)
        for try await (id, backend, name, user, instance, version, total, received, complete, created)
            in rows.decode((Int64, String, String, String, String?, String?, Int64, Int64, Bool, Date).self)
        {
            return SupportStoreSummary(
                id: id, backend: backend, name: name, user: Self.shownUser(user), clientInstanceID: instance,
                appVersion: version, size: total, received: received, complete: complete, createdAt: created)
        }
        return nil
    }

    /// Removes a support store; false when there is none.
    public func removeSupportStore(id: Int64) async throws -> Bool {
        let rows = try await client.query(
            "DELETE FROM oodata_support_store WHERE id = \(id) RETURNING id", logger: logger)
        var removed = false
        for try await _ in rows.decode(Int64.self) { removed = true }
        return removed
    }

    /// Removes `backend`'s support stores older than `seconds`, and those not complete an hour
    /// after they began.
    func removeSupportStores(backend: String, olderThan seconds: Double) async throws {
        try await client.query(
            """
            DELETE FROM oodata_support_store WHERE backend = \(backend)
              AND (created_at < clock_timestamp() - make_interval(secs => \(seconds))
                   OR (completed_at IS NULL AND created_at < clock_timestamp() - interval '1 hour'))
            """, logger: logger)
    }
}
