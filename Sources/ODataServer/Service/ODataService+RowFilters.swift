import Foundation
import ODataCore
import ODataStore

/// One row of an entity set, named by its key in V4 form.
struct RowID: Hashable, Sendable {
    var set: String
    var key: String
}

/// The rows a modification touches, checked against the users' row filters before its write
/// transaction (a query needs a reader, which a transaction cannot use), then confirmed at the
/// start of the transaction: a row changed in between is stale and not written.
struct RowChecks: Sendable {
    enum State: Sendable, Hashable {
        /// No such row when checked.
        case absent
        /// The row, its ETag and the users (with a row filter of its set) who could see it.
        case present(etag: String?, viewers: Set<String>)
        /// The row changed between the check and the transaction.
        case stale
    }

    struct Row: Sendable {
        var key: [String: PrimitiveValue]
        var state: State
    }

    var rows: [RowID: Row] = [:]
    /// Whether the transaction confirmed the rows (``ODataService/confirmed(_:_:)``).
    var confirmed = false

    /// The users (with a row filter of the row's set) who could see the row before the change.
    func viewers(of row: RowID) -> Set<String> {
        if case .present(_, let viewers)? = rows[row]?.state { return viewers }
        return []
    }
}

extension ODataService {
    // MARK: Reads

    /// The row filter of `set` for the request's user; nil when the set is wholly visible to it.
    func rowFilter(_ request: ServiceRequest, _ set: String) -> String? {
        request.user?.rowFilters[set]
    }

    /// Whether the request's user sees only some rows of some set.
    func hasRowFilters(_ request: ServiceRequest) -> Bool {
        !(request.user?.rowFilters.isEmpty ?? true)
    }

    /// The target the store answers a read with, under the user's row filters: its `$filter`
    /// joined with the filter of the set the path ends at (when the path addresses entities, a
    /// `/$count` or `/$ref` of them). Every entity the path passes on the way must be visible
    /// (else 404, as if it did not exist). Nil when the user has no row filters.
    func restrictedTarget(_ request: ServiceRequest) async throws -> String? {
        guard hasRowFilters(request) else { return nil }
        let version = request.version
        // The request as sent must parse: each `$filter` is then one complete expression, and
        // in parentheses it cannot reach past them.
        let parsed = try URLParser(version: version.grammar).parse(request.target)
        // A path the binder refuses is refused by the store too (it binds the same way).
        let bound = try? RequestBinder(model: model, version: version.grammar).bind(parsed, input: request.target)
        var target: String?
        if let type = bound?.elementType, model.entityType(type) != nil,
            let table = try table(forPath: request.target, version: version),
            let filter = rowFilter(request, table.entitySet)
        {
            target = try Self.joiningFilter(filter, to: request.target, version: version)
        }
        let pieces = Self.pathPieces(request.path)
        // The path itself when no filter covers it (a property, a stream), and every shorter
        // path that ends at one entity.
        let lengths = target == nil ? Array(1...max(1, pieces.count)) : Array(1..<max(1, pieces.count))
        for length in lengths where length <= pieces.count {
            let prefix = pieces[0..<length].map(Self.encodedPathPiece).joined(separator: "/")
            guard let shape = try? shape(of: prefix, version: version), case .entity = shape,
                let table = try? table(forPath: prefix, version: version),
                let filter = rowFilter(request, table.entitySet)
            else { continue }
            let checked = try await store.query(prefix + "?$filter=" + RowFilterText.encoded(filter), version: version)
            guard case .entity(_?) = checked else {
                throw ServiceFailure(404, "NotFound", "No entity at \(request.path)")
            }
        }
        return target
    }

    private func shape(of path: String, version: ODataVersion) throws -> ResourceShape {
        let parsed = try URLParser(version: version.grammar).parse(path)
        return try RequestBinder(model: model, version: version.grammar).bind(parsed, input: path).path.shape
    }

