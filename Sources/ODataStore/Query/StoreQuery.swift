public import ODataCore

/// The answer to a read request.
public enum QueryResult: Sendable, Hashable {
    /// A collection of entities, with count and next link.
    case collection(EntityCollection)
    /// One entity (nil: not found, or outside the store's scope).
    case entity(Entity?)
    /// A property value or a collection of values.
    case value(Value)
    /// A `/$count` result.
    case count(Int64)
    /// Entity references for `$ref`.
    case references([String])
}

extension QueryResult: CustomStringConvertible {
    /// The result as a person reads it: a collection as its size (with `$count` and the next
    /// link when there are) and one entity a line, an entity, a value, a count.
    public var description: String {
        switch self {
        case .collection(let collection):
            var head = collection.entities.count == 1 ? "1 entity" : "\(collection.entities.count) entities"
            if let count = collection.count { head += ", $count \(count)" }
            if let next = collection.nextLink { head += ", next link \(next)" }
            return ([head + (collection.entities.isEmpty ? "" : ":")] + collection.entities.map { "  \($0)" })
                .joined(separator: "\n")
        case .entity(let entity?): return entity.description
        case .entity(nil): return "no entity (not found, or outside the store's scope)"
        case .value(let value): return value.description
        case .count(let count): return String(count)
        case .references(let references): return references.joined(separator: "\n")
        }
    }

    /// The entities of a collection, or the one entity; empty for other results.
    public var entities: [Entity] {
        switch self {
        case .collection(let collection): collection.entities
        case .entity(let entity?): [entity]
        default: []
        }
    }
}

extension Store {
    /// Answers a read request (a URL relative to the service root) from the store.
    ///
    /// `pageSize` limits how many entities one response carries; a longer result returns a
    /// next link with `$skiptoken` that resumes where this page stopped.
    public func query(_ url: String, version requested: ODataVersion? = nil, pageSize: Int? = nil) async throws -> QueryResult {
        let schema = self.schema
        let version = requestVersion(requested)
        let (parsed, bound) = try prepare(url, version: version)
        return try await Self.boundingSQLDepth {
            try await read { reader in
                var executor = QueryExecutor(
                    reader: reader, schema: schema, parsed: parsed, bound: bound, url: url, version: version)
                return try executor.run(pageSize: pageSize)
            }
        }
    }

    /// A read URL parsed and bound for `version`. What the store does not implement is refused
    /// before binding: binding `$select=alias` of a `$compute` would fail with a misleading
    /// "has no property".
    func prepare(_ url: String, version: ODataVersion) throws -> (ParsedURL, BoundRequest) {
        let parsed = try URLParser(version: version).parse(url)
        try QueryExecutor.refuseUnimplemented(parsed.query)
        return (parsed, try RequestBinder(model: schema.model, version: version).bind(parsed, input: url))
    }

    /// Runs a query, turning SQLite's "parser stack overflow" (its parser takes about 40 levels
    /// of parentheses; the URL grammar allows 100) into a client error that says so.
    static func boundingSQLDepth<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as DatabaseError where error.message.contains("parser stack overflow") {
            throw StoreError(.badRequest, "The query nests too deeply for the store: its SQL exceeds SQLite's parser "
                                 + "stack; use fewer levels of parentheses or nested functions")
        }
    }
}

extension Store {
    /// The version requests are parsed with: the one asked for (4.0 read as 4.01), else the model's.
    func requestVersion(_ requested: ODataVersion?) -> ODataVersion {
        (requested ?? schema.model.version).grammar
    }

    /// Like `query`, also returning the SQL statements it ran (for tests).
    func queryTracingSQL(_ url: String, pageSize: Int? = nil) async throws -> (QueryResult, [String]) {
        let schema = self.schema
        let (parsed, bound) = try prepare(url, version: schema.model.version.grammar)
        return try await read { reader in
            reader.db.statementLog = []
            defer { reader.db.statementLog = nil }
            var executor = QueryExecutor(
                reader: reader, schema: schema, parsed: parsed, bound: bound, url: url,
                version: schema.model.version)
            let result = try executor.run(pageSize: pageSize)
            return (result, reader.db.statementLog ?? [])
        }
    }
}

