import Crypto
public import Foundation
public import Logging
public import PostgresNIO

/// The gateway's state in PostgreSQL (SPEC §13): scopes, the rows each refresh read, tombstones
/// for rows that went away, and the refreshes that published them. Nothing else is kept:
/// any number of gateway instances share one database and any of them answers any request.
///
/// Visibility: a refresh runs in one transaction under an advisory lock on its scope, so a
/// device sees either the previous refresh or the whole new one, never a part; a refresh killed
/// half way (`kill -9`) is rolled back by PostgreSQL and the next one starts over.
public struct GatewayStore: Sendable {
    let client: DeadlineClient
    let logger: Logger

    /// One scope: a defining query of one backend, for one user (empty for shared data and for
    /// anonymous devices).
    public struct Scope: Sendable, Equatable {
        public var id: Int64
        /// The sequence number of the last complete refresh: what a delta link carries.
        public var published: Int64
        /// Tokens below this were given before tombstones were purged: they get 410.
        public var floor: Int64
        /// Whether the scope needs a refresh for a request that arrived now.
        public var due: Bool
        /// When the request arrived, by PostgreSQL's clock (the same clock for every instance).
        public var arrival: Date
    }

    /// One stored row of a page answered to a device.
    public struct Row: Sendable {
        public var seq: Int64
        public var key: String
        /// The key properties as a JSON object's members (`"ID":5`), for tombstones.
        public var keyMembers: String
        /// The entity as the backend sent it; nil for a tombstone.
        public var payload: String?
        /// Its content hash (nil for a tombstone): the gateway's ETag where the backend gives none.
        public var hash: String?
    }

    /// A store on `client`, which the caller runs (`client.run()`). Each statement and each
    /// lease of a connection has `deadline` seconds; `server` names PostgreSQL in the error
    /// when one runs out.
    public init(client: PostgresClient, logger: Logger, deadline: Double = 10, server: String = "PostgreSQL") {
        self.client = DeadlineClient(client, deadline: deadline, server: server)
        self.logger = logger
    }

