public import ODataCore

/// The table layout of a store, derived from a model.
///
/// - one table per entity set (`"es_Set"`) with a rowid (`_rowid`, the stable local identity),
///   bookkeeping columns, the key and every structural property; complex properties are
///   flattened into `Prop/Sub` columns plus a `Prop` presence column;
/// - a child table per collection-valued property (`"es_Set/Prop"`: owner, ordinal, value columns);
/// - navigation: joins through foreign-key columns where a referential constraint exists (on the
///   property or its partner), otherwise a link table `"lk_Set/Nav"` (source and target rowids;
///   a partner without a constraint reads the same table from its target side);
/// - a table of dynamic properties for open types (`"es_Set/$dynamic"`);
/// - `store_meta` with the schema version and the model.
public struct StoreSchema: Sendable {
    /// Version of this layout; stored in `PRAGMA user_version` so later releases can migrate.
    public static let version = 1

    /// Bookkeeping columns every entity table has, besides `_rowid`.
    public static let bookkeepingColumns: [(name: String, type: String)] = [
        ("_type", "TEXT"), ("_etag", "TEXT"), ("_editLink", "TEXT"), ("_localID", "TEXT"),
        ("_isLocal", "INTEGER NOT NULL DEFAULT 0"), ("_pending", "INTEGER NOT NULL DEFAULT 0"),
        ("_error", "INTEGER NOT NULL DEFAULT 0"), ("_upserted", "INTEGER NOT NULL DEFAULT 0"),
    ]

    /// What a column stores.
    public enum ColumnKind: Sendable, Hashable {
        case primitive(PrimitiveType)
        /// An enum, stored as its integer value.
        case enumeration(String)
        /// 1 when a complex value is present, NULL when it is null.
        case complexPresence(String)
    }

    /// A column of an entity or collection table.
    public struct Column: Sendable, Hashable {
        /// SQL name (unquoted), the property path joined with `/`.
        public var name: String
        public var path: [String]
        public var kind: ColumnKind
        public var nullable: Bool

        var sqlType: String {
            switch kind {
            case .primitive(let p): ValueStorage.columnType(p)
            case .enumeration, .complexPresence: "INTEGER"
            }
        }
    }

    /// A collection-valued property's child table.
    public struct CollectionTable: Sendable, Hashable {
        public var name: String
        public var property: String
        /// Value columns: `value` for primitives, flattened columns for complex elements.
        public var columns: [Column]
    }

    /// How a navigation property is joined.
    public enum Relation: Sendable, Hashable {
        /// Columns of the source table equal columns of the target table.
        case foreignKey(sourceColumns: [String], targetColumns: [String])
        /// A link table of `source` and `target` rowids.
        case linkTable(LinkTable)
    }

    /// A link table as one navigation property uses it.
    public struct LinkTable: Sendable, Hashable {
        /// The table's name, `lk_Set/Nav` of the navigation property that keeps it.
        public var name: String
        /// The partner navigation property keeps the table (the same relationship seen from its
        /// other end, without a referential constraint): this one reads it from the target side,
        /// so a link made through either end shows through both.
        public var reversed: Bool
        /// The partner is single-valued: a target links to one source at most, so a new link
        /// of a target replaces its old one (an order moved to another customer).
        public var singleSourcePerTarget = false
        /// The column of this navigation's source rowids.
        public var sourceColumn: String { reversed ? "target" : "source" }
        /// The column of this navigation's target rowids.
        public var targetColumn: String { reversed ? "source" : "target" }
    }

    /// A navigation property of an entity set.
    public struct Navigation: Sendable, Hashable {
        public var name: String
        public var targetEntitySet: String
        public var isCollection: Bool
        public var relation: Relation
        public var onDelete: OnDeleteAction?
    }

    /// The table of one entity set.
    public struct EntityTable: Sendable, Hashable {
        public var name: String
        public var entitySet: String
        public var entityType: String
        public var keyColumns: [String]
        public var columns: [Column]
        public var collections: [CollectionTable]
        public var navigation: [Navigation]
        public var isOpen: Bool

        /// The INSERT statement for a row: bookkeeping columns, then `columns` in order.
        public var insertSQL: String {
            let names = StoreWriter.insertBookkeeping + columns.map(\.name)
            return "INSERT INTO \(StoreSchema.quote(name)) (\(names.map(StoreSchema.quote).joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: names.count).joined(separator: ", ")))"
        }

