public import Foundation
import Logging
import PostgresNIO

/// A scope's first read, streamed (SPEC §13, "First reads"): the rows of each backend page are
/// committed as a chunk with a sequence number of its own while the backend is still being
/// read, so that devices page through them at once, in (sequence, key) order, instead of
/// waiting for the whole refresh. The scope is published (and its delta link given) only when
/// the last page is in.
///
/// A stream is one generation (`stream_gen`, the sequence number taken when it began) and runs
/// under the scope's lock, held by its connection: a gateway killed half way releases it, and
/// the next first read deletes the unpublished rows and begins a new generation, whose tokens
/// differ (a device holding the old one reads again).
extension GatewayStore {
    static let streamSchema = [
        // The generation of the scope's streamed first read, the last chunk it committed, and
        // when it began reading the backend.
        "ALTER TABLE oodata_scope ADD COLUMN IF NOT EXISTS stream_gen BIGINT",
        "ALTER TABLE oodata_scope ADD COLUMN IF NOT EXISTS stream_upto BIGINT",
        "ALTER TABLE oodata_scope ADD COLUMN IF NOT EXISTS stream_from TIMESTAMPTZ",
        // The PostgreSQL backend whose connection holds the stream's lock (a refresh's lock on
        // the same scope is not a stream's).
        "ALTER TABLE oodata_scope ADD COLUMN IF NOT EXISTS stream_pid INTEGER",
    ]

    /// Where a scope's streamed first read stands.
    public struct StreamState: Sendable, Equatable {
        /// The stream's generation; nil when the scope was never streamed, or a refresh that
        /// was not streamed published it after a stream broke off.
        public var generation: Int64?
        /// The last chunk committed; once published, the sequence number published.
        public var upTo: Int64
        /// When the stream began reading the backend, by PostgreSQL's clock.
        public var began: Date?
        /// The scope's published sequence number (0 while the first read runs).
        public var published: Int64
        /// Whether the stream's connection still holds the scope's lock (the stream runs).
        public var locked: Bool
        /// When a change that could not be written through made the scope due.
        public var staleSince: Date?
        /// What the scope's last refresh failed with.
        public var error: String?
        /// When the state was read, by PostgreSQL's clock.
        public var now: Date

        /// Whether generation `generation` is finished: everything up to ``upTo`` is the
        /// published first read.
        public func finished(_ generation: Int64) -> Bool {
            self.generation == generation && published != 0 && published >= upTo
        }
    }

    /// The stream state of scope `id`; nil when there is no such scope.
    public func streamState(scope id: Int64) async throws -> StreamState? {
        let rows = try await client.query(
            """
            SELECT stream_gen, coalesce(stream_upto, 0), stream_from, published, refresh_error, clock_timestamp(),
                   EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
                           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                           AND pid = s.stream_pid
                           AND classid = \(Self.lockClass(id))::bigint::oid
                           AND objid = \(Self.lockObject(id))::bigint::oid),
                   stale_since
            FROM oodata_scope AS s WHERE id = \(id)
            """, logger: logger)
        for try await (generation, upTo, began, published, error, now, locked, stale)
            in rows.decode((Int64?, Int64, Date?, Int64, String?, Date, Bool, Date?).self)
        {
            return StreamState(
                generation: generation, upTo: upTo, began: began, published: published, locked: locked,
                staleSince: stale, error: error, now: now)
        }
        return nil
    }

    /// The two halves of a one-key advisory lock as `pg_locks` shows them.
    static func lockClass(_ key: Int64) -> Int64 { Int64(UInt64(bitPattern: key) >> 32) }
    static func lockObject(_ key: Int64) -> Int64 { Int64(UInt64(bitPattern: key) & 0xffff_ffff) }

    /// Writes one backend page's rows as a chunk; `last` for the backend's last page.
    public typealias StreamWrite = (
        _ rows: [(key: String, keyMembers: String, payload: String)], _ last: Bool
    ) async throws -> Void

    /// One chunk a stream committed: a backend page's rows under their sequence number.
    public struct StreamChunk: Sendable {
        /// The chunk's sequence number.
        public var seq: Int64
        /// The chunk before it (the generation for the first).
        public var previous: Int64
        /// Its rows, in the backend's order, one per key.
        public var rows: [Row]
    }

