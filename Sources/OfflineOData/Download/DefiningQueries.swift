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

    /// Creates a defining query.
    public init(name: String, query: String, automaticallyRetrievesStreams: Bool = false) {
        self.name = name
        self.query = query
        self.automaticallyRetrievesStreams = automaticallyRetrievesStreams
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

    /// The defining queries a store was made or last opened with, in order.
    static func load(_ connection: Connection) throws -> [OfflineODataDefiningQuery] {
        try connection.query("SELECT name, query, streams FROM oo_defining ORDER BY ordinal").compactMap { row in
            guard case .text(let name) = row[0], case .text(let query) = row[1] else { return nil }
            return OfflineODataDefiningQuery(
                name: name, query: query, automaticallyRetrievesStreams: row[2] == .integer(1))
        }
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
