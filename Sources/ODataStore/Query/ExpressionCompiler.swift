import ODataCore

/// Compiles bound OData expressions to parameterized SQL over a store's tables.
///
/// Semantics follow OData, not SQL: `eq`/`ne` treat null as a value (`IS`/`IS NOT`), string
/// functions are case-sensitive (`instr`/`substr`, never `LIKE`), `substring`/`indexof` are
/// zero-based, DateTimeOffset compares by instant, `any`/`all` become `EXISTS` subqueries.
/// What cannot be expressed exactly fails with `StoreError.unsupported` naming the feature.
struct ExpressionCompiler {
    let schema: StoreSchema
    let aliases: [String: CommonExpression]
    private var aliasCounter = 0
    /// The predicate of the lambda that ends the path being compiled.
    var lambdaPredicate: BoundExpression?
    /// The `$filter` of the `$count` step of the path being compiled.
    var countFilter: BoundExpression?
    /// Whether the node being compiled only selects rows (a WHERE, and/or inside one, a case
    /// condition, a lambda predicate), where a null answer stands for false. Elsewhere (under
    /// `not`, as a value) a comparison's null must be false: OData's `gt`/`ge`/`lt`/`le`/`in`
    /// are false, not unknown, when an operand is null (Part 2, 5.1.1.1), where SQL's are null.
    private var selecting = false
    /// A V2 request: `cast` to `Edm.String` writes V2's forms (an Edm.Date is an Edm.DateTime,
    /// an Edm.TimeOfDay an Edm.Time there; see ``PrimitiveCast/cast(_:to:legacy:)``).
    var legacyStrings = false

    init(schema: StoreSchema, aliases: [String: CommonExpression]) {
        self.schema = schema
        self.aliases = aliases
    }

    /// Where names resolve: the current row's table and alias, and lambda variables.
    struct Scope {
        var table: StoreSchema.EntityTable
        var alias: String
        var variables: [String: Variable] = [:]
        /// The row `$it` refers to: the resource the request addresses. Nil where it is not in
        /// the query (a `$filter` of an `$expand` nested in another).
        var rootTable: StoreSchema.EntityTable?
        var rootAlias: String
    }

    /// A lambda variable: an entity row, or an element of a collection table.
    enum Variable {
        case entity(StoreSchema.EntityTable, alias: String)
        case element(StoreSchema.CollectionTable, alias: String)
    }

    /// How a compiled value is stored, which decides how literals are encoded against it.
    enum Storage: Equatable {
        case primitive(PrimitiveType)
        case enumeration(String)
        case literal(Value)
        case boolean
        case null
        case untyped
    }

    struct Operand {
        var sql: SQLFragment
        var storage: Storage
    }

    static func unsupported(_ feature: String) -> StoreError {
        StoreError(.unsupported, "The store cannot answer this query: \(feature) is not supported")
    }

    mutating func nextAlias() -> String {
        aliasCounter += 1
        return "a\(aliasCounter)"
    }

    // MARK: Predicates

    /// A Boolean SQL condition for a `$filter` (or lambda predicate).
    mutating func predicate(_ expression: BoundExpression, _ scope: Scope) throws -> SQLFragment {
        let saved = selecting
        selecting = true
        defer { selecting = saved }
        return try condition(expression, scope)
    }

    /// The SQL condition for `expression`, compiled in the current ``selecting`` state.
    private mutating func condition(_ expression: BoundExpression, _ scope: Scope) throws -> SQLFragment {
        let operand = try compile(expression, scope)
        switch operand.storage {
        case .boolean: return operand.sql
        case .primitive(.boolean), .untyped: return "(" + operand.sql + " = 1)"
        case .literal(.primitive(.boolean(let b))): return SQLFragment(b ? "1" : "0")
        case .null, .literal(.null): return SQLFragment("NULL")
        default: throw Self.unsupported("a non-Boolean filter")
        }
    }

