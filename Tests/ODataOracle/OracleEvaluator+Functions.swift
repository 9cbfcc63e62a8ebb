import Foundation
import ODataCore

extension OracleEvaluator {
    // MARK: Canonical functions (Part 2, 5.1.1.4–5.1.1.10)

    func call(_ name: String, _ bound: BoundExpression, _ scope: Scope) throws -> OracleValue {
        if name == "isof" { return try isOf(bound, scope) }
        if name == "cast" {
            guard bound.operands.count == 2, case .typeName(let target) = bound.operands[1].expression.node else {
                throw OracleUnsupported("cast of the instance")
            }
            return try cast(evaluate(bound.operands[0], scope), from: bound.operands[0].type, to: target)
        }
        let args = try bound.operands.map { try evaluate($0, scope) }
        // 5.1.1.4: a null argument makes the result null.
        if args.contains(where: \.isNull) { return .null }
        func string(_ index: Int) throws -> [Unicode.Scalar] {
            guard index < args.count, case .string(let s) = args[index] else {
                throw OracleUnsupported("\(name) argument \(index + 1)")
            }
            return Array(s.unicodeScalars)
        }
        func integer(_ index: Int) throws -> Int {
            guard index < args.count, case .integer(let i) = args[index] else {
                throw OracleUnsupported("\(name) argument \(index + 1)")
            }
            return Int(i)
        }
        func text(_ scalars: some Sequence<Unicode.Scalar>) -> OracleValue {
            var view = String.UnicodeScalarView()
            view.append(contentsOf: scalars)
            return .string(String(view))
        }
        switch name {
        case "contains": return .boolean(try Self.find(string(1), in: string(0)) != nil)
        case "substringof": return .boolean(try Self.find(string(0), in: string(1)) != nil)
        case "startswith": return .boolean(try string(0).starts(with: string(1)))
        case "endswith": return .boolean(try string(0).reversed().starts(with: string(1).reversed()))
        case "indexof": return .integer(Int64(try Self.find(string(1), in: string(0)) ?? -1))
        case "length": return .integer(Int64(try string(0).count))
        case "substring":
            let s = try string(0)
            let start = try integer(1)
            guard start >= 0 else { throw OracleUnsupported("a negative substring start") }
            let tail = start >= s.count ? [] : Array(s[start...])
            guard args.count > 2 else { return text(tail) }
            let length = try integer(2)
            guard length >= 0 else { throw OracleUnsupported("a negative substring length") }
            return text(tail.prefix(length))
        case "tolower":
            // 5.1.1.7.2: by Unicode rules (full case mapping), not only ASCII.
            return .string(String(String.UnicodeScalarView(try string(0))).lowercased())
        case "toupper":
            return .string(String(String.UnicodeScalarView(try string(0))).uppercased())
        case "trim":
            let s = try string(0)
            let isSpace: (Unicode.Scalar) -> Bool = { $0.properties.isWhitespace }
            let start = s.firstIndex { !isSpace($0) } ?? s.endIndex
            let end = s.lastIndex { !isSpace($0) }.map { $0 + 1 } ?? start
            return text(start < end ? s[start..<end] : [])
        case "concat": return text(try string(0) + string(1))
        case "year", "month", "day":
            let date: DateValue
            switch args[0] {
            case .date(let days): date = DateValue(daysSinceEpoch: days)
            case .dateTimeOffset(let d): date = d.date  // in the value's own offset
            default: throw OracleUnsupported("\(name) of \(args[0])")
            }
            return .integer(Int64(name == "year" ? date.year : name == "month" ? date.month : date.day))
        case "hour", "minute", "second", "fractionalseconds":
            let picos: Int64
            switch args[0] {
            case .timeOfDay(let p): picos = p
            case .dateTimeOffset(let d): picos = d.time.picosecondsSinceMidnight
            default: throw OracleUnsupported("\(name) of \(args[0])")
            }
            let seconds = picos / 1_000_000_000_000
            switch name {
            case "hour": return .integer(seconds / 3600)
            case "minute": return .integer(seconds / 60 % 60)
            case "second": return .integer(seconds % 60)
            default:
                return .decimal(Decimal(picos % 1_000_000_000_000) / Decimal(1_000_000_000_000))
            }
        case "date":
            guard case .dateTimeOffset(let d) = args[0] else { throw OracleUnsupported("date of \(args[0])") }
            return .date(d.date.daysSinceEpoch)
        case "time":
            guard case .dateTimeOffset(let d) = args[0] else { throw OracleUnsupported("time of \(args[0])") }
            return .timeOfDay(d.time.picosecondsSinceMidnight)
        case "totaloffsetminutes":
            guard case .dateTimeOffset(let d) = args[0] else { throw OracleUnsupported("offset of \(args[0])") }
            return .integer(Int64(d.offsetMinutes ?? 0))
        case "round", "floor", "ceiling":
            switch args[0] {
            case .integer: return args[0]
            case .double(let x):
                // 5.1.1.9.3: mid-points away from zero.
                let rule: FloatingPointRoundingRule =
                    name == "round" ? .toNearestOrAwayFromZero : name == "floor" ? .down : .up
                return .double(x.rounded(rule))
            case .decimal(var x):
                var result = Decimal()
                let mode: NSDecimalNumber.RoundingMode = name == "round" ? .plain : name == "floor" ? .down : .up
                NSDecimalRound(&result, &x, 0, mode)
                return .decimal(result)
            default: throw OracleUnsupported("\(name) of \(args[0])")
            }
        case "mindatetime":
            return .dateTimeOffset(
                DateTimeOffsetValue(
                    date: DateValue(year: 1, month: 1, day: 1), time: TimeOfDayValue(hour: 0, minute: 0),
                    offsetMinutes: 0))
        case "maxdatetime":
            let time = TimeOfDayValue(hour: 23, minute: 59, second: 59, fraction: "999999999999")
            return .dateTimeOffset(
                DateTimeOffsetValue(date: DateValue(year: 9999, month: 12, day: 31), time: time, offsetMinutes: 0))
        default:
            throw OracleUnsupported("the function \(name)")
        }
    }

