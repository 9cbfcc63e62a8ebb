public import ODataCore

/// Writes entities inside one transaction of a ``Store``. Obtain one from `Store.write`.
///
/// Entity rows are updated with `UPDATE OR FAIL`: a plain `UPDATE` of a `NOT NULL` column (the
/// bookkeeping flags) makes SQLite keep a statement journal, and SQLCipher encrypts every page
/// written to it (about 11 µs per updated row here). A failed statement fails its whole write
/// transaction (or savepoint) anyway, so nothing relies on the statement-level rollback.
public struct StoreWriter {
    let db: Connection
    /// The schema the store follows.
    public let schema: StoreSchema
    /// The connection of this write transaction, for tables the store's user keeps beside the
    /// entity tables. It must not escape the `write` closure.
    public var connection: Connection { db }
    /// A reader over this transaction's connection: it sees the changes made so far.
    public var reader: StoreReader { StoreReader(db: db, schema: schema) }

    /// INSERT statements per table, built once per write transaction.
    let insertStatements = InsertStatementCache()

    /// Bookkeeping columns an INSERT sets, before the property columns.
    static let insertBookkeeping = ["_type", "_etag", "_editLink", "_localID", "_isLocal", "_pending"]

    init(db: Connection, schema: StoreSchema) {
        self.db = db
        self.schema = schema
    }

    func insertSQL(_ table: StoreSchema.EntityTable) -> String {
        if let cached = insertStatements.sql[table.name] { return cached }
        let sql = table.insertSQL
        insertStatements.sql[table.name] = sql
        return sql
    }

    /// The `_type` of a row: NULL for the entity set's own type (which is what NULL reads
    /// as), the name of a derived type otherwise. Most rows are of the set's type, and a
    /// qualified name repeated in every row only makes the table larger.
    static func storedType(_ typeName: String?, in table: StoreSchema.EntityTable) -> DatabaseValue {
        guard let typeName, typeName != table.entityType else { return .null }
        return .text(typeName)
    }

    func table(_ entitySet: String) throws(StoreError) -> StoreSchema.EntityTable {
        guard let table = schema.table(forEntitySet: entitySet) else { throw StoreError(.unknownEntitySet, "No entity set \(entitySet)") }
        return table
    }

    /// Bookkeeping written with an entity.
    public struct Bookkeeping: Sendable {
        public var isLocal = false
        public var pending = false
        public var localID: String?
        public init(isLocal: Bool = false, pending: Bool = false, localID: String? = nil) {
            self.isLocal = isLocal
            self.pending = pending
            self.localID = localID
        }
    }

    // MARK: Insert

    /// Inserts an entity (with its collections, dynamic properties and expanded navigation,
    /// recursively: a deep insert) and returns its rowid.
    @discardableResult
    public func insert(_ entity: Entity, into entitySet: String, bookkeeping: Bookkeeping = Bookkeeping()) throws -> Int64 {
        let table = try table(entitySet)
        var values: [DatabaseValue] = []
        return try insertRow(entity, table: table, statement: db.statement(insertSQL(table)), bookkeeping: bookkeeping, values: &values)
    }

    /// Inserts many entities with one prepared statement (for downloads).
    public func bulkInsert(_ entities: [Entity], into entitySet: String) throws {
        let table = try table(entitySet)
        let sql = insertSQL(table)
        var values: [DatabaseValue] = []
        values.reserveCapacity(Self.insertBookkeeping.count + table.columns.count)
        for entity in entities {
            // Children of the entity may run other statements in between; the cache hands the
            // same prepared statement back, reset.
            try insertRow(entity, table: table, statement: db.statement(sql), bookkeeping: Bookkeeping(), values: &values)
        }
    }