    /// Streams the first read of scope `id`: takes the scope's lock without waiting and, when
    /// the scope is still unpublished, deletes what a broken-off stream left, begins a new
    /// generation (`began` gets it and the time), commits each page `pages` writes as a
    /// chunk (`committed` gets it) and publishes at the end. Nil when another holds the lock or
    /// the scope was published meanwhile: nothing was done.
    public func streamFirstRead(
        scope id: Int64,
        began: (_ generation: Int64, _ at: Date) async -> Void,
        committed: @escaping @Sendable (StreamChunk, _ published: Int64?) async -> Void,
        pages: (_ write: StreamWrite) async throws -> Void
    ) async throws -> RefreshSummary? {
        try await client.withConnection { connection in
            var taken = false
            do {
                for try await value in try await connection.query(
                    "SELECT pg_try_advisory_lock(\(id))", logger: logger
                ).decode(Bool.self) {
                    taken = value
                }
            } catch {
                // The lock may have been granted before the answer was read: the connection goes.
                try? await connection.close()
                throw error
            }
            guard taken else { return nil }
            do {
                let summary = try await stream(id, on: connection, began: began, committed: committed, pages: pages)
                try await connection.query("SELECT pg_advisory_unlock(\(id))", logger: logger)
                return summary
            } catch {
                // A connection that cannot say it let go of the lock would keep it in the pool.
                do {
                    try await connection.query("SELECT pg_advisory_unlock(\(id))", logger: logger)
                } catch {
                    try? await connection.close()
                }
                throw error
            }
        }
    }

    private func stream(
        _ id: Int64, on connection: PostgresConnection,
        began: (_ generation: Int64, _ at: Date) async -> Void,
        committed: @escaping @Sendable (StreamChunk, _ published: Int64?) async -> Void,
        pages: (_ write: StreamWrite) async throws -> Void
    ) async throws -> RefreshSummary? {
        let logger = self.logger
        func nextSeq() async throws -> Int64 {
            for try await value in try await connection.query("SELECT nextval('oodata_seq')", logger: logger)
                .decode(Int64.self)
            {
                return value
            }
            throw GatewayError(status: 503, code: "GatewayState", "PostgreSQL gave no sequence number")
        }
        // Begin: the scope must still be unpublished (a refresh may have published it between
        // the device's look and the lock).
        let start: (generation: Int64, at: Date)? = try await connection.withTransaction(logger: logger) {
            connection in
            var published: Int64 = -1
            var now = Date()
            for try await (value, clock) in try await connection.query(
                "SELECT published, clock_timestamp() FROM oodata_scope WHERE id = \(id) FOR UPDATE", logger: logger
            ).decode((Int64, Date).self) {
                published = value
                now = clock
            }
            guard published == 0 else { return nil }
            try await connection.query("DELETE FROM oodata_row WHERE scope_id = \(id)", logger: logger)
            let generation = try await nextSeq()
            try await connection.query(
                """
                UPDATE oodata_scope SET stream_gen = \(generation), stream_upto = \(generation), stream_from = \(now),
                  stream_pid = pg_backend_pid(), refresh_error = NULL
                WHERE id = \(id)
                """, logger: logger)
            return (generation, now)
        }
        guard let start else { return nil }
        await began(start.generation, start.at)
        var summary = RefreshSummary(ran: true)
        var previous = start.generation
        var published = false
        /// Publishes the stream, in the transaction of its last chunk: a device that sees the
        /// last chunk sees the delta link too.
        func publish(on connection: PostgresConnection) async throws -> (seq: Int64, rows: Int64) {
            let seq = try await nextSeq()
            // Rows a key repeated across pages overwrote are counted once.
            var rows: Int64 = 0
            for try await count in try await connection.query(
                "SELECT count(*) FROM oodata_row WHERE scope_id = \(id)", logger: logger
            ).decode(Int64.self) {
                rows = count
            }
            try await connection.query(
                """
                UPDATE oodata_scope SET published = \(seq), stream_upto = \(seq), refreshed_at = clock_timestamp(),
                  refreshed_from = \(start.at)::timestamptz, refresh_error = NULL, row_count = \(rows)
                WHERE id = \(id)
                """, logger: logger)
            try await connection.query(
                "INSERT INTO oodata_refresh (scope_id, seq) VALUES (\(id), \(seq))", logger: logger)
            return (seq, rows)
        }
        func note(_ done: (seq: Int64, rows: Int64)) {
            published = true
            summary.published = done.seq
            summary.rows = Int(done.rows)
            summary.changed = Int(done.rows)
        }
        try await pages { rows, last in
            // A key twice on one page: the last one wins (as in a refresh).
            var latest: [String: Int] = [:]
            for (index, row) in rows.enumerated() { latest[row.key] = index }
            let kept = rows.indices.filter { latest[rows[$0].key] == $0 }.map { rows[$0] }
            guard !kept.isEmpty || last else { return }
            let hashes = kept.map { Self.md5($0.payload) }
            let keys = kept.map(\.key)
            let members = kept.map(\.keyMembers)
            let payloads = kept.map(\.payload)
            // Keys are new to the scope but for one a backend repeats across pages: a plain
            // insert first (an upsert checks each key before it writes), the upsert again when
            // PostgreSQL refuses a key twice.
            func write(upserting: Bool) async throws -> (Int64?, (seq: Int64, rows: Int64)?) {
                try await connection.withTransaction(logger: logger) {
                    connection -> (Int64?, (seq: Int64, rows: Int64)?) in
                    // A chunk lost in a crash of PostgreSQL leaves the scope unpublished: the next
                    // first read starts a new generation, so chunks need not wait for the disk (the
                    // last one, which publishes, does).
                    if !last { try await connection.query("SET LOCAL synchronous_commit = off", logger: logger) }
                    var seq: Int64?
                    if !kept.isEmpty {
                        let chunk = try await nextSeq()
                        seq = chunk
                        try await connection.query(
                            """
                            INSERT INTO oodata_row (scope_id, key, key_members, hash, payload, seq)
                            SELECT \(id), k, m, h, p, \(chunk) FROM unnest(\(keys)::text[], \(members)::text[], \
                            \(hashes)::text[], \(payloads)::text[]) AS t(k, m, h, p)
                            \(unescaped: upserting ? Self.upsertTail : "")
                            """, logger: logger)
                        try await connection.query(
                            "UPDATE oodata_scope SET stream_upto = \(chunk) WHERE id = \(id)", logger: logger)
                    }
                    return (seq, last ? try await publish(on: connection) : nil)
                }
            }
            let seq: Int64?
            let done: (seq: Int64, rows: Int64)?
            do {
                (seq, done) = try await write(upserting: false)
            } catch let error as PostgresTransactionError
                where (error.closureError as? PSQLError)?.serverInfo?[.sqlState] == "23505"
            {
                (seq, done) = try await write(upserting: true)
            }
            if let done { note(done) }
            if let seq {
                let chunk = StreamChunk(
                    seq: seq, previous: previous,
                    rows: kept.indices.map {
                        Row(seq: seq, key: keys[$0], keyMembers: members[$0], payload: payloads[$0], hash: hashes[$0])
                    })
                previous = seq
                await committed(chunk, last ? summary.published : nil)
            } else if last {
                await committed(StreamChunk(seq: summary.published, previous: previous, rows: []), summary.published)
            }
        }
        if !published {
            note(try await connection.withTransaction(logger: logger) { try await publish(on: $0) })
            await committed(StreamChunk(seq: summary.published, previous: previous, rows: []), summary.published)
        }
        return summary
    }