/// Runs one bound request against a snapshot.
struct QueryExecutor {
    let reader: StoreReader
    let schema: StoreSchema
    let parsed: ParsedURL
    let bound: BoundRequest
    let url: String
    var compiler: ExpressionCompiler
    /// SQL statements run, for tests that check there is no N+1.
    static let traceKey = "ODATASTORE_TRACE_SQL"

    /// `version`: what the request was written in (V2 casts values to strings in V2's forms).
    init(
        reader: StoreReader, schema: StoreSchema, parsed: ParsedURL, bound: BoundRequest, url: String,
        version: ODataVersion
    ) {
        self.reader = reader
        self.schema = schema
        self.parsed = parsed
        self.bound = bound
        self.url = url
        self.compiler = ExpressionCompiler(schema: schema, aliases: parsed.query.aliases)
        self.compiler.legacyStrings = version.isLegacy
    }

    /// The rows a path addresses: a table and a condition on its alias `t0`.
    struct Source {
        var table: StoreSchema.EntityTable
        var condition: SQLFragment
        var single: Bool
    }

    func fail(_ feature: String) -> StoreError { ExpressionCompiler.unsupported(feature) }

    // MARK: Path

    mutating func source() throws -> (Source, ArraySlice<PathSegment>) {
        var segments = bound.path.path.segments[...]
        guard let first = segments.first, case .entitySet(let name) = first.kind else {
            throw fail("requests that do not start at an entity set")
        }
        guard let table = schema.table(forEntitySet: name) else { throw StoreError(.unknownEntitySet, "No entity set \(name) in the store") }
        segments = segments.dropFirst()
        var source = Source(table: table, condition: SQLFragment("1"), single: false)
        var hops = 0
        while let segment = segments.first {
            switch segment.kind {
            case .key(let parts):
                source.condition = "(" + source.condition + " AND " + (try keyCondition(parts, source.table, alias: "t0")) + ")"
                source.single = true
            case .keySegment(let text):
                guard source.table.keyColumns.count == 1, let column = source.table.column([source.table.keyColumns[0]]) else { throw fail("key segments for compound keys") }
                guard case .primitive(let type) = column.kind, let value = try? Literal.parse(text, as: type) else { throw StoreError(.notFound, "'\(text)' is not a key of \(source.table.entitySet)") }
                source.condition = "(" + source.condition + " AND t0.\(StoreSchema.quote(column.name)) = ?" + ")"
                source.condition.arguments.append(try compiler.encode(value, for: .primitive(type)))
                source.single = true
            case .navigation(let navName):
                guard let nav = source.table.navigation(navName), let target = schema.table(forEntitySet: nav.targetEntitySet) else {
                    throw fail("navigation \(navName), which has no target entity set in the store")
                }
                // Rows of the target reachable from the current rows; each hop gets its own alias.
                hops += 1
                let hop = "n\(hops)"
                let previous = source.condition.sql.replacingOccurrences(of: "t0.", with: "\(hop).")
                let joinCondition = compiler.join(nav, from: hop, to: "t0")
                source = Source(table: target, condition: SQLFragment("EXISTS (SELECT 1 FROM \(StoreSchema.quote(source.table.name)) \(hop) WHERE (\(previous)) AND \(joinCondition))",
                                                                     source.condition.arguments),
                                single: !nav.isCollection)
            case .typeCast(let typeName):
                let derived = schema.model.schemas.flatMap(\.entityTypes).filter { schema.model.isType($0.qualifiedName, derivedFrom: typeName) }.map(\.qualifiedName)
                let placeholders = Array(repeating: "?", count: derived.count).joined(separator: ", ")
                source.condition = "(" + source.condition + SQLFragment(" AND COALESCE(t0._type, ?) IN (\(placeholders)))", [.text(source.table.entityType)] + derived.map { .text($0) })
            default:
                return (source, segments)
            }
            segments = segments.dropFirst()
        }
        return (source, segments)
    }

