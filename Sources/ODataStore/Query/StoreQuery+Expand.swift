import ODataCore

extension QueryExecutor {
    /// Loads entities by rowid, then expands navigation: one query per expand level (for all
    /// parents at once), never one per parent.
    mutating func load(_ table: StoreSchema.EntityTable, _ rowids: [Int64], options: QueryOptions, boundExpand: [BoundRequest.BoundExpand],
                       depth: Int = 0) throws -> [Entity] {
        try loadPairs(table, rowids, options: options, boundExpand: boundExpand, depth: depth).map(\.1)
    }

    mutating func loadPairs(_ table: StoreSchema.EntityTable, _ rowids: [Int64], options: QueryOptions, boundExpand: [BoundRequest.BoundExpand],
                            depth: Int) throws -> [(Int64, Entity)] {
        var loaded = try reader.entities(table, rowids: rowids)
        guard depth < 32 else { throw fail("$expand nested deeper than 32 levels") }
        for expand in boundExpand {
            try expandNavigation(table, &loaded, expand, depth: depth)
        }
        if let select = options.select {
            loaded = loaded.map { ($0.0, project($0.1, select, table)) }
        }
        return loaded
    }

    private func project(_ entity: Entity, _ select: [SelectItem], _ table: StoreSchema.EntityTable) -> Entity {
        if select.contains(where: { $0.kind == .star }) { return entity }
        var keep = Set(table.keyColumns)
        var subPaths: [String: [[String]]] = [:]
        for item in select {
            guard case .path(let segments) = item.kind, let first = segments.first(where: { !$0.contains(".") }) else { continue }
            keep.insert(first)
            let rest = Array(segments.drop { $0 != first }.dropFirst())
            if !rest.isEmpty { subPaths[first, default: []].append(rest) }
        }
        var result = entity
        result.properties = entity.properties.compactMap { property in
            guard keep.contains(property.name) else { return nil }
            guard let paths = subPaths[property.name], case .complex(let structured) = property.value else { return property }
            // Complex sub-properties: keep only the selected members.
            let names = Set(paths.compactMap(\.first))
            return NamedValue(name: property.name, value: .complex(StructuredValue(typeName: structured.typeName,
                                                                                    properties: structured.properties.filter { names.contains($0.name) })))
        }
        // V2 selects members of expanded entities by path (`$select=Contacts/FirstName`): the
        // inline entities keep those (and their keys); `Contacts` alone keeps them whole.
        for index in result.navigation.indices {
            let name = result.navigation[index].name
            guard let paths = subPaths[name], !select.contains(where: { $0.kind == .path([name]) }),
                  let nav = table.navigation(name), let target = schema.table(forEntitySet: nav.targetEntitySet) else { continue }
            let inner = paths.map { SelectItem(kind: $0 == ["*"] ? .star : .path($0)) }
            switch result.navigation[index].inline {
            case .entity(let child?)?:
                result.navigation[index].inline = .entity(project(child, inner, target))
            case .collection(var children)?:
                children.entities = children.entities.map { project($0, inner, target) }
                result.navigation[index].inline = .collection(children)
            default:
                break
            }
        }
        return result
    }

