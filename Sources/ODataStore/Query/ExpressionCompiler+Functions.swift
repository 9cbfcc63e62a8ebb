import Foundation
import ODataCore

extension ExpressionCompiler {
    /// The offset in minutes of a stored DateTimeOffset (`…Z`, `…+hh:mm`, or none).
    static func offsetMinutes(_ c: SQLFragment) -> SQLFragment {
        "(CASE WHEN length(" + c + ") <= 35 THEN 0 ELSE (CASE substr(" + c + ", 35, 1) WHEN '-' THEN -1 ELSE 1 END) * "
            + "(CAST(substr(" + c + ", 36, 2) AS INTEGER) * 60 + CAST(substr(" + c + ", 39, 2) AS INTEGER)) END)"
    }

    /// The local date-time (in the value's own offset) of a stored DateTimeOffset, as SQLite
    /// `YYYY-MM-DD HH:MM:SS` text. Years outside 0000–9999 are not supported by SQLite's
    /// date functions.
    static func localDateTime(_ c: SQLFragment) -> SQLFragment {
        "datetime(substr(" + c + ", 3, 10) || ' ' || substr(" + c + ", 14, 8), " + offsetMinutes(c) + " || ' minutes')"
    }

    /// A date-time value known when the query is compiled (`now()`, `mindatetime()`, …).
    static func dateTimeLiteral(_ value: DateTimeOffsetValue) -> Operand {
        Operand(sql: SQLFragment(""), storage: .literal(.primitive(.dateTimeOffset(value))))
    }

    static let supportedFunctions: Set<String> = [
        "contains", "substringof", "startswith", "endswith", "indexof", "length", "substring", "tolower", "toupper",
        "trim", "concat",
        "year", "month", "day", "hour", "minute", "second", "fractionalseconds", "date", "time", "totaloffsetminutes",
        "now",
        "mindatetime", "maxdatetime", "round", "floor", "ceiling", "isof", "cast",
    ]

    /// The bookkeeping column behind a local-state function (`sap.isLocal()` and the others).
    static func localStateColumn(_ name: String) -> String? {
        let bare = name.hasPrefix("sap.") ? String(name.dropFirst(4)) : name
        switch bare {
        case "islocal": return "_isLocal"
        case "haspendingchanges": return "_pending"
        case "inerrorstate": return "_error"
        case "upsertedlastdownload": return "_upserted"
        default: return nil
        }
    }