    /// Inserts a page of flat rows (see `V4JSONReader.readFlatCollection`) with one prepared
    /// statement: the rows of ``bulkInsert(_:into:)-([Entity],_)`` without entities in
    /// between. Properties the table has no column for are an error, as are complex or
    /// collection columns (such tables are not flat).
    public func bulkInsert(_ page: FlatCollection, into entitySet: String) throws {
        let table = try table(entitySet)
        guard table.collections.isEmpty else { throw StoreError(.unsupported, "\(entitySet) has collection properties; its rows are not flat") }
        guard table.columns.allSatisfy({ $0.path.count == 1 }) else {
            throw StoreError(.unsupported, "\(entitySet) has complex properties; its rows are not flat")
        }
        let plan = try FlatRowPlan(page, table: table)
        let statement = try db.statement(insertSQL(table))
        let typeName = Self.storedType(page.entityType, in: table)
        let first = Int32(Self.insertBookkeeping.count + 1)
        // GUIDs and other values without a slot are written into this reused buffer.
        var scratch: [UInt8] = []
        scratch.reserveCapacity(64)
        try withRows(of: page, plan: plan) { cursor in
            // Cells and slots are bound in place: no binding may outlive the cursor.
            defer { statement.reset() }
            // What is the same in every row is bound once: the statement is reset without
            // clearing its bindings, and everything else is bound again for each row.
            try statement.bind(typeName, at: 1)
            try statement.bindNull(at: 4)
            try statement.bind(integer: 0, at: 5)
            try statement.bind(integer: 0, at: 6)
            for (offset, binding) in plan.bindings.enumerated() {
                if case .absent = binding { try statement.bindNull(at: first + Int32(offset)) }
            }
            let etags = page.etags.contains { $0 != nil }, editLinks = page.editLinks.contains { $0 != nil }
            if !etags { try statement.bindNull(at: 2) }
            if !editLinks { try statement.bindNull(at: 3) }
            for row in 0..<page.entityCount {
                do {
                    statement.resetKeepingBindings()
                    if editLinks { try statement.bind(page.editLinks[row].map { .text($0) } ?? .null, at: 3) }
                    try bindColumns(
                        of: row, from: cursor, to: statement, at: first, skippingAbsent: true, scratch: &scratch)
                    // Most services send an ETag per entity: it is bound from the page's own
                    // string while the row is written, without SQLite copying it.
                    if etags {
                        try Self.withText(page.etags[row], boundTo: statement, at: 2) { while try statement.step() {} }
                    } else {
                        while try statement.step() {}
                    }
                } catch let failure as DatabaseError where failure.code == .constraint {
                    throw Self.conflict(failure, in: table)
                }
            }
        }
    }

    /// Binds `text` (NULL when nil) at `position` and runs `body`, which steps the statement,
    /// while the string's storage is valid: a native string is bound in place (SQLite does not
    /// copy it), so the binding must not be read after `body` returns; bind the position again
    /// before the next step, and reset the statement with its bindings cleared when done.
    static func withText(
        _ text: String?, boundTo statement: Statement, at position: Int32, _ body: () throws -> Void
    ) throws {
        guard let text else {
            try statement.bindNull(at: position)
            return try body()
        }
        let boundInPlace = try text.utf8.withContiguousStorageIfAvailable { buffer -> Bool in
            try statement.bindInPlace(buffer, start: 0, count: buffer.count, at: position)
            try body()
            return true
        }
        if boundInPlace == nil {
            try statement.bind(.text(text), at: position)
            try body()
        }
    }

    /// The error for a row that breaks a constraint of `table`.
    static func conflict(_ failure: DatabaseError, in table: StoreSchema.EntityTable) -> StoreError {
        StoreError(.conflict, "\(table.entitySet): an entity with this key exists already, or a required value is missing (\(failure.message))")
    }

    /// Runs an entity row's INSERT with `values`; a constraint failure is a `conflict`.
    private func run(_ statement: Statement, _ values: [DatabaseValue], into table: StoreSchema.EntityTable) throws {
        if let failure = Self.failure({ () throws(DatabaseError) in
            // The statement keeps the values for error messages only while it runs, so that
            // the buffer can be reused without a copy.
            defer { statement.forgetArguments() }
            try statement.bind(values)
            while try statement.step() {}
        }) {
            guard failure.code == .constraint else { throw failure }
            throw Self.conflict(failure, in: table)
        }
    }

    /// One row, then its collections, dynamic properties and inline entities. `values` is a
    /// reusable buffer.
    @discardableResult
    private func insertRow(_ entity: Entity, table: StoreSchema.EntityTable, statement: Statement, bookkeeping: Bookkeeping,
                           values: inout [DatabaseValue]) throws -> Int64 {
        values.removeAll(keepingCapacity: true)
        values.append(Self.storedType(entity.typeName, in: table))
        values.append(entity.control.etag.map { .text($0) } ?? .null)
        values.append(entity.control.editLink.map { .text($0) } ?? .null)
        values.append(bookkeeping.localID.map { .text($0) } ?? .null)
        values.append(.integer(bookkeeping.isLocal ? 1 : 0))
        values.append(.integer(bookkeeping.pending ? 1 : 0))
        // Properties usually come in the order of the columns: look there first.
        var position = 0
        for column in table.columns {
            values.append(try columnValue(column, in: entity, position: &position))
        }
        try run(statement, values, into: table)
        let rowid = db.lastInsertRowID
        if !table.collections.isEmpty || table.dynamicTable != nil { try writeChildren(entity, table: table, rowid: rowid) }
        if !entity.navigation.isEmpty { try insertInline(entity, table: table, rowid: rowid, bookkeeping: bookkeeping) }
        return rowid
    }

    /// Inserts the entity, or replaces the existing one with the same key (downloads: the
    /// backend's copy wins). Returns the rowid, which stays stable on replace.
    @discardableResult
    public func upsert(_ entity: Entity, into entitySet: String) throws -> Int64 {
        let table = try table(entitySet)
        if let rowid = try rowid(of: entity, in: table) {
            try replace(rowid: rowid, with: entity, table: table)
            return rowid
        }
        return try insert(entity, into: entitySet)
    }