        /// The table of dynamic properties, for open types.
        public var dynamicTable: String? { isOpen ? name + "/$dynamic" : nil }

        public func column(_ path: [String]) -> Column? { columns.first { $0.path == path } }
        public func navigation(_ name: String) -> Navigation? { navigation.first { $0.name == name } }
    }

    public let model: Model
    public var tables: [EntityTable]
    /// Extra indexes: table name → column lists.
    public var extraIndexes: [(table: String, columns: [String])]

    /// The layout for every entity set of `model`, with optional single-property indexes
    /// (entity set name → property paths, each as its segments: `["Address", "City"]`).
    public init(model: Model, indexes: [String: [[String]]]) throws(StoreError) {
        try self.init(model: model, indexes: StoreIndex.list(indexes))
    }

    /// The layout for every entity set of `model`, with the indexes an application asked for.
    public init(model: Model, indexes: [StoreIndex] = []) throws(StoreError) {
        self.model = model
        self.tables = []
        self.extraIndexes = []
        for container in model.entityContainers {
            for set in container.entitySets {
                tables.append(try Self.table(for: set, model))
            }
        }
        for index in tables.indices {
            tables[index].navigation = try navigation(of: tables[index])
        }
        for index in indexes {
            guard let table = table(forEntitySet: index.entitySet) else {
                throw StoreError(.unknownEntitySet, "No entity set \(index.entitySet) to index")
            }
            guard !index.properties.isEmpty else { throw StoreError(.unknownProperty, "An index of \(index.entitySet) names no property") }
            for property in index.properties where !table.columns.contains(where: { $0.name == property }) {
                throw StoreError(.unknownProperty, "\(index.entitySet) has no primitive property \(property) to index")
            }
            let entry = (table: table.name, columns: index.properties)
            if !extraIndexes.contains(where: { $0 == entry }) { extraIndexes.append(entry) }
        }
    }

    /// The table of an entity set.
    public func table(forEntitySet name: String) -> EntityTable? { tables.first { $0.entitySet == name } }

    /// Whether the rows of `entitySet` can be stored and merged from a ``FlatCollection``:
    /// every column is a single property and there are no collection or dynamic properties.
    public func acceptsRows(ofEntitySet entitySet: String) -> Bool {
        guard let table = table(forEntitySet: entitySet) else { return false }
        return table.collections.isEmpty && table.dynamicTable == nil && table.columns.allSatisfy { $0.path.count == 1 }
    }

    /// The name of an index an application asked for: its table and columns, so that the same
    /// declaration always names the same index.
    static func extraIndexName(table: String, columns: [String]) -> String {
        table + "/$index/" + columns.joined(separator: ",")
    }

    /// Whether `name` is the name of an index an application asked for (also the numbered
    /// names stores made before issue 22 gave them).
    static func isExtraIndexName(_ name: String) -> Bool { name.contains("/$index") }

    // MARK: Building

    static func table(for set: EntitySet, _ model: Model) throws(StoreError) -> EntityTable {
        guard let type = model.entityType(set.entityType) else {
            throw StoreError(.unknownEntitySet, "Entity set \(set.name) has type \(set.entityType), which the model does not define")
        }
        let key = model.key(of: type)
        guard !key.isEmpty else { throw StoreError(.unsupported, "Entity set \(set.name): type \(type.name) has no key") }
        // The set may hold derived types: their properties get columns too.
        let derived = model.schemas.flatMap(\.entityTypes).filter { $0.qualifiedName != type.qualifiedName && model.isType($0.qualifiedName, derivedFrom: type.qualifiedName) }
        var columns: [Column] = []
        var collections: [CollectionTable] = []
        let tableName = "es_" + set.name
        for owner in [type] + derived {
            let properties = owner.qualifiedName == type.qualifiedName ? model.allProperties(ofStructuredType: owner.qualifiedName) : owner.properties
            for property in properties where !columns.contains(where: { $0.path.first == property.name }) {
                if property.type.isCollection {
                    collections.append(CollectionTable(name: tableName + "/" + property.name, property: property.name,
                                                       columns: try flatten(property.type.name, path: [], nullable: true, model, element: true)))
                } else {
                    let isKey = key.contains { $0.name == property.name }
                    columns += try flatten(property.type.name, path: [property.name], nullable: property.nullable && !isKey, model, element: false)
                }
            }
        }
        let keyColumns = key.map { $0.name }
        for keyColumn in keyColumns where !columns.contains(where: { $0.name == keyColumn }) {
            throw StoreError(.unsupported, "Key property \(keyColumn) of \(type.name) is not a stored primitive property")
        }
        let isOpen = ([type] + derived).contains { $0.isOpenType } || model.entityTypeChain(type).contains { $0.isOpenType }
        return EntityTable(name: tableName, entitySet: set.name, entityType: type.qualifiedName, keyColumns: keyColumns,
                           columns: columns, collections: collections, navigation: [], isOpen: isOpen)
    }

