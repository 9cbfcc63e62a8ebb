public import Foundation
import ODataCore
import PostgresNIO

/// What the admin API shows of a scope (issue 56).
public struct ScopeSummary: Sendable, Codable, Equatable {
    public var id: Int64
    /// The backend's service root.
    public var backend: String
    /// The defining query, canonical.
    public var query: String
    /// `shared` (shared data, and anonymous devices), or the kind and first 12 characters of the
    /// user's identity digest (`basic:3f9a…`; never a name).
    public var user: String
    /// The sequence number of the last complete refresh.
    public var published: Int64
    /// Rows the last refresh read (written-through changes since are not counted).
    public var rows: Int64?
    /// When the last refresh finished, and when it began reading the backend.
    public var lastRefresh: Date?
    public var refreshedFrom: Date?
    /// Seconds since the last refresh began reading the backend: how old the data devices get
    /// can be. Nil when the scope was never refreshed.
    public var lagSeconds: Double?
    /// Whether a change the gateway could not write through made it due.
    public var markedDue: Bool
    /// What its last refresh failed with, nil when the last one succeeded.
    public var lastError: String?
    /// When a device last read it (to the hour).
    public var lastUsed: Date
}

/// A recorded request the gateway cannot tell the fate of (SPEC §13, "Uploads").
public struct InDoubtRequest: Sendable, Codable, Equatable {
    public var backend: String
    public var requestID: String
    /// `anonymous`, or the identity digest's first 12 characters.
    public var user: String
    /// Its method and URL as the device sent it.
    public var request: String
    /// `forwarding-cut` (forwarded, no answer recorded, no gateway forwards it now: the
    /// device's repeat is resolved by reading the backend) or `answered-in-doubt` (the device was
    /// answered 409 `RequestInDoubt`: it is in its ErrorArchive).
    public var state: String
    /// When it was (last) forwarded.
    public var forwardedAt: Date
    /// `applied` or `notApplied` once an operator decided, with when.
    public var resolution: String?
    public var resolvedAt: Date?
}

/// A device seen by the gateway, by the `Client-Instance-ID` it sends.
public struct DeviceSummary: Sendable, Codable, Equatable {
    public var backend: String
    public var clientInstanceID: String
    /// `anonymous`, or the identity digest's first 12 characters.
    public var user: String
    public var appVersion: String?
    public var firstSeen: Date
    public var lastSeen: Date
    /// When it last downloaded a defining query or uploaded, if ever.
    public var lastSync: Date?
}

/// A store file the gateway built for first opens (issue 37).
public struct StoreFileSummary: Sendable, Codable, Equatable {
    public var id: String
    public var backend: String
    public var shared: Bool
    public var user: String
    public var size: Int64
    public var sha256: String
    public var createdAt: Date
}

extension GatewayStore {
    static let adminSchema = [
        "ALTER TABLE oodata_scope ADD COLUMN IF NOT EXISTS row_count BIGINT",
        """
        CREATE TABLE IF NOT EXISTS oodata_device (
          backend TEXT NOT NULL,
          instance_id TEXT NOT NULL,
          user_name TEXT NOT NULL,
          app_version TEXT,
          first_seen TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
          last_seen TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
          last_sync TIMESTAMPTZ,
          PRIMARY KEY (backend, instance_id, user_name))
        """,
        "CREATE INDEX IF NOT EXISTS oodata_device_seen ON oodata_device (last_seen)",
    ]

    /// How an identity is shown to operators: never the digest whole (it keys nothing, but
    /// there is no need to show more than tells two users apart).
    static func shownUser(_ user: String, empty: String = "anonymous") -> String {
        guard !user.isEmpty else { return empty }
        guard let colon = user.firstIndex(of: ":") else { return String(user.prefix(12)) }
        return String(user[...colon]) + user[user.index(after: colon)...].prefix(12)
    }

    /// The scopes, most lagging first (never refreshed before all), at most `limit`.
    public func scopeSummaries(limit: Int = 1000) async throws -> [ScopeSummary] {
        let rows = try await client.query(
            """
            SELECT id, backend, query, user_name, published, row_count, refreshed_at, refreshed_from,
                   extract(epoch FROM clock_timestamp() - refreshed_from)::float8,
                   stale_since IS NOT NULL AND (refreshed_from IS NULL OR stale_since >= refreshed_from),
                   refresh_error, used_at
            FROM oodata_scope ORDER BY refreshed_from ASC NULLS FIRST, id LIMIT \(limit)
            """, logger: logger)
        var result: [ScopeSummary] = []
        for try await (id, backend, query, user, published, count, refreshed, from, lag, due, error, used)
            in rows.decode(
                (
                    Int64, String, String, String, Int64, Int64?, Date?, Date?, Double?, Bool, String?, Date
                ).self)
        {
            result.append(
                ScopeSummary(
                    id: id, backend: backend, query: query, user: Self.shownUser(user, empty: "shared"),
                    published: published,
                    rows: count, lastRefresh: refreshed, refreshedFrom: from, lagSeconds: lag, markedDue: due,
                    lastError: error, lastUsed: used))
        }
        return result
    }

