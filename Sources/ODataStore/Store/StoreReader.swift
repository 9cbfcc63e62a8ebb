public import ODataCore

/// Reads entities from one consistent snapshot of a ``Store``. Obtain one from `Store.read`.
public struct StoreReader {
    let db: Connection
    /// The schema the store follows.
    public let schema: StoreSchema
    /// The connection of this read, for tables kept beside the entity tables. It must not
    /// escape the `read` closure.
    public var connection: Connection { db }

    /// Bookkeeping of a stored entity.
    public struct Bookkeeping: Sendable, Hashable {
        public var rowid: Int64
        public var isLocal: Bool
        public var pending: Bool
        public var inError: Bool
        public var localID: String?

        /// The row holds local changes a download must not overwrite: pending ones, or failed
        /// ones still in the ErrorArchive (they stay until the app resolves them).
        public var keepsLocalChanges: Bool { pending || inError }
    }

    /// The entity with the given key, or nil.
    public func entity(in entitySet: String, key: [String: PrimitiveValue]) throws -> Entity? {
        guard let table = schema.table(forEntitySet: entitySet) else { throw StoreError(.unknownEntitySet, "No entity set \(entitySet)") }
        guard let rowid = try StoreWriter(db: db, schema: schema).rowid(forKey: key, in: table) else { return nil }
        return try entity(in: entitySet, rowid: rowid)
    }

    /// The properties a new entity created through `navigation` of the entity at `key` takes
    /// from that parent, as SAP Gateway and the OData specification fill them: its side of a
    /// foreign-key relation (`POST SalesOrders('SO2')/Items` gives each new item
    /// `OrderID = 'SO2'`). Empty for a relation kept in a link table, or when the parent is not
    /// stored.
    public func propertiesImplied(creatingThrough navigation: String, of entitySet: String,
                                  key: [String: PrimitiveValue]) throws -> [String: PrimitiveValue] {
        guard let table = schema.table(forEntitySet: entitySet), let nav = table.navigation(navigation) else { return [:] }
        var parent: Entity??
        return try schema.propertiesImplied(through: nav, from: table) { name in
            if let value = key[name] { return value }
            if parent == nil { parent = .some(try entity(in: entitySet, key: key)) }
            if case .primitive(let value)? = parent??[name] { return value }
            return nil
        }
    }

    /// The entity in the row `rowid` of an entity set (from ``bookkeeping(in:key:)``), or nil.
    public func entity(in entitySet: String, rowid: Int64) throws -> Entity? {
        guard let table = schema.table(forEntitySet: entitySet) else { throw StoreError(.unknownEntitySet, "No entity set \(entitySet)") }
        return try entities(table, rowids: [rowid]).first?.1
    }

    /// Every entity of a set, in key order.
    public func all(in entitySet: String) throws -> [Entity] {
        guard let table = schema.table(forEntitySet: entitySet) else { throw StoreError(.unknownEntitySet, "No entity set \(entitySet)") }
        let q = StoreSchema.quote
        let order = table.keyColumns.map(q).joined(separator: ", ")
        let rows = try db.query("SELECT _rowid FROM \(q(table.name)) ORDER BY \(order)")
        let ids = rows.compactMap { if case .integer(let id) = $0.first { return id }; return nil }
        return try entities(table, rowids: ids).map(\.1)
    }

    /// The row and ETag of the entity with the given key, or nil when there is none: reads two
    /// columns, not the entity (for checks that need only whether it exists and its ETag).
    public func rowAndETag(in entitySet: String, key: [String: PrimitiveValue]) throws
        -> (rowid: Int64, etag: String?)?
    {
        guard let table = schema.table(forEntitySet: entitySet) else {
            throw StoreError(.unknownEntitySet, "No entity set \(entitySet)")
        }
        let rows = try StoreWriter(db: db, schema: schema).rows(forKey: key, in: table, columns: "_rowid, _etag")
        guard let row = rows.first, case .integer(let rowid) = row[0] else { return nil }
        if case .text(let etag) = row[1] { return (rowid, etag) }
        return (rowid, nil)
    }

    /// The bookkeeping of the entity with the given key.
    public func bookkeeping(in entitySet: String, key: [String: PrimitiveValue]) throws -> Bookkeeping? {
        guard let table = schema.table(forEntitySet: entitySet) else { throw StoreError(.unknownEntitySet, "No entity set \(entitySet)") }
        let rows = try StoreWriter(db: db, schema: schema).rows(forKey: key, in: table, columns: "_rowid, _isLocal, _pending, _error, _localID")
        guard let row = rows.first, case .integer(let rowid) = row[0] else { return nil }
        func flag(_ value: DatabaseValue) -> Bool { value == .integer(1) }
        var localID: String?
        if case .text(let id) = row[4] { localID = id }
        return Bookkeeping(rowid: rowid, isLocal: flag(row[1]), pending: flag(row[2]), inError: flag(row[3]), localID: localID)
    }