    static func find(_ needle: [Unicode.Scalar], in haystack: [Unicode.Scalar]) -> Int? {
        if needle.isEmpty { return 0 }
        guard needle.count <= haystack.count else { return nil }
        for start in 0...(haystack.count - needle.count)
        where haystack[start..<start + needle.count].elementsEqual(needle) {
            return start
        }
        return nil
    }

    /// `isof(Type)`: whether the instance is of the type or derived from it.
    func isOf(_ bound: BoundExpression, _ scope: Scope) throws -> OracleValue {
        guard bound.operands.count == 1, case .typeName(let name) = bound.operands[0].expression.node,
            case .entity(let entity) = scope.this
        else {
            throw OracleUnsupported("isof of a value")
        }
        guard let type = entity.typeName else { throw OracleUnsupported("an entity without its type") }
        return .boolean(model.isType(type, derivedFrom: name))
    }

    /// `cast` of a primitive or enum value (5.1.1.10.1): null stays null, a cast that fails is
    /// null; to Edm.String as the payload literal; from Edm.String when the text is a literal
    /// of the target; numbers to numbers when the value fits.
    func cast(_ value: OracleValue, from source: ExpressionType, to target: String) throws -> OracleValue {
        if value.isNull { return .null }
        switch (value, target) {
        case (.string, "Edm.String"): return value
        case (.integer(let i), "Edm.String"): return .string(String(i))
        case (.boolean(let b), "Edm.String"): return .string(b ? "true" : "false")
        case (.date(let d), "Edm.String"): return .string(DateValue(daysSinceEpoch: d).description)
        case (.guid(let g), "Edm.String"): return .string(g)
        case (.enumeration(let typeName, let n), "Edm.String"):
            guard let type = model.enumType(typeName) else { throw OracleUnsupported("enum \(typeName)") }
            if let member = type.members.first(where: { $0.value == n }) { return .string(member.name) }
            let names = type.members.filter { $0.value != 0 && n & $0.value == $0.value }.map(\.name)
            return .string(names.joined(separator: ","))
        case (.enumeration(_, let n), _) where Self.integerRanges[target] != nil:
            // Rule 9: an enum casts to an integer type as its value, when it fits.
            return Self.fits(n, target) ? .integer(n) : .null
        case (.integer(let i), _) where Self.integerRanges[target] != nil:
            return Self.fits(i, target) ? .integer(i) : .null
        case (.integer(let i), "Edm.Double"), (.integer(let i), "Edm.Single"): return .double(Double(i))
        case (.integer(let i), "Edm.Decimal"): return .decimal(Decimal(i))
        case (.decimal(let d), "Edm.Double"): return .double(Self.nearestDouble(d))
        case (.decimal, "Edm.Decimal"), (.double, "Edm.Double"): return value
        case (.string(let s), _):
            guard let type = PrimitiveType(qualifiedName: target) else { throw OracleUnsupported("cast to \(target)") }
            guard let parsed = try? Literal.parsePayloadValue(s, as: type) else { return .null }
            let result = try OracleValue.from(parsed)
            if case .integer(let i) = result, !Self.fits(i, target) { return .null }
            return result
        default:
            throw OracleUnsupported("cast of \(value) to \(target)")
        }
    }

    static let integerRanges: [String: ClosedRange<Int64>] = [
        "Edm.Byte": 0...255, "Edm.SByte": -128...127, "Edm.Int16": -32768...32767,
        "Edm.Int32": Int64(Int32.min)...Int64(Int32.max), "Edm.Int64": Int64.min...Int64.max,
    ]

    static func fits(_ value: Int64, _ target: String) -> Bool {
        integerRanges[target].map { $0.contains(value) } ?? true
    }
}
