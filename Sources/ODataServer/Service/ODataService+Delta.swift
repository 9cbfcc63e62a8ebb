import ODataCore
import ODataStore

extension ODataService {
    /// The delta link for a tracked read: the request with `$deltatoken` set to the newest change.
    /// `token`: the change to read from (the newest when nil).
    func deltaLink(for request: ServiceRequest, table: StoreSchema.EntityTable, token given: Int64? = nil) async throws -> String {
        var token: Int64 = 0
        if let given {
            token = given
        } else {
            let latest = try await store.read { reader in try reader.connection.query("SELECT max(seq) FROM server_changes") }
            if case .integer(let value)? = latest.first?.first { token = value }
        }
        let base = request.target.split(separator: "?", maxSplits: 1)
        var query = base.count > 1 ? String(base[1]).split(separator: "&").filter { !$0.hasPrefix("$skiptoken") && !$0.hasPrefix("!deltatoken") && !$0.hasPrefix("$deltatoken") }.joined(separator: "&") : ""
        query += (query.isEmpty ? "" : "&") + (request.isV2 ? "!deltatoken=\(token)" : "$deltatoken=\(token)")
        return (request.serviceRoot ?? "") + String(base[0]) + "?" + query
    }

    /// Changes since a delta token: changed entities that still match the request, and
    /// removed ones (deleted, or changed so they no longer match) with their keys.
    ///
    /// Paged like any collection: a page holds at most `pageSize` entities, each in the state
    /// of its last change, in the order of those changes; its next link is a delta link whose
    /// token is the last change on the page (the keys changed after it are on later pages).
    func delta(_ request: ServiceRequest, _ parsed: ParsedURL, pageSize: Int) async throws -> ServiceResponse {
        guard let tokenText = parsed.query.deltaToken, let token = Int64(tokenText) else {
            throw ServiceFailure(400, "BadDeltaToken", "The delta token is not valid")
        }
        guard let table = try table(forPath: request.target, version: request.version) else {
            throw ServiceFailure(400, "BadRequest", "Delta needs an entity set")
        }
        let set = table.entitySet
        let (floor, changes, newest) = try await store.read { reader -> (Int64, [[DatabaseValue]], Int64) in
            let floor = try reader.connection.query("SELECT value FROM server_history WHERE name = 'floor'")
            var floorValue: Int64 = 0
            if case .integer(let value)? = floor.first?.first { floorValue = value }
            // The last change per key decides (SQLite takes `kind` from the row of max(seq)).
            let rows = try reader.connection.query(
                """
                SELECT max(seq) AS last, key, kind FROM server_changes WHERE entity_set = ? AND seq > ?
                GROUP BY key ORDER BY last LIMIT ?
                """, [.text(set), .integer(token), .integer(Int64(pageSize) + 1)])
            // The token of the last page's delta link, read with the changes: a change made
            // after this read is in the next delta, not lost between the two.
            var newest: Int64 = 0
            if case .integer(let value)? = try reader.connection.query("SELECT max(seq) FROM server_changes").first?.first {
                newest = value
            }
            return (floorValue, rows, newest)
        }
        guard token >= floor else {
            throw ServiceFailure(410, "DeltaTokenExpired", "The delta token is older than the retained change history; read the collection again")
        }
        var last: [String: String] = [:]
        var order: [String] = []
        var pageEnd: Int64?
        var lastSeq = token
        for row in changes {
            guard case .integer(let seq) = row[0], case .text(let key) = row[1], case .text(let kind) = row[2] else { continue }
            if order.count == pageSize {
                pageEnd = lastSeq
                break
            }
            order.append(key)
            last[key] = kind
            lastSeq = seq
        }
        var collection = EntityCollection()
        var otherOptions = request.target.split(separator: "?", maxSplits: 1).count > 1
            ? String(request.target.split(separator: "?", maxSplits: 1)[1]).split(separator: "&").filter { !$0.hasPrefix("$deltatoken") && !$0.hasPrefix("!deltatoken") }.map(String.init) : []
        otherOptions.removeAll { $0.hasPrefix("$skiptoken") }
        let ownFilter = parsed.query.filter != nil
            ? otherOptions.first { $0.hasPrefix("$filter=") }.map { String($0.dropFirst(8)) } : nil
        // Under a row filter of the set, only the user's rows are changed entities.
        let rowFilter = rowFilter(request, set)
        let filter = rowFilter.map { mine in
            ownFilter.map { "(" + RowFilterText.encoded(mine) + ")%20and%20(" + $0 + ")" } ?? RowFilterText.encoded(mine)
        } ?? ownFilter
        // Changed entities come in the shape the tracked read asked for: its `$select` and
        // `$expand` apply to them too (ordering and paging options have no meaning here).
        let shape = otherOptions.filter { $0.hasPrefix("$select=") || $0.hasPrefix("$expand=") }.joined(separator: "&")
        // Entities of a single-property key in a V4 read are fetched 200 at a time with one
        // `in` query (its `$filter` and shape kept); the others one by one below.
        var fetched: [String: Entity] = [:]
        var batched: Set<String> = []
        if table.keyColumns.count == 1, !request.isV2 {
            // The recorded key text is as the writing request spelled it (`(5)`, `(ID=5)`,
            // percent-encoded): each is parsed, and its value written as a V4 literal.
            var literals: [(text: String, canonical: String, literal: String)] = []
            for key in order where last[key] != "delete" {
                guard let value = keyValues(ofKeyText: key, table)?[table.keyColumns[0]] else { continue }
                let literal = Literal.format(.primitive(value), version: .v4)
                // Characters that would end the query option or the URL are left to the path below.
                guard !literal.contains("&"), !literal.contains("#"), !literal.contains("%") else { continue }
                literals.append((key, canonicalKeyText([table.keyColumns[0]: value], table), literal))
            }
            for start in stride(from: 0, to: literals.count, by: 200) {
                let chunk = literals[start..<min(start + 200, literals.count)]
                let condition = "\(table.keyColumns[0]) in (\(chunk.map(\.literal).joined(separator: ",")))"
                let url = set + "?$filter=" + (filter.map { "(\($0)) and " } ?? "") + condition + (shape.isEmpty ? "" : "&" + shape)
                guard case .collection(let found) = try await store.query(url, version: request.version) else { continue }
                var byCanonical: [String: Entity] = [:]
                for entity in found.entities { byCanonical[canonicalKeyText(keyValues(of: entity, table), table)] = entity }
                for item in chunk {
                    if let entity = byCanonical[item.canonical] { fetched[item.text] = entity }
                    batched.insert(item.text)
                }
            }
        }
        var removals: [(key: String, reason: String)] = []
        for key in order {
            let keyPath = set + key
            if batched.contains(key) {
                if let entity = fetched[key] {
                    collection.entities.append(entity)
                } else {
                    removals.append((key, "changed"))
                }
                continue
            }
            if last[key] == "delete" {
                removals.append((key, "deleted"))
                continue
            }
            // Still in the result? Re-run the filter on this one entity.
            var url = keyPath + (shape.isEmpty ? "" : "?" + shape)
            if let filter { url = set + "?$filter=(\(filter)) and " + keyFilter(key, table) + (shape.isEmpty ? "" : "&" + shape) }
            let result = try await store.query(url, version: request.version)
            switch result {
            case .entity(let entity?):
                collection.entities.append(request.isV2 ? decorateV2(entity, table, root: request.serviceRoot ?? "") : entity)
            case .collection(let found) where !found.entities.isEmpty:
                collection.entities.append(contentsOf: request.isV2 ? found.entities.map { decorateV2($0, table, root: request.serviceRoot ?? "") } : found.entities)
            default:
                removals.append((key, "changed"))
            }
        }
        for removal in try await visibleRemovals(removals, request, table, since: token, ownFilter: ownFilter != nil) {
            collection.deleted.append(
                removed(set + removal.key, removal.key, table, reason: removal.reason, v2: request.isV2))
        }
        if parsed.query.expand != nil {
            collection.entities = try await hidingInvisible(collection.entities, of: table, for: request)
        }
        if let pageEnd {
            // More changes: the next page is the delta since the last change on this one.
            collection.nextLink = try await deltaLink(for: request, table: table, token: pageEnd)
        } else {
            collection.deltaLink = try await deltaLink(for: request, table: table, token: newest)
        }
        if request.isV2 { return .json(200, V2JSONWriter().write(collection), version: request.version) }
        collection.context = request.contextURL("\(set)/$delta")
        return .json(200, V4JSONWriter().write(collection), version: request.version)
    }

