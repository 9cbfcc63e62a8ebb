public import ODataCore

/// Merging the backend's rows into a stored table (downloads after the first open), and the
/// keys a full read has seen.
extension StoreWriter {
    /// What ``mergeRows(_:into:recordSeen:isLocallyDeleted:)`` did with a page.
    public struct MergeResult: Sendable, Equatable {
        /// Rows inserted, or whose values changed (these are marked upserted).
        public var written = 0
        /// Rows stored with the same values (nothing was written, or only a newer edit link
        /// or cleared local-state flags).
        public var unchanged = 0
        /// Rows left for the caller, by their index in the page: their stored entity has
        /// pending changes, or it is not stored and `isLocallyDeleted` said so.
        public var deferred: [Int] = []
    }

    /// Whether the rows of `entitySet` can be merged from a ``FlatCollection``: every column is
    /// a single property and there are no collection or dynamic properties.
    public func acceptsRows(of entitySet: String) -> Bool { schema.acceptsRows(ofEntitySet: entitySet) }

    /// Merges a page of the backend's rows into `entitySet`, each row with one lookup of its
    /// key that also compares the stored values with the incoming ones in SQL:
    /// - a row that is not stored is inserted, unless `isLocallyDeleted(row)` (then deferred);
    /// - a stored row with pending changes is deferred (the caller keeps its local state);
    /// - a stored row whose values, ETag and type differ is updated and marked upserted in the
    ///   current download generation; local-state flags are cleared;
    /// - a stored row with the same values is not written (only a new edit link, or flags of
    ///   an entity whose local change the backend now has, are set).
    ///
    /// With `recordSeen`, the rowid of every row merged or deferred while stored goes into the
    /// set's seen rows (see ``unseenRows(in:)``). The stored forms are those of
    /// ``bulkInsert(_:into:)-(FlatCollection,_)``, so equal values compare equal.
    public func mergeRows(
        _ page: FlatCollection, into entitySet: String, recordSeen: Bool, isLocallyDeleted: (Int) throws -> Bool
    ) throws -> MergeResult {
        try merge(page, into: entitySet, recordSeen: recordSeen, compareOnly: false, isLocallyDeleted: isLocallyDeleted)
    }

    /// The rows of `page` a merge would not leave alone, by their index, found with the same
    /// lookups as ``mergeRows(_:into:recordSeen:isLocallyDeleted:)`` but without writing any:
    /// rows not stored, stored with other values or local-state flags, or with pending
    /// changes. With `recordSeen`, stored rows are marked seen. A download compares each page
    /// as it arrives and stages only these rows.
    public func changedRows(_ page: FlatCollection, in entitySet: String, recordSeen: Bool) throws -> [Int] {
        try merge(page, into: entitySet, recordSeen: recordSeen, compareOnly: true) { _ in false }.deferred
    }

    private func merge(
        _ page: FlatCollection, into entitySet: String, recordSeen: Bool, compareOnly: Bool,
        isLocallyDeleted: (Int) throws -> Bool
    ) throws -> MergeResult {
        let table = try table(entitySet)
        guard acceptsRows(of: entitySet) else {
            throw StoreError(
                .unsupported, "\(entitySet) has complex, collection or dynamic properties; its rows are not flat")
        }
        let plan = try FlatRowPlan(page, table: table)
        let sql = mergeSQL(table)
        let generation = try downloadGeneration()
        let lookup = try db.statement(sql.lookup)
        let update = try db.statement(sql.update)
        let insert = try db.statement(sql.insert)
        // The rows seen go into the connection's set once the page is merged (or fails): nothing
        // called meanwhile (`isLocallyDeleted`) may mark rows of this table seen, or they are lost.
        var seen = recordSeen ? db.seenRows.removeValue(forKey: table.name) ?? RowidSet() : nil
        defer { if let seen { db.seenRows[table.name] = seen } }
        let typeName = Self.storedType(page.entityType, in: table)
        let width = table.columns.count
        var scratch: [UInt8] = []
        scratch.reserveCapacity(64)
        var result = MergeResult()
        try withRows(of: page, plan: plan) { cursor in
            // Cells and slots are bound in place: no binding may outlive the cursor.
            defer {
                lookup.reset()
                update.reset()
                insert.reset()
            }
            // Binds the row's type, ETag, edit link and columns at 1, 2, 3 and 4... .
            func bindRow(_ row: Int, _ statement: Statement) throws {
                try statement.bind(typeName, at: 1)
                try statement.bind(page.etags[row].map { .text($0) } ?? .null, at: 2)
                try statement.bind(page.editLinks[row].map { .text($0) } ?? .null, at: 3)
                try bindColumns(of: row, from: cursor, to: statement, at: 4, scratch: &scratch)
            }
            for row in 0..<page.entityCount {
                do {
                    lookup.reset()
                    try bindRow(row, lookup)
                    guard try lookup.step(), let rowid = lookup.integer(0) else {
                        lookup.reset()
                        if compareOnly {
                            result.deferred.append(row)
                            continue
                        }
                        if try isLocallyDeleted(row) {
                            result.deferred.append(row)
                            continue
                        }
                        insert.reset()
                        try bindRow(row, insert)
                        try insert.bind(.integer(generation), at: Int32(4 + width))
                        while try insert.step() {}
                        result.written += 1
                        seen?.insert(db.lastInsertRowID)
                        continue
                    }
                    let pending = lookup.integer(1) == 1
                    let same = lookup.integer(2) == 1
                    let clean = lookup.integer(3) == 1
                    lookup.reset()
                    seen?.insert(rowid)
                    if pending || (compareOnly && !(same && clean)) {
                        result.deferred.append(row)
                        continue
                    }
                    if same {
                        result.unchanged += 1
                        if clean { continue }
                    } else {
                        result.written += 1
                    }
                    update.reset()
                    try bindRow(row, update)
                    try update.bind(.integer(rowid), at: Int32(4 + width))
                    try update.bind(same ? .null : .integer(generation), at: Int32(5 + width))
                    while try update.step() {}
                } catch let failure as DatabaseError where failure.code == .constraint {
                    throw Self.conflict(failure, in: table)
                }
            }
        }
        return result
    }