    mutating func call(_ name: String, _ expression: BoundExpression, _ scope: Scope) throws -> Operand {
        if let column = Self.localStateColumn(name) {
            if column == "_upserted" {
                // Rows hold the generation of the download that wrote them (see
                // `StoreWriter.downloadGeneration()`); the subquery runs once per statement.
                let current = "coalesce((SELECT value FROM store_meta WHERE key = 'upserted'), 1)"
                return Operand(sql: SQLFragment("(\(scope.alias)._upserted = \(current))"), storage: .boolean)
            }
            return Operand(sql: SQLFragment("(\(scope.alias).\(column) <> 0)"), storage: .boolean)
        }
        guard Self.supportedFunctions.contains(name) else { throw Self.unsupported("the function \(name)") }
        var args: [Operand] = []
        for operand in expression.operands {
            if case .typeName = operand.expression.node {
                args.append(Operand(sql: SQLFragment(""), storage: .untyped))
            } else {
                args.append(try compile(operand, scope))
            }
        }
        func text(_ index: Int) throws -> SQLFragment { try materialize(args[index], as: .primitive(.string)) }
        func integer(_ index: Int) throws -> SQLFragment { try materialize(args[index], as: .primitive(.int64)) }
        func storageType(_ index: Int) -> PrimitiveType? {
            switch args[index].storage {
            case .primitive(let p): p
            case .literal(.primitive(let p)): p.type
            default: nil
            }
        }
        switch name {
        case "contains":
            return Operand(sql: "(instr(" + (try text(0)) + ", " + (try text(1)) + ") > 0)", storage: .boolean)
        case "substringof":
            return Operand(sql: "(instr(" + (try text(1)) + ", " + (try text(0)) + ") > 0)", storage: .boolean)
        case "startswith":
            let prefix = try text(1)
            return Operand(
                sql: "(substr(" + (try text(0)) + ", 1, length(" + prefix + ")) = " + prefix + ")", storage: .boolean)
        case "endswith":
            let suffix = try text(1)
            let value = try text(0)
            // substr(x, -0) is all of x: the empty suffix is tested on its own, and a null value
            // stays null (not true) with it.
            let test = "(length(" + suffix + ") = 0 OR substr(" + value + ", -length(" + suffix + ")) = " + suffix + ")"
            return Operand(sql: "(CASE WHEN " + value + " IS NULL THEN NULL ELSE " + test + " END)", storage: .boolean)
        case "indexof":
            return Operand(
                sql: "(instr(" + (try text(0)) + ", " + (try text(1)) + ") - 1)", storage: .primitive(.int32))
        case "length":
            return Operand(sql: "length(" + (try text(0)) + ")", storage: .primitive(.int32))
        case "substring":
            var sql = "substr(" + (try text(0)) + ", " + (try integer(1)) + " + 1"
            if args.count > 2 { sql = sql + ", " + (try integer(2)) }
            return Operand(sql: sql + ")", storage: .primitive(.string))
        case "tolower":
            return Operand(sql: "oodata_lower(" + (try text(0)) + ")", storage: .primitive(.string))
        case "toupper":
            return Operand(sql: "oodata_upper(" + (try text(0)) + ")", storage: .primitive(.string))
        case "trim":
            return Operand(sql: "oodata_trim(" + (try text(0)) + ")", storage: .primitive(.string))
        case "concat":
            return Operand(sql: "(" + (try text(0)) + " || " + (try text(1)) + ")", storage: .primitive(.string))
        case "year", "month", "day", "hour", "minute", "second", "fractionalseconds", "date", "time",
            "totaloffsetminutes":
            return try datePart(name, args[0], storageType(0))
        case "now":
            return Self.dateTimeLiteral(Self.now())
        case "mindatetime":
            let date = DateValue(year: 1, month: 1, day: 1)
            return Self.dateTimeLiteral(
                DateTimeOffsetValue(date: date, time: TimeOfDayValue(hour: 0, minute: 0), offsetMinutes: 0))
        case "maxdatetime":
            let date = DateValue(year: 9999, month: 12, day: 31)
            let time = TimeOfDayValue(hour: 23, minute: 59, second: 59, fraction: "999999999999")
            return Self.dateTimeLiteral(DateTimeOffsetValue(date: date, time: time, offsetMinutes: 0))
        case "round", "floor", "ceiling":
            guard let type = storageType(0), type.isIntegral || type == .double || type == .single else {
                throw Self.unsupported("\(name) on Edm.Decimal or non-numeric values")
            }
            let x = try materialize(args[0], as: .primitive(type))
            if type.isIntegral { return Operand(sql: x, storage: .primitive(type)) }
            // One function of the store's own (`oodata_round`), exact for every double: SQLite's
            // round of a value past 2^63 goes through its 16-digit printf (the oracle found
            // 12345678901234567890.0 changed), and CAST(… AS INTEGER) saturates there.
            return Operand(sql: "oodata_round(" + x + SQLFragment(", ?)", [.text(name)]), storage: .primitive(.double))
        case "isof":
            guard expression.operands.count == 1, case .typeName(let typeName) = expression.operands[0].expression.node
            else {
                throw Self.unsupported("isof with an expression argument")
            }
            let derived = schema.model.schemas.flatMap(\.entityTypes).filter {
                schema.model.isType($0.qualifiedName, derivedFrom: typeName)
            }.map(\.qualifiedName)
            guard !derived.isEmpty else { return Operand(sql: SQLFragment("0"), storage: .boolean) }
            let placeholders = Array(repeating: "?", count: derived.count).joined(separator: ", ")
            return Operand(
                sql: SQLFragment(
                    "(COALESCE(\(scope.alias)._type, ?) IN (\(placeholders)))",
                    [.text(scope.table.entityType)] + derived.map { .text($0) }),
                storage: .boolean)
        case "cast":
            guard expression.operands.count == 2, case .typeName(let typeName) = expression.operands[1].expression.node,
                let target = PrimitiveType(qualifiedName: typeName)
            else {
                throw Self.unsupported("cast to a structured type")
            }
            return try cast(args[0], to: target)
        default:
            throw Self.unsupported("the function \(name)")
        }
    }

    /// `cast(value, target)` (see ``PrimitiveCast``): a literal is cast now; a stored or
    /// computed value by `oodata_cast` on its stored form (``StoreFunctions``). An enum casts
    /// to `Edm.String` as its member's name; other casts of enums fail (null).
    func cast(_ value: Operand, to target: PrimitiveType) throws -> Operand {
        switch value.storage {
        case .null, .literal(.null):
            return Operand(sql: SQLFragment("NULL"), storage: .null)
        case .literal(.primitive(let p)):
            guard PrimitiveCast.isComputed(from: p.type, to: target) else {
                throw Self.unsupported("cast of \(p.type.rawValue) to \(target.rawValue)")
            }
            guard let cast = PrimitiveCast.cast(p, to: target, legacy: legacyStrings) else {
                return Operand(sql: SQLFragment("NULL"), storage: .null)
            }
            return Operand(sql: SQLFragment(""), storage: .literal(.primitive(cast)))
        case .primitive(let source):
            return try castStored(value, from: source, to: target)
        case .boolean:
            return try castStored(value, from: .boolean, to: target)
        case .enumeration(let typeName):
            if let range = target.integralRange {
                // Part 2, 5.1.1.10.1, rule 9: an enum casts to an integer type as its value, when
                // that fits the type (null otherwise).
                let bounds = SQLFragment(
                    " BETWEEN ? AND ? THEN ", [.integer(range.lowerBound), .integer(range.upperBound)])
                let check = "(CASE WHEN " + value.sql + bounds + value.sql + " END)"
                return Operand(sql: check, storage: .primitive(target))
            }
            guard target == .string else { return Operand(sql: SQLFragment("NULL"), storage: .null) }
            guard let type = schema.model.enumType(typeName) else {
                throw Self.unsupported("cast of the enum \(typeName) to Edm.String")
            }
            var sql = "(CASE " + value.sql
            for member in type.members {
                sql = sql + SQLFragment(" WHEN ? THEN ?", [.integer(member.value), .text(member.name)])
            }
            if type.isFlags {
                // A combination: its members' names in declaration order, as a payload writes it
                // (`Red,Blue`).
                var names: [SQLFragment] = []
                for member in type.members where member.value != 0 {
                    names.append(
                        "(CASE WHEN (" + value.sql
                            + SQLFragment(
                                " & ?) = ? THEN ? ELSE '' END)",
                                [.integer(member.value), .integer(member.value), .text("," + member.name)]))
                }
                if !names.isEmpty {
                    // (A null stays null: the parts would make it an empty string.)
                    sql = sql + " ELSE (CASE WHEN " + value.sql + " IS NULL THEN NULL ELSE substr("
                        + SQLFragment.joined(names, " || ") + ", 2) END)"
                }
            }
            return Operand(sql: sql + " END)", storage: .primitive(.string))
        default:
            throw Self.unsupported("cast of this value to \(target.rawValue)")
        }
    }

