import Crypto
import Foundation
import ODataCore
import PostgresNIO

/// The record of one modification request a device sent through the gateway (SPEC §13,
/// "Uploads"): kept under its repeatable-request ID before it is forwarded, with the backend's
/// answer once the gateway has it.
struct RequestRecord: Sendable {
    /// `forwarding` until the answer is recorded; a record still `forwarding` that no live
    /// gateway holds the lock of is *in doubt* (its forwarder died).
    var answered: Bool
    var answer: RecordedAnswer?
    /// Seconds since it was recorded as being forwarded.
    var age: Double = 0
    /// The identity of the device that sent it first (``GatewayIdentities``): only that
    /// identity is answered from the record.
    var owner = ""
}

/// A backend's answer to one request, as the gateway keeps it (the backend's URLs, not the
/// gateway's: the root a device sees is put in when it is answered).
struct RecordedAnswer: Sendable, Equatable {
    var status: Int
    var headers: HTTPHeaders
    var body: [UInt8]

    /// The headers as text, one `Name: value` line each (values hold no line breaks).
    var headerText: String {
        headers.map { "\($0.name): \($0.value)" }.joined(separator: "\n")
    }

    static func headers(from text: String) -> HTTPHeaders {
        var headers = HTTPHeaders()
        for line in text.split(separator: "\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers.add(
                String(line[..<colon]), String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces))
        }
        return headers
    }
}

extension GatewayStore {
    static let requestSchema = [
        """
        CREATE TABLE IF NOT EXISTS oodata_request (
          backend TEXT NOT NULL,
          user_name TEXT NOT NULL,
          request_id TEXT NOT NULL,
          answered BOOLEAN NOT NULL DEFAULT false,
          status INTEGER,
          headers TEXT,
          answer BYTEA,
          created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
          answered_at TIMESTAMPTZ,
          PRIMARY KEY (backend, request_id))
        """,
        "CREATE INDEX IF NOT EXISTS oodata_request_created ON oodata_request (created_at)",
        // What the request was (method and URL), and what an operator decided of it in doubt.
        "ALTER TABLE oodata_request ADD COLUMN IF NOT EXISTS request_line TEXT",
        "ALTER TABLE oodata_request ADD COLUMN IF NOT EXISTS resolution TEXT",
        "ALTER TABLE oodata_request ADD COLUMN IF NOT EXISTS resolved_at TIMESTAMPTZ",
        """
        CREATE TABLE IF NOT EXISTS oodata_secret (
          name TEXT PRIMARY KEY,
          value TEXT NOT NULL)
        """,
        """
        CREATE TABLE IF NOT EXISTS oodata_progress (
          operation TEXT PRIMARY KEY,
          user_name TEXT NOT NULL,
          step TEXT NOT NULL,
          number BIGINT,
          count BIGINT,
          updated_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())
        """,
    ]