    mutating func keyCondition(_ parts: [KeyValue], _ table: StoreSchema.EntityTable, alias: String) throws -> SQLFragment {
        var conditions: [SQLFragment] = []
        for part in parts {
            guard let name = part.name ?? (table.keyColumns.count == 1 ? table.keyColumns[0] : nil), let column = table.column([name]) else {
                throw StoreError(.notFound, "The key does not match \(table.entitySet)'s key \(table.keyColumns.joined(separator: ","))")
            }
            let value: Value
            switch part.value.node {
            case .literal(let literal): value = literal
            case .alias(let aliasName):
                guard let expression = parsed.query.aliases[aliasName], case .literal(let literal) = expression.node else { throw fail("this key alias") }
                value = literal
            default: throw fail("this key value")
            }
            conditions.append(SQLFragment("\(alias).\(StoreSchema.quote(column.name)) = ?", [try compiler.encode(value, for: compiler.storageOf(column))]))
        }
        return SQLFragment.joined(conditions, " AND ")
    }

    // MARK: Run

    /// The rows the request addresses: the source's condition, `$filter` and `$search` as one
    /// condition on `t0`.
    mutating func condition(for source: Source) throws -> SQLFragment {
        var conditions = [source.condition]
        if let filter = bound.filter {
            let scope = ExpressionCompiler.Scope(table: source.table, alias: "t0", rootTable: source.table, rootAlias: "t0")
            conditions.append(try compiler.predicate(filter, scope))
        }
        if let search = parsed.query.search {
            conditions.append(try searchCondition(search, source.table))
        }
        return SQLFragment.joined(conditions, " AND ")
    }

    /// Refuses options the store does not implement, at any expand level: an answer that
    /// ignored them would look right and be wrong.
    static func refuseUnimplemented(_ options: QueryOptions, at place: String = "") throws {
        let whereText = place.isEmpty ? "" : " (in $expand=\(place))"
        if options.apply != nil {
            throw StoreError(.unsupported, "The store cannot answer this query: $apply (data aggregation) is not supported\(whereText)")
        }
        if options.compute != nil {
            throw StoreError(.unsupported, "The store cannot answer this query: $compute is not supported\(whereText)")
        }
        for item in options.expand ?? [] {
            let path = (place.isEmpty ? "" : place + "/") + item.path.joined(separator: "/")
            if item.path == ["*"], item.isRef || item.options?.isEmpty == false {
                throw StoreError(.unsupported, "The store cannot answer this query: $expand=*/$ref and options of * are not supported")
            }
            if let nested = item.options { try refuseUnimplemented(nested, at: path) }
        }
    }

    /// Runs the request; `Store.prepare` refused what the store does not implement.
    mutating func run(pageSize: Int?) throws -> QueryResult {
        let (source, rest) = try source()
        let whereClause = try condition(for: source)
        let fromClause = "\(StoreSchema.quote(source.table.name)) t0"

        // Paths that end beyond the entities.
        if let last = rest.first {
            switch last.kind {
            case .count:
                let rows = try reader.db.query("SELECT count(*) FROM \(fromClause) WHERE " + whereClause.sql, whereClause.arguments)
                if case .integer(let n)? = rows.first?.first { return .count(n) }
                return .count(0)
            case .ref:
                let rows = try rowids(fromClause, whereClause, order: try orderBy(source.table), limit: nil, offset: nil)
                return .references(try references(source.table, rows))
            case .property(let name):
                return try propertyValue(source, Array(rest), name: name, whereClause: whereClause)
            default:
                throw fail("the path segment \(last.kind)")
            }
        }

        if source.single {
            let rows = try rowids(fromClause, whereClause, order: [], limit: 1, offset: nil)
            guard let entity = try load(source.table, rows, options: parsed.query, boundExpand: bound.expand).first else { return .entity(nil) }
            return .entity(entity)
        }

        let page = try page(source, whereClause: whereClause, pageSize: pageSize)
        var collection = EntityCollection()
        collection.count = page.count
        var rows = try rowids(page.from, page.whereClause, order: page.order, limit: page.limit, offset: page.offset)
        if page.paged && rows.count > (pageSize ?? 0) {
            rows.removeLast()
            collection.nextLink = page.nextLink(lastRow: rows.last ?? 0, returned: rows.count, executor: self)
        }
        collection.entities = try load(source.table, rows, options: parsed.query, boundExpand: bound.expand)
        return .collection(collection)
    }