    /// Like ``upsert(_:into:)``, but a stored row whose columns, ETag and type already hold the
    /// entity's values is not rewritten (only a new edit link is kept): `changed` says whether
    /// a value changed. A full read of an unchanged backend then rewrites nothing. Tables with
    /// collection or dynamic properties are always written.
    public func upsertIfChanged(_ entity: Entity, into entitySet: String) throws -> (rowid: Int64, changed: Bool) {
        let table = try table(entitySet)
        guard let rowid = try rowid(of: entity, in: table) else { return (try insert(entity, into: entitySet), true) }
        if table.collections.isEmpty && table.dynamicTable == nil {
            let q = StoreSchema.quote
            let (names, incoming) = try replacedValues(entity, table: table)
            let stored = try db.query("SELECT \((names + ["_editLink"]).map(q).joined(separator: ", ")) FROM \(q(table.name)) WHERE _rowid = ?",
                                      [.integer(rowid)]).first ?? []
            if stored.dropLast().elementsEqual(incoming) {
                // The same values; the backend may name the entity's edit link now (after a create).
                if let link = entity.control.editLink, stored.last != .text(link) {
                    try db.execute("UPDATE \(q(table.name)) SET _editLink = ? WHERE _rowid = ?", [.text(link), .integer(rowid)])
                }
                return (rowid, false)
            }
        }
        try replace(rowid: rowid, with: entity, table: table)
        return (rowid, true)
    }

    // MARK: Update and delete

    /// Updates the entity with `entity`'s key: merge (PATCH/MERGE: only the properties given)
    /// or replace (PUT: properties not given become null). `markLocalPending` also sets the
    /// `isLocal` and `hasPendingChanges` flags in the same statement (a local change).
    /// `rowid`: the row, when the caller has looked it up already.
    public func update(_ entity: Entity, in entitySet: String, rowid knownRowid: Int64? = nil, replace: Bool, markLocalPending: Bool = false) throws {
        let table = try table(entitySet)
        guard let rowid = try knownRowid ?? rowid(of: entity, in: table) else {
            throw StoreError(.notFound, "\(entitySet): no entity with the given key")
        }
        if replace {
            try self.replace(rowid: rowid, with: entity, table: table, markLocalPending: markLocalPending)
            return
        }
        let given = Set(entity.properties.map(\.name))
        let columns = table.columns.filter { given.contains($0.path.first ?? "") && !table.keyColumns.contains($0.name) }
        let q = StoreSchema.quote
        var assignments = columns.map { "\(q($0.name)) = ?" }
        var values = try columns.map { column in try columnValue(column, in: entity, table: table) }
        if let etag = entity.control.etag {
            assignments.append("_etag = ?")
            values.append(.text(etag))
        }
        if markLocalPending { assignments.append("_isLocal = 1, _pending = 1") }
        if !assignments.isEmpty {
            try db.execute("UPDATE OR FAIL \(q(table.name)) SET \(assignments.joined(separator: ", ")) WHERE _rowid = ?", values + [.integer(rowid)])
        }
        for collection in table.collections where given.contains(collection.property) {
            try db.execute("DELETE FROM \(q(collection.name)) WHERE owner = ?", [.integer(rowid)])
        }
        try writeChildren(entity, table: table, rowid: rowid, only: given)
    }

    /// The columns a replace writes (every non-key column, the ETag and the type) and the
    /// entity's values for them.
    private func replacedValues(_ entity: Entity, table: StoreSchema.EntityTable) throws -> (names: [String], values: [DatabaseValue]) {
        let columns = table.columns.filter { !table.keyColumns.contains($0.name) }
        let values = try columns.map { column in try columnValue(column, in: entity, table: table) }
            + [entity.control.etag.map { .text($0) } ?? .null, Self.storedType(entity.typeName, in: table)]
        return (columns.map(\.name) + ["_etag", "_type"], values)
    }

    private func replace(rowid: Int64, with entity: Entity, table: StoreSchema.EntityTable, markLocalPending: Bool = false) throws {
        let q = StoreSchema.quote
        var (names, values) = try replacedValues(entity, table: table)
        var assignments = names.map { "\(q($0)) = ?" }
        if markLocalPending { assignments.append("_isLocal = 1, _pending = 1") }
        if entity.control.editLink != nil { assignments.append("_editLink = ?") }
        if let link = entity.control.editLink { values.append(.text(link)) }
        let sql = "UPDATE OR FAIL \(q(table.name)) SET \(assignments.joined(separator: ", ")) WHERE _rowid = ?"
        if let failure = Self.failure({ () throws(DatabaseError) in try db.execute(sql, values + [.integer(rowid)]) }) {
            guard failure.code == .constraint else { throw failure }
            throw StoreError(.conflict, "\(table.entitySet): a replace must give every required property (\(failure.message))")
        }
        for collection in table.collections { try db.execute("DELETE FROM \(q(collection.name)) WHERE owner = ?", [.integer(rowid)]) }
        if let dynamic = table.dynamicTable { try db.execute("DELETE FROM \(q(dynamic)) WHERE owner = ?", [.integer(rowid)]) }
        try writeChildren(entity, table: table, rowid: rowid)
    }