    /// `target` with `filter` joined to its `$filter` (`(filter) and (own)`), or as its `$filter`.
    static func joiningFilter(_ filter: String, to target: String, version: ODataVersion) throws -> String {
        let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let path = String(parts.first ?? "")
        let options =
            parts.count > 1 ? parts[1].split(separator: "&", omittingEmptySubsequences: false).map(String.init) : []
        var kept: [String] = []
        var own: String?
        for option in options {
            let equals = option.firstIndex(of: "=") ?? option.endIndex
            // Named as the URL parser reads names: percent-decoded, `+` a space, any case, and
            // in V4 also without `$`.
            guard
                let name = option[..<equals].replacingOccurrences(of: "+", with: " ").removingPercentEncoding?
                    .lowercased()
            else {
                throw ServiceFailure(400, "BadRequest", "A query option name is not valid percent-encoding")
            }
            if equals < option.endIndex, name == "$filter" || (version.grammar >= .v401 && name == "filter") {
                // The parser has refused a request with two.
                own = String(option[option.index(after: equals)...])
            } else {
                kept.append(option)
            }
        }
        let mine = RowFilterText.encoded(filter)
        let joined = own.map { "(" + mine + ")%20and%20(" + $0 + ")" } ?? mine
        return path + "?" + (kept + ["$filter=" + joined]).joined(separator: "&")
    }

    /// The store's next link for a restricted target, made again from the request's own target
    /// (so it carries the client's query, not the row filter): the same `$skiptoken`.
    static func nextLink(_ storeLink: String, for target: String) -> String {
        guard let question = storeLink.firstIndex(of: "?"),
            let token = storeLink[storeLink.index(after: question)...].split(separator: "&").last,
            token.lowercased().hasPrefix("$skiptoken=")
        else { return storeLink }
        let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let kept =
            parts.count > 1
            ? parts[1].split(separator: "&").filter {
                !$0.lowercased().hasPrefix("$skiptoken=") && !$0.lowercased().hasPrefix("%24skiptoken=")
            }
            : []
        return String(parts.first ?? "") + "?" + (kept.map(String.init) + [String(token)]).joined(separator: "&")
    }

    /// A resource path split at its `/`s, percent-decoded; a `/` in a quoted key or in
    /// parentheses does not split.
    static func pathPieces(_ path: String) -> [String] {
        let decoded = path.removingPercentEncoding ?? path
        var pieces: [String] = []
        var current = ""
        var quoted = false
        var depth = 0
        for character in decoded {
            switch character {
            case "'": quoted.toggle()
            case "(" where !quoted: depth += 1
            case ")" where !quoted: depth -= 1
            case "/" where !quoted && depth <= 0:
                pieces.append(current)
                current = ""
                continue
            default: break
            }
            current.append(character)
        }
        if !current.isEmpty { pieces.append(current) }
        return pieces
    }