    /// Makes scope `id` due (its next read, or a refresher holding credentials for it, refreshes
    /// it). Returns its backend, query and user, or nil when there is no such scope.
    public func markDue(scope id: Int64) async throws -> (backend: String, query: String, user: String)? {
        let rows = try await client.query(
            """
            UPDATE oodata_scope SET stale_since = clock_timestamp() WHERE id = \(id)
            RETURNING backend, query, user_name
            """, logger: logger)
        for try await (backend, query, user) in rows.decode((String, String, String).self) {
            return (backend, query, user)
        }
        return nil
    }

    /// The recorded requests in doubt: forwarded more than `cutAfter` seconds ago with no
    /// answer and no gateway forwarding them now, and those answered `RequestInDoubt`.
    public func inDoubtRequests(cutAfter: Double = 0, limit: Int = 1000) async throws -> [InDoubtRequest] {
        // A request being forwarded holds an advisory lock (requestLockSpace, hashtext of
        // backend and ID): one whose lock no session holds has no live forwarder.
        let rows = try await client.query(
            """
            SELECT backend, request_id, user_name, coalesce(request_line, ''), answered, created_at,
                   resolution, resolved_at
            FROM oodata_request AS r
            WHERE (NOT answered AND created_at < clock_timestamp() - make_interval(secs => \(cutAfter))
                   AND NOT EXISTS (
                     SELECT 1 FROM pg_locks AS l
                     WHERE l.locktype = 'advisory' AND l.classid::bigint = \(Int64(Self.requestLockSpace))
                       AND l.objid::bigint = (hashtext(r.backend || E'\\n' || r.request_id)::bigint & 4294967295)
                       AND l.objsubid = 2 AND l.granted))
               OR (answered AND status = 409 AND position(convert_to('RequestInDoubt', 'UTF8') in answer) > 0)
            ORDER BY created_at LIMIT \(limit)
            """, logger: logger)
        var result: [InDoubtRequest] = []
        for try await (backend, id, user, line, answered, created, resolution, resolvedAt)
            in rows.decode((String, String, String, String, Bool, Date, String?, Date?).self)
        {
            result.append(
                InDoubtRequest(
                    backend: backend, requestID: id, user: Self.shownUser(user), request: line,
                    state: answered ? "answered-in-doubt" : "forwarding-cut", forwardedAt: created,
                    resolution: resolution, resolvedAt: resolvedAt))
        }
        return result
    }

    /// Records an operator's word on a request in doubt: `applied` or not. A request whose
    /// forwarding was cut is answered from then on: applied, its repeat is not sent (an update
    /// or delete is answered 204, a create 409 saying it was applied); not applied, its record
    /// goes and its repeat is forwarded again. One answered
    /// `RequestInDoubt` keeps its answer and carries the resolution, which its device reads
    /// (`$oodata/requests/<id>`). Returns false when no such request is in doubt.
    public func resolveInDoubt(backend: String, requestID: String, applied: Bool) async throws -> Bool {
        let word = applied ? "applied" : "notApplied"
        return try await client.withTransaction(logger: logger) { connection in
            // Not while a gateway forwards it: its lock is taken first, held to the transaction's
            // end, and both changes commit together.
            let name = backend + "\n" + requestID
            var locked = false
            for try await value in try await connection.query(
                "SELECT pg_try_advisory_xact_lock(\(Self.requestLockSpace), hashtext(\(name)))", logger: logger
            ).decode(Bool.self) {
                locked = value
            }
            guard locked else { return false }
            return try await resolveLocked(backend: backend, requestID: requestID, word: word, on: connection) > 0
        }
    }

    private func resolveLocked(
        backend: String, requestID: String, word: String, on connection: PostgresConnection
    ) async throws -> Int {
        var changed = 0
        let rows: PostgresRowSequence
        if word == "applied" {
            // Its repeat is answered from now on: an update or a delete as done (204); a create
            // with a 409 that says it was applied (the device cannot be given the entity the
            // backend made; its next download brings it), so that it reaches the ErrorArchive.
            var line = ""
            for try await value in try await connection.query(
                """
                SELECT coalesce(request_line, '') FROM oodata_request
                WHERE backend = \(backend) AND request_id = \(requestID) AND NOT answered
                """, logger: logger
            ).decode(String.self) {
                line = value
            }
            let create = line.uppercased().hasPrefix("POST ")
            let status = create ? 409 : 204
            let body =
                create
                ? ODataError(
                    code: "RequestInDoubt",
                    message: "An operator confirmed on the gateway that request \(requestID) (\(line)) was applied: "
                        + "it is not sent again, and the next download brings the backend's entity",
                    httpStatus: 409
                ).v4JSON() : []
            rows = try await connection.query(
                """
                UPDATE oodata_request SET answered = true, status = \(Int32(status)),
                  headers = \(create ? "Content-Type: application/json" : ""), answer = decode(\(Self.hex(body)), 'hex'),
                  answered_at = clock_timestamp(), resolution = 'applied', resolved_at = clock_timestamp()
                WHERE backend = \(backend) AND request_id = \(requestID) AND NOT answered
                RETURNING 1
                """, logger: logger)
        } else {
            rows = try await connection.query(
                """
                DELETE FROM oodata_request WHERE backend = \(backend) AND request_id = \(requestID) AND NOT answered
                RETURNING 1
                """, logger: logger)
        }
        for try await _ in rows.decode(Int.self) { changed += 1 }
        for try await _ in try await connection.query(
            """
            UPDATE oodata_request SET resolution = \(word), resolved_at = clock_timestamp()
            WHERE backend = \(backend) AND request_id = \(requestID) AND answered AND status = 409
              AND resolution IS NULL AND position(convert_to('RequestInDoubt', 'UTF8') in answer) > 0
            RETURNING 1
            """, logger: logger
        ).decode(Int.self) {
            changed += 1
        }
        return changed
    }