    /// Gives the entity with `oldKey` the key `newKey` in place (its row, and so its links,
    /// stay), and rewrites the foreign keys of the entities that refer to it through a
    /// referential constraint. Returns false when there is no entity with `oldKey`; another
    /// entity that already has `newKey` is a `conflict`.
    @discardableResult
    public func changeKey(in entitySet: String, from oldKey: [String: PrimitiveValue], to newKey: [String: PrimitiveValue]) throws -> Bool {
        let table = try table(entitySet)
        guard let row = try rowid(forKey: oldKey, in: table) else { return false }
        if let other = try rowid(forKey: newKey, in: table) {
            guard other == row else { throw StoreError(.conflict, "\(entitySet): another entity has the key \(newKey) already") }
            return true
        }
        let q = StoreSchema.quote
        let old = try keyValues(oldKey, in: table)
        let new = try keyValues(newKey, in: table)
        try db.execute("UPDATE OR FAIL \(q(table.name)) SET \(table.keyColumns.map { "\(q($0)) = ?" }.joined(separator: ", ")) WHERE _rowid = ?",
                       new + [.integer(row)])
        // Foreign keys that hold this key: (table, its columns, the key columns they hold).
        var references: [(table: String, columns: [String], keyColumns: [String])] = []
        for other in schema.tables {
            for nav in other.navigation {
                guard case .foreignKey(let source, let target) = nav.relation else { continue }
                // Never another entity's own key (a key that contains a foreign key keeps it).
                if nav.targetEntitySet == entitySet, Set(target).isSubset(of: table.keyColumns), Set(source).isDisjoint(with: other.keyColumns) {
                    references.append((other.name, source, target))
                }
                if other.name == table.name, Set(source).isSubset(of: table.keyColumns), let targetTable = schema.table(forEntitySet: nav.targetEntitySet),
                   Set(target).isDisjoint(with: targetTable.keyColumns) {
                    references.append((targetTable.name, target, source))
                }
            }
        }
        var done: Set<String> = []
        for reference in references where done.insert(reference.table + "|" + reference.columns.joined(separator: ",")).inserted {
            let positions = reference.keyColumns.compactMap { table.keyColumns.firstIndex(of: $0) }
            guard positions.count == reference.columns.count else { continue }
            let assignments = reference.columns.map { "\(q($0)) = ?" }.joined(separator: ", ")
            let condition = reference.columns.map { "\(q($0)) = ?" }.joined(separator: " AND ")
            try db.execute("UPDATE OR FAIL \(q(reference.table)) SET \(assignments) WHERE \(condition)", positions.map { new[$0] } + positions.map { old[$0] })
        }
        return true
    }

    /// Deletes the entity with the given key values, following `OnDelete` cascades; returns
    /// whether it existed.
    @discardableResult
    public func delete(from entitySet: String, key: [String: PrimitiveValue]) throws -> Bool {
        let table = try table(entitySet)
        guard let rowid = try rowid(forKey: key, in: table) else { return false }
        try delete(rowid: rowid, table: table, depth: 0)
        return true
    }

    private func delete(rowid: Int64, table: StoreSchema.EntityTable, depth: Int) throws {
        guard depth < 64 else { throw StoreError(.unsupported, "Cascading deletes deeper than 64 levels") }
        for nav in table.navigation where nav.onDelete == .cascade {
            guard let target = schema.table(forEntitySet: nav.targetEntitySet) else { continue }
            for child in try relatedRowids(from: rowid, table: table, nav: nav) {
                try delete(rowid: child, table: target, depth: depth + 1)
            }
        }
        try db.execute("DELETE FROM \(StoreSchema.quote(table.name)) WHERE _rowid = ?", [.integer(rowid)])
    }

    // MARK: Links

    /// Links two entities through a navigation property stored in a link table, or by setting
    /// the foreign key of the dependent side.
    public func link(_ entitySet: String, key: [String: PrimitiveValue], navigation: String, to targetKey: [String: PrimitiveValue]) throws {
        let table = try table(entitySet)
        guard let nav = table.navigation(navigation), let target = schema.table(forEntitySet: nav.targetEntitySet) else {
            throw StoreError(.unknownProperty, "\(entitySet) has no stored navigation property \(navigation)")
        }
        guard let source = try rowid(forKey: key, in: table) else { throw StoreError(.notFound, "\(entitySet): no entity with the given key") }
        guard let targetRow = try rowid(forKey: targetKey, in: target) else { throw StoreError(.notFound, "\(target.entitySet): no entity with the given key") }
        try link(sourceRow: source, table: table, nav: nav, targetRow: targetRow, target: target)
    }

