import ODataCore

extension ExpressionCompiler {
    /// Where a path has got to.
    enum Location {
        /// An entity row (with a prefix inside complex properties).
        case row(StoreSchema.EntityTable, alias: String, prefix: [String])
        /// An element of a collection table (with a prefix inside complex elements).
        case element(StoreSchema.CollectionTable, alias: String, prefix: [String])
        /// A collection-valued navigation from a row.
        case navigationCollection(StoreSchema.EntityTable, StoreSchema.Navigation, alias: String)
        /// A collection-valued property of a row.
        case propertyCollection(StoreSchema.CollectionTable, ownerAlias: String)
        /// A value.
        case value(Operand)
    }

    /// The join condition from `source` (alias `s`) to the navigation's target (alias `t`).
    func join(_ nav: StoreSchema.Navigation, from source: String, to target: String) -> String {
        let q = StoreSchema.quote
        switch nav.relation {
        case .linkTable(let link):
            return "\(target)._rowid IN (SELECT \(link.targetColumn) FROM \(q(link.name)) WHERE \(link.sourceColumn) = \(source)._rowid)"
        case .foreignKey(let sourceColumns, let targetColumns):
            return zip(sourceColumns, targetColumns).map { "\(target).\(q($1)) = \(source).\(q($0))" }.joined(separator: " AND ")
        }
    }

    mutating func path(_ expression: BoundExpression, _ scope: Scope) throws -> Operand {
        guard case .path(let path) = expression.expression.node else { throw Self.unsupported("this path") }
        // A count step's `$filter` is compiled with it (one per path, as its only operand);
        // `$search` is not: without it the step would count every related row.
        countFilter = nil
        for step in path.steps {
            guard case .count(let filter, let search) = step, filter != nil || search != nil else { continue }
            guard search == nil, countFilter == nil, expression.operands.count == 1 else {
                throw Self.unsupported("$count with $search, or with more than one $filter, inside an expression")
            }
            countFilter = expression.operands[0]
        }
        var steps = expression.steps[...]
        lambdaPredicate = nil
        if case .lambda(_, _, let predicate)? = path.steps.last, predicate != nil {
            lambdaPredicate = expression.operands.last
        }
        var location: Location
        switch path.root {
        case .implicit, .this:
            location = .row(scope.table, alias: scope.alias, prefix: [])
        case .it:
            guard let root = scope.rootTable else {
                throw Self.unsupported("$it in the options of an $expand nested inside another $expand")
            }
            location = .row(root, alias: scope.rootAlias, prefix: [])
        case .variable(let name):
            guard let variable = scope.variables[name] else { throw StoreError(.unknownProperty, "Lambda variable \(name) is not in scope") }
            switch variable {
            case .entity(let table, let alias): location = .row(table, alias: alias, prefix: [])
            case .element(let table, let alias): location = .element(table, alias: alias, prefix: [])
            }
        case .root:
            // `$root/Set(key)/…`: a scalar subquery on the keyed entity.
            guard let first = steps.first, first.kind == .entitySet, let table = schema.table(forEntitySet: first.name) else {
                throw Self.unsupported("this $root path")
            }
            steps = steps.dropFirst()
            guard case .path(let syntax) = expression.expression.node, syntax.steps.count > 1, case .key(let parts) = syntax.steps[1] else {
                throw Self.unsupported("$root without a key")
            }
            steps = steps.dropFirst()
            let alias = nextAlias()
            var condition = SQLFragment("")
            for (index, part) in parts.enumerated() {
                let name = part.name ?? table.keyColumns.first ?? ""
                guard let column = table.column([name]), case .literal(let value) = part.value.node else { throw Self.unsupported("this key in $root") }
                if index > 0 { condition = condition + " AND " }
                condition = condition + SQLFragment("\(alias).\(StoreSchema.quote(column.name)) = ?", [try encode(value, for: storageOf(column))])
            }
            let inner = try walk(steps, from: .row(table, alias: alias, prefix: []), scope)
            return Operand(sql: "(SELECT " + inner.sql + " FROM \(StoreSchema.quote(table.name)) \(alias) WHERE " + condition + ")", storage: inner.storage)
        case .alias:
            throw Self.unsupported("paths starting at a parameter alias or annotation")
        }
        return try walk(steps, from: location, scope)
    }

