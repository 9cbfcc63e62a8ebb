import Foundation
import ODataCore
import ODataStore

/// The users of a shared store (SPEC §16), as the store records them in `oo_meta`.
struct StoreUsers: Sendable, Equatable {
    /// The user the store's data and queue belong to now; nil for a store without users.
    var current: String?
    /// The user before ``current``.
    var previous: String?
    /// Whether a switch to ``current`` has not finished its download yet: the rows may still be
    /// those another user could read, so the store must not open before that download.
    var switching = false

    static func load(_ connection: Connection) throws -> StoreUsers {
        var users = StoreUsers()
        for row in try connection.query(
            "SELECT key, value FROM oo_meta WHERE key IN ('currentUser', 'previousUser', 'switchingUser')")
        {
            guard case .text(let key) = row[0], case .text(let value) = row[1] else { continue }
            switch key {
            case "currentUser": users.current = value
            case "previousUser": users.previous = value
            default: users.switching = true
            }
        }
        return users
    }

    func save(_ writer: StoreWriter) throws {
        let connection = writer.connection
        _ = try connection.execute(
            "DELETE FROM oo_meta WHERE key IN ('currentUser', 'previousUser', 'switchingUser')", [])
        for (key, value) in [
            ("currentUser", current), ("previousUser", previous), ("switchingUser", switching ? "1" : nil),
        ] {
            guard let value else { continue }
            _ = try connection.execute("INSERT INTO oo_meta (key, value) VALUES (?, ?)", [.text(key), .text(value)])
        }
    }
}

/// Requests of users other than the current one wait in side tables: `oo_parked` (the queue
/// rows), `oo_parked_archive` (their ErrorArchive rows), `oo_parked_conflict` (their conflict
/// copies) and `oo_parked_original`, `oo_parked_stream_original` (the states kept for the
/// entities they change). `oo_queue` only ever holds the current user's requests, so nothing
/// that reads the queue (an upload, a download's reapplying, the RequestQueue) can see or send
/// another user's. Every side row carries its user (`owner` in `oo_parked`, `parked_owner` in
/// the others): queue IDs are reused once a queue empties, so an ID alone names no one's row.
extension RequestQueue {
    /// The ErrorArchive's table in the file.
    private var archiveTable: String {
        writer.schema.table(forEntitySet: LocalSchema.errorArchive)?.name ?? LocalSchema.errorArchive
    }

    /// The column names of a table, in order.
    private func columns(of table: String) throws -> [String] {
        try writer.connection.query("PRAGMA table_info(\(StoreSchema.quote(table)))").compactMap { row in
            if row.count > 1, case .text(let name) = row[1] { return name }
            return nil
        }
    }

    /// The side tables and the tables they mirror.
    private var parkedTables: [(parked: String, source: String)] {
        [
            ("oo_parked", "oo_queue"), ("oo_parked_archive", archiveTable), ("oo_parked_conflict", "oo_conflict"),
            ("oo_parked_original", "oo_original"), ("oo_parked_stream_original", "oo_stream_original"),
        ]
    }

    /// Creates the side tables with the columns of the tables they mirror (and `parked_owner`),
    /// and adds the columns those gained since (a store upgraded by a later version).
    private func prepareParking() throws {
        let q = StoreSchema.quote
        for (parked, source) in parkedTables {
            try writer.connection.execute(
                "CREATE TABLE IF NOT EXISTS \(q(parked)) AS SELECT * FROM \(q(source)) WHERE 0")
            let have = Set(try columns(of: parked))
            var wanted = try columns(of: source)
            if parked != "oo_parked" { wanted.append("parked_owner") }
            for column in wanted where !have.contains(column) {
                try writer.connection.execute("ALTER TABLE \(q(parked)) ADD COLUMN \(q(column))")
            }
        }
        // Rows are brought back one by one, by user and ID.
        try writer.connection.execute("CREATE INDEX IF NOT EXISTS oo_parked_by_owner ON oo_parked (owner, id)")
        try writer.connection.execute(
            "CREATE INDEX IF NOT EXISTS oo_parked_archive_by_owner ON oo_parked_archive (parked_owner, \"RequestID\")")
        try writer.connection.execute(
            "CREATE INDEX IF NOT EXISTS oo_parked_conflict_by_owner ON oo_parked_conflict (parked_owner, request_id)")
    }

    /// Copies the rows of `source` that `condition` selects into `target`, by column name;
    /// `replacing` gives some columns another value, `adding` fills columns only `target` has.
    private func copy(
        from source: String, to target: String, where condition: String, _ arguments: [DatabaseValue],
        skipping: Set<String> = [], replacing: [String: DatabaseValue] = [:], adding: [String: DatabaseValue] = [:]
    ) throws {
        let q = StoreSchema.quote
        let targetColumns = Set(try columns(of: target))
        let shared = try columns(of: source).filter { targetColumns.contains($0) && !skipping.contains($0) }
        let added = adding.keys.sorted().filter { targetColumns.contains($0) && !shared.contains($0) }
        var values: [DatabaseValue] = []
        var expressions: [String] = []
        for column in shared {
            if let value = replacing[column] {
                values.append(value)
                expressions.append("?")
            } else {
                expressions.append(q(column))
            }
        }
        for column in added {
            values.append(adding[column] ?? .null)
            expressions.append("?")
        }
        let list = (shared + added).map(q).joined(separator: ", ")
        _ = try writer.connection.execute(
            "INSERT OR REPLACE INTO \(q(target)) (\(list)) SELECT \(expressions.joined(separator: ", ")) "
                + "FROM \(q(source)) WHERE \(condition)", values + arguments)
    }