    /// The secret that keys identity digests (``GatewayIdentities``), made at random by the
    /// first instance that asks and shared by every instance on this PostgreSQL. It never leaves
    /// PostgreSQL and the instances' memory; a new one would make every device a new identity.
    func identitySecret() async throws -> [UInt8] {
        let fresh = GatewayStore.hex(SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) })
        try await client.query(
            "INSERT INTO oodata_secret (name, value) VALUES ('identity', \(fresh)) ON CONFLICT (name) DO NOTHING",
            logger: logger)
        let rows = try await client.query("SELECT value FROM oodata_secret WHERE name = 'identity'", logger: logger)
        for try await text in rows.decode(String.self) {
            var bytes: [UInt8] = []
            var index = text.startIndex
            while index < text.endIndex, let next = text.index(index, offsetBy: 2, limitedBy: text.endIndex) {
                guard let byte = UInt8(text[index..<next], radix: 16) else { break }
                bytes.append(byte)
                index = next
            }
            guard bytes.count == 32 else { break }
            return bytes
        }
        throw GatewayError(status: 503, code: "GatewayState", "The gateway's identity secret cannot be read")
    }

    /// Records where a device's operation is on the gateway (any instance answers the device's
    /// pulls). Best effort: a failure is left to the caller to ignore.
    func setProgress(
        _ operation: String, user: String, step: String, number: Int?, count: Int?, on connection: PostgresConnection
    ) async throws {
        try await connection.query(
            """
            INSERT INTO oodata_progress (operation, user_name, step, number, count) VALUES
              (\(operation), \(user), \(step), \(number.map(Int64.init)), \(count.map(Int64.init)))
            ON CONFLICT (operation) DO UPDATE SET step = EXCLUDED.step, number = EXCLUDED.number,
              count = EXCLUDED.count, updated_at = clock_timestamp()
              WHERE oodata_progress.user_name = EXCLUDED.user_name
            """, logger: logger)
    }

    /// Where `operation` is, or nil when the gateway has no word of it.
    func progress(_ operation: String, user: String) async throws -> (step: String, number: Int64?, count: Int64?)? {
        let rows = try await client.query(
            """
            SELECT step, number, count FROM oodata_progress WHERE operation = \(operation) AND user_name = \(user)
            """, logger: logger)
        for try await (step, number, count) in rows.decode((String, Int64?, Int64?).self) {
            return (step, number, count)
        }
        return nil
    }

    /// The query of scope `id` when it serves `backend` and is shared or `user`'s (see
    /// ``query(ofScope:backend:user:)``: a scope named in a device's ETag), read on
    /// `connection` (a caller that holds one must not ask the pool for another).
    func query(
        ofScope id: Int64, backend: String, user: String, on connection: PostgresConnection
    ) async throws
        -> String?
    {
        let rows = try await connection.query(
            """
            SELECT query FROM oodata_scope
            WHERE id = \(id) AND backend = \(backend) AND (user_name = '' OR user_name = \(user))
            """, logger: logger)
        for try await query in rows.decode(String.self) { return query }
        return nil
    }

    /// Removes the progress of operations not updated for `seconds`.
    func removeProgress(olderThan seconds: Double) async throws {
        try await client.query(
            "DELETE FROM oodata_progress WHERE updated_at < clock_timestamp() - make_interval(secs => \(seconds))",
            logger: logger)
    }

    /// The advisory-lock space of request IDs (a request being forwarded holds its lock).
    static let requestLockSpace: Int32 = 7263

    /// Takes the lock of every request in `ids` on `connection`, or none when another live
    /// gateway holds one (it is forwarding that request): false then.
    func tryLockRequests(
        _ ids: [String], backend: String, on connection: PostgresConnection
    )
        async throws -> Bool
    {
        var taken = 0
        for id in ids {
            let name = backend + "\n" + id
            var locked = false
            for try await value in try await connection.query(
                "SELECT pg_try_advisory_lock(\(Self.requestLockSpace), hashtext(\(name)))", logger: logger
            ).decode(Bool.self) {
                locked = value
            }
            if !locked {
                if taken > 0 { try await unlockRequests(on: connection) }
                return false
            }
            taken += 1
        }
        return true
    }

    /// The advisory-lock space of entities whose update is checked against a gateway ETag.
    static let entityLockSpace: Int32 = 7264

    /// Takes a lock per entity (`Set(key)` of `backend`), all or none at a time, trying again
    /// every 100 ms while another gateway holds one (never waiting inside PostgreSQL, so two
    /// uploads cannot deadlock), for up to `timeout` seconds; then 503. Released with the
    /// requests' locks (``unlockRequests(on:)``).
    func lockEntities(
        _ entities: [String], backend: String, timeout: Double, on connection: PostgresConnection
    ) async throws {
        guard !entities.isEmpty else { return }
        let names = Set(entities).map { backend + "\n" + $0 }
        let deadline = ContinuousClock.now + .seconds(timeout)
        while true {
            let rows = try await connection.query(
                """
                SELECT key, pg_try_advisory_lock(\(Self.entityLockSpace), key)
                FROM (SELECT DISTINCT hashtext(name) AS key FROM unnest(\(names)::text[]) AS name) AS keys
                """, logger: logger)
            var taken: [Int32] = []
            var missed = false
            for try await (key, locked) in rows.decode((Int32, Bool).self) {
                if locked { taken.append(key) } else { missed = true }
            }
            guard missed else { return }
            if !taken.isEmpty {
                try await connection.query(
                    "SELECT pg_advisory_unlock(\(Self.entityLockSpace), key) FROM unnest(\(taken)::int4[]) AS key",
                    logger: logger)
            }
            guard ContinuousClock.now < deadline else {
                throw GatewayError(
                    status: 503, code: "EntityBeingChanged",
                    "Another upload is still changing an entity this upload changes; try again later")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// Releases every advisory lock of this connection (the requests' and the entities').
    func unlockRequests(on connection: PostgresConnection) async throws {
        try await connection.query("SELECT pg_advisory_unlock_all()", logger: logger)
    }

    /// The records of `ids` that exist.
    func requestRecords(
        _ ids: [String], backend: String, on connection: PostgresConnection
    )
        async throws -> [String: RequestRecord]
    {
        let rows = try await connection.query(
            """
            SELECT request_id, answered, status, headers, answer,
                   extract(epoch FROM clock_timestamp() - created_at)::float8, user_name FROM oodata_request
            WHERE backend = \(backend) AND request_id = ANY(\(ids)::text[])
            """, logger: logger)
        var records: [String: RequestRecord] = [:]
        for try await (id, answered, status, headers, answer, age, owner)
            in rows.decode((String, Bool, Int32?, String?, ByteBuffer?, Double, String).self)
        {
            var recorded: RecordedAnswer?
            if answered, let status {
                recorded = RecordedAnswer(
                    status: Int(status), headers: RecordedAnswer.headers(from: headers ?? ""),
                    body: answer.map { Array($0.readableBytesView) } ?? [])
            }
            records[id] = RequestRecord(answered: answered, answer: recorded, age: age, owner: owner)
        }
        return records
    }

    /// Records `ids` as being forwarded (committed before the gateway sends them).
    /// `lines` gives each request's method and URL (`PATCH Contacts(5)`), shown to operators
    /// when it is in doubt.
    func recordForwarding(
        _ ids: [String], lines: [String], backend: String, user: String, on connection: PostgresConnection
    )
        async throws
    {
        guard !ids.isEmpty else { return }
        let lines = ids.indices.map { $0 < lines.count ? String(lines[$0].prefix(2000)) : "" }
        try await connection.query(
            """
            INSERT INTO oodata_request (backend, user_name, request_id, request_line)
            SELECT \(backend), \(user), i, l FROM unnest(\(ids)::text[], \(lines)::text[]) AS t(i, l)
            ON CONFLICT (backend, request_id) DO UPDATE SET created_at = clock_timestamp()
            WHERE NOT oodata_request.answered AND oodata_request.user_name = EXCLUDED.user_name
            """, logger: logger)
    }

    /// Records each request's answer, all in one statement (a change set's answers are
    /// recorded together or not at all). An answer already recorded is never replaced.
    func recordAnswers(
        _ answers: [(id: String, answer: RecordedAnswer)], backend: String, user: String,
        on connection: PostgresConnection
    ) async throws {
        guard !answers.isEmpty else { return }
        let ids = answers.map(\.id)
        let statuses = answers.map { Int32($0.answer.status) }
        let headers = answers.map(\.answer.headerText)
        // Bodies as hex text, decoded by PostgreSQL.
        let bodies = answers.map { Self.hex($0.answer.body) }
        try await connection.query(
            """
            INSERT INTO oodata_request (backend, user_name, request_id, answered, status, headers, answer, answered_at)
            SELECT \(backend), \(user), i, true, s, h, decode(b, 'hex'), clock_timestamp()
            FROM unnest(\(ids)::text[], \(statuses)::int4[], \(headers)::text[], \(bodies)::text[]) AS t(i, s, h, b)
            ON CONFLICT (backend, request_id) DO UPDATE
              SET answered = true, status = EXCLUDED.status, headers = EXCLUDED.headers, answer = EXCLUDED.answer,
                  answered_at = EXCLUDED.answered_at
              WHERE NOT oodata_request.answered AND oodata_request.user_name = EXCLUDED.user_name
            """, logger: logger)
    }

    /// Starts the wait of `ids` again: a forward whose answer was lost ended now, and the
    /// backend may go on with it from here.
    func touchRequests(_ ids: [String], backend: String, on connection: PostgresConnection) async throws {
        guard !ids.isEmpty else { return }
        try await connection.query(
            """
            UPDATE oodata_request SET created_at = clock_timestamp()
            WHERE backend = \(backend) AND request_id = ANY(\(ids)::text[]) AND NOT answered
            """, logger: logger)
    }

    /// Forgets `ids`: the backend did not apply them (it refused the whole batch, or stopped
    /// before them), so a repeat is forwarded again.
    func forgetRequests(
        _ ids: [String], backend: String, on connection: PostgresConnection
    )
        async throws
    {
        guard !ids.isEmpty else { return }
        try await connection.query(
            """
            DELETE FROM oodata_request
            WHERE backend = \(backend) AND request_id = ANY(\(ids)::text[]) AND NOT answered
            """, logger: logger)
    }

    /// Removes the records of requests first recorded more than `seconds` ago, and returns how
    /// many went. A repeat sent first before that is refused, never applied again.
    public func removeRequestRecords(olderThan seconds: Double) async throws -> Int {
        let rows = try await client.query(
            """
            DELETE FROM oodata_request WHERE created_at < clock_timestamp() - make_interval(secs => \(seconds))
            RETURNING 1
            """, logger: logger)
        var removed = 0
        for try await _ in rows.decode(Int.self) { removed += 1 }
        return removed
    }

    /// How many requests are recorded, and how many of them are answered (for operators and
    /// tests).
    public func requestCounts() async throws -> (recorded: Int, answered: Int) {
        let rows = try await client.query(
            "SELECT count(*), count(*) FILTER (WHERE answered) FROM oodata_request", logger: logger)
        for try await (all, answered) in rows.decode((Int64, Int64).self) { return (Int(all), Int(answered)) }
        return (0, 0)
    }

    /// Runs `body` with a connection of its own (the request locks are held on it).
    func withConnection<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await client.withConnection(body)
    }
}
