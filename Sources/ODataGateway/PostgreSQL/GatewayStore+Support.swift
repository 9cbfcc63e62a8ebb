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

/// A support store's chunks changed while it was read (removed, or begun again).
public struct SupportStoreChanged: Error, CustomStringConvertible {
    public var id: Int64
    public var description: String { "support store \(id) changed while it was read" }
}

/// What became of a support store's chunk.
enum SupportChunkOutcome: Sendable, Equatable {
    /// Taken: `received` of `total` bytes are kept.
    case taken(received: Int64, total: Int64)
    /// It does not continue the store (a gap, another total, no store begun).
    case notContinued
    /// A new store that would take the endpoint's stores past their limit; `used` bytes are
    /// taken by the others.
    case full(used: Int64)
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

    /// The advisory lock space of support stores: one lock per endpoint, identity and name, so
    /// that two first chunks of one store at once are taken one after the other.
    static let supportLockSpace: Int32 = 7264

    /// Takes bytes `start...` of a support store of `total` bytes: a chunk at 0 begins it anew
    /// (replacing one of the same name of this identity) when the endpoint's stores stay within
    /// `totalLimit` bytes; a later one must continue it (a chunk already taken is taken again
    /// without change, a retry).
    func takeSupportChunk(
        backend: String, user: String, name: String, instance: String?, appVersion: String?,
        start: Int64, total: Int64, bytes: [UInt8], totalLimit: Int64
    ) async throws -> SupportChunkOutcome {
        do {
            return try await takeSupportChunkOnce(
                backend: backend, user: user, name: name, instance: instance, appVersion: appVersion, start: start,
                total: total, bytes: bytes, totalLimit: totalLimit)
        } catch let full as SupportStoresFull {
            return .full(used: full.used)
        }
    }

    private struct SupportStoresFull: Error {
        var used: Int64
    }

    private func takeSupportChunkOnce(
        backend: String, user: String, name: String, instance: String?, appVersion: String?,
        start: Int64, total: Int64, bytes: [UInt8], totalLimit: Int64
    ) async throws -> SupportChunkOutcome {
        try await client.withTransaction(logger: logger) { connection in
            let end = start + Int64(bytes.count)
            let lockName = backend + "\n" + user + "\n" + name
            try await connection.query(
                "SELECT pg_advisory_xact_lock(\(Self.supportLockSpace), hashtext(\(lockName)))", logger: logger)
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
                let sums = try await connection.query(
                    "SELECT COALESCE(SUM(total), 0)::BIGINT FROM oodata_support_store WHERE backend = \(backend)",
                    logger: logger)
                var used: Int64 = 0
                for try await value in sums.decode(Int64.self) { used = value }
                // Thrown to undo the removals above: the stores stay as they were.
                guard used + total <= totalLimit else { throw SupportStoresFull(used: used) }
                let rows = try await connection.query(
                    """
                    INSERT INTO oodata_support_store
                      (backend, user_name, name, instance_id, app_version, total, received)
                    VALUES (\(backend), \(user), \(name), \(instance), \(appVersion), \(total), \(end))
                    RETURNING id
                    """, logger: logger)
                var id: Int64?
                for try await value in rows.decode(Int64.self) { id = value }
                guard let id else { return .notContinued }
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
                return .taken(received: end, total: total)
            }
            let rows = try await connection.query(
                """
                SELECT id, total, received FROM oodata_support_store
                WHERE backend = \(backend) AND user_name = \(user) AND name = \(name) FOR UPDATE
                """, logger: logger)
            var found: (Int64, Int64, Int64)?
            for try await row in rows.decode((Int64, Int64, Int64).self) { found = row }
            guard let (id, known, received) = found, known == total else { return .notContinued }
            if end <= received { return .taken(received: received, total: total) }
            guard start == received else { return .notContinued }
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
            return .taken(received: end, total: total)
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

    /// Passes a complete support store's chunks to `write` in order, one at a time, as
    /// PostgreSQL sends them; throws ``SupportStoreChanged`` when the chunks are not the
    /// `size` bytes listed (removed or replaced meanwhile).
    func streamSupportStore(
        id: Int64, size: Int64, to write: (ByteBuffer) async throws -> Void
    ) async throws {
        let rows = try await client.query(
            "SELECT start_at, bytes FROM oodata_support_chunk WHERE store_id = \(id) ORDER BY start_at",
            logger: logger)
        var sent: Int64 = 0
        for try await (start, chunk) in rows.decode((Int64, ByteBuffer).self) {
            guard start == sent, sent + Int64(chunk.readableBytes) <= size else { throw SupportStoreChanged(id: id) }
            sent += Int64(chunk.readableBytes)
            try await write(chunk)
        }
        guard sent == size else { throw SupportStoreChanged(id: id) }
    }

    public func supportStore(id: Int64) async throws -> SupportStoreSummary? {
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

    /// Removes the support stores of endpoints no longer configured (`backends` are those that
    /// are) after the default retention, 7 days.
    func removeSupportStores(notOf backends: [String]) async throws {
        try await client.query(
            """
            DELETE FROM oodata_support_store WHERE backend <> ALL(\(backends))
              AND created_at < clock_timestamp() - interval '7 days'
            """, logger: logger)
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