    func link(sourceRow: Int64, table: StoreSchema.EntityTable, nav: StoreSchema.Navigation, targetRow: Int64, target: StoreSchema.EntityTable) throws {
        let q = StoreSchema.quote
        switch nav.relation {
        case .linkTable(let link):
            // No UPSERT in SQLite 3.15: INSERT OR IGNORE keeps an existing link.
            if !nav.isCollection { try db.execute("DELETE FROM \(q(link.name)) WHERE \(link.sourceColumn) = ?", [.integer(sourceRow)]) }
            if link.singleSourcePerTarget { try db.execute("DELETE FROM \(q(link.name)) WHERE \(link.targetColumn) = ?", [.integer(targetRow)]) }
            try db.execute("INSERT OR IGNORE INTO \(q(link.name)) (\(link.sourceColumn), \(link.targetColumn)) VALUES (?, ?)",
                           [.integer(sourceRow), .integer(targetRow)])
        case .foreignKey(let sourceColumns, let targetColumns):
            if sourceColumns == table.keyColumns {
                // The foreign key is on the target: point the target at the source.
                let values = try db.query("SELECT \(sourceColumns.map(q).joined(separator: ", ")) FROM \(q(table.name)) WHERE _rowid = ?", [.integer(sourceRow)])
                guard let row = values.first else { return }
                try db.execute("UPDATE \(q(target.name)) SET \(targetColumns.map { "\(q($0)) = ?" }.joined(separator: ", ")) WHERE _rowid = ?", row + [.integer(targetRow)])
            } else {
                let values = try db.query("SELECT \(targetColumns.map(q).joined(separator: ", ")) FROM \(q(target.name)) WHERE _rowid = ?", [.integer(targetRow)])
                guard let row = values.first else { return }
                try db.execute("UPDATE \(q(table.name)) SET \(sourceColumns.map { "\(q($0)) = ?" }.joined(separator: ", ")) WHERE _rowid = ?", row + [.integer(sourceRow)])
            }
        }
    }

    /// The keys of the entities `key` of `entitySet` links to through `navigation` (for a
    /// single-valued navigation property, none or one).
    public func linkedKeys(_ entitySet: String, key: [String: PrimitiveValue], navigation: String) throws -> [[String: PrimitiveValue]] {
        let table = try table(entitySet)
        guard let nav = table.navigation(navigation), let target = schema.table(forEntitySet: nav.targetEntitySet) else {
            throw StoreError(.unknownProperty, "\(entitySet) has no stored navigation property \(navigation)")
        }
        guard let source = try rowid(forKey: key, in: table) else { return [] }
        return try relatedRowids(from: source, table: table, nav: nav).compactMap { try keyValues(ofRow: $0, in: target) }
    }

    /// Whether a stored navigation property of an entity set is a collection.
    public func isCollection(_ entitySet: String, navigation: String) throws -> Bool {
        guard let nav = try table(entitySet).navigation(navigation) else {
            throw StoreError(.unknownProperty, "\(entitySet) has no stored navigation property \(navigation)")
        }
        return nav.isCollection
    }

    /// Removes a link (for a foreign key, sets the dependent's columns to null).
    public func unlink(_ entitySet: String, key: [String: PrimitiveValue], navigation: String, from targetKey: [String: PrimitiveValue]) throws {
        let table = try table(entitySet)
        guard let nav = table.navigation(navigation), let target = schema.table(forEntitySet: nav.targetEntitySet) else {
            throw StoreError(.unknownProperty, "\(entitySet) has no stored navigation property \(navigation)")
        }
        guard let source = try rowid(forKey: key, in: table), let targetRow = try rowid(forKey: targetKey, in: target) else { return }
        let q = StoreSchema.quote
        switch nav.relation {
        case .linkTable(let link):
            try db.execute("DELETE FROM \(q(link.name)) WHERE \(link.sourceColumn) = ? AND \(link.targetColumn) = ?", [.integer(source), .integer(targetRow)])
        case .foreignKey(let sourceColumns, let targetColumns):
            let (owner, row, columns) = sourceColumns == table.keyColumns ? (target, targetRow, targetColumns) : (table, source, sourceColumns)
            try db.execute("UPDATE \(q(owner.name)) SET \(columns.map { "\(q($0)) = NULL" }.joined(separator: ", ")) WHERE _rowid = ?", [.integer(row)])
        }
    }

    // MARK: Helpers

    /// Per-transaction cache of generated SQL; only used on the writer's queue.
    final class InsertStatementCache {
        var sql: [String: String] = [:]
        /// The download generation rows marked upserted get (read once per transaction).
        var generation: Int64?
    }

    /// The error `body` throws, or nil.
    static func failure(_ body: () throws(DatabaseError) -> Void) -> DatabaseError? {
        do {
            try body()
            return nil
        } catch {
            return error
        }
    }