    /// The rows of one page of a collection read, as SQL parts.
    struct Page {
        var from: String
        var whereClause: SQLFragment
        var order: [SQLFragment]
        var limit: Int?
        var offset: Int
        /// Whether the page size cut the result (one row more than the page is asked for).
        var paged: Bool
        var keyset: Bool
        var skipToken: Int
        var count: Int64?

        func nextLink(lastRow: Int64, returned: Int, executor: QueryExecutor) -> String {
            let total = skipToken + returned
            return executor.nextLink(skipToken: keyset ? "r\(lastRow)o\(total)" : "\(total)")
        }
    }

    mutating func page(_ source: Source, whereClause: SQLFragment, pageSize: Int?) throws -> Page {
        let q = StoreSchema.quote
        let fromClause = "\(q(source.table.name)) t0"
        var count: Int64?
        if parsed.query.count == true || parsed.query.inlineCount == .allPages {
            let rows = try reader.db.query("SELECT count(*) FROM \(fromClause) WHERE " + whereClause.sql, whereClause.arguments)
            if case .integer(let n)? = rows.first?.first { count = n }
        }
        // `$skiptoken`: `r<rowid>o<n>` resumes after that row in key order (no OFFSET scan,
        // so the last page of a large set costs what the first does); a plain number, or a
        // row that is gone, resumes after n rows.
        var skipToken = 0
        var afterRow: Int64?
        if let token = parsed.query.skipToken {
            // Only tokens this store wrote: another one would silently restart at the beginning.
            let refused = StoreError(.badRequest, "$skiptoken=\(token.prefix(40)) is not a token of this service's next links")
            if token.hasPrefix("r"), let o = token.firstIndex(of: "o") {
                guard let row = Int64(token[token.index(after: token.startIndex)..<o]),
                      let count = Int(token[token.index(after: o)...]), count >= 0 else { throw refused }
                afterRow = row
                skipToken = count
            } else {
                guard let count = Int(token), count >= 0 else { throw refused }
                skipToken = count
            }
        }
        let keyset = bound.orderBy.isEmpty
        var keysetCondition: SQLFragment?
        if keyset, let afterRow, try !reader.db.query("SELECT 1 FROM \(q(source.table.name)) WHERE _rowid = ?", [.integer(afterRow)]).isEmpty {
            let columns = source.table.keyColumns.map { "t0.\(q($0))" }.joined(separator: ", ")
            let selected = source.table.keyColumns.map(q).joined(separator: ", ")
            keysetCondition = SQLFragment("(\(columns)) > (SELECT \(selected) FROM \(q(source.table.name)) WHERE _rowid = ?)", [.integer(afterRow)])
        }
        let skip = keysetCondition == nil ? (parsed.query.skip ?? 0) + skipToken : 0
        var limit = parsed.query.top.map { max(0, $0 - skipToken) }
        var paged = false
        if let pageSize, pageSize > 0, limit.map({ $0 > pageSize }) ?? true {
            limit = pageSize + 1
            paged = true
        }
        let pageWhere = keysetCondition.map { "(" + whereClause + ") AND " + $0 } ?? whereClause
        return Page(from: fromClause, whereClause: pageWhere, order: try orderBy(source.table), limit: limit, offset: skip, paged: paged,
                    keyset: keyset, skipToken: skipToken, count: count)
    }

    /// The next-page URL: the same request with `$skiptoken` set to the rows already returned.
    func nextLink(skipToken: String) -> String {
        var base = url
        var query = ""
        if let question = url.firstIndex(of: "?") {
            base = String(url[..<question])
            query = String(url[url.index(after: question)...])
        }
        let kept = query.split(separator: "&").filter { !$0.lowercased().hasPrefix("$skiptoken=") && !$0.lowercased().hasPrefix("%24skiptoken=") }
        return base + "?" + (kept.map(String.init) + ["$skiptoken=\(skipToken)"]).joined(separator: "&")
    }