    private mutating func expandNavigation(_ table: StoreSchema.EntityTable, _ loaded: inout [(Int64, Entity)], _ expand: BoundRequest.BoundExpand,
                                           depth: Int) throws {
        guard !loaded.isEmpty else { return }
        if expand.item.path == ["*"] {
            // Every navigation property with a target in the store (`*/$count` counts each).
            for nav in table.navigation where schema.table(forEntitySet: nav.targetEntitySet) != nil {
                let item = ExpandItem(path: [nav.name], isCount: expand.item.isCount)
                let star = BoundRequest.BoundExpand(item: item, targetType: nil, isCollection: nav.isCollection, filter: nil,
                                                    orderBy: [], expand: [])
                try expandNavigation(table, &loaded, star, depth: depth)
            }
            return
        }
        guard expand.item.path.count == 1, let name = expand.item.path.first else {
            throw fail("$expand through complex properties or casts (\(expand.item.path.joined(separator: "/")))")
        }
        guard let nav = table.navigation(name), let target = schema.table(forEntitySet: nav.targetEntitySet) else {
            throw fail("$expand of \(name), which has no target entity set in the store")
        }
        let q = StoreSchema.quote
        let options = expand.item.options ?? QueryOptions()
        // One query: every (parent, child) pair for all parents, filtered and ordered.
        let parents = loaded.map(\.0)
        let placeholders = Array(repeating: "?", count: parents.count).joined(separator: ", ")
        var sql = SQLFragment("SELECT s._rowid, t0._rowid FROM \(q(table.name)) s JOIN \(q(target.name)) t0 ON \(compiler.join(nav, from: "s", to: "t0")) "
                              + "WHERE s._rowid IN (\(placeholders))", parents.map { .integer($0) })
        // `$it` is the resource the request addresses: the parent row `s` at the first level only.
        let scope = ExpressionCompiler.Scope(table: target, alias: "t0", rootTable: depth == 0 ? table : nil, rootAlias: "s")
        if let filter = expand.filter { sql = sql + " AND " + (try compiler.predicate(filter, scope)) }
        var order: [SQLFragment] = [SQLFragment("s._rowid")]
        for item in expand.orderBy {
            let operand = try compiler.compile(item.expression, scope)
            order.append((try compiler.comparable(operand, operand.storage)) + (item.descending ? " DESC" : " ASC"))
        }
        order += target.keyColumns.map { SQLFragment("t0.\(q($0))") }
        sql = sql + " ORDER BY " + SQLFragment.joined(order, ", ")
        let pairs = try reader.db.query(sql.sql, sql.arguments).compactMap { row -> (Int64, Int64)? in
            guard case .integer(let parent) = row[0], case .integer(let child) = row[1] else { return nil }
            return (parent, child)
        }
        // $skip and $top apply per parent.
        var grouped: [Int64: [Int64]] = [:]
        for (parent, child) in pairs { grouped[parent, default: []].append(child) }
        // `Nav/$count`: only the number of related entities (after $filter), no entities.
        if expand.item.isCount {
            for index in loaded.indices {
                var value = NavigationValue(name: name)
                value.count = Int64(grouped[loaded[index].0]?.count ?? 0)
                loaded[index].1.navigation.removeAll { $0.name == name }
                loaded[index].1.navigation.append(value)
            }
            return
        }
        let skip = options.skip ?? 0
        for (parent, children) in grouped {
            var slice = Array(children.dropFirst(skip))
            if let top = options.top { slice = Array(slice.prefix(top)) }
            grouped[parent] = slice
        }
        // `Nav/$ref`: entity references (`@odata.id` only) instead of the entities.
        if expand.item.isRef {
            for index in loaded.indices {
                let ids = grouped[loaded[index].0] ?? []
                let references = try references(target, ids).map { id -> Entity in
                    var reference = Entity()
                    reference.control.id = id
                    return reference
                }
                var value = NavigationValue(name: name)
                value.inline = nav.isCollection ? .collection(EntityCollection(entities: references)) : .entity(references.first)
                loaded[index].1.navigation.removeAll { $0.name == name }
                loaded[index].1.navigation.append(value)
            }
            return
        }
        var nestedExpand = expand.expand
        // $levels: expand the same navigation again below, up to the given depth.
        if let levels = options.levels {
            let remaining: ExpandLevels?
            switch levels {
            case .count(let n): remaining = n > 1 ? .count(n - 1) : nil
            case .max: remaining = depth < 8 ? .max : nil
            }
            if let remaining {
                var again = expand
                var againOptions = options
                againOptions.levels = remaining
                again.item.options = againOptions
                nestedExpand.append(again)
            }
        }
        let childIDs = Array(Set(grouped.values.flatMap { $0 }))
        var childOptions = options
        childOptions.expand = nil
        var byID: [Int64: Entity] = [:]
        for (id, entity) in try loadPairs(target, childIDs, options: childOptions, boundExpand: nestedExpand, depth: depth + 1) { byID[id] = entity }
        for index in loaded.indices {
            let ids = grouped[loaded[index].0] ?? []
            var value = NavigationValue(name: name)
            if nav.isCollection {
                var collection = EntityCollection(entities: ids.compactMap { byID[$0] })
                if options.count == true { collection.count = Int64(collection.entities.count) }
                value.inline = .collection(collection)
                if options.count == true { value.count = Int64(ids.count) }
            } else {
                value.inline = .entity(ids.first.flatMap { byID[$0] })
            }
            loaded[index].1.navigation.removeAll { $0.name == name }
            loaded[index].1.navigation.append(value)
        }
    }
}