    /// Columns for a value of `typeName` at `path`: one for a primitive or enum, presence plus
    /// sub-columns for a complex type (nested complex types flatten further).
    static func flatten(_ typeName: String, path: [String], nullable: Bool, _ model: Model, element: Bool, depth: Int = 0) throws(StoreError) -> [Column] {
        guard depth < 16 else { throw StoreError(.unsupported, "Complex types nested deeper than 16 levels at \(path.joined(separator: "/"))") }
        let name = element && path.isEmpty ? "value" : path.joined(separator: "/")
        switch model.typeKind(typeName) {
        case .primitive(let p)?:
            return [Column(name: name, path: path, kind: .primitive(p), nullable: nullable)]
        case .typeDefinition(let underlying)?:
            guard let p = PrimitiveType(qualifiedName: underlying) else { throw StoreError(.unsupported, "Type definition \(typeName) is not primitive") }
            return [Column(name: name, path: path, kind: .primitive(p), nullable: nullable)]
        case .enumeration?:
            return [Column(name: name, path: path, kind: .enumeration(typeName), nullable: nullable)]
        case .complex?:
            var columns: [Column] = path.isEmpty ? [] : [Column(name: name, path: path, kind: .complexPresence(typeName), nullable: true)]
            for property in model.allProperties(ofStructuredType: typeName) where !property.type.isCollection {
                columns += try flatten(property.type.name, path: path + [property.name], nullable: true, model, element: false, depth: depth + 1)
            }
            return columns
        default:
            throw StoreError(.unsupported, "Property \(path.joined(separator: "/")) has type \(typeName), which the store cannot hold")
        }
    }

    func navigation(of table: EntityTable) throws(StoreError) -> [Navigation] {
        guard let set = model.entitySet(table.entitySet) else { return [] }
        var result: [Navigation] = []
        for nav in model.allNavigationProperties(ofStructuredType: table.entityType) {
            guard let target = model.targetEntitySet(from: set.name, navigationPath: nav.name), let targetTable = self.table(forEntitySet: target.name) else {
                // Unbound or contained navigation: not stored as a relation between sets.
                continue
            }
            var relation = Relation.linkTable(LinkTable(name: "lk_\(set.name)/\(nav.name)", reversed: false))
            if !nav.referentialConstraints.isEmpty,
               nav.referentialConstraints.allSatisfy({ c in table.columns.contains { $0.name == c.property } && targetTable.columns.contains { $0.name == c.referencedProperty } }) {
                relation = .foreignKey(sourceColumns: nav.referentialConstraints.map(\.property), targetColumns: nav.referentialConstraints.map(\.referencedProperty))
            } else if let partnerName = nav.partner, let partner = model.navigationProperty(partnerName, ofStructuredType: nav.type.name),
                      !partner.referentialConstraints.isEmpty,
                      partner.referentialConstraints.allSatisfy({ c in targetTable.columns.contains { $0.name == c.property } && table.columns.contains { $0.name == c.referencedProperty } }) {
                relation = .foreignKey(sourceColumns: partner.referentialConstraints.map(\.referencedProperty), targetColumns: partner.referentialConstraints.map(\.property))
            } else if let partnerName = nav.partner, model.targetEntitySet(from: target.name, navigationPath: partnerName)?.name == set.name,
                      let partner = model.navigationProperty(partnerName, ofStructuredType: nav.type.name), partner.referentialConstraints.isEmpty {
                // Both ends of one relationship without a referential constraint (common in V2):
                // one link table, kept by the end whose name sorts first.
                let own = "lk_\(set.name)/\(nav.name)", partnerTable = "lk_\(target.name)/\(partnerName)"
                var link = LinkTable(name: min(own, partnerTable), reversed: partnerTable < own)
                link.singleSourcePerTarget = !partner.type.isCollection
                relation = .linkTable(link)
            }
            result.append(Navigation(name: nav.name, targetEntitySet: target.name, isCollection: nav.type.isCollection, relation: relation, onDelete: nav.onDelete))
        }
        return result
    }