    func rowids(_ from: String, _ whereClause: SQLFragment, order: [SQLFragment], limit: Int?, offset: Int?) throws -> [Int64] {
        let sql = select("t0._rowid", from, whereClause, order: order, limit: limit, offset: offset)
        return try reader.db.query(sql.sql, sql.arguments).compactMap { if case .integer(let id) = $0.first { return id }; return nil }
    }

    func select(_ columns: String, _ from: String, _ whereClause: SQLFragment, order: [SQLFragment], limit: Int?, offset: Int?) -> SQLFragment {
        var sql = SQLFragment("SELECT \(columns) FROM \(from) WHERE ") + whereClause
        if !order.isEmpty { sql = sql + " ORDER BY " + SQLFragment.joined(order, ", ") }
        if let limit { sql = sql + SQLFragment(" LIMIT ?", [.integer(Int64(limit))]) }
        if let offset, offset > 0 {
            if limit == nil { sql = sql + " LIMIT -1" }
            sql = sql + SQLFragment(" OFFSET ?", [.integer(Int64(offset))])
        }
        return sql
    }

    /// `$orderby`, then the key for a stable order. Nulls sort first ascending, last
    /// descending, which is SQLite's order too.
    mutating func orderBy(_ table: StoreSchema.EntityTable) throws -> [SQLFragment] {
        var parts: [SQLFragment] = []
        let scope = ExpressionCompiler.Scope(table: table, alias: "t0", rootTable: table, rootAlias: "t0")
        for item in bound.orderBy {
            let operand = try compiler.compile(item.expression, scope)
            let sql = try compiler.comparable(operand, operand.storage)
            parts.append(sql + (item.descending ? " DESC" : " ASC"))
        }
        parts += table.keyColumns.map { SQLFragment("t0.\(StoreSchema.quote($0)) ASC") }
        return parts
    }

    /// `$search`: terms and phrases matched case-insensitively in any string property.
    func searchCondition(_ search: SearchExpression, _ table: StoreSchema.EntityTable) throws -> SQLFragment {
        let columns = table.columns.filter { $0.kind == .primitive(.string) }
        guard !columns.isEmpty else { return SQLFragment("0") }
        func term(_ text: String) -> SQLFragment {
            let parts = columns.map { SQLFragment("instr(lower(t0.\(StoreSchema.quote($0.name))), lower(?)) > 0", [.text(text)]) }
            return "(" + SQLFragment.joined(parts, " OR ") + ")"
        }
        // SQLite 3.15's parser takes about 40 levels of parentheses: a chain of NOTs becomes one
        // NOT or none (NOT NOT x is x, also for NULL), a chain of ANDs or ORs one flat group.
        switch search {
        case .term(let text), .phrase(let text): return term(text)
        case .not:
            var inner = search
            var negated = false
            while case .not(let next) = inner {
                negated.toggle()
                inner = next
            }
            let condition = try searchCondition(inner, table)
            return negated ? "(NOT " + condition + ")" : condition
        case .and, .or:
            let isAnd: Bool = { if case .and = search { true } else { false } }()
            var operands: [SearchExpression] = []
            var pending = [search]
            while let next = pending.popLast() {
                switch (next, isAnd) {
                case (.and(let a, let b), true), (.or(let a, let b), false): pending += [b, a]
                default: operands.append(next)
                }
            }
            let parts = try operands.map { try searchCondition($0, table) }
            return "(" + SQLFragment.joined(parts, isAnd ? " AND " : " OR ") + ")"
        }
    }

    func references(_ table: StoreSchema.EntityTable, _ rows: [Int64]) throws -> [String] {
        try reader.entities(table, rowids: rows).map { _, entity in
            let key = table.keyColumns.compactMap { name -> String? in
                guard case .primitive(let value)? = entity[name] else { return nil }
                let literal = Literal.format(.primitive(value))
                return table.keyColumns.count == 1 ? literal : "\(name)=\(literal)"
            }.joined(separator: ",")
            return "\(table.entitySet)(\(key))"
        }
    }