    private static let pathCharacters = CharacterSet(
        charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~()'=,$@:;*!")

    /// A decoded path piece encoded again for a URL.
    static func encodedPathPiece(_ piece: String) -> String {
        piece.addingPercentEncoding(withAllowedCharacters: pathCharacters) ?? ""
    }

    /// The keys (V4 key text) of those of `keys` whose rows of `table` match `filter`.
    func visibleKeys(
        _ keys: [[String: PrimitiveValue]], of table: StoreSchema.EntityTable, filter: String,
        version: ODataVersion
    ) async throws -> Set<String> {
        var visible: Set<String> = []
        let conditions = keys.compactMap { key -> String? in
            let parts = table.keyColumns.compactMap { name in
                key[name].map { "\(name) eq \(Literal.format(.primitive($0), version: version))" }
            }
            return parts.count == table.keyColumns.count ? "(" + parts.joined(separator: " and ") + ")" : nil
        }
        // 40 keys a query: an `or` chain the parser and SQLite both take.
        for start in stride(from: 0, to: conditions.count, by: 40) {
            let chunk = conditions[start..<min(start + 40, conditions.count)].joined(separator: " or ")
            let url =
                table.entitySet + "?$filter=" + RowFilterText.encoded("(" + filter + ") and (" + chunk + ")")
                + "&$select=" + table.keyColumns.joined(separator: ",")
            guard case .collection(let found) = try await store.query(url, version: version, pageSize: nil) else {
                continue
            }
            for entity in found.entities { visible.insert(canonicalKeyText(keyValues(of: entity, table), table)) }
        }
        return visible
    }

    /// The key of an entity of `table` in an answer: its key properties, or for a reference
    /// (`$expand=Nav/$ref`) the key its id names.
    private func answerKey(_ entity: Entity, _ table: StoreSchema.EntityTable) -> [String: PrimitiveValue]? {
        let key = keyValues(of: entity, table)
        if key.count == table.keyColumns.count { return key }
        guard let id = entity.control.id, let (idTable, idKey) = try? resolveID(id, .v4),
            idTable.entitySet == table.entitySet
        else { return nil }
        return idKey
    }

    /// `entities` of `table` without the expanded entities the user cannot see, at every depth:
    /// an invisible entity of a collection goes (the collection's count with it), an invisible
    /// single one is answered as none.
    func hidingInvisible(
        _ entities: [Entity], of table: StoreSchema.EntityTable, for request: ServiceRequest
    ) async throws -> [Entity] {
        guard let user = request.user, !user.rowFilters.isEmpty else { return entities }
        let schema = store.schema
        func inline(_ value: NavigationValue) -> [Entity] {
            switch value.inline {
            case .entity(let child?)?: [child]
            case .collection(let children)?: children.entities
            default: []
            }
        }
        var wanted: [String: [String: [String: PrimitiveValue]]] = [:]
        func collect(_ entity: Entity, _ table: StoreSchema.EntityTable, depth: Int) {
            guard depth < 32 else { return }
            for value in entity.navigation {
                guard let nav = table.navigation(value.name),
                    let target = schema.table(forEntitySet: nav.targetEntitySet)
                else { continue }
                for child in inline(value) {
                    if user.rowFilters[target.entitySet] != nil, let key = answerKey(child, target) {
                        wanted[target.entitySet, default: [:]][canonicalKeyText(key, target)] = key
                    }
                    collect(child, target, depth: depth + 1)
                }
            }
        }
        for entity in entities { collect(entity, table, depth: 0) }
        guard !wanted.isEmpty else { return entities }
        var visible: [String: Set<String>] = [:]
        for (set, keys) in wanted {
            guard let target = schema.table(forEntitySet: set), let filter = user.rowFilters[set] else { continue }
            visible[set] = try await visibleKeys(
                Array(keys.values), of: target, filter: filter, version: request.version)
        }
        func keep(_ child: Entity, _ target: StoreSchema.EntityTable) -> Bool {
            guard user.rowFilters[target.entitySet] != nil else { return true }
            guard let key = answerKey(child, target) else { return false }
            return visible[target.entitySet]?.contains(canonicalKeyText(key, target)) == true
        }
        func prune(_ entity: Entity, _ table: StoreSchema.EntityTable, depth: Int) -> Entity {
            guard depth < 32 else { return entity }
            var entity = entity
            for index in entity.navigation.indices {
                guard let nav = table.navigation(entity.navigation[index].name),
                    let target = schema.table(forEntitySet: nav.targetEntitySet)
                else { continue }
                switch entity.navigation[index].inline {
                case .entity(let child?)?:
                    entity.navigation[index].inline = .entity(
                        keep(child, target) ? prune(child, target, depth: depth + 1) : nil)
                case .collection(var children)?:
                    let before = children.entities.count
                    children.entities = children.entities.filter { keep($0, target) }.map {
                        prune($0, target, depth: depth + 1)
                    }
                    let removed = Int64(before - children.entities.count)
                    if let count = children.count { children.count = count - removed }
                    if let count = entity.navigation[index].count { entity.navigation[index].count = count - removed }
                    entity.navigation[index].inline = .collection(children)
                default:
                    break
                }
            }
            return entity
        }
        return entities.map { prune($0, table, depth: 0) }
    }

    // MARK: Writes

    /// The rows a modification changes or links: the entity its path names, the entity a
    /// `$ref` names, the order `ConfirmOrder` confirms.
    private func touchedRows(_ request: ServiceRequest) -> [(StoreSchema.EntityTable, [String: PrimitiveValue])] {
        guard ["POST", "PUT", "PATCH", "MERGE", "DELETE"].contains(request.method) else { return [] }
        if request.method == "POST", let orderID = confirmOrderID(request),
            let table = store.schema.table(forEntitySet: "SalesOrders")
        {
            return [(table, ["OrderID": .string(orderID)])]
        }
        guard let target = try? writeTarget(request) else { return [] }
        var rows: [(StoreSchema.EntityTable, [String: PrimitiveValue])] = []
        if let key = target.key { rows.append((target.table, key)) }
        if target.isRef, let nav = target.navigation, let id = try? referencedID(request, target, nav),
            let other = try? resolveID(id, request.version)
        {
            rows.append(other)
        }
        return rows
    }

    /// Checks the rows `requests` touch against the row filters of every user: whether each
    /// exists, its ETag, and who sees it. Empty when no user has a row filter of their sets.
    func checkRows(_ requests: [ServiceRequest]) async throws -> RowChecks {
        var checks = RowChecks()
        guard let users = options.users?.users, users.contains(where: { !$0.rowFilters.isEmpty }) else { return checks }
        var wanted: [RowID: (StoreSchema.EntityTable, [String: PrimitiveValue], ODataVersion)] = [:]
        for request in requests {
            for (table, key) in touchedRows(request)
            where users.contains(where: { $0.rowFilters[table.entitySet] != nil }) {
                wanted[RowID(set: table.entitySet, key: canonicalKeyText(key, table))] = (table, key, request.version)
            }
        }
        for (id, (table, key, version)) in wanted {
            let set = table.entitySet
            guard let found = try await store.read({ reader in try reader.rowAndETag(in: set, key: key) }) else {
                checks.rows[id] = RowChecks.Row(key: key, state: .absent)
                continue
            }
            var viewers: Set<String> = []
            for user in users {
                guard let filter = user.rowFilters[set] else { continue }
                if try await !visibleKeys([key], of: table, filter: filter, version: version).isEmpty {
                    viewers.insert(user.name)
                }
            }
            checks.rows[id] = RowChecks.Row(key: key, state: .present(etag: found.etag, viewers: viewers))
        }
        return checks
    }

    /// `checks` confirmed at the start of the write transaction: a row whose ETag changed, or
    /// that appeared, since the check is stale.
    func confirmed(_ checks: RowChecks, _ writer: StoreWriter) throws -> RowChecks {
        var checks = checks
        for (id, row) in checks.rows {
            let now = try writer.reader.rowAndETag(in: id.set, key: row.key)
            switch row.state {
            case .absent where now != nil: checks.rows[id]?.state = .stale
            case .present where now == nil: checks.rows[id]?.state = .absent
            case .present(let etag, _) where now?.etag != etag: checks.rows[id]?.state = .stale
            default: break
            }
        }
        checks.confirmed = true
        return checks
    }

    /// Throws 404 when the request's user may not see the row it is about to change (as if it
    /// did not exist), 409 when the row changed since it was checked. A row created in this
    /// transaction (after the check) is the user's own.
    func guardRow(_ request: ServiceRequest, _ table: StoreSchema.EntityTable, _ key: [String: PrimitiveValue]) throws {
        guard let user = request.user, user.rowFilters[table.entitySet] != nil else { return }
        guard let checks = request.rowChecks, checks.confirmed else {
            throw ServiceFailure(500, "InternalError", "The rows of \(request.method) \(request.path) were not checked")
        }
        switch checks.rows[RowID(set: table.entitySet, key: canonicalKeyText(key, table))]?.state {
        case .present(_, let viewers)? where !viewers.contains(user.name):
            throw ServiceFailure(404, "NotFound", "No entity at \(request.path)")
        case .stale?:
            throw ServiceFailure(
                409, "Conflict", "The entity changed while \(request.method) \(request.path) was checked; send it again"
            )
        default:
            return
        }
    }

    /// The users (with a row filter) who could see a row the request changes, before it did.
    func viewers(
        _ request: ServiceRequest, _ table: StoreSchema.EntityTable, _ key: [String: PrimitiveValue]
    ) -> Set<String> {
        request.rowChecks?.viewers(of: RowID(set: table.entitySet, key: canonicalKeyText(key, table))) ?? []
    }
}