    /// The removed entries a user with a row filter of the set may be told of: rows it could
    /// see before a change since the token (the change's recorded viewers), and rows it sees
    /// now that left the request's own filter. Every removal without a row filter.
    private func visibleRemovals(_ removals: [(key: String, reason: String)], _ request: ServiceRequest,
                                 _ table: StoreSchema.EntityTable, since token: Int64,
                                 ownFilter: Bool) async throws -> [(key: String, reason: String)] {
        guard let user = request.user, let filter = rowFilter(request, table.entitySet), !removals.isEmpty else {
            return removals
        }
        let set = table.entitySet
        let name = user.name
        let seen = try await store.read { reader -> Set<String> in
            let rows = try reader.connection.query(
                """
                SELECT DISTINCT c.key FROM server_changes c JOIN server_change_viewers v ON v.seq = c.seq
                WHERE c.entity_set = ? AND c.seq > ? AND v.viewer = ?
                """, [.text(set), .integer(token), .text(name)])
            return Set(rows.compactMap { row in if case .text(let key)? = row.first { key } else { nil } })
        }
        var visibleNow: Set<String> = []
        if ownFilter {
            let keys = removals.filter { $0.reason == "changed" }.compactMap { keyValues(ofKeyText: $0.key, table) }
            visibleNow = try await visibleKeys(keys, of: table, filter: filter, version: request.version)
        }
        return removals.filter { removal in
            if seen.contains(removal.key) { return true }
            guard removal.reason == "changed", let key = keyValues(ofKeyText: removal.key, table) else { return false }
            return visibleNow.contains(canonicalKeyText(key, table))
        }
    }