    func relatedRowids(from rowid: Int64, table: StoreSchema.EntityTable, nav: StoreSchema.Navigation) throws -> [Int64] {
        guard let target = schema.table(forEntitySet: nav.targetEntitySet) else { return [] }
        let q = StoreSchema.quote
        let rows: [[DatabaseValue]]
        switch nav.relation {
        case .linkTable(let link):
            rows = try db.query("SELECT \(link.targetColumn) FROM \(q(link.name)) WHERE \(link.sourceColumn) = ?", [.integer(rowid)])
        case .foreignKey(let sourceColumns, let targetColumns):
            let condition = zip(sourceColumns, targetColumns).map { "t.\(q($1)) = s.\(q($0))" }.joined(separator: " AND ")
            rows = try db.query("SELECT t._rowid FROM \(q(target.name)) t JOIN \(q(table.name)) s ON \(condition) WHERE s._rowid = ?", [.integer(rowid)])
        }
        return rows.compactMap { if case .integer(let id) = $0.first { return id }; return nil }
    }

    func rowid(of entity: Entity, in table: StoreSchema.EntityTable) throws -> Int64? {
        var key: [String: PrimitiveValue] = [:]
        for name in table.keyColumns {
            guard case .primitive(let value)? = entity[name] else { throw StoreError(.unknownProperty, "\(table.entitySet): the entity has no value for key property \(name)") }
            key[name] = value
        }
        return try rowid(forKey: key, in: table)
    }

    func rowid(forKey key: [String: PrimitiveValue], in table: StoreSchema.EntityTable) throws -> Int64? {
        let rows = try rows(forKey: key, in: table, columns: "_rowid")
        if case .integer(let id)? = rows.first?.first { return id }
        return nil
    }

    /// `columns` of the row with the given key values (none or one row).
    func rows(forKey key: [String: PrimitiveValue], in table: StoreSchema.EntityTable, columns: String) throws -> [[DatabaseValue]] {
        let q = StoreSchema.quote
        let condition = table.keyColumns.map { "\(q($0)) = ?" }.joined(separator: " AND ")
        return try db.query("SELECT \(columns) FROM \(q(table.name)) WHERE \(condition)", try keyValues(key, in: table))
    }

    /// The stored values of a key, in the order of the table's key columns.
    func keyValues(_ key: [String: PrimitiveValue], in table: StoreSchema.EntityTable) throws -> [DatabaseValue] {
        try table.keyColumns.map { name in
            guard let value = key[name], let column = table.column([name]) else {
                throw StoreError(.unknownProperty, "\(table.entitySet): key property \(name) is missing")
            }
            return try encode(.primitive(value), for: column)
        }
    }

    /// The stored value of one column for an entity.
    func columnValue(_ column: StoreSchema.Column, in entity: Entity, table: StoreSchema.EntityTable) throws -> DatabaseValue {
        var position = 0
        return try columnValue(column, in: entity, position: &position)
    }

    /// The stored value of one column; `position` is where the property is looked for first
    /// (and is moved past it when found there).
    func columnValue(_ column: StoreSchema.Column, in entity: Entity, position: inout Int) throws -> DatabaseValue {
        guard let name = column.path.first else { return .null }
        var value: Value?
        let properties = entity.properties
        if position < properties.count, properties[position].name == name {
            value = properties[position].value
            if column.path.count == 1 { position += 1 }
        } else if let index = properties.firstIndex(where: { $0.name == name }) {
            value = properties[index].value
            position = column.path.count == 1 ? index + 1 : index
        }
        for part in column.path.dropFirst() {
            guard case .complex(let structured)? = value else {
                value = nil
                break
            }
            value = structured[part]
        }
        return try encode(value ?? .null, for: column)
    }

    func encode(_ value: Value, for column: StoreSchema.Column) throws -> DatabaseValue {
        switch (column.kind, value) {
        case (_, .null): return .null
        case (.complexPresence, .complex): return .integer(1)
        case (.complexPresence, _): return .null
        case (.primitive(let type), .primitive(let p)) where p.type == type:
            return ValueStorage.encode(p)
        case (.primitive(let type), _):
            guard case .primitive(let converted)? = Literal.convert(value, to: type) else {
                throw StoreError(.unsupported, "Property \(column.name): \(value) is not a \(type.rawValue)")
            }
            return ValueStorage.encode(converted)
        case (.enumeration(let typeName), .enumeration(let e)):
            return .integer(try enumNumber(e.members, typeName, column))
        case (.enumeration(let typeName), .primitive(.string(let text))):
            return .integer(try enumNumber(text.split(separator: ",").map(String.init), typeName, column))
        case (.enumeration(let typeName), .primitive(let p)):
            guard case .primitive(.int64(let number))? = Literal.convert(.primitive(p), to: .int64) else {
                throw StoreError(.unsupported, "Property \(column.name): \(p) is not a member of \(typeName)")
            }
            return .integer(number)
        default:
            throw StoreError(.unsupported, "Property \(column.name): cannot store \(value)")
        }
    }