    /// `entity_set || entity_key` of the entities `entries` change, for matching kept states.
    private static func references(_ entries: [QueueEntry]) -> [DatabaseValue] {
        entries.reduce(into: Set<String>()) { $0.formUnion($1.changed) }.sorted().map { .text($0) }
    }

    /// Sets aside every queued request of `owner` (pending and failed, with their ErrorArchive
    /// rows, conflict copies and the states kept for their entities) and puts the entities they
    /// changed back into their downloaded state, as an undo would, without losing the requests:
    /// ``unpark(owner:)`` brings them back. Returns how many requests were set aside.
    func park(owner: String) throws -> Int {
        try prepareParking()
        let (entries, keyMap) = try entries()
        let owned = entries.filter { $0.request.owner == owner }
        let ids = Set(owned.map(\.id))
        guard !ids.isEmpty else { return 0 }
        let mark: [String: DatabaseValue] = ["parked_owner": .text(owner)]
        let queued = "SELECT id FROM oo_queue WHERE owner = ? AND status IN ('pending', 'failed')"
        try copy(
            from: "oo_queue", to: "oo_parked", where: "owner = ? AND status IN ('pending', 'failed')", [.text(owner)])
        try copy(
            from: archiveTable, to: "oo_parked_archive", where: "\"RequestID\" IN (\(queued))", [.text(owner)],
            skipping: ["_rowid"], adding: mark)
        try copy(
            from: "oo_conflict", to: "oo_parked_conflict", where: "request_id IN (\(queued))", [.text(owner)],
            adding: mark)
        let references = Self.references(owned)
        for references in stride(from: 0, to: references.count, by: 400).map({
            Array(references[$0..<min($0 + 400, references.count)])
        }) {
            let list = references.map { _ in "?" }.joined(separator: ", ")
            for table in ["oo_original", "oo_stream_original"] {
                try copy(
                    from: table, to: "oo_parked_\(table.dropFirst(3))", where: "entity_set || entity_key IN (\(list))",
                    references, adding: mark)
            }
        }
        try removeRequests(ids, entries: entries, keyMap: keyMap)
        return ids.count
    }

    /// Removes every queued request of `owner` (pending and failed, with their ErrorArchive
    /// rows) and puts the entities they changed back into their downloaded state. Returns how
    /// many went.
    func discard(owner: String) throws -> Int {
        let (entries, keyMap) = try entries()
        let ids = Set(entries.filter { $0.request.owner == owner }.map(\.id))
        guard !ids.isEmpty else { return 0 }
        try removeRequests(ids, entries: entries, keyMap: keyMap)
        return ids.count
    }

    /// Brings back the requests of `owner` that ``park(owner:)`` set aside, in their order,
    /// after the current queue (each gets a new queue ID; its repeatable-request ID, which the
    /// backend knows it by, stays), with their ErrorArchive rows, conflict copies and kept
    /// states, and applies them again to the entities they change. Returns how many came back.
    func unpark(owner: String) throws -> Int {
        try prepareParking()
        let parked = try writer.connection.query(
            "SELECT id FROM oo_parked WHERE owner = ? ORDER BY id", [.text(owner)]
        ).compactMap { row -> Int64? in
            if case .integer(let id) = row[0] { return id }
            return nil
        }
        guard !parked.isEmpty else { return 0 }
        let mine: DatabaseValue = .text(owner)
        // The kept states first: rebuilding the entities starts from them.
        for table in ["oo_original", "oo_stream_original"] {
            let side = "oo_parked_\(table.dropFirst(3))"
            try copy(from: side, to: table, where: "parked_owner = ?", [mine])
            _ = try writer.connection.execute("DELETE FROM \(side) WHERE parked_owner = ?", [mine])
        }
        var renumbered: Set<Int64> = []
        for old in parked {
            try copy(
                from: "oo_parked", to: "oo_queue", where: "owner = ? AND id = ?", [mine, .integer(old)],
                skipping: ["id"])
            guard case .integer(let new)? = try writer.connection.query("SELECT last_insert_rowid()").first?.first
            else { continue }
            renumbered.insert(new)
            try copy(
                from: "oo_parked_archive", to: archiveTable, where: "parked_owner = ? AND \"RequestID\" = ?",
                [mine, .integer(old)], skipping: ["_rowid"], replacing: ["RequestID": .integer(new)])
            try copy(
                from: "oo_parked_conflict", to: "oo_conflict", where: "parked_owner = ? AND request_id = ?",
                [mine, .integer(old)], replacing: ["request_id": .integer(new)])
        }
        for table in ["oo_parked_archive", "oo_parked_conflict"] {
            _ = try writer.connection.execute("DELETE FROM \(table) WHERE parked_owner = ?", [mine])
        }
        _ = try writer.connection.execute("DELETE FROM oo_parked WHERE owner = ?", [mine])
        let (entries, keyMap) = try entries()
        let affected = entries.filter { renumbered.contains($0.id) }.reduce(into: Set<String>()) {
            $0.formUnion($1.changed)
        }
        try rebuild(affected, remaining: entries, keyMap: keyMap)
        return renumbered.count
    }

    /// How many requests of each user other than the current one wait set aside.
    static func parkedCounts(_ connection: Connection) throws -> [String: Int] {
        guard try !connection.query("SELECT 1 FROM sqlite_master WHERE name = 'oo_parked'").isEmpty else { return [:] }
        var counts: [String: Int] = [:]
        for row in try connection.query("SELECT owner, count(*) FROM oo_parked GROUP BY owner") {
            if case .text(let owner) = row[0], case .integer(let count) = row[1] { counts[owner] = Int(count) }
        }
        return counts
    }
}