    /// Which end of a link through `navigation` of `entitySet` holds the foreign key, and so
    /// has its values (and ETag) changed when the link changes: `true` for the entity of
    /// `entitySet`, `false` for the target; nil for a relation kept in a link table (no
    /// entity's values change) or an unknown navigation property.
    public func linkChangesSource(_ entitySet: String, navigation: String) -> Bool? {
        guard let table = table(forEntitySet: entitySet), let nav = table.navigation(navigation),
              case .foreignKey(let sourceColumns, _) = nav.relation else { return nil }
        // As in `StoreWriter.link`: columns that are the source's key mean the target points at it.
        return sourceColumns != table.keyColumns
    }

    /// The properties an entity created through `navigation` of `parent` (an entity of
    /// `entitySet`, stored or not) takes from it: its foreign key to the parent's key, as in a
    /// deep insert. Empty for a relation kept in a link table.
    public func propertiesImplied(creatingThrough navigation: String, of entitySet: String, parent: Entity) -> [String: PrimitiveValue] {
        guard let table = table(forEntitySet: entitySet), let nav = table.navigation(navigation) else { return [:] }
        return propertiesImplied(through: nav, from: table) { name in
            if case .primitive(let value)? = parent[name] { return value }
            return nil
        }
    }

    /// A nested entity of a deep insert that contradicts its parent: the first property the
    /// parent implies through `navigation` (``propertiesImplied(creatingThrough:of:parent:)``)
    /// to which `child` gives another, non-null value. Nil when they agree.
    public func contradiction(
        creatingThrough navigation: String, of entitySet: String, parent: Entity, child: Entity
    ) -> (property: String, given: PrimitiveValue, implied: PrimitiveValue)? {
        let implied = propertiesImplied(creatingThrough: navigation, of: entitySet, parent: parent)
        for (name, value) in implied.sorted(by: { $0.key < $1.key }) {
            guard case .primitive(let given)? = child[name] else { continue }
            let same = Literal.convert(.primitive(given), to: value.type) == .primitive(value)
            if !same { return (name, given, value) }
        }
        return nil
    }

    /// The properties an entity created through `nav` of an entity of `table` takes from that
    /// parent: its foreign key to the parent's key, the two sides' columns being equal.
    /// `parentValue` gives a property of the parent by name.
    func propertiesImplied(through nav: Navigation, from table: EntityTable,
                           parentValue: (String) throws -> PrimitiveValue?) rethrows -> [String: PrimitiveValue] {
        // Only a foreign key held by the new entity, pointing at its parent's key (an item's
        // OrderID), as in `link`; not one the parent holds (an order's PartnerID).
        guard case .foreignKey(let sourceColumns, let targetColumns) = nav.relation, sourceColumns == table.keyColumns,
              let target = self.table(forEntitySet: nav.targetEntitySet) else { return [:] }
        var implied: [String: PrimitiveValue] = [:]
        for (source, targetColumn) in zip(sourceColumns, targetColumns) {
            guard let from = table.columns.first(where: { $0.name == source }), from.path.count == 1,
                  let to = target.columns.first(where: { $0.name == targetColumn }), to.path.count == 1,
                  let value = try parentValue(from.path[0]) else { continue }
            implied[to.path[0]] = value
        }
        return implied
    }

    // MARK: SQL