    mutating func propertyValue(_ source: Source, _ rest: [PathSegment], name: String, whereClause: SQLFragment) throws -> QueryResult {
        let rows = try rowids("\(StoreSchema.quote(source.table.name)) t0", whereClause, order: [], limit: 1, offset: nil)
        guard let entity = try reader.entities(source.table, rowids: rows).first?.1 else { return .entity(nil) }
        var value = entity[name] ?? .null
        for segment in rest.dropFirst() {
            switch segment.kind {
            case .property(let sub):
                guard case .complex(let structured) = value else { return .value(.null) }
                value = structured[sub] ?? .null
            case .value:
                continue
            case .count:
                guard case .collection(let items) = value else { throw fail("$count on a non-collection property") }
                return .count(Int64(items.count))
            default:
                throw fail("the path segment \(segment.kind) after a property")
            }
        }
        return .value(value)
    }
}

/// One page of a collection read written as V4 JSON by ``Store/queryRows(_:version:pageSize:format:context:)``.
/// Close it with `writer.finish(nextLink:deltaLink:)`.
public struct RowPage: Sendable {
    /// The payload so far: context, count and the page's entities.
    public var writer: V4RowWriter
    /// The next page's URL relative to the service root (as in ``QueryResult``); nil on the last page.
    public var nextLink: String?
    /// How many entities the page holds.
    public var entityCount: Int
}

/// What ``Store/queryRows(_:version:pageSize:format:context:)`` answers.
public enum RowQueryAnswer: Sendable {
    /// A flat collection, written from its rows.
    case rows(RowPage)
    /// Any other request, answered as ``Store/query(_:version:pageSize:)`` answers it.
    case result(QueryResult)
}

extension Store {
    /// Answers a read request, writing flat collections straight as V4 JSON, row by row,
    /// without building ``Entity`` values: what a server sending large pages needs. That
    /// payload is the one `V4JSONWriter` writes for the entities ``query(_:version:pageSize:)``
    /// returns.
    ///
    /// Only requests whose entities are flat take the row path: a V4 collection of an entity
    /// set whose properties are all primitive or enum values (no complex or collection
    /// properties, no open type), with no `$select`, `$expand`, `$compute` or `$apply`. Every
    /// other request is answered as `query` answers it (``RowQueryAnswer/result(_:)``), from the
    /// same parse of the URL.
    public func queryRows(_ url: String, version requested: ODataVersion? = nil, pageSize: Int? = nil, format: JSONFormat = JSONFormat(),
                          context: String?) async throws -> RowQueryAnswer {
        let schema = self.schema
        let version = requestVersion(requested)
        let (parsed, bound) = try prepare(url, version: version)
        let query = parsed.query
        let rowsPossible = !version.isLegacy && query.select == nil && query.expand == nil && query.compute == nil && query.apply == nil
        return try await Self.boundingSQLDepth {
            try await read { reader in
                if rowsPossible {
                    var executor = QueryExecutor(
                        reader: reader, schema: schema, parsed: parsed, bound: bound, url: url, version: version)
                    if let page = try executor.runRows(pageSize: pageSize, format: format, context: context) { return .rows(page) }
                }
                var executor = QueryExecutor(
                    reader: reader, schema: schema, parsed: parsed, bound: bound, url: url, version: version)
                return .result(try executor.run(pageSize: pageSize))
            }
        }
    }
}