    // MARK: Values

    mutating func compile(_ expression: BoundExpression, _ scope: Scope) throws -> Operand {
        let selectingHere = selecting
        selecting = false
        defer { selecting = selectingHere }
        switch expression.expression.node {
        case .literal(let value):
            if value == .null { return Operand(sql: SQLFragment("NULL"), storage: .null) }
            return Operand(sql: SQLFragment(""), storage: .literal(value))
        case .alias(let name):
            // OData: an alias the request gives no value is null.
            guard let value = aliases[name] else { return Operand(sql: SQLFragment("NULL"), storage: .null) }
            let binder = ExpressionBinder(model: schema.model, aliases: aliases)
            let bound = try binder.bind(value, itType: scope.table.entityType, input: "@\(name)")
            return try compile(bound, scope)
        case .path:
            return try path(expression, scope)
        case .unary(let op, _):
            let operand = try compile(expression.operands[0], scope)
            switch op {
            case .not:
                let inner = try asCondition(operand)
                return Operand(sql: "(NOT " + inner + ")", storage: .boolean)
            case .negate:
                if case .literal(let value) = operand.storage {
                    return Operand(sql: SQLFragment(""), storage: .literal(try negate(value)))
                }
                try requireArithmetic(operand.storage, "negation")
                return Operand(sql: "(-" + operand.sql + ")", storage: operand.storage)
            }
        case .binary(let op, _, _):
            return try binary(op, expression.operands[0], expression.operands[1], scope, selecting: selectingHere)
        case .call(let name, _):
            return try call(name, expression, scope)
        case .list:
            throw Self.unsupported("a list outside 'in'")
        case .caseOf:
            var parts: [SQLFragment] = []
            var storage: Storage = .null
            var index = 0
            while index + 1 < expression.operands.count {
                let condition = try predicate(expression.operands[index], scope)
                let value = try compile(expression.operands[index + 1], scope)
                if storage == .null || storage == .untyped { storage = concreteStorage(value) }
                parts.append("WHEN " + condition + " THEN " + (try materialize(value, as: storage)))
                index += 2
            }
            return Operand(sql: "(CASE " + SQLFragment.joined(parts, " ") + " END)", storage: storage)
        case .array, .object, .typeName:
            throw Self.unsupported("JSON literals and type names as values")
        }
    }

    private func concreteStorage(_ operand: Operand) -> Storage {
        if case .literal(let value) = operand.storage, case .primitive(let p) = value { return .primitive(p.type) }
        return operand.storage
    }

    func asCondition(_ operand: Operand) throws -> SQLFragment {
        switch operand.storage {
        case .boolean: return operand.sql
        case .primitive(.boolean), .untyped: return "(" + operand.sql + " = 1)"
        case .literal(.primitive(.boolean(let b))): return SQLFragment(b ? "1" : "0")
        case .null, .literal(.null): return SQLFragment("NULL")
        default: throw Self.unsupported("'not' on a non-Boolean value")
        }
    }

    /// SQL for an operand, encoding a literal for the given storage.
    func materialize(_ operand: Operand, as storage: Storage) throws -> SQLFragment {
        guard case .literal(let value) = operand.storage else { return operand.sql }
        return SQLFragment("?", [try encode(value, for: storage)])
    }