    /// Creates the tables when they are missing; safe when several instances start at once.
    public func migrate() async throws {
        try await client.withConnection { connection in
            // One instance at a time: CREATE ... IF NOT EXISTS races on the catalog otherwise.
            try await connection.query("SELECT pg_advisory_lock(7262, 13)", logger: logger)
            do {
                for statement in Self.schema + Self.requestSchema + Self.fileSchema + Self.adminSchema
                    + Self.supportSchema + Self.streamSchema
                {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(7262, 13)", logger: logger)
                throw error
            }
            try await connection.query("SELECT pg_advisory_unlock(7262, 13)", logger: logger)
        }
    }

    static let schema = [
        """
        CREATE TABLE IF NOT EXISTS oodata_scope (
          id BIGSERIAL PRIMARY KEY,
          backend TEXT NOT NULL,
          query TEXT NOT NULL,
          user_name TEXT NOT NULL,
          published BIGINT NOT NULL DEFAULT 0,
          floor BIGINT NOT NULL DEFAULT 0,
          refreshed_at TIMESTAMPTZ,
          refreshed_from TIMESTAMPTZ,
          UNIQUE (backend, query, user_name))
        """,
        """
        CREATE TABLE IF NOT EXISTS oodata_row (
          scope_id BIGINT NOT NULL REFERENCES oodata_scope (id) ON DELETE CASCADE,
          key TEXT COLLATE "C" NOT NULL,
          key_members TEXT NOT NULL,
          hash TEXT,
          payload TEXT,
          seq BIGINT NOT NULL,
          PRIMARY KEY (scope_id, key))
        """,
        "ALTER TABLE oodata_scope ADD COLUMN IF NOT EXISTS refreshed_from TIMESTAMPTZ",
        "ALTER TABLE oodata_scope ADD COLUMN IF NOT EXISTS used_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()",
        "CREATE INDEX IF NOT EXISTS oodata_scope_used ON oodata_scope (used_at)",
        // When an upload through a gateway last went to the backend for the scope's user.
        "ALTER TABLE oodata_scope ADD COLUMN IF NOT EXISTS written_at TIMESTAMPTZ",
        // The scope checksum of one published sequence number, computed once.
        "ALTER TABLE oodata_scope ADD COLUMN IF NOT EXISTS checksum_published BIGINT",
        "ALTER TABLE oodata_scope ADD COLUMN IF NOT EXISTS checksum_rows BIGINT",
        "ALTER TABLE oodata_scope ADD COLUMN IF NOT EXISTS checksum_sum TEXT",
        "CREATE INDEX IF NOT EXISTS oodata_row_seq ON oodata_row (scope_id, seq, key)",
        // Rows go with their scope by `removeUnusedScopes`, not by a foreign key: its check ran
        // for every row a refresh wrote (a tenth of a first read's time). Rows are written only
        // under the scope's lock, after the scope was read.
        // Only when it is there: ALTER TABLE waits for every refresh under way, and blocks
        // every read of the rows behind it.
        """
        DO $$ BEGIN
          IF EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'oodata_row_scope_id_fkey') THEN
            ALTER TABLE oodata_row DROP CONSTRAINT oodata_row_scope_id_fkey;
          END IF;
        END $$
        """,
        // When a change the gateway could not write through made the scope due: a refresh that
        // began before then does not make it fresh.
        "ALTER TABLE oodata_scope ADD COLUMN IF NOT EXISTS stale_since TIMESTAMPTZ",
        // What the last refresh of the scope failed with, and when (for operators).
        "ALTER TABLE oodata_scope ADD COLUMN IF NOT EXISTS refresh_error TEXT",
        """
        CREATE TABLE IF NOT EXISTS oodata_refresh (
          scope_id BIGINT NOT NULL REFERENCES oodata_scope (id) ON DELETE CASCADE,
          seq BIGINT NOT NULL,
          finished_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
          PRIMARY KEY (scope_id, seq))
        """,
        "CREATE SEQUENCE IF NOT EXISTS oodata_seq",
    ]

    /// The scope of `query` on `backend` for `user`, created when new, with whether a request
    /// arriving now needs a refresh (none within `interval` seconds of the last one).
    public func scope(backend: String, query: String, user: String, interval: Double) async throws -> Scope {
        // Look first; create when missing; look again (a new statement sees a row another
        // request created meanwhile, which one statement's snapshot would not).
        for attempt in 0..<2 {
            let rows = try await client.query(
                """
                SELECT id, published, floor,
                       (refreshed_from IS NULL
                        OR refreshed_from < clock_timestamp() - make_interval(secs => \(interval))
                        OR (stale_since IS NOT NULL AND stale_since >= refreshed_from)),
                       clock_timestamp(), used_at < clock_timestamp() - make_interval(secs => \(Self.usedAtPrecision))
                FROM oodata_scope WHERE backend = \(backend) AND query = \(query) AND user_name = \(user)
                """, logger: logger)
            for try await (id, published, floor, due, arrival, stale)
                in rows.decode((Int64, Int64, Int64, Bool, Date, Bool).self)
            {
                // When a device last read the scope, to the hour (a write per hour, not per read).
                if stale {
                    try await client.query(
                        "UPDATE oodata_scope SET used_at = clock_timestamp() WHERE id = \(id)", logger: logger)
                }
                return Scope(id: id, published: published, floor: floor, due: due, arrival: arrival)
            }
            if attempt == 0 {
                try await client.query(
                    """
                    INSERT INTO oodata_scope (backend, query, user_name) VALUES (\(backend), \(query), \(user))
                    ON CONFLICT (backend, query, user_name) DO NOTHING
                    """, logger: logger)
            }
        }
        throw GatewayError(status: 503, code: "GatewayState", "The scope of \(query) could not be made; try again")
    }

    /// A payload's content hash, as hex (the same as PostgreSQL's `md5(text)`): it tells a
    /// changed row from an unchanged one, nothing more.
    static func md5(_ text: String) -> String {
        hex(Insecure.MD5.hash(data: Array(text.utf8)))
    }

    /// Bytes as lowercase hex: row hashes, credential digests and answer bodies sent as text.
    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// How precisely a scope's last use is kept, in seconds (it is written when older).
    static let usedAtPrecision: Double = 3600

    /// Removes the scopes no device has read for `unused` seconds (more than
    /// ``usedAtPrecision`` later than that at most) and none refreshed in that time, with their
    /// rows, skipping any whose refresh is under way. Returns how many went.
    public func removeUnusedScopes(unused: Double) async throws -> Int {
        let rows = try await client.query(
            """
            WITH gone AS (
              DELETE FROM oodata_scope
              WHERE GREATEST(used_at, refreshed_at) < clock_timestamp() - make_interval(secs => \(unused))
                AND pg_try_advisory_xact_lock(id)
              RETURNING id),
            rows AS (DELETE FROM oodata_row WHERE scope_id IN (SELECT id FROM gone))
            SELECT id FROM gone
            """, logger: logger)
        var removed = 0
        for try await _ in rows.decode(Int64.self) { removed += 1 }
        return removed
    }

    /// How many scopes PostgreSQL keeps, of every backend and user (for operators and tests).
    public func scopeCount() async throws -> Int {
        let rows = try await client.query("SELECT count(*) FROM oodata_scope", logger: logger)
        for try await count in rows.decode(Int64.self) { return Int(count) }
        return 0
    }

    /// The query a scope serves, or nil when there is no such scope.
    public func query(ofScope id: Int64) async throws -> String? {
        let rows = try await client.query("SELECT query FROM oodata_scope WHERE id = \(id)", logger: logger)
        for try await query in rows.decode(String.self) { return query }
        return nil
    }

    /// The query of scope `id` when it serves `backend` and is shared (its user is "") or
    /// `user`'s; nil otherwise. A scope named by a device (in one of the gateway's ETags) is
    /// looked up this way, so that a device cannot use another user's scope.
    public func query(ofScope id: Int64, backend: String, user: String) async throws -> String? {
        try await withConnection { try await query(ofScope: id, backend: backend, user: user, on: $0) }
    }

    /// The scope `id` as it is now.
    public func scope(id: Int64) async throws -> Scope? {
        let rows = try await client.query(
            "SELECT id, published, floor, clock_timestamp() FROM oodata_scope WHERE id = \(id)", logger: logger)
        for try await (id, published, floor, now) in rows.decode((Int64, Int64, Int64, Date).self) {
            return Scope(id: id, published: published, floor: floor, due: false, arrival: now)
        }
        return nil
    }

    /// The scope checksum of `scope` as of sequence number `published` (SPEC §13): its rows
    /// and the sum, modulo 2^64, of the first 60 bits of the MD5 of each row's ETag as devices
    /// get it (the backend's, or else the gateway's `W/"gw.<scope>.<hash>"` when `gatewayETags`).
    /// Nil when a row has no ETag or two rows share one (a backend's version numbers: a missing
    /// row and an extra one would sum the same), when an upload went to the backend after the
    /// refresh began (a device may hold what it changed, with its answer's ETag), or when a
    /// later refresh changed rows since (the next delta carries the checksum). Computed once per
    /// published sequence number and kept with the scope.
    public func checksum(
        scope: Int64, upTo published: Int64, gatewayETags: Bool
    ) async throws
        -> (rows: Int64, sum: String)?
    {
        let kept = try await client.query(
            """
            SELECT written_at IS NULL OR refreshed_from > written_at, checksum_published, checksum_rows, checksum_sum,
                   (SELECT coalesce(max(seq), 0) FROM oodata_row WHERE scope_id = \(scope))
            FROM oodata_scope WHERE id = \(scope)
            """, logger: logger)
        var found = false
        for try await (newer, at, rows, sum, last) in kept.decode((Bool, Int64?, Int64?, String?, Int64).self) {
            guard newer, last <= published else { return nil }
            if at == published, let rows, let sum { return (rows, sum) }
            found = true
        }
        guard found else { return nil }
        let fallback = gatewayETags ? "'W/\"gw.' || scope_id || '.' || hash || '\"'" : "NULL"
        let rows = try await client.query(
            """
            WITH tagged AS (
              SELECT coalesce(payload::json->>'@odata.etag', payload::json->>'odata.etag',
                              payload::json->'__metadata'->>'etag', \(unescaped: fallback)) AS etag
              FROM oodata_row WHERE scope_id = \(scope) AND payload IS NOT NULL)
            SELECT (SELECT count(*) FROM tagged), (SELECT count(*) FROM tagged WHERE etag IS NULL),
                   (SELECT count(DISTINCT etag) FROM tagged),
                   ((SELECT coalesce(sum(('x' || substr(md5(etag), 1, 15))::bit(60)::bigint), 0) FROM tagged)
                     % 18446744073709551616)::text,
                   (SELECT coalesce(max(seq), 0) FROM oodata_row WHERE scope_id = \(scope))
            """, logger: logger)
        for try await (count, untagged, distinct, sum, last) in rows.decode((Int64, Int64, Int64, String, Int64).self) {
            guard last <= published, untagged == 0, distinct == count else { return nil }
            try await client.query(
                """
                UPDATE oodata_scope SET checksum_published = \(published), checksum_rows = \(count),
                       checksum_sum = \(sum)
                WHERE id = \(scope) AND published = \(published)
                """, logger: logger)
            return (count, sum)
        }
        return nil
    }

    /// Notes that an upload of `user` went to `backend` (its scopes and the shared ones): the
    /// refreshes that began before now no longer give scope checksums.
    public func noteWrite(backend: String, user: String) async throws {
        try await client.query(
            """
            UPDATE oodata_scope SET written_at = clock_timestamp()
            WHERE backend = \(backend) AND (user_name = \(user) OR user_name = '')
            """, logger: logger)
    }

    /// What a refresh did.
    public struct RefreshSummary: Sendable, Equatable {
        /// False when another refresh (of any instance) that finished after the request arrived
        /// made this one unnecessary: the request is answered from it.
        public var ran: Bool
        public var rows = 0
        public var changed = 0
        public var removed = 0
        public var published: Int64 = 0
    }

    /// Refreshes `scope`: takes the scope's lock (waiting for a refresh under way elsewhere),
    /// (or, unless `waits`, skips when another holds it),
    /// skips when a refresh finished within `interval` seconds before `arrival`, otherwise reads
    /// every page through `pages` and publishes a new sequence number with what changed.
    /// `pages` calls its argument once per page with `(key, keyMembers, payload)` triples.
    public func refresh(
        _ scope: Scope, interval: Double, retention: Double, waits: Bool = true,
        pages: (_ write: ([(key: String, keyMembers: String, payload: String)]) async throws -> Void) async throws ->
            Void
    ) async throws -> RefreshSummary {
        try await client.withTransaction(logger: logger) { connection in
            if waits {
                try await connection.query("SELECT pg_advisory_xact_lock(\(scope.id))", logger: logger)
            } else {
                // The refresher: a scope another instance refreshes now is skipped, not waited for.
                for try await taken in try await connection.query(
                    "SELECT pg_try_advisory_xact_lock(\(scope.id))", logger: logger
                ).decode(Bool.self) where !taken {
                    return RefreshSummary(ran: false)
                }
            }
            // Answered from another refresh only when that one began reading the backend at or
            // after this request arrived (less the interval): it then holds every change the
            // device could know of, its own uploads included.
            let fresh = try await connection.query(
                """
                SELECT refreshed_from IS NOT NULL
                       AND refreshed_from >= \(scope.arrival)::timestamptz - make_interval(secs => \(interval))
                       AND (stale_since IS NULL OR refreshed_from > stale_since),
                       clock_timestamp(), published
                FROM oodata_scope WHERE id = \(scope.id)
                """, logger: logger)
            var started = Date()
            var found = false
            // A scope never published has no rows a device was given a delta link for (a refresh
            // killed half way left none; a streamed first read that broke off left some).
            var empty = false
            for try await (skip, now, published) in fresh.decode((Bool, Date, Int64).self) {
                if skip { return RefreshSummary(ran: false) }
                found = true
                started = now
                empty = published == 0
            }
            // Removed meanwhile (unused): no rows for a scope that is not there.
            guard found else {
                throw GatewayError(status: 503, code: "GatewayState", "The scope went away during its refresh")
            }
            var summary = RefreshSummary(ran: true)
            var seq: Int64 = 0
            for try await value in try await connection.query("SELECT nextval('oodata_seq')", logger: logger)
                .decode(Int64.self)
            {
                seq = value
            }
            summary.published = seq
            if empty {
                // What a streamed first read that broke off left (it was never published).
                try await connection.query("DELETE FROM oodata_row WHERE scope_id = \(scope.id)", logger: logger)
            }
            try await connection.query(
                "CREATE TEMPORARY TABLE IF NOT EXISTS oodata_seen (key TEXT COLLATE \"C\" PRIMARY KEY) ON COMMIT DROP",
                logger: logger)
            try await pages { rows in
                guard !rows.isEmpty else { return }
                // A key twice on one page (or across pages): the last one wins.
                var latest: [String: Int] = [:]
                for (index, row) in rows.enumerated() { latest[row.key] = index }
                let kept = rows.indices.filter { latest[rows[$0].key] == $0 }.map { rows[$0] }
                let keys = kept.map(\.key)
                // Only new and changed rows are written: the stored hashes of the page's keys
                // are read first (the primary key's index). Writing unchanged rows, even as an
                // upsert that skips them, locks them: at 1M rows that dirtied every page.
                // Only this refresh writes the scope's rows (it holds the scope's lock).
                var stored: [String: String] = [:]
                if !empty {
                    for try await (key, hash) in try await connection.query(
                        """
                        SELECT key, hash FROM oodata_row WHERE scope_id = \(scope.id) AND key = ANY(\(keys)::text[])
                        """, logger: logger
                    ).decode((String, String?).self) {
                        if let hash { stored[key] = hash }
                    }
                }
                let hashes = kept.map { Self.md5($0.payload) }
                let write = kept.indices.filter { stored[kept[$0].key] != hashes[$0] }
                let writeKeys = write.map { kept[$0].key }
                let members = write.map { kept[$0].keyMembers }
                let payloads = write.map { kept[$0].payload }
                let writeHashes = write.map { hashes[$0] }
                if !write.isEmpty {
                    try await connection.query(
                        """
                        INSERT INTO oodata_row (scope_id, key, key_members, hash, payload, seq)
                        SELECT \(scope.id), k, m, h, p, \(seq) FROM unnest(\(writeKeys)::text[], \(members)::text[], \
                        \(writeHashes)::text[], \(payloads)::text[]) AS t(k, m, h, p)
                        ON CONFLICT (scope_id, key) DO UPDATE
                          SET hash = EXCLUDED.hash, payload = EXCLUDED.payload, key_members = EXCLUDED.key_members,
                              seq = EXCLUDED.seq
                        """, logger: logger)
                    summary.changed += write.count
                }
                try await connection.query(
                    "INSERT INTO oodata_seen SELECT unnest(\(keys)::text[]) ON CONFLICT DO NOTHING", logger: logger)
                summary.rows += kept.count
            }
            let gone = try await connection.query(
                """
                UPDATE oodata_row AS r SET payload = NULL, hash = NULL, seq = \(seq)
                WHERE r.scope_id = \(scope.id) AND r.payload IS NOT NULL
                  AND NOT EXISTS (SELECT 1 FROM oodata_seen AS s WHERE s.key = r.key)
                RETURNING 1
                """, logger: logger)
            for try await _ in gone.decode(Int.self) { summary.removed += 1 }
            try await connection.query(
                """
                UPDATE oodata_scope SET published = \(seq), refreshed_at = clock_timestamp(),
                  refreshed_from = \(started)::timestamptz, refresh_error = NULL, row_count = \(Int64(summary.rows)),
                  stream_gen = CASE WHEN \(empty) THEN NULL ELSE stream_gen END
                WHERE id = \(scope.id)
                """, logger: logger)
            try await connection.query(
                "INSERT INTO oodata_refresh (scope_id, seq) VALUES (\(scope.id), \(seq))", logger: logger)
            // Tombstones older than the retention go; tokens from before them get 410.
            var cut: Int64?
            for try await value in try await connection.query(
                """
                SELECT max(seq) FROM oodata_refresh
                WHERE scope_id = \(scope.id) AND finished_at < clock_timestamp() - make_interval(secs => \(retention))
                """, logger: logger
            ).decode(Int64?.self) {
                cut = value
            }
            if let cut {
                try await connection.query(
                    "DELETE FROM oodata_row WHERE scope_id = \(scope.id) AND payload IS NULL AND seq <= \(cut)",
                    logger: logger)
                try await connection.query(
                    "DELETE FROM oodata_refresh WHERE scope_id = \(scope.id) AND seq < \(cut)", logger: logger)
                try await connection.query(
                    "UPDATE oodata_scope SET floor = \(cut) WHERE id = \(scope.id) AND floor < \(cut)", logger: logger)
            }
            return summary
        }
    }

    /// A page of a full read: live rows with keys after `after`, in key order.
    public func fullPage(scope: Int64, after: String, limit: Int) async throws -> [Row] {
        try await rows(
            """
            SELECT seq, key, key_members, payload, hash FROM oodata_row
            WHERE scope_id = \(scope) AND payload IS NOT NULL AND key > \(after)
            ORDER BY key LIMIT \(limit)
            """)
    }

    /// A page of a delta: rows (tombstones too) changed after `since` up to `upTo`, in
    /// (sequence, key) order, after the position `(seq, key)` when a previous page ended there.
    public func deltaPage(
        scope: Int64, since: Int64, upTo: Int64, after: (seq: Int64, key: String)?, limit: Int
    )
        async throws -> [Row]
    {
        let query: PostgresQuery
        if let after {
            // A row comparison, so that the (scope_id, seq, key) index starts at the position.
            query = """
                SELECT seq, key, key_members, payload, hash FROM oodata_row
                WHERE scope_id = \(scope) AND (seq, key) > (\(after.seq), \(after.key)::text COLLATE "C")
                  AND seq > \(since) AND seq <= \(upTo)
                ORDER BY seq, key LIMIT \(limit)
                """
        } else {
            query = """
                SELECT seq, key, key_members, payload, hash FROM oodata_row
                WHERE scope_id = \(scope) AND seq > \(since) AND seq <= \(upTo)
                ORDER BY seq, key LIMIT \(limit)
                """
        }
        return try await rows(query)
    }

    /// The rows `query` selects as `seq, key, key_members, payload, hash`.
    func rows(_ query: PostgresQuery) async throws -> [Row] {
        let rows = try await client.query(query, logger: logger)
        var result: [Row] = []
        for try await (seq, key, members, payload, hash) in rows.decode((Int64, String, String, String?, String?).self)
        {
            result.append(Row(seq: seq, key: key, keyMembers: members, payload: payload, hash: hash))
        }
        return result
    }
}