    /// Loads entities by rowid, in the given order, with their collections and dynamic
    /// properties: one query per table, not one per entity.
    func entities(_ table: StoreSchema.EntityTable, rowids: [Int64]) throws -> [(Int64, Entity)] {
        guard !rowids.isEmpty else { return [] }
        let q = StoreSchema.quote
        var byRow: [Int64: Entity] = [:]
        for chunk in stride(from: 0, to: rowids.count, by: 500).map({ Array(rowids[$0..<min($0 + 500, rowids.count)]) }) {
            let placeholders = Array(repeating: "?", count: chunk.count).joined(separator: ", ")
            let columns = ["_rowid", "_type", "_etag", "_editLink"] + table.columns.map(\.name)
            let rows = try db.query("SELECT \(columns.map(q).joined(separator: ", ")) FROM \(q(table.name)) WHERE _rowid IN (\(placeholders))",
                                    chunk.map { .integer($0) })
            for row in rows {
                guard case .integer(let rowid) = row[0] else { continue }
                byRow[rowid] = try entity(from: row, table: table)
            }
            for collection in table.collections {
                let columnList = (["owner", "ordinal"] + collection.columns.map(\.name)).map(q).joined(separator: ", ")
                let items = try db.query("SELECT \(columnList) FROM \(q(collection.name)) WHERE owner IN (\(placeholders)) ORDER BY owner, ordinal",
                                         chunk.map { .integer($0) })
                var grouped: [Int64: [Value]] = [:]
                for item in items {
                    guard case .integer(let owner) = item[0] else { continue }
                    if collection.columns.count == 1, collection.columns[0].path.isEmpty {
                        grouped[owner, default: []].append(try decode(item[2], collection.columns[0]))
                    } else {
                        grouped[owner, default: []].append(try structured(Array(item[2...]), collection.columns, prefix: []))
                    }
                }
                for id in chunk where byRow[id] != nil {
                    byRow[id]?[collection.property] = .collection(grouped[id] ?? [])
                }
            }
            if let dynamic = table.dynamicTable {
                for row in try db.query("SELECT owner, name, type, value FROM \(q(dynamic)) WHERE owner IN (\(placeholders)) ORDER BY owner, name", chunk.map { .integer($0) }) {
                    guard case .integer(let owner) = row[0], case .text(let name) = row[1], case .text(let typeName) = row[2],
                          let type = PrimitiveType(qualifiedName: typeName), let value = try ValueStorage.decode(row[3], as: type) else { continue }
                    byRow[owner]?[name] = .primitive(value)
                }
            }
        }
        return rowids.compactMap { id in byRow[id].map { (id, $0) } }
    }

    func entity(from row: [DatabaseValue], table: StoreSchema.EntityTable) throws -> Entity {
        var entity = Entity()
        // Only a derived type is named; the set's own type is implied.
        if case .text(let type) = row[1], type != table.entityType { entity.typeName = type }
        if case .text(let etag) = row[2] { entity.control.etag = etag }
        if case .text(let link) = row[3] { entity.control.editLink = link }
        let values = Array(row[4...])
        let topLevel = structuredProperties(values, table.columns)
        entity.properties = topLevel
        return entity
    }

    /// Properties from flattened columns (top level: paths of length 1 and their sub-columns).
    private func structuredProperties(_ values: [DatabaseValue], _ columns: [StoreSchema.Column]) -> [NamedValue] {
        (try? structuredValues(values, columns, prefix: [])) ?? []
    }

    private func structuredValues(_ values: [DatabaseValue], _ columns: [StoreSchema.Column], prefix: [String]) throws -> [NamedValue] {
        var result: [NamedValue] = []
        var index = 0
        while index < columns.count {
            let column = columns[index]
            guard column.path.count == prefix.count + 1 else {
                index += 1
                continue
            }
            let name = column.path[prefix.count]
            switch column.kind {
            case .complexPresence:
                // The sub-columns follow the presence column.
                var end = index + 1
                while end < columns.count, columns[end].path.count > column.path.count, Array(columns[end].path.prefix(column.path.count)) == column.path { end += 1 }
                if values[index] == .null {
                    result.append(NamedValue(name: name, value: .null))
                } else {
                    let inner = try structuredValues(Array(values[(index + 1)..<end]), Array(columns[(index + 1)..<end]), prefix: column.path)
                    if case .complexPresence(let typeName) = column.kind {
                        result.append(NamedValue(name: name, value: .complex(StructuredValue(typeName: typeName, properties: inner))))
                    }
                }
                index = end
            default:
                result.append(NamedValue(name: name, value: try decode(values[index], column)))
                index += 1
            }
        }
        return result
    }

    private func structured(_ values: [DatabaseValue], _ columns: [StoreSchema.Column], prefix: [String]) throws -> Value {
        let typeName: String? = nil
        return .complex(StructuredValue(typeName: typeName, properties: try structuredValues(values, columns, prefix: prefix)))
    }

    func decode(_ stored: DatabaseValue, _ column: StoreSchema.Column) throws -> Value {
        switch column.kind {
        case .primitive(let type):
            return try ValueStorage.decode(stored, as: type).map { .primitive($0) } ?? .null
        case .enumeration(let typeName):
            guard case .integer(let number) = stored else { return .null }
            guard let type = schema.model.enumType(typeName) else { return .enumeration(EnumValue(typeName: typeName, members: [String(number)])) }
            if let exact = type.members.first(where: { $0.value == number }) {
                return .enumeration(EnumValue(typeName: typeName, members: [exact.name]))
            }
            if type.isFlags {
                let names = type.members.filter { $0.value != 0 && number & $0.value == $0.value }.map(\.name)
                if !names.isEmpty { return .enumeration(EnumValue(typeName: typeName, members: names)) }
            }
            return .enumeration(EnumValue(typeName: typeName, members: [String(number)]))
        case .complexPresence:
            return stored == .null ? .null : .complex(StructuredValue())
        }
    }
}