    /// `"name"` with quotes doubled.
    public static func quote(_ identifier: String) -> String {
        guard identifier.utf8.contains(UInt8(ascii: "\"")) else { return "\"" + identifier + "\"" }
        return "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// The statements that create the schema: ``tableStatements()`` then
    /// ``lookupIndexStatements()``.
    public func createStatements() -> [String] {
        tableStatements() + lookupIndexStatements()
    }

    /// The tables with their unique indexes (entity keys, local IDs), which inserts need.
    public func tableStatements() -> [String] {
        ["CREATE TABLE IF NOT EXISTS store_meta (key TEXT PRIMARY KEY, value BLOB)"]
            + tables.flatMap { objects(of: $0).map(\.sql) }
    }

    /// One database object of an entity set: its table, a unique index, a table of a
    /// collection-valued property, of dynamic properties or of links.
    struct SchemaObject {
        /// The table's name; for an index, the table it indexes.
        var table: String
        var isTable: Bool
        var sql: String
    }

    /// The objects of one entity table, in creation order.
    func objects(of table: EntityTable) -> [SchemaObject] {
        let q = Self.quote
        var objects: [SchemaObject] = []
        var columns = ["_rowid INTEGER PRIMARY KEY"] + Self.bookkeepingColumns.map { "\($0.name) \($0.type)" }
        columns += table.columns.map { column in "\(q(column.name)) \(column.sqlType)" + (column.nullable ? "" : " NOT NULL") }
        objects.append(.init(table: table.name, isTable: true, sql: "CREATE TABLE \(q(table.name)) (\(columns.joined(separator: ", ")))"))
        objects.append(.init(table: table.name, isTable: false, sql: "CREATE UNIQUE INDEX \(q(table.name + "/$key")) ON \(q(table.name)) (\(table.keyColumns.map(q).joined(separator: ", ")))"))
        // Downloaded rows have no local ID: only local ones are indexed (one B-tree insert less per downloaded row).
        objects.append(.init(table: table.name, isTable: false, sql: "CREATE UNIQUE INDEX \(q(table.name + "/$localID")) ON \(q(table.name)) (_localID) WHERE _localID IS NOT NULL"))
        for collection in table.collections {
            let valueColumns = collection.columns.map { "\(q($0.name)) \($0.sqlType)" }
            objects.append(.init(table: collection.name, isTable: true, sql: "CREATE TABLE \(q(collection.name)) (owner INTEGER NOT NULL REFERENCES \(q(table.name))(_rowid) ON DELETE CASCADE, "
                                 + "ordinal INTEGER NOT NULL, \(valueColumns.joined(separator: ", ")), PRIMARY KEY (owner, ordinal))"))
        }
        if let dynamic = table.dynamicTable {
            objects.append(.init(table: dynamic, isTable: true, sql: "CREATE TABLE \(q(dynamic)) (owner INTEGER NOT NULL REFERENCES \(q(table.name))(_rowid) ON DELETE CASCADE, "
                                 + "name TEXT NOT NULL, type TEXT NOT NULL, value, PRIMARY KEY (owner, name))"))
        }
        for nav in table.navigation {
            guard case .linkTable(let link) = nav.relation, !link.reversed, let target = self.table(forEntitySet: nav.targetEntitySet) else { continue }
            let name = link.name
            objects.append(.init(table: name, isTable: true, sql: "CREATE TABLE \(q(name)) (source INTEGER NOT NULL REFERENCES \(q(table.name))(_rowid) ON DELETE CASCADE, "
                                 + "target INTEGER NOT NULL REFERENCES \(q(target.name))(_rowid) ON DELETE CASCADE, PRIMARY KEY (source, target))"))
        }
        return objects
    }

    /// The indexes that only speed up lookups (foreign keys, the target side of link tables,
    /// the indexes asked for at creation), as `CREATE INDEX IF NOT EXISTS`. A bulk fill of an
    /// empty store is cheaper without them, building them once at the end: every row would
    /// otherwise update each of them, in pages spread over the whole index.
    public func lookupIndexStatements() -> [String] {
        lookupIndexes().map(\.statement)
    }

    /// The names of the lookup indexes and the statements that create them.
    func lookupIndexes() -> [(name: String, statement: String)] {
        lookupIndexesByTable().map { ($0.name, $0.statement) }
    }

    /// ``lookupIndexes()`` with the table each one indexes.
    func lookupIndexesByTable() -> [(name: String, table: String, statement: String)] {
        let q = Self.quote
        var indexes: [(name: String, table: String, statement: String)] = []
        for table in tables {
            for nav in table.navigation {
                switch nav.relation {
                case .foreignKey(let sourceColumns, _):
                    // Index the foreign-key side (unless it is the key, which is indexed already).
                    let name = table.name + "/$fk/" + sourceColumns.joined(separator: ",")
                    if sourceColumns != table.keyColumns && !indexes.contains(where: { $0.name == name }) {
                        indexes.append((name, table.name, "CREATE INDEX IF NOT EXISTS \(q(name)) ON \(q(table.name)) (\(sourceColumns.map(q).joined(separator: ", ")))"))
                    }
                case .linkTable(let link):
                    guard !link.reversed, self.table(forEntitySet: nav.targetEntitySet) != nil else { continue }
                    let linkTable = link.name
                    let name = linkTable + "/$target"
                    indexes.append((name, linkTable, "CREATE INDEX IF NOT EXISTS \(q(name)) ON \(q(linkTable)) (target, source)"))
                }
            }
        }
        for extra in extraIndexes {
            let name = Self.extraIndexName(table: extra.table, columns: extra.columns)
            // Points in time are compared and ordered by their instant (the stored text without
            // its offset, see `ExpressionCompiler.comparable`): the index holds that expression,
            // so that the planner finds it for `$filter` and `$orderby`.
            let table = tables.first { $0.name == extra.table }
            let terms = extra.columns.map { name -> String in
                if case .primitive(let type)? = table?.columns.first(where: { $0.name == name })?.kind,
                    type == .dateTimeOffset || type == .dateTime {
                    return "substr(\(q(name)), 1, \(ValueStorage.instantLength))"
                }
                return q(name)
            }
            indexes.append((name, extra.table, "CREATE INDEX IF NOT EXISTS \(q(name)) ON \(q(extra.table)) (\(terms.joined(separator: ", ")))"))
        }
        return indexes
    }
}

/// An error of the store above the SQL level: a name the model does not know, a feature the
/// store does not support, a store whose schema is from another version.
public struct StoreError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure; cases may be added.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable, Hashable {
            case unknownEntitySet, unknownProperty, unsupported, schemaVersion, notAStore, notFound, conflict, badRequest
        }
        private let base: Base
        private init(_ base: Base) { self.base = base }
        public static let unknownEntitySet = Code(.unknownEntitySet)
        public static let unknownProperty = Code(.unknownProperty)
        /// A model feature or query the store cannot handle; the message names it.
        public static let unsupported = Code(.unsupported)
        public static let schemaVersion = Code(.schemaVersion)
        public static let notAStore = Code(.notAStore)
        public static let notFound = Code(.notFound)
        public static let conflict = Code(.conflict)
        /// Input the store refuses because it is wrong, not because the store lacks a feature: a
        /// value out of range for its type, a `$skiptoken` it did not write.
        public static let badRequest = Code(.badRequest)
        public var description: String { base.rawValue }
    }

    public var code: Code
    public var message: String

    /// Creates an error with its code and message.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(message) (\(code))" }
}