    func encode(_ value: Value, for storage: Storage) throws -> DatabaseValue {
        switch (storage, value) {
        case (_, .null): return .null
        case (.primitive(let type), _):
            guard case .primitive(let converted)? = Literal.convert(value, to: type) else {
                // Issue 34's rule: a number that cannot fit the type it meets is refused, naming
                // the type (`I8 gt 255`, `I32 eq 1.5`); the oracle counts it as this refusal.
                throw StoreError(.badRequest, "The literal \(Literal.format(value)) does not fit \(type.rawValue)")
            }
            if type == .dateTimeOffset || type == .dateTime, case .dateTimeOffset(let d) = converted { return .text(ValueStorage.instantKey(d)) }
            if type == .dateTimeOffset || type == .dateTime, case .dateTime(let d) = converted { return .text(ValueStorage.instantKey(d)) }
            return ValueStorage.encode(converted)
        case (.enumeration(let typeName), .enumeration(let e)):
            return .integer(try enumNumber(e.members, typeName))
        case (.enumeration(let typeName), .primitive(.string(let text))):
            return .integer(try enumNumber(text.split(separator: ",").map(String.init), typeName))
        case (.enumeration, .primitive(let p)):
            guard case .primitive(.int64(let n))? = Literal.convert(.primitive(p), to: .int64) else { throw Self.unsupported("this enum literal") }
            return .integer(n)
        case (.boolean, .primitive(.boolean(let b))): return .integer(b ? 1 : 0)
        case (_, .primitive(let p)):
            return ValueStorage.encode(p)
        default:
            throw Self.unsupported("the literal \(Literal.format(value)) here")
        }
    }

    func enumNumber(_ members: [String], _ typeName: String) throws -> Int64 {
        try schema.model.enumNumber(members, typeName)
    }

    private func negate(_ value: Value) throws -> Value {
        guard case .primitive(let p) = value else { throw Self.unsupported("negating this literal") }
        switch p {
        case .int32(let v): return .primitive(.int32(-v))
        case .int64(let v): return .primitive(.int64(-v))
        case .double(let v): return .primitive(.double(-v))
        case .decimal(let d): return .primitive(.decimal(DecimalValue("-" + d.description) ?? d))
        default: throw Self.unsupported("negating this literal")
        }
    }

    private func requireArithmetic(_ storage: Storage, _ what: String) throws {
        switch storage {
        case .primitive(let p) where p.isIntegral || p == .double || p == .single: return
        case .literal(.primitive(let p)) where p.type.isIntegral || p.type == .double || p.type == .single: return
        case .untyped, .null: return
        case .primitive(.decimal), .literal(.primitive(.decimal)):
            throw Self.unsupported("\(what) on Edm.Decimal values (decimals are stored exactly and compared, but not computed in SQL)")
        default:
            throw Self.unsupported("\(what) on this type")
        }
    }

    // MARK: Binary operators