    /// Follows the remaining steps from a location to a value.
    mutating func walk(_ steps: ArraySlice<BoundStep>, from start: Location, _ scope: Scope) throws -> Operand {
        var location = start
        var remaining = steps
        let q = StoreSchema.quote
        while let step = remaining.first {
            remaining = remaining.dropFirst()
            switch (step.kind, location) {
            case (.property, .row(let table, let alias, let prefix)):
                let path = prefix + [step.name]
                if prefix.isEmpty, let collection = table.collections.first(where: { $0.property == step.name }) {
                    location = .propertyCollection(collection, ownerAlias: alias)
                } else if let column = table.column(path) {
                    if case .complexPresence = column.kind {
                        location = .row(table, alias: alias, prefix: path)
                    } else {
                        location = .value(Operand(sql: SQLFragment("\(alias).\(q(column.name))"), storage: storageOf(column)))
                    }
                } else {
                    throw Self.unsupported("the property \(path.joined(separator: "/")) in a filter (it is not stored as a column)")
                }
            case (.property, .element(let table, let alias, let prefix)):
                let path = prefix + [step.name]
                guard let column = table.columns.first(where: { $0.path == path }) else {
                    throw Self.unsupported("the property \(path.joined(separator: "/")) of a collection element")
                }
                if case .complexPresence = column.kind {
                    location = .element(table, alias: alias, prefix: path)
                } else {
                    location = .value(Operand(sql: SQLFragment("\(alias).\(q(column.name))"), storage: storageOf(column)))
                }
            case (.dynamicProperty, .row(let table, let alias, _)):
                guard let dynamic = table.dynamicTable else { throw Self.unsupported("dynamic property \(step.name)") }
                location = .value(Operand(sql: SQLFragment("(SELECT value FROM \(q(dynamic)) WHERE owner = \(alias)._rowid AND name = ?)", [.text(step.name)]),
                                          storage: .untyped))
            case (.navigation, .row(let table, let alias, _)):
                guard let nav = table.navigation(step.name), let target = schema.table(forEntitySet: nav.targetEntitySet) else {
                    throw Self.unsupported("the navigation property \(step.name), which has no target entity set in the store")
                }
                if nav.isCollection {
                    location = .navigationCollection(table, nav, alias: alias)
                } else {
                    // A single-valued navigation: the rest of the path is a scalar subquery.
                    let targetAlias = nextAlias()
                    let inner = try walk(remaining, from: .row(target, alias: targetAlias, prefix: []), scope)
                    return Operand(sql: "(SELECT " + inner.sql + " FROM \(q(target.name)) \(targetAlias) WHERE \(join(nav, from: alias, to: targetAlias)))",
                                   storage: inner.storage)
                }
            case (.cast, .row(let table, _, let prefix)) where prefix.isEmpty:
                // Columns of derived types live in the same table, null in rows of other types, so
                // a cast to a derived type narrows by itself for the properties that type declares;
                // a property it inherits would be read from every row (`O.Special/ID`).
                if step.name != table.entityType, let next = remaining.first, next.kind == .property,
                    let derived = schema.model.entityType(step.name),
                    !derived.properties.contains(where: { $0.name == next.name })
                {
                    throw Self.unsupported("\(next.name) after the cast to \(step.name), which inherits it")
                }
                continue
            case (.cast, _):
                continue
            case (.count, .navigationCollection(_, let nav, let alias)):
                guard let target = schema.table(forEntitySet: nav.targetEntitySet) else { throw Self.unsupported("$count here") }
                let targetAlias = nextAlias()
                let linked = join(nav, from: alias, to: targetAlias)
                var sql = SQLFragment("(SELECT count(*) FROM \(q(target.name)) \(targetAlias) WHERE \(linked)")
                if let filter = countFilter {
                    countFilter = nil
                    // `Lines/$count($filter=Qty gt 1)`: names in the filter are the related row's.
                    let inner = Scope(
                        table: target, alias: targetAlias, variables: scope.variables, rootTable: scope.rootTable,
                        rootAlias: scope.rootAlias)
                    sql = sql + " AND " + (try predicate(filter, inner))
                }
                location = .value(Operand(sql: sql + ")", storage: .primitive(.int64)))
            case (.count, .propertyCollection) where countFilter != nil:
                throw Self.unsupported("$count with $filter over a collection of values inside an expression")
            case (.count, .propertyCollection(let collection, let owner)):
                location = .value(Operand(sql: SQLFragment("(SELECT count(*) FROM \(q(collection.name)) WHERE owner = \(owner)._rowid)"), storage: .primitive(.int64)))
            case (.any, _), (.all, _):
                return try lambda(step, location, scope)
            default:
                throw Self.unsupported("the path step \(step.kind) \(step.name) here")
            }
        }
        switch location {
        case .value(let operand):
            return operand
        case .row(let table, let alias, let prefix) where !prefix.isEmpty:
            // A complex value: its presence column (null when the value is null).
            guard let column = table.column(prefix) else { throw Self.unsupported("comparing whole complex values") }
            return Operand(sql: SQLFragment("\(alias).\(q(column.name))"), storage: .untyped)
        case .element(let table, let alias, let prefix) where prefix.isEmpty && table.columns.count == 1:
            // A lambda variable over a collection of primitives: the element itself.
            return Operand(sql: SQLFragment("\(alias).\(q(table.columns[0].name))"), storage: storageOf(table.columns[0]))
        default:
            throw Self.unsupported("using a collection or an entity as a value")
        }
    }