/// An index an application asks for on the table of an entity set, to make its local queries
/// on those properties fast (a `$filter` on the first ones, an `$orderby` in their order).
public struct StoreIndex: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The entity set.
    public var entitySet: String
    /// The indexed properties, in order: names, or paths such as `Address/City` for a
    /// property of a complex property.
    public var properties: [String]

    /// Creates a value from its parts.
    public init(entitySet: String, properties: [String]) {
        self.entitySet = entitySet
        self.properties = properties
    }

    /// Reads `Set=Prop,Prop` (the form of `oodata … --index`).
    public init(parsing text: String) throws(StoreError) {
        let parts = text.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map {
            String($0.filter { !$0.isWhitespace })
        }
        guard parts.count == 2, !parts[0].isEmpty else {
            throw StoreError(.unknownProperty, "The index \(text) is not of the form EntitySet=Property,Property")
        }
        let properties = parts[1].split(separator: ",", omittingEmptySubsequences: false).map {
            String($0.filter { !$0.isWhitespace })
        }
        guard !properties.contains(where: \.isEmpty) else {
            throw StoreError(.unknownProperty, "The index \(text) names an empty property")
        }
        self.init(entitySet: parts[0], properties: properties)
    }

    /// `Set=Prop,Prop`.
    public var description: String { entitySet + "=" + properties.joined(separator: ",") }

    /// The single-property indexes of the older form: entity set → property paths.
    static func list(_ indexes: [String: [[String]]]) -> [StoreIndex] {
        indexes.keys.sorted().flatMap { set in
            (indexes[set] ?? []).map { StoreIndex(entitySet: set, properties: [$0.joined(separator: "/")]) }
        }
    }
}