extension QueryExecutor {
    /// The row path of ``Store/queryRows(_:version:pageSize:format:context:)``; nil, before any
    /// SQL is compiled, for requests that need entities.
    mutating func runRows(pageSize: Int?, format: JSONFormat, context: String?) throws -> RowPage? {
        guard bound.expand.isEmpty, bound.compute.isEmpty else { return nil }
        let (source, rest) = try source()
        let table = source.table
        guard rest.isEmpty, !source.single, table.collections.isEmpty, table.dynamicTable == nil,
              table.columns.allSatisfy({ column in
                  guard column.path.count == 1 else { return false }
                  if case .complexPresence = column.kind { return false }
                  return true
              }) else { return nil }
        let page = try page(source, whereClause: try condition(for: source), pageSize: pageSize)
        let q = StoreSchema.quote
        let columns = (["_rowid", "_type", "_etag", "_editLink"] + table.columns.map(\.name)).map { "t0." + q($0) }.joined(separator: ", ")
        let sql = select(columns, page.from, page.whereClause, order: page.order, limit: page.limit, offset: page.offset)
        var writer = V4RowWriter(format: format, context: context, count: page.count, propertyNames: table.columns.map { $0.path[0] })
        let statement = try reader.db.statement(sql.sql, binding: sql.arguments)
        // Also when a stored value cannot be read: a statement left running would keep the
        // reader's transaction open.
        defer { statement.reset() }
        let rowLimit = page.paged ? (pageSize ?? 0) : Int.max
        var written = 0
        var lastRow: Int64 = 0
        var more = false
        while try statement.step() {
            guard written < rowLimit else {
                more = true
                break
            }
            if case .integer(let rowid) = statement.column(0) { lastRow = rowid }
            var typeName: String?
            if case .text(let type) = statement.column(1), type != table.entityType { typeName = type }
            var etag: String?
            if case .text(let text) = statement.column(2) { etag = text }
            var editLink: String?
            if case .text(let text) = statement.column(3) { editLink = text }
            writer.beginEntity(typeName: typeName, etag: etag, editLink: editLink)
            for (index, column) in table.columns.enumerated() {
                if !writer.annotatesTypes, Self.writeDirectly(column, statement: statement, at: index, to: &writer) { continue }
                let stored = statement.column(index + 4)
                switch column.kind {
                case .primitive(let type):
                    writer.value(try ValueStorage.decode(stored, as: type), at: index)
                default:
                    guard case .enumeration(let e) = try reader.decode(stored, column) else {
                        writer.enumValue(nil, at: index)
                        continue
                    }
                    writer.enumValue(e.members.joined(separator: ","), at: index)
                }
            }
            writer.endEntity()
            written += 1
        }
        let nextLink = more ? page.nextLink(lastRow: lastRow, returned: written, executor: self) : nil
        return RowPage(writer: writer, nextLink: nextLink, entityCount: written)
    }
}

extension QueryExecutor {
    /// Writes the common column kinds from the row without building values: integers in
    /// range, Booleans, ASCII strings, GUIDs, decimals and dates in their usual stored forms.
    /// False when the general decoding must write it.
    static func writeDirectly(_ column: StoreSchema.Column, statement: Statement, at index: Int, to writer: inout V4RowWriter) -> Bool {
        let position = index + 4
        guard case .primitive(let type) = column.kind else { return false }
        switch type {
        case .string:
            return statement.withText(position) { writer.asciiString($0, at: index) } ?? false
        case .guid:
            // Stored in canonical form (lowercase, 36 characters), which is the JSON form.
            return statement.withText(position) { text in
                guard text.count == 36, text.enumerated().allSatisfy({ offset, c in
                    (offset == 8 || offset == 13 || offset == 18 || offset == 23) ? c == 0x2D : (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66)
                }) else { return false }
                return writer.asciiString(text, at: index)
            } ?? false
        case .decimal:
            return statement.withBlob(position) { blob in
                guard let stored = ValueStorage.StoredDecimal(blob) else { return false }
                writer.decimal(at: index) { stored.append(to: &$0) }
                return true
            } ?? false
        case .dateTimeOffset, .dateTime:
            return statement.withText(position) { text in
                guard ValueStorage.isPlainInstant(text) else { return false }
                writer.temporal(at: index) { ValueStorage.appendPlainInstant(text, to: &$0) }
                return true
            } ?? false
        case .boolean:
            guard let value = statement.integer(position) else { return false }
            writer.boolean(value != 0, at: index)
        case .int64:
            guard let value = statement.integer(position) else { return false }
            writer.integer(value, int64: true, at: index)
        case .int32, .int16, .byte, .sbyte:
            guard let value = statement.integer(position), type.integralRange?.contains(value) == true else {
                return false
            }
            writer.integer(value, int64: false, at: index)
        default:
            return false
        }
        return true
    }
}