    func enumNumber(_ members: [String], _ typeName: String, _ column: StoreSchema.Column) throws -> Int64 {
        do {
            return try schema.model.enumNumber(members, typeName)
        } catch {
            throw StoreError(error.code, "Property \(column.name): \(error.message)")
        }
    }

    /// Collection rows and dynamic properties of an entity.
    private func writeChildren(_ entity: Entity, table: StoreSchema.EntityTable, rowid: Int64, only: Set<String>? = nil) throws {
        let q = StoreSchema.quote
        for collection in table.collections where only?.contains(collection.property) ?? true {
            guard case .collection(let items)? = entity[collection.property] else { continue }
            let columns = ["owner", "ordinal"] + collection.columns.map(\.name)
            let sql = "INSERT INTO \(q(collection.name)) (\(columns.map(q).joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: columns.count).joined(separator: ", ")))"
            for (ordinal, item) in items.enumerated() {
                var values: [DatabaseValue] = [.integer(rowid), .integer(Int64(ordinal))]
                for column in collection.columns {
                    if column.path.isEmpty {
                        values.append(try encode(item, for: column))
                    } else {
                        var value: Value? = item
                        for part in column.path {
                            guard case .complex(let structured)? = value else {
                                value = nil
                                break
                            }
                            value = structured[part]
                        }
                        values.append(try encode(value ?? .null, for: column))
                    }
                }
                try db.execute(sql, values)
            }
        }
        if let dynamic = table.dynamicTable {
            let declared = Set(schema.model.allProperties(ofStructuredType: table.entityType).map(\.name))
            for property in entity.properties where !declared.contains(property.name) && !table.columns.contains(where: { $0.path.first == property.name }) {
                guard only?.contains(property.name) ?? true else { continue }
                guard case .primitive(let p) = property.value else {
                    if property.value == .null { continue }
                    throw StoreError(.unsupported, "Dynamic property \(property.name): only primitive dynamic properties are stored")
                }
                try db.execute("INSERT OR REPLACE INTO \(q(dynamic)) (owner, name, type, value) VALUES (?, ?, ?, ?)",
                               [.integer(rowid), .text(property.name), .text(p.type.rawValue), ValueStorage.encode(p)])
            }
        }
    }

    /// Expanded navigation values in the payload are inserted and linked (deep insert).
    private func insertInline(_ entity: Entity, table: StoreSchema.EntityTable, rowid parentRow: Int64, bookkeeping: Bookkeeping) throws {
        for value in entity.navigation {
            guard let inline = value.inline, let nav = table.navigation(value.name), let target = schema.table(forEntitySet: nav.targetEntitySet) else { continue }
            let children: [Entity]
            switch inline {
            case .entity(let child): children = child.map { [$0] } ?? []
            case .collection(let collection): children = collection.entities
            }
            // A nested entity is created as if posted to the parent's navigation property: it
            // takes the parent's side of a foreign key (the items of a new order its OrderID).
            let implied = schema.propertiesImplied(through: nav, from: table) { name in
                if case .primitive(let value)? = entity[name] { return value }
                return nil
            }
            for var child in children {
                for (name, value) in implied where child[name] == nil || child[name] == .null { child[name] = .primitive(value) }
                var childRow = try rowid(of: child, in: target)
                if childRow == nil {
                    var nested = bookkeeping
                    nested.localID = nil
                    childRow = try insert(child, into: target.entitySet, bookkeeping: nested)
                }
                if let childRow { try link(sourceRow: parentRow, table: table, nav: nav, targetRow: childRow, target: target) }
            }
        }
    }
}

extension StoreWriter {
    /// The rowid of the entity with the given key, if stored.
    public func rowid(in entitySet: String, key: [String: PrimitiveValue]) throws -> Int64? {
        try rowid(forKey: key, in: try table(entitySet))
    }

    /// Sets local-state flags of one entity (nil leaves a flag as it is); returns whether it exists.
    @discardableResult
    public func setState(in entitySet: String, key: [String: PrimitiveValue], isLocal: Bool? = nil, pending: Bool? = nil, inError: Bool? = nil,
                         upserted: Bool? = nil, etag: String?? = nil, localID: String?? = nil) throws -> Bool {
        let table = try table(entitySet)
        guard let rowid = try rowid(forKey: key, in: table) else { return false }
        try setState(table: table, rowid: rowid, isLocal: isLocal, pending: pending, inError: inError, upserted: upserted, etag: etag, localID: localID)
        return true
    }

    /// Sets local-state flags of the row `rowid` of `entitySet`.
    public func setState(in entitySet: String, rowid: Int64, isLocal: Bool? = nil, pending: Bool? = nil, inError: Bool? = nil,
                         upserted: Bool? = nil) throws {
        try setState(table: try table(entitySet), rowid: rowid, isLocal: isLocal, pending: pending, inError: inError, upserted: upserted, etag: nil, localID: nil)
    }

