import Foundation
import ODataCore
import ODataStore

/// A named read request whose results the store keeps (SPEC §3).
public struct OfflineODataDefiningQuery: Sendable, Hashable, Codable {
    /// Unique name.
    public var name: String
    /// The read request relative to the service root, e.g. `Orders?$expand=Items`.
    public var query: String
    /// Whether media streams of the entities are downloaded too.
    public var automaticallyRetrievesStreams: Bool
    /// Whether the query is being removed (SAP's `isRemoving`): removed while requests were
    /// pending, it is left out of downloads, and its data goes once the request queue is
    /// empty (see ``OfflineODataProvider/remove(definingQueryNamed:)``).
    public internal(set) var isRemoving = false

    /// Creates a defining query.
    public init(name: String, query: String, automaticallyRetrievesStreams: Bool = false) {
        self.name = name
        self.query = query
        self.automaticallyRetrievesStreams = automaticallyRetrievesStreams
    }

    private enum CodingKeys: String, CodingKey { case name, query, automaticallyRetrievesStreams, isRemoving }

    /// Decodes a query; `isRemoving` may be missing (false).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        name = try container.decode(String.self, forKey: .name)
        query = try container.decode(String.self, forKey: .query)
        automaticallyRetrievesStreams = try container.decode(Bool.self, forKey: .automaticallyRetrievesStreams)
        isRemoving = try container.decodeIfPresent(Bool.self, forKey: .isRemoving) ?? false
    }
}

/// What the defining queries read, and where the store keeps them (`oo_defining`: name,
/// query, whether it retrieves streams, its order and its last delta link).
enum DefiningQueries {
    /// Checks a defining query's syntax in the grammar of `version`, the service's. Before the
    /// first open the version is not known yet: the query must then parse as V4.01 or as V2, and
    /// the open checks it again against the service's `$metadata`.
    static func validate(_ query: OfflineODataDefiningQuery, version: ODataVersion?) throws {
        guard !query.name.isEmpty else { throw OfflineODataError(.invalidParameter, "A defining query needs a name") }
        guard !query.query.isEmpty, !query.query.hasPrefix("/"), !query.query.contains("://") else {
            throw OfflineODataError(
                .invalidParameter,
                "Defining query \(query.name): '\(query.query)' must be a read request relative to the service root")
        }
        let grammars: [ODataVersion] = version.map { [$0.grammar] } ?? [.v401, .v2]
        do {
            _ = try URLParser(version: grammars[0]).parse(query.query)
        } catch {
            guard grammars.count > 1, (try? URLParser(version: grammars[1]).parse(query.query)) != nil else {
                throw OfflineODataError(.invalidParameter, "Defining query \(query.name) is not valid: \(error)")
            }
        }
    }

    /// The entity set a defining query reads.
    static func entitySet(of query: String, model: Model) throws -> String {
        let (_, resolved) = try Keys.resolve(query, model: model, what: "defining query")
        var set: String?
        for segment in resolved.path.segments {
            switch segment.kind {
            case .entitySet(let name): set = name
            case .navigation(let name):
                if let current = set { set = model.targetEntitySet(from: current, navigationPath: name)?.name }
            default: continue
            }
        }
        guard let set else {
            throw OfflineODataError(.invalidParameter, "The defining query \(query) does not read an entity set")
        }
        return set
    }

    /// Why a defining query does not bind to `model` (its set, a navigation property, or a
    /// property its options name is not there), or nil when it does.
    static func bindingProblem(of query: String, model: Model) -> String? {
        do {
            _ = try coveredSets(of: query, model: model)
            let version = model.version.grammar
            let parsed = try URLParser(version: version).parse(query)
            _ = try RequestBinder(model: model, version: version).bind(parsed, input: query)
            return nil
        } catch let error as OfflineODataError {
            return error.message
        } catch {
            return "\(error)"
        }
    }

    /// Forgets the delta links of the queries named: their next read is a full one.
    static func forgetDeltaLinks(named names: [String], _ writer: StoreWriter) throws {
        for name in names {
            _ = try writer.connection.execute("UPDATE oo_defining SET delta_link = NULL WHERE name = ?", [.text(name)])
        }
    }

    /// Entity sets whose rows a defining query brings: its own and those of its expands.
    static func coveredSets(of query: String, model: Model) throws -> Set<String> {
        let root = try entitySet(of: query, model: model)
        var sets: Set<String> = [root]
        let (parsed, _) = try Keys.resolve(query, model: model, what: "defining query")
        func walk(_ items: [ExpandItem], from set: String) {
            for item in items {
                guard let name = item.path.last(where: { !$0.contains(".") }),
                    let target = model.targetEntitySet(from: set, navigationPath: name)?.name
                else { continue }
                sets.insert(target)
                walk(item.options?.expand ?? [], from: target)
            }
        }
        walk(parsed.query.expand ?? [], from: root)
        return sets
    }