    private mutating func binary(
        _ op: BinaryOperator, _ lhs: BoundExpression, _ rhs: BoundExpression, _ scope: Scope,
        selecting selectingHere: Bool
    ) throws -> Operand {
        /// A comparison that SQL answers null for a null operand, made false where that matters.
        func twoValued(_ sql: SQLFragment) -> SQLFragment { selectingHere ? sql : "COALESCE(" + sql + ", 0)" }
        switch op {
        case .and, .or:
            // and/or pass their own state on: under `not`, their comparisons must be two-valued.
            let saved = selecting
            selecting = selectingHere
            defer { selecting = saved }
            let a = try condition(lhs, scope)
            let b = try condition(rhs, scope)
            return Operand(sql: .binary(a, op == .and ? "AND" : "OR", b), storage: .boolean)
        case .eq, .ne, .lt, .le, .gt, .ge:
            var a = try compile(lhs, scope)
            var b = try compile(rhs, scope)
            // Decide the storage both sides are compared in.
            let storage = comparisonStorage(a.storage, b.storage)
            if case .literal = a.storage, case .literal = b.storage {
                // Two literals: let SQLite compare the encoded values.
            }
            a.sql = try comparable(a, storage)
            b.sql = try comparable(b, storage)
            let sqlOp: String
            switch op {
            case .eq: sqlOp = "IS"
            case .ne: sqlOp = "IS NOT"
            case .lt: sqlOp = "<"
            case .le: sqlOp = "<="
            case .gt: sqlOp = ">"
            default: sqlOp = ">="
            }
            let comparison = SQLFragment.binary(a.sql, sqlOp, b.sql)
            return Operand(sql: op == .eq || op == .ne ? comparison : twoValued(comparison), storage: .boolean)
        case .add, .sub, .mul, .div, .mod, .divby:
            let a = try compile(lhs, scope)
            let b = try compile(rhs, scope)
            if op == .add || op == .sub, let moved = try shiftedDate(op, a, b) { return moved }
            try requireArithmetic(a.storage, "arithmetic")
            try requireArithmetic(b.storage, "arithmetic")
            let storage = arithmeticStorage(a.storage, b.storage)
            let sa = try materialize(a, as: storage)
            let sb = try materialize(b, as: storage)
            switch op {
            case .add: return Operand(sql: .binary(sa, "+", sb), storage: storage)
            case .sub: return Operand(sql: .binary(sa, "-", sb), storage: storage)
            case .mul: return Operand(sql: .binary(sa, "*", sb), storage: storage)
            case .mod:
                if case .primitive(let p) = storage, p == .double || p == .single {
                    // SQLite's `%` takes its operands' integer parts; OData's mod keeps the
                    // fraction, with the sign of the left operand (`2.5 mod 2` is 0.5).
                    return Operand(sql: "oodata_mod(" + sa + ", " + sb + ")", storage: storage)
                }
                return Operand(sql: .binary(sa, "%", sb), storage: storage)
            case .div:
                // Integer division truncates in both OData and SQLite; division by zero is null.
                return Operand(sql: .binary(sa, "/", sb), storage: storage)
            default:
                return Operand(sql: "(CAST(" + sa + " AS REAL) / " + sb + ")", storage: .primitive(.double))
            }
        case .has:
            let a = try compile(lhs, scope)
            let b = try compile(rhs, scope)
            let storage = a.storage
            let flag = try materialize(b, as: storage)
            return Operand(sql: "((" + a.sql + " & " + flag + ") = " + flag + ")", storage: .boolean)
        case .in:
            let a = try compile(lhs, scope)
            guard case .list(let items) = rhs.expression.node else {
                if case .collection = rhs.type, case .path = rhs.expression.node {
                    return try membership(a, rhs, scope)
                }
                throw Self.unsupported("'in' with this right-hand side")
            }
            _ = items
            var values: [SQLFragment] = []
            for item in rhs.operands {
                let operand = try compile(item, scope)
                values.append(try comparable(operand, concreteStorage(a)))
            }
            if values.isEmpty { return Operand(sql: SQLFragment("0"), storage: .boolean) }
            let left = try comparable(a, concreteStorage(a))
            let membership = "(" + left + " IN (" + SQLFragment.joined(values, ", ") + "))"
            return Operand(sql: twoValued(membership), storage: .boolean)
        }
    }

    /// `At add duration'PT1H'`, `Day sub duration'P1D'`: a date-time or date moved by a duration
    /// literal (``DateArithmetic``; stored values by `oodata_shift`). Nil when the left side is
    /// no date; a duration that is not a literal is refused, as is part of a day for a date.
    private func shiftedDate(_ op: BinaryOperator, _ a: Operand, _ b: Operand) throws -> Operand? {
        let dates: Set<PrimitiveType> = [.dateTimeOffset, .dateTime, .date]
        let type: PrimitiveType
        switch a.storage {
        case .primitive(let t) where dates.contains(t): type = t
        case .literal(.primitive(let v)) where dates.contains(v.type): type = v.type
        default: return nil
        }
        let length: DurationValue
        switch b.storage {
        case .literal(.primitive(.duration(let d))), .literal(.primitive(.time(let d))): length = d
        case .primitive(.duration), .primitive(.time):
            throw Self.unsupported("adding to \(type.rawValue) a duration that is not a literal")
        default: return nil
        }
        let sign: Int64 = op == .add ? 1 : -1
        let total = length.totalPicoseconds
        if type == .date, total.picos != 0 || total.whole % 86_400 != 0 {
            throw Self.unsupported("moving an Edm.Date by part of a day")
        }
        if case .literal(.primitive(let value)) = a.storage {
            guard let moved = DateArithmetic.shifted(value, seconds: sign * total.whole, picoseconds: sign * total.picos)
            else { throw StoreError(.badRequest, "\(Literal.format(.primitive(value))) moved by \(length) is no date") }
            return Operand(sql: SQLFragment(""), storage: .literal(.primitive(moved)))
        }
        let moved =
            SQLFragment("oodata_shift(?, ", [.text(type.rawValue)]) + a.sql
            + SQLFragment(", ?, ?)", [.integer(sign * total.whole), .integer(sign * total.picos)])
        return Operand(sql: moved, storage: .primitive(type))
    }