    private func castStored(_ value: Operand, from source: PrimitiveType, to target: PrimitiveType) throws -> Operand {
        guard PrimitiveCast.isComputed(from: source, to: target) else {
            throw Self.unsupported("cast of \(source.rawValue) to \(target.rawValue)")
        }
        // Integers are all stored as SQLite integers, and a computed one (`-(U8)`, `I16 add I8`)
        // may lie outside its declared type's range: it is read as the Int64 it is, and a cast
        // to a smaller type checks the range (null when it does not fit), even to the same type.
        let from: PrimitiveType = source.isIntegral ? .int64 : source
        if from == target { return Operand(sql: value.sql, storage: .primitive(target)) }
        let stored = try materialize(value, as: .primitive(source))
        let legacy = legacyStrings && target == .string ? ", 1)" : ")"
        return Operand(
            sql: SQLFragment("oodata_cast(?, ?, ", [.text(from.rawValue), .text(target.rawValue)]) + stored + legacy,
            storage: .primitive(target))
    }

    static func now() -> DateTimeOffsetValue {
        let seconds = Int64(Date().timeIntervalSince1970)
        let days = Int(seconds / 86_400)
        let second = Int(seconds % 86_400)
        return DateTimeOffsetValue(
            date: DateValue(daysSinceEpoch: days),
            time: TimeOfDayValue(hour: second / 3600, minute: second / 60 % 60, second: second % 60), offsetMinutes: 0)
    }

    private func datePart(_ name: String, _ arg: Operand, _ type: PrimitiveType?) throws -> Operand {
        guard let type else { throw Self.unsupported("\(name) on this value") }
        let c = try materialize(arg, as: .primitive(type))
        func int(_ sql: SQLFragment) -> Operand {
            Operand(sql: "CAST(" + sql + " AS INTEGER)", storage: .primitive(.int32))
        }
        switch (type, name) {
        case (.date, "year"):
            return Operand(sql: "(CAST(substr(" + c + ", 1, 6) AS INTEGER) - 100000)", storage: .primitive(.int32))
        case (.date, "month"): return int("substr(" + c + ", 8, 2)")
        case (.date, "day"): return int("substr(" + c + ", 11, 2)")
        case (.timeOfDay, "hour"): return int("substr(" + c + ", 1, 2)")
        case (.timeOfDay, "minute"): return int("substr(" + c + ", 4, 2)")
        case (.timeOfDay, "second"): return int("substr(" + c + ", 7, 2)")
        case (.timeOfDay, "fractionalseconds"):
            return Operand(sql: "CAST('0' || substr(" + c + ", 9) AS REAL)", storage: .primitive(.double))
        case (.dateTimeOffset, _), (.dateTime, _):
            let local = Self.localDateTime(c)
            switch name {
            case "year": return int("strftime('%Y', " + local + ")")
            case "month": return int("strftime('%m', " + local + ")")
            case "day": return int("strftime('%d', " + local + ")")
            case "hour": return int("strftime('%H', " + local + ")")
            case "minute": return int("strftime('%M', " + local + ")")
            case "second": return int("strftime('%S', " + local + ")")
            case "fractionalseconds":
                return Operand(sql: "CAST('0' || substr(" + c + ", 22, 13) AS REAL)", storage: .primitive(.double))
            case "date":
                return Operand(sql: "('10' || strftime('%Y-%m-%d', " + local + "))", storage: .primitive(.date))
            case "time":
                return Operand(
                    sql: "(strftime('%H:%M:%S', " + local + ") || substr(" + c + ", 22, 13))",
                    storage: .primitive(.timeOfDay))
            case "totaloffsetminutes": return Operand(sql: Self.offsetMinutes(c), storage: .primitive(.int32))
            default: break
            }
        default: break
        }
        throw Self.unsupported("\(name) on \(type.rawValue)")
    }
}