    /// `any`/`all` as EXISTS subqueries; the lambda variable is bound to the subquery's row.
    private mutating func lambda(_ step: BoundStep, _ location: Location, _ scope: Scope) throws -> Operand {
        let q = StoreSchema.quote
        let alias = nextAlias()
        var inner = scope
        var from: String
        var condition: String
        switch location {
        case .navigationCollection(_, let nav, let owner):
            guard let target = schema.table(forEntitySet: nav.targetEntitySet) else { throw Self.unsupported("this lambda") }
            from = "\(q(target.name)) \(alias)"
            condition = join(nav, from: owner, to: alias)
            // Names without the variable's prefix still refer to the instance outside the lambda.
            if !step.name.isEmpty { inner.variables[step.name] = .entity(target, alias: alias) }
        case .propertyCollection(let collection, let owner):
            from = "\(q(collection.name)) \(alias)"
            condition = "\(alias).owner = \(owner)._rowid"
            if !step.name.isEmpty { inner.variables[step.name] = .element(collection, alias: alias) }
        default:
            throw Self.unsupported("any/all on something that is not a collection")
        }
        let predicateExpression = lambdaPredicate
        guard let body = predicateExpression else {
            // `any()` without a predicate: the collection is not empty.
            return Operand(sql: SQLFragment("EXISTS (SELECT 1 FROM \(from) WHERE \(condition))"), storage: .boolean)
        }
        lambdaPredicate = nil
        let predicate = try self.predicate(body, inner)
        if step.kind == .any {
            return Operand(sql: "EXISTS (SELECT 1 FROM \(from) WHERE \(condition) AND " + predicate + ")", storage: .boolean)
        }
        // all: no element for which the predicate is not true (null counts as not true).
        return Operand(sql: "NOT EXISTS (SELECT 1 FROM \(from) WHERE \(condition) AND NOT COALESCE(" + predicate + ", 0))", storage: .boolean)
    }
}