    /// The indexes of the store: the application's (``OfflineODataParameters/indexes``, checked
    /// against the model), then, where cheap, indexes for the defining queries' own options: one
    /// for a query's `$orderby` properties, in order, and one for the properties its `$filter`
    /// compares with a literal (`eq` first; only at the top level of `and`). Automatic indexes
    /// cover primitive properties only, never start with the key (indexed already), and are at
    /// most two per query and eight in all.
    static func indexes(
        declared: [String: [[String]]], queries: [OfflineODataDefiningQuery], model: Model
    ) throws -> [StoreIndex] {
        let schema = try StoreSchema(model: model)
        var result: [StoreIndex] = []
        for set in declared.keys.sorted() {
            guard let table = schema.table(forEntitySet: set) else {
                throw OfflineODataError(.invalidParameter, "Index on \(set): the service has no entity set \(set)")
            }
            for properties in declared[set] ?? [] {
                guard !properties.isEmpty else {
                    throw OfflineODataError(.invalidParameter, "An index on \(set) names no property")
                }
                for property in properties
                where !(table.columns.contains { $0.name == property && Self.isPrimitive($0) }) {
                    throw OfflineODataError(
                        .invalidParameter, "Index on \(set): \(property) is not a primitive property of \(set)")
                }
                let index = StoreIndex(entitySet: set, properties: properties)
                if !result.contains(index) { result.append(index) }
            }
        }
        var automatic = 0
        for query in queries {
            guard let set = try? entitySet(of: query.query, model: model), let table = schema.table(forEntitySet: set),
                let parsed = try? URLParser(version: model.version.grammar).parse(query.query)
            else { continue }
            /// The column of a plain property path (`Name`, `Address/City`), if it is primitive.
            func column(_ expression: CommonExpression) -> String? {
                guard case .path(let path) = expression.node, !path.steps.isEmpty else { return nil }
                var names: [String] = []
                for step in path.steps {
                    guard case .member(let name) = step else { return nil }
                    names.append(name)
                }
                guard let column = table.column(names), Self.isPrimitive(column) else { return nil }
                return column.name
            }
            var candidates: [[String]] = []
            let ordered = (parsed.query.orderBy ?? []).map { column($0.expression) }
            if !ordered.isEmpty, !ordered.contains(where: { $0 == nil }) {
                candidates.append(ordered.compactMap { $0 })
            }
            var equal: [String] = []
            var ranges: [String] = []
            var conditions = parsed.query.filter.map { [$0] } ?? []
            while let condition = conditions.popLast() {
                guard case .binary(let op, let left, let right) = condition.node else { continue }
                if op == .and {
                    conditions += [right, left]
                    continue
                }
                guard [.eq, .ne, .gt, .ge, .lt, .le].contains(op) else { continue }
                let property: String?
                if case .literal = right.node {
                    property = column(left)
                } else if case .literal = left.node {
                    property = column(right)
                } else {
                    property = nil
                }
                guard let property else { continue }
                if op == .eq {
                    if !equal.contains(property) { equal.append(property) }
                } else if !ranges.contains(property) {
                    ranges.append(property)
                }
            }
            if let first = ranges.first, equal.count < 3 { equal.append(first) }
            if !equal.isEmpty { candidates.append(Array(equal.prefix(3))) }
            for properties in candidates.prefix(2) where automatic < 8 {
                guard properties.first.map({ !table.keyColumns.contains($0) }) == true else { continue }
                let index = StoreIndex(entitySet: set, properties: properties)
                // An index that begins with this one's properties serves its queries too.
                if result.contains(where: { $0.entitySet == set && $0.properties.starts(with: properties) }) {
                    continue
                }
                result.append(index)
                automatic += 1
            }
        }
        return result
    }

    /// Whether a column holds a primitive or enum value (one that an index orders).
    private static func isPrimitive(_ column: StoreSchema.Column) -> Bool {
        switch column.kind {
        case .primitive, .enumeration: return true
        default: return false
        }
    }

    /// The defining queries a store was made or last opened with, in order.
    static func load(_ connection: Connection) throws -> [OfflineODataDefiningQuery] {
        // Stores made before queries could be marked removing have no such column.
        let marked = try connection.query("PRAGMA table_info(oo_defining)").contains {
            $0.count > 1 && $0[1] == .text("removing")
        }
        return try connection.query(
            "SELECT name, query, streams, \(marked ? "removing" : "0") FROM oo_defining ORDER BY ordinal"
        ).compactMap { row in
            guard case .text(let name) = row[0], case .text(let query) = row[1] else { return nil }
            var loaded = OfflineODataDefiningQuery(
                name: name, query: query, automaticallyRetrievesStreams: row[2] == .integer(1))
            loaded.isRemoving = row[3] == .integer(1)
            return loaded
        }
    }

    /// Marks a defining query as being removed (see ``OfflineODataDefiningQuery/isRemoving``).
    static func markRemoving(named name: String, _ writer: StoreWriter) throws {
        let columns = try writer.connection.query("PRAGMA table_info(oo_defining)")
        if !columns.contains(where: { $0.count > 1 && $0[1] == .text("removing") }) {
            try writer.connection.execute("ALTER TABLE oo_defining ADD COLUMN removing INTEGER NOT NULL DEFAULT 0")
        }
        _ = try writer.connection.execute("UPDATE oo_defining SET removing = 1 WHERE name = ?", [.text(name)])
    }

    /// Records a defining query; `ordinal` is its place, from 1.
    static func insert(_ query: OfflineODataDefiningQuery, ordinal: Int, _ writer: StoreWriter) throws {
        _ = try writer.connection.execute(
            "INSERT INTO oo_defining (name, query, streams, ordinal) VALUES (?, ?, ?, ?)",
            [
                .text(query.name), .text(query.query), .integer(query.automaticallyRetrievesStreams ? 1 : 0),
                .integer(Int64(ordinal)),
            ])
    }

    /// Forgets a defining query.
    static func delete(named name: String, _ writer: StoreWriter) throws {
        _ = try writer.connection.execute("DELETE FROM oo_defining WHERE name = ?", [.text(name)])
    }

    /// Query name → the delta link its last read ended with.
    static func deltaLinks(_ connection: Connection) throws -> [String: String] {
        var links: [String: String] = [:]
        for row in try connection.query("SELECT name, delta_link FROM oo_defining") {
            if case .text(let name) = row[0], case .text(let link) = row[1] { links[name] = link }
        }
        return links
    }
}
