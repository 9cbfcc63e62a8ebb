public import Foundation
import PostgresNIO

extension GatewayStore {
    /// A scope an upload may have changed: its ID and its query, canonical.
    public struct ScopeEntry: Sendable, Equatable {
        public var id: Int64
        public var query: String
        /// Its user ("" for shared data).
        public var user: String
    }

    /// The scopes of `backend` that hold `user`'s data or shared data: those an upload of
    /// `user` may change.
    public func scopes(backend: String, user: String) async throws -> [ScopeEntry] {
        let rows = try await client.query(
            """
            SELECT id, query, user_name FROM oodata_scope
            WHERE backend = \(backend) AND (user_name = \(user) OR user_name = '') AND published > 0
            ORDER BY id
            """, logger: logger)
        var result: [ScopeEntry] = []
        for try await (id, query, user) in rows.decode((Int64, String, String).self) {
            result.append(ScopeEntry(id: id, query: query, user: user))
        }
        return result
    }

    /// Makes the scopes `ids` due: the next download of each waits for a refresh that began
    /// after now (a change that could not be written through).
    public func markDue(_ ids: [Int64]) async throws {
        guard !ids.isEmpty else { return }
        try await client.query(
            "UPDATE oodata_scope SET stale_since = clock_timestamp() WHERE id = ANY(\(ids)::bigint[])",
            logger: logger)
    }

    /// Makes every scope of `backend` that holds `user`'s data or shared data due (write-through
    /// could not tell which an upload changed).
    public func markDue(backend: String, user: String) async throws {
        try await client.query(
            """
            UPDATE oodata_scope SET stale_since = clock_timestamp()
            WHERE backend = \(backend) AND (user_name = \(user) OR user_name = '')
            """, logger: logger)
    }

    /// What a write-through did to one scope.
    public struct WriteThroughSummary: Sendable, Equatable {
        /// False when the scope has no published rows yet (its first refresh reads the change).
        public var ran = false
        public var changed = 0
        public var removed = 0
        /// The sequence number the rows were published at (0 when nothing changed).
        public var published: Int64 = 0
    }

