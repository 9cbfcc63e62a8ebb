import Foundation
public import ODataCore

extension Store {
    /// This store with `newModel`, a model that only adds to the store's (new entity sets and
    /// their tables, new properties as new columns, new navigation properties with their link
    /// tables), migrated in place in one transaction: either everything below happens or
    /// nothing does.
    ///
    /// - New tables, columns and indexes are created; the rows already stored keep their values
    ///   and read the new properties as null. A column added for a property that is not
    ///   nullable stays nullable in the file (its rows existed before the property did).
    /// - Tables and columns the new model no longer names stay in the file, unread. A column
    ///   left out that is `NOT NULL` cannot stay (inserts would fail): that is a
    ///   ``StoreError/Code/conflict``, as is a column whose SQL type the new model changes, or
    ///   a key the new model changes. Such changes need a new store.
    /// - `alsoWriting` runs last, in the same transaction, with a writer for the new model.
    ///
    /// Returns a store on the same connections with the new model: use it instead of this one,
    /// which must not be closed separately.
    public func migratingInPlace(
        to newModel: Model, alsoWriting: (@Sendable (StoreWriter) throws -> Void)? = nil
    ) async throws -> Store {
        let old = schema
        let newSchema = try await pool.read { db -> StoreSchema in
            var stored: [StoreIndex] = []
            let rows = try db.query("SELECT value FROM store_meta WHERE key = 'index-list'")
            if case .blob(let bytes)? = rows.first?.first {
                stored = try JSONDecoder().decode([StoreIndex].self, from: Data(bytes))
            }
            // Indexes on what the new model no longer has are dropped with it.
            let probe = try StoreSchema(model: newModel)
            let kept = stored.filter { index in
                guard let table = probe.table(forEntitySet: index.entitySet) else { return false }
                return index.properties.allSatisfy { name in table.columns.contains { $0.name == name } }
            }
            return try StoreSchema(model: newModel, indexes: kept)
        }
        let modelData = try JSONEncoder().encode(newModel)
        let indexData = try JSONEncoder().encode(
            newSchema.extraIndexes.map { entry in
                StoreIndex(
                    entitySet: newSchema.tables.first { $0.name == entry.table }?.entitySet ?? entry.table,
                    properties: entry.columns)
            })
        try await pool.write { db in
            var existing: [String: [String: (type: String, notNull: Bool)]] = [:]
            var views: Set<String> = []
            for row in try db.query("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')") {
                guard case .text(let name) = row[0] else { continue }
                // A view stands in for a table the owner of the store made its own way: it is
                // neither created nor altered here.
                if row[1] == .text("view") {
                    existing[name] = nil
                    views.insert(name)
                    continue
                }
                var columns: [String: (type: String, notNull: Bool)] = [:]
                for column in try db.query("PRAGMA table_info(\(StoreSchema.quote(name)))") {
                    guard column.count > 3, case .text(let columnName) = column[1] else { continue }
                    var type = ""
                    if case .text(let declared) = column[2] { type = declared }
                    columns[columnName] = (type.uppercased(), column[3] == .integer(1))
                }
                existing[name] = columns
            }
            for statement in try Self.additions(from: old, to: newSchema, existing: existing, views: views) {
                try db.execute(statement)
            }
            try db.execute(
                "INSERT OR REPLACE INTO store_meta (key, value) VALUES (?, ?)",
                [.text("model"), .blob(Array(modelData))])
            try db.execute(
                "INSERT OR REPLACE INTO store_meta (key, value) VALUES (?, ?)",
                [.text("index-list"), .blob(Array(indexData))])
            try alsoWriting?(StoreWriter(db: db, schema: newSchema))
        }
        let migrated = Store(schema: newSchema, pool: pool)
        try await migrated.createLookupIndexes()
        return migrated
    }

    /// The statements that take a file laid out for `old` to `new`, given the tables (and views)
    /// it has with their columns; throws when `new` does not only add.
    static func additions(
        from old: StoreSchema, to new: StoreSchema, existing: [String: [String: (type: String, notNull: Bool)]],
        views: Set<String> = []
    ) throws(StoreError) -> [String] {
        let q = StoreSchema.quote
        var statements: [String] = []
        for table in new.tables where !views.contains(table.name) {
            if let before = old.tables.first(where: { $0.name == table.name }), before.keyColumns != table.keyColumns {
                throw StoreError(
                    .conflict,
                    "The key of \(table.entitySet) changes from \(before.keyColumns.joined(separator: ", ")) to "
                        + "\(table.keyColumns.joined(separator: ", ")): the store cannot take it in place")
            }
            let objects = new.objects(of: table)
            if existing[table.name] == nil {
                statements += objects.map(\.sql)
                continue
            }
            for object in objects where object.isTable && object.table != table.name && existing[object.table] == nil {
                statements.append(object.sql)
            }
            let columns = existing[table.name] ?? [:]
            for column in table.columns {
                if let present = columns[column.name] {
                    guard present.type == column.sqlType else {
                        throw StoreError(
                            .conflict,
                            "\(table.entitySet)/\(column.path.joined(separator: "/")) is stored as \(present.type) and "
                                + "the new model needs \(column.sqlType): the store cannot take it in place")
                    }
                    continue
                }
                statements.append("ALTER TABLE \(q(table.name)) ADD COLUMN \(q(column.name)) \(column.sqlType)")
            }
            let bookkeeping = Set(["_rowid"] + StoreSchema.bookkeepingColumns.map(\.name))
            for (name, present) in columns where present.notNull && !bookkeeping.contains(name) {
                guard !table.columns.contains(where: { $0.name == name }) else { continue }
                throw StoreError(
                    .conflict,
                    "\(table.entitySet)/\(name) is left out of the new model but its column is NOT NULL: "
                        + "the store cannot take it in place")
            }
            for collection in table.collections where existing[collection.name] != nil {
                let present = existing[collection.name] ?? [:]
                for column in collection.columns where present[column.name] == nil {
                    statements.append(
                        "ALTER TABLE \(q(collection.name)) ADD COLUMN \(q(column.name)) \(column.sqlType)")
                }
            }
        }
        return statements
    }
}

extension Store {
    /// Copies every page of the write-ahead log into the database file and empties the log, so
    /// that the file alone holds the store (before it is moved or replaced). Throws when a
    /// reader kept the checkpoint from finishing.
    public func checkpoint() async throws {
        let result = try await pool.withWriter { db in try db.query("PRAGMA wal_checkpoint(TRUNCATE)") }
        if case .integer(let busy)? = result.first?.first, busy != 0 {
            throw StoreError(.conflict, "The write-ahead log of the store could not be emptied: a reader still uses it")
        }
    }
}