    /// The key values of a recorded key text (`(5)`, `(ID=5)`, `('a%20b')`), or nil.
    private func keyValues(ofKeyText keyText: String, _ table: StoreSchema.EntityTable) -> [String: PrimitiveValue]? {
        guard let parsed = try? URLParser(version: ODataVersion.v4.grammar).parsePath(table.entitySet + keyText),
            case .key(let parts)? = parsed.segments.last?.kind
        else { return nil }
        return try? keyValues(parts, table, QueryOptions())
    }

    /// A removed entity with its key properties (V4 `@removed`; V2 deleted entry).
    private func removed(_ id: String, _ keyText: String, _ table: StoreSchema.EntityTable, reason: String, v2: Bool) -> DeletedEntity {
        var properties: [NamedValue] = []
        if let parsed = try? URLParser(version: v2 ? ODataVersion.v2.grammar : ODataVersion.v4.grammar).parsePath(id), case .key(let parts)? = parsed.segments.last?.kind,
           let key = try? keyValues(parts, table, QueryOptions()) {
            properties = table.keyColumns.compactMap { name in key[name].map { NamedValue(name: name, value: .primitive($0)) } }
        }
        return DeletedEntity(id: id, reason: reason, properties: properties, context: v2 ? "$metadata#\(table.entitySet)/$deletedEntity" : nil)
    }

    /// `$filter` text matching one key predicate.
    private func keyFilter(_ keyText: String, _ table: StoreSchema.EntityTable) -> String {
        let inner = keyText.dropFirst().dropLast()
        if table.keyColumns.count == 1 { return "\(table.keyColumns[0]) eq \(inner)" }
        return inner.split(separator: ",").map { $0.replacingOccurrences(of: "=", with: " eq ") }.joined(separator: " and ")
    }

    /// Forgets change history older than the newest `keep` changes; tokens older than that get 410.
    public func pruneChangeHistory(keepingLast keep: Int) async throws {
        try await store.write { writer in
            let db = writer.connection
            let rows = try db.query("SELECT max(seq) FROM server_changes")
            guard case .integer(let newest)? = rows.first?.first else { return }
            let floor = max(0, newest - Int64(keep))
            try db.execute("DELETE FROM server_changes WHERE seq <= ?", [.integer(floor)])
            try db.execute("DELETE FROM server_change_viewers WHERE seq <= ?", [.integer(floor)])
            try db.execute("INSERT OR REPLACE INTO server_history (name, value) VALUES ('floor', ?)", [.integer(floor)])
        }
    }
}