    private func setState(table: StoreSchema.EntityTable, rowid: Int64, isLocal: Bool?, pending: Bool?, inError: Bool?, upserted: Bool?,
                          etag: String??, localID: String??) throws {
        var assignments: [String] = []
        var values: [DatabaseValue] = []
        for (column, flag) in [("_isLocal", isLocal), ("_pending", pending), ("_error", inError)] {
            if let flag {
                assignments.append("\(column) = ?")
                values.append(.integer(flag ? 1 : 0))
            }
        }
        if let upserted {
            assignments.append("_upserted = ?")
            values.append(.integer(upserted ? try downloadGeneration() : 0))
        }
        if let etag {
            assignments.append("_etag = ?")
            values.append(etag.map { .text($0) } ?? .null)
        }
        if let localID {
            assignments.append("_localID = ?")
            values.append(localID.map { .text($0) } ?? .null)
        }
        guard !assignments.isEmpty else { return }
        try db.execute("UPDATE OR FAIL \(StoreSchema.quote(table.name)) SET \(assignments.joined(separator: ", ")) WHERE _rowid = ?", values + [.integer(rowid)])
    }

    /// The download generation: a row marked upserted holds the generation of the download
    /// that wrote it, and `upsertedLastDownload()` selects the rows of the current one. Stores
    /// that never started one are at generation 1 (their rows hold 0, or 1 from the time the
    /// flag was cleared on every row before each download).
    public func downloadGeneration() throws -> Int64 {
        if let known = insertStatements.generation { return known }
        var generation: Int64 = 1
        if case .integer(let stored)? = try db.query("SELECT value FROM store_meta WHERE key = 'upserted'").first?.first {
            generation = stored
        }
        insertStatements.generation = generation
        return generation
    }

    /// Starts a new download generation (see ``downloadGeneration()``): the rows marked upserted
    /// before it no longer count as upserted by the last download, without touching any of them.
    @discardableResult
    public func beginDownloadGeneration() throws -> Int64 {
        let next = try downloadGeneration() + 1
        try db.execute("INSERT OR REPLACE INTO store_meta (key, value) VALUES ('upserted', ?)", [.integer(next)])
        insertStatements.generation = next
        return next
    }

    /// The entities a delete of `key` in `entitySet` would remove through `OnDelete` cascades
    /// (not the entity itself), nearest first.
    public func cascade(from entitySet: String, key: [String: PrimitiveValue]) throws -> [(entitySet: String, key: [String: PrimitiveValue])] {
        let table = try table(entitySet)
        guard let rowid = try rowid(forKey: key, in: table) else { return [] }
        var result: [(entitySet: String, key: [String: PrimitiveValue])] = []
        var visited: Set<String> = ["\(table.name)#\(rowid)"]
        var work: [(Int64, StoreSchema.EntityTable, Int)] = [(rowid, table, 0)]
        while !work.isEmpty {
            let (row, current, depth) = work.removeFirst()
            guard depth < 64 else { throw StoreError(.unsupported, "Cascading deletes deeper than 64 levels") }
            for nav in current.navigation where nav.onDelete == .cascade {
                guard let target = schema.table(forEntitySet: nav.targetEntitySet) else { continue }
                for child in try relatedRowids(from: row, table: current, nav: nav) where visited.insert("\(target.name)#\(child)").inserted {
                    if let childKey = try keyValues(ofRow: child, in: target) { result.append((target.entitySet, childKey)) }
                    work.append((child, target, depth + 1))
                }
            }
        }
        return result
    }

    /// The key values of the row `rowid` of `table`.
    func keyValues(ofRow rowid: Int64, in table: StoreSchema.EntityTable) throws -> [String: PrimitiveValue]? {
        let q = StoreSchema.quote
        let columns = table.keyColumns
        guard let row = try db.query("SELECT \(columns.map(q).joined(separator: ", ")) FROM \(q(table.name)) WHERE _rowid = ?", [.integer(rowid)]).first else { return nil }
        var key: [String: PrimitiveValue] = [:]
        for (index, name) in columns.enumerated() {
            guard let column = table.column([name]), case .primitive(let type) = column.kind,
                  let value = try ValueStorage.decode(row[index], as: type) else { return nil }
            key[name] = value
        }
        return key
    }

    /// Key values of every stored entity of `entitySet` with its pending flag.
    public func keys(in entitySet: String) throws -> [(key: [String: PrimitiveValue], pending: Bool)] {
        let table = try table(entitySet)
        let q = StoreSchema.quote
        let columns = table.keyColumns
        let rows = try db.query("SELECT _pending, \(columns.map(q).joined(separator: ", ")) FROM \(q(table.name))")
        var result: [(key: [String: PrimitiveValue], pending: Bool)] = []
        for row in rows {
            var key: [String: PrimitiveValue] = [:]
            for (index, name) in columns.enumerated() {
                guard let column = table.column([name]), case .primitive(let type) = column.kind,
                      let value = try ValueStorage.decode(row[index + 1], as: type) else { continue }
                key[name] = value
            }
            result.append((key, row[0] == .integer(1)))
        }
        return result
    }
}