    /// `x in CollectionProperty`: an EXISTS over the collection table.
    private mutating func membership(_ value: Operand, _ collection: BoundExpression, _ scope: Scope) throws -> Operand {
        guard case .path(let path) = collection.expression.node, path.root == .implicit,
              case .member(let name)? = path.steps.first, path.steps.count == 1,
              let table = scope.table.collections.first(where: { $0.property == name }), table.columns.count == 1 else {
            throw Self.unsupported("'in' over this collection")
        }
        let alias = nextAlias()
        let q = StoreSchema.quote
        let column = table.columns[0]
        let storage: Storage = column.kind == .enumeration("") ? .untyped : storageOf(column)
        let left = try comparable(value, storage)
        let sql = "EXISTS (SELECT 1 FROM \(q(table.name)) \(alias) WHERE \(alias).owner = \(scope.alias)._rowid AND \(alias).\(q(column.name)) IS " + left + ")"
        return Operand(sql: SQLFragment(sql.sql, sql.arguments), storage: .boolean)
    }

    private func comparisonStorage(_ a: Storage, _ b: Storage) -> Storage {
        switch (a, b) {
        case (.literal(let v), .literal):
            if case .primitive(let p) = v { return .primitive(p.type) }
            return .untyped
        case (.literal, _), (.null, _): return b
        default: return a
        }
    }

    private func arithmeticStorage(_ a: Storage, _ b: Storage) -> Storage {
        func type(_ s: Storage) -> PrimitiveType? {
            switch s {
            case .primitive(let p): p
            case .literal(.primitive(let p)): p.type
            default: nil
            }
        }
        if let x = type(a), let y = type(b), let promoted = PrimitiveType.promoted(x, y) { return .primitive(promoted) }
        return type(a).map { .primitive($0) } ?? type(b).map { .primitive($0) } ?? .untyped
    }

    /// The SQL that compares an operand in `storage` (DateTimeOffsets by their instant).
    func comparable(_ operand: Operand, _ storage: Storage) throws -> SQLFragment {
        if case .literal = operand.storage { return try materialize(operand, as: storage) }
        if case .primitive(let p) = operand.storage, p == .dateTimeOffset || p == .dateTime {
            return "substr(" + operand.sql + ", 1, \(ValueStorage.instantLength))"
        }
        if case .primitive(.decimal) = operand.storage, case .primitive(let other) = storage, other != .decimal, other.isNumeric {
            throw Self.unsupported("comparing an Edm.Decimal property with a computed \(other.rawValue) value")
        }
        // The other way round (`M gt I32`): a decimal's stored BLOB against an integer or a real
        // would compare by SQLite's type order, not by value.
        if case .primitive(.decimal) = storage, case .primitive(let other) = operand.storage, other != .decimal,
            other.isNumeric
        {
            throw Self.unsupported("comparing an Edm.Decimal value with an \(other.rawValue) property or value")
        }
        return operand.sql
    }

    func storageOf(_ column: StoreSchema.Column) -> Storage {
        switch column.kind {
        case .primitive(let p): .primitive(p)
        case .enumeration(let name): .enumeration(name)
        case .complexPresence: .untyped
        }
    }
}