    /// What an operator decided of `requestID` of `user` (only that user's), or nil.
    func resolution(
        backend: String, requestID: String, user: String
    ) async throws
        -> (resolution: String, at: Date)?
    {
        let rows = try await client.query(
            """
            SELECT resolution, resolved_at FROM oodata_request
            WHERE backend = \(backend) AND request_id = \(requestID) AND user_name = \(user)
              AND resolution IS NOT NULL AND resolved_at IS NOT NULL
            """, logger: logger)
        for try await (word, at) in rows.decode((String, Date).self) { return (word, at) }
        return nil
    }

    /// Notes a device's request: its `Client-Instance-ID`, identity and app version; `sync`
    /// when it downloaded a defining query or uploaded.
    func noteDevice(backend: String, instance: String, user: String, appVersion: String?, sync: Bool) async throws {
        try await client.query(
            """
            INSERT INTO oodata_device (backend, instance_id, user_name, app_version, last_sync)
            VALUES (\(backend), \(instance), \(user), \(appVersion),
                    CASE WHEN \(sync) THEN clock_timestamp() END)
            ON CONFLICT (backend, instance_id, user_name) DO UPDATE
              SET last_seen = clock_timestamp(), app_version = coalesce(EXCLUDED.app_version, oodata_device.app_version),
                  last_sync = coalesce(EXCLUDED.last_sync, oodata_device.last_sync)
            """, logger: logger)
    }

    /// Removes the devices not seen for `seconds`.
    func removeDevices(unseenFor seconds: Double) async throws {
        try await client.query(
            "DELETE FROM oodata_device WHERE last_seen < clock_timestamp() - make_interval(secs => \(seconds))",
            logger: logger)
    }

    /// The devices seen, most recent first.
    public func devices(limit: Int = 1000) async throws -> [DeviceSummary] {
        let rows = try await client.query(
            """
            SELECT backend, instance_id, user_name, app_version, first_seen, last_seen, last_sync
            FROM oodata_device ORDER BY last_seen DESC LIMIT \(limit)
            """, logger: logger)
        var result: [DeviceSummary] = []
        for try await (backend, instance, user, version, first, last, sync)
            in rows.decode((String, String, String, String?, Date, Date, Date?).self)
        {
            result.append(
                DeviceSummary(
                    backend: backend, clientInstanceID: instance, user: Self.shownUser(user), appVersion: version,
                    firstSeen: first, lastSeen: last, lastSync: sync))
        }
        return result
    }

    /// The store files kept, newest first.
    public func storeFiles(limit: Int = 1000) async throws -> [StoreFileSummary] {
        let rows = try await client.query(
            """
            SELECT id, backend, shared, owner, size, sha256, created_at FROM oodata_store_file
            ORDER BY created_at DESC LIMIT \(limit)
            """, logger: logger)
        var result: [StoreFileSummary] = []
        for try await (id, backend, shared, owner, size, sha, created)
            in rows.decode((String, String, Bool, String, Int64, String, Date).self)
        {
            result.append(
                StoreFileSummary(
                    id: id, backend: backend, shared: shared, user: Self.shownUser(owner, empty: "shared"), size: size,
                    sha256: sha,
                    createdAt: created))
        }
        return result
    }

    /// The tables the gateway needs that PostgreSQL lacks, asked within `seconds` (readiness).
    func missingTables(within seconds: Double) async throws -> [String] {
        let names = [
            "oodata_scope", "oodata_row", "oodata_refresh", "oodata_request", "oodata_progress", "oodata_store_file",
            "oodata_device", "oodata_support_store", "oodata_support_chunk",
        ]
        let quick = DeadlineClient(client.base, deadline: seconds, server: client.server)
        let rows = try await quick.query(
            "SELECT n FROM unnest(\(names)::text[]) AS n WHERE to_regclass(n) IS NULL", logger: logger)
        var missing: [String] = []
        for try await name in rows.decode(String.self) { missing.append(name) }
        return missing
    }
}