    /// The three statements of a merge, with numbered parameters: 1 type, 2 ETag, 3 edit link,
    /// 4... the columns in table order; then the rowid (update) or generation (insert), and
    /// the generation or NULL (update: NULL keeps the row's mark).
    func mergeSQL(_ table: StoreSchema.EntityTable) -> (lookup: String, update: String, insert: String) {
        let q = StoreSchema.quote
        let key = "merge/" + table.name
        if let cached = insertStatements.sql[key + "/lookup"], let update = insertStatements.sql[key + "/update"],
            let insert = insertStatements.sql[key + "/insert"]
        {
            return (cached, update, insert)
        }
        let width = table.columns.count
        let parameter = { (offset: Int) in "?\(4 + offset)" }
        let nonKey = table.columns.enumerated().filter { !table.keyColumns.contains($0.element.name) }
        let same = (nonKey.map { "\(q($0.element.name)) IS \(parameter($0.offset))" } + ["_etag IS ?2", "_type IS ?1"])
            .joined(separator: " AND ")
        let keyCondition = table.columns.enumerated().filter { table.keyColumns.contains($0.element.name) }
            .map { "\(q($0.element.name)) = \(parameter($0.offset))" }.joined(separator: " AND ")
        let lookup = """
            SELECT _rowid, (_pending = 1 OR _error = 1), (\(same)), \
            (_isLocal = 0 AND _error = 0 AND (?3 IS NULL OR _editLink IS ?3)) \
            FROM \(q(table.name)) WHERE \(keyCondition)
            """
        let assignments =
            nonKey.map { "\(q($0.element.name)) = \(parameter($0.offset))" }
            + [
                "_etag = ?2", "_type = ?1", "_editLink = coalesce(?3, _editLink)", "_isLocal = 0", "_error = 0",
                "_upserted = coalesce(?\(5 + width), _upserted)",
            ]
        let update =
            "UPDATE OR FAIL \(q(table.name)) SET \(assignments.joined(separator: ", ")) WHERE _rowid = ?\(4 + width)"
        let names = ["_type", "_etag", "_editLink", "_isLocal", "_pending", "_upserted"] + table.columns.map(\.name)
        let values = ["?1", "?2", "?3", "0", "0", "?\(4 + width)"] + (0..<width).map(parameter)
        let insert = """
            INSERT INTO \(q(table.name)) (\(names.map(q).joined(separator: ", "))) VALUES (\(values.joined(separator: ", ")))
            """
        insertStatements.sql[key + "/lookup"] = lookup
        insertStatements.sql[key + "/update"] = update
        insertStatements.sql[key + "/insert"] = insert
        return (lookup, update, insert)
    }

    // MARK: Seen rows of a full read

    /// Records that a full read returned the entity stored in row `rowid` of `entitySet`. The
    /// rows seen are kept with the writer's connection, in memory, until ``forgetSeen()``.
    public func markSeen(in entitySet: String, rowid: Int64) throws {
        let table = try table(entitySet)
        db.seenRows[table.name, default: RowidSet()].insert(rowid)
    }

    /// The stored entities of `entitySet` a full read did not return (no ``markSeen(in:rowid:)``
    /// and no merge with `recordSeen`): their rowids, keys and pending flags.
    public func unseenRows(
        in entitySet: String
    ) throws -> [(rowid: Int64, key: [String: PrimitiveValue], pending: Bool)] {
        let table = try table(entitySet)
        let q = StoreSchema.quote
        let seen = db.seenRows[table.name] ?? RowidSet()
        // Only rowids: SQLite then scans the smallest index that holds them (every index does)
        // instead of the table, which at 1,000,000 rows is ten times larger and decrypted page
        // by page. The few rows found are read one by one.
        let scan = try db.statement("SELECT _rowid FROM \(q(table.name))")
        defer { scan.reset() }
        var unseen: [Int64] = []
        while try scan.step() {
            if let rowid = scan.integer(0), !seen.contains(rowid) { unseen.append(rowid) }
        }
        scan.reset()
        var result: [(rowid: Int64, key: [String: PrimitiveValue], pending: Bool)] = []
        for rowid in unseen {
            guard let key = try keyValues(ofRow: rowid, in: table) else { continue }
            let pending = try db.query(
                "SELECT (_pending = 1 OR _error = 1) FROM \(q(table.name)) WHERE _rowid = ?", [.integer(rowid)])
            result.append((rowid, key, pending.first?.first == .integer(1)))
        }
        return result
    }

    /// Forgets every row a full read has seen on this connection.
    public func forgetSeen() throws {
        db.seenRows = [:]
    }
}