    static let upsertTail = """
        ON CONFLICT (scope_id, key) DO UPDATE
          SET hash = EXCLUDED.hash, payload = EXCLUDED.payload, key_members = EXCLUDED.key_members, seq = EXCLUDED.seq
        """

    /// A page of a streamed first read of scope `id`: live rows of its chunks after the
    /// position (after chunk `afterSeq` whole, or within it after `afterKey`), up to `upTo`,
    /// in (sequence, key) order. Rows a later refresh changed have moved past `upTo`: the
    /// delta from there carries them.
    public func streamPage(
        scope id: Int64, afterSeq: Int64, afterKey: String?, upTo: Int64, limit: Int
    ) async throws -> [Row] {
        let query: PostgresQuery
        if let afterKey {
            query = """
                SELECT seq, key, key_members, payload, hash FROM oodata_row
                WHERE scope_id = \(id) AND (seq, key) > (\(afterSeq), \(afterKey)::text COLLATE "C")
                  AND seq <= \(upTo) AND payload IS NOT NULL
                ORDER BY seq, key LIMIT \(limit)
                """
        } else {
            query = """
                SELECT seq, key, key_members, payload, hash FROM oodata_row
                WHERE scope_id = \(id) AND seq > \(afterSeq) AND seq <= \(upTo) AND payload IS NOT NULL
                ORDER BY seq, key LIMIT \(limit)
                """
        }
        return try await rows(query)
    }
}