    /// Writes rows of one scope read back after an upload: `read` is called under the scope's
    /// lock (the one its refresh holds while it reads the backend), so that every read that
    /// writes the scope's rows is published in the order it was made, and a refresh that began
    /// before never puts its older copy over the rows read here. `read` returns the rows its
    /// read found and the keys (each in the row's key form, any of its spellings) of entities
    /// the scope no longer holds: live rows under those keys become tombstones. Changed rows get
    /// one new sequence number, which becomes the scope's published one.
    ///
    /// Waits for a refresh under way at most `lockTimeout` seconds, then throws (the caller
    /// makes the scope due).
    public func writeThrough(
        scope: Int64, lockTimeout: Double,
        read: () async throws -> (rows: [(key: String, keyMembers: String, payload: String)], gone: [String])
    ) async throws -> WriteThroughSummary {
        try await client.withTransaction(logger: logger) { connection in
            let milliseconds = max(1, Int(lockTimeout * 1000))
            try await connection.query(
                PostgresQuery(unsafeSQL: "SET LOCAL lock_timeout = \(milliseconds)"), logger: logger)
            try await connection.query("SELECT pg_advisory_xact_lock(\(scope))", logger: logger)
            var published: Int64 = 0
            for try await value in try await connection.query(
                "SELECT published FROM oodata_scope WHERE id = \(scope)", logger: logger
            ).decode(Int64.self) {
                published = value
            }
            // Never published (or gone): no device holds its rows; its refresh reads the change.
            guard published > 0 else { return WriteThroughSummary() }
            let (found, gone) = try await read()
            var summary = WriteThroughSummary(ran: true)
            var latest: [String: Int] = [:]
            for (index, row) in found.enumerated() { latest[row.key] = index }
            let kept = found.indices.filter { latest[found[$0].key] == $0 }.map { found[$0] }
            var stored: [String: String] = [:]
            if !kept.isEmpty {
                for try await (key, hash) in try await connection.query(
                    """
                    SELECT key, hash FROM oodata_row WHERE scope_id = \(scope) AND key = ANY(\(kept.map(\.key))::text[])
                    """, logger: logger
                ).decode((String, String?).self) {
                    if let hash { stored[key] = hash }
                }
            }
            let hashes = kept.map { Self.md5($0.payload) }
            let write = kept.indices.filter { stored[kept[$0].key] != hashes[$0] }
            let keys = Set(kept.map(\.key))
            let removed = gone.filter { !keys.contains($0) }
            guard !write.isEmpty || !removed.isEmpty else { return summary }
            var seq: Int64 = 0
            for try await value in try await connection.query("SELECT nextval('oodata_seq')", logger: logger)
                .decode(Int64.self)
            {
                seq = value
            }
            if !write.isEmpty {
                try await connection.query(
                    """
                    INSERT INTO oodata_row (scope_id, key, key_members, hash, payload, seq)
                    SELECT \(scope), k, m, h, p, \(seq) FROM unnest(\(write.map { kept[$0].key })::text[], \
                    \(write.map { kept[$0].keyMembers })::text[], \(write.map { hashes[$0] })::text[], \
                    \(write.map { kept[$0].payload })::text[]) AS t(k, m, h, p)
                    ON CONFLICT (scope_id, key) DO UPDATE
                      SET hash = EXCLUDED.hash, payload = EXCLUDED.payload, key_members = EXCLUDED.key_members,
                          seq = EXCLUDED.seq
                    """, logger: logger)
                summary.changed = write.count
            }
            if !removed.isEmpty {
                let rows = try await connection.query(
                    """
                    UPDATE oodata_row SET payload = NULL, hash = NULL, seq = \(seq)
                    WHERE scope_id = \(scope) AND payload IS NOT NULL AND key = ANY(\(removed)::text[])
                    RETURNING 1
                    """, logger: logger)
                for try await _ in rows.decode(Int.self) { summary.removed += 1 }
            }
            guard summary.changed + summary.removed > 0 else { return summary }
            try await connection.query(
                "UPDATE oodata_scope SET published = \(seq) WHERE id = \(scope)", logger: logger)
            try await connection.query(
                "INSERT INTO oodata_refresh (scope_id, seq) VALUES (\(scope), \(seq))", logger: logger)
            summary.published = seq
            return summary
        }
    }

    /// One scope as the refresher sees it.
    public struct RefreshState: Sendable, Equatable {
        public var id: Int64
        /// Seconds since its last refresh began reading the backend (nil: never refreshed).
        public var age: Double?
        /// Whether a change that could not be written through made it due.
        public var marked: Bool
        /// PostgreSQL's clock when the state was read (the same clock for every instance).
        public var now: Date
    }

    /// The refresh state of the scopes `ids` (those gone are left out).
    public func refreshStates(_ ids: [Int64]) async throws -> [RefreshState] {
        guard !ids.isEmpty else { return [] }
        let rows = try await client.query(
            """
            SELECT id, extract(epoch FROM clock_timestamp() - refreshed_from)::float8,
                   stale_since IS NOT NULL AND (refreshed_from IS NULL OR stale_since >= refreshed_from),
                   clock_timestamp()
            FROM oodata_scope WHERE id = ANY(\(ids)::bigint[])
            """, logger: logger)
        var result: [RefreshState] = []
        for try await (id, age, marked, now) in rows.decode((Int64, Double?, Bool, Date).self) {
            result.append(RefreshState(id: id, age: age, marked: marked, now: now))
        }
        return result
    }

    /// Records what the last refresh of `scope` failed with (cleared by the next that succeeds).
    public func noteRefreshError(scope: Int64, _ message: String) async throws {
        try await client.query(
            "UPDATE oodata_scope SET refresh_error = \(String(message.prefix(1000))) WHERE id = \(scope)",
            logger: logger)
    }
}
