import Foundation
import ODataCore

extension OracleEvaluator {
    // MARK: Operators

    func binary(_ op: BinaryOperator, _ lhs: BoundExpression, _ rhs: BoundExpression, _ scope: Scope) throws
        -> OracleValue
    {
        switch op {
        case .and, .or:
            let a = try truth(evaluate(lhs, scope))
            let b = try truth(evaluate(rhs, scope))
            // Part 2, 5.1.1.1.7–8: null is unknown.
            if op == .and {
                if a == false || b == false { return .boolean(false) }
                if a == nil || b == nil { return .null }
                return .boolean(true)
            }
            if a == true || b == true { return .boolean(true) }
            if a == nil || b == nil { return .null }
            return .boolean(false)
        case .eq, .ne:
            let (a, b) = try comparands(lhs, rhs, scope)
            let equal: Bool
            if a.isNull || b.isNull {
                equal = a.isNull && b.isNull
            } else {
                equal = try Self.order(a, b, lhs.type, rhs.type, model) == 0
            }
            return .boolean(op == .eq ? equal : !equal)
        case .gt, .ge, .lt, .le:
            let (a, b) = try comparands(lhs, rhs, scope)
            // 5.1.1.1.3–6: false, not null, when an operand is null.
            if a.isNull || b.isNull { return .boolean(false) }
            let order = try Self.order(a, b, lhs.type, rhs.type, model)
            switch op {
            case .gt: return .boolean(order > 0)
            case .ge: return .boolean(order >= 0)
            case .lt: return .boolean(order < 0)
            default: return .boolean(order <= 0)
            }
        case .has:
            let a = try evaluate(lhs, scope)
            let b = try evaluate(rhs, scope)
            if a.isNull || b.isNull { return .null }
            guard case .enumeration(let typeName, let value) = a else { throw OracleUnsupported("has on \(a)") }
            let flags = try Self.enumNumber(b, typeName, model)
            return .boolean(value & flags == flags)
        case .in:
            let a = try evaluate(lhs, scope)
            let b = try evaluate(rhs, scope)
            guard case .collection(let items) = b else {
                if b.isNull { return .boolean(false) }
                throw OracleUnsupported("in over \(b)")
            }
            // Membership is equality with one of the items; a null is a member of nothing.
            if a.isNull { return .boolean(false) }
            let element: ExpressionType
            if case .collection(let e) = rhs.type { element = e } else { element = .untyped }
            for item in items where !item.isNull {
                if try Self.order(a, item, lhs.type, element, model) == 0 { return .boolean(true) }
            }
            return .boolean(false)
        case .add, .sub, .mul, .div, .divby, .mod:
            let a = try evaluate(lhs, scope)
            let b = try evaluate(rhs, scope)
            if a.isNull || b.isNull { return .null }
            return try Self.arithmetic(op, a, b)
        }
    }

    /// Both sides of a comparison. A numeric literal compared with an Edm.Single takes that
    /// type first (`F eq 3.3` holds for the Single 3.3): the literal's type is open in the URL
    /// (Part 2, 5.1.1.18), and a Single value is what the user wrote too. (The oracle first
    /// widened the Single to Double and called `F eq 3.3` false; that reading was dropped.)
    func comparands(_ lhs: BoundExpression, _ rhs: BoundExpression, _ scope: Scope) throws
        -> (OracleValue, OracleValue)
    {
        var a = try evaluate(lhs, scope)
        var b = try evaluate(rhs, scope)
        func single(_ value: OracleValue, _ side: BoundExpression, other: ExpressionType) -> OracleValue {
            guard other == .primitive(.single), case .literal = side.expression.node,
                let number = Self.double(value)
            else { return value }
            return .double(Double(Float(number)))
        }
        a = single(a, lhs, other: rhs.type)
        b = single(b, rhs, other: lhs.type)
        return (a, b)
    }

    func truth(_ value: OracleValue) throws -> Bool? {
        switch value {
        case .boolean(let b): return b
        case .null: return nil
        default: throw OracleUnsupported("a Boolean operator on \(value)")
        }
    }

    static func enumNumber(_ value: OracleValue, _ typeName: String, _ model: Model) throws -> Int64 {
        guard let type = model.enumType(typeName) else { throw OracleUnsupported("enum \(typeName)") }
        switch value {
        case .enumeration(_, let n): return n
        case .integer(let n): return n
        case .string(let text): return try OracleValue.number(text.split(separator: ",").map(String.init), of: type)
        default: throw OracleUnsupported("\(value) as \(typeName)")
        }
    }

    /// -1, 0 or 1: how `a` compares with `b`, by value (numbers across types, instants, code
    /// points). `aType`/`bType` give the enum type a string or number names a member of.
    static func order(_ a: OracleValue, _ b: OracleValue, _ aType: ExpressionType, _ bType: ExpressionType,
                      _ model: Model) throws -> Int
    {
        func sign<T: Comparable>(_ x: T, _ y: T) -> Int { x < y ? -1 : (x == y ? 0 : 1) }
        switch (a, b) {
        case (.integer(let x), .integer(let y)): return sign(x, y)
        case (.double(let x), .double(let y)): return sign(x, y)
        case (.decimal(let x), .decimal(let y)): return sign(x, y)
        case (.integer(let x), .double(let y)): return sign(Double(x), y)
        case (.double(let x), .integer(let y)): return sign(x, Double(y))
        case (.integer(let x), .decimal(let y)): return sign(Decimal(x), y)
        case (.decimal(let x), .integer(let y)): return sign(x, Decimal(y))
        case (.decimal(let x), .double(let y)): return sign(Self.nearestDouble(x), y)
        case (.double(let x), .decimal(let y)): return sign(x, Self.nearestDouble(y))
        case (.string(let x), .string(let y)): return scalarOrder(x, y)
        case (.boolean(let x), .boolean(let y)): return sign(x ? 1 : 0, y ? 1 : 0)
        case (.date(let x), .date(let y)): return sign(x, y)
        case (.dateTimeOffset(let x), .dateTimeOffset(let y)):
            let p = x.instant, q = y.instant
            return p.seconds != q.seconds ? sign(p.seconds, q.seconds) : sign(p.picoseconds, q.picoseconds)
        case (.date(let x), .dateTimeOffset(let y)):
            return try order(.dateTimeOffset(midnight(x)), .dateTimeOffset(y), aType, bType, model)
        case (.dateTimeOffset(let x), .date(let y)):
            return try order(.dateTimeOffset(x), .dateTimeOffset(midnight(y)), aType, bType, model)
        case (.timeOfDay(let x), .timeOfDay(let y)): return sign(x, y)
        case (.duration(let x), .duration(let y)):
            let p = x.totalPicoseconds, q = y.totalPicoseconds
            return p.whole != q.whole ? sign(p.whole, q.whole) : sign(p.picos, q.picos)
        case (.duration, .string(let text)):
            guard case .duration(let d) = try Literal.parsePayloadValue(text, as: .duration) else {
                throw OracleUnsupported("\(text) as a duration")
            }
            return try order(a, .duration(d), aType, bType, model)
        case (.string, .duration): return -(try order(b, a, bType, aType, model))
        case (.guid(let x), .guid(let y)): return sign(x, y)
        case (.binary(let x), .binary(let y)): return x == y ? 0 : 1
        case (.enumeration(let t, let x), _):
            return sign(x, try enumNumber(b, t, model))
        case (_, .enumeration(let t, let y)):
            return sign(try enumNumber(a, t, model), y)
        default:
            throw OracleUnsupported("comparing \(a) with \(b)")
        }
    }

    /// Strings order by code point (what UTF-8 byte order gives).
    static func scalarOrder(_ x: String, _ y: String) -> Int {
        let p = x.unicodeScalars.map(\.value), q = y.unicodeScalars.map(\.value)
        if p == q { return 0 }
        return p.lexicographicallyPrecedes(q) ? -1 : 1
    }

    static func midnight(_ days: Int) -> DateTimeOffsetValue {
        DateTimeOffsetValue(
            date: DateValue(daysSinceEpoch: days), time: TimeOfDayValue(hour: 0, minute: 0), offsetMinutes: 0)
    }

    /// `$orderby`'s order: null first, then by value.
    static func sortOrder(_ a: OracleValue, _ b: OracleValue, _ model: Model) throws -> Int {
        switch (a.isNull, b.isNull) {
        case (true, true): return 0
        case (true, false): return -1
        case (false, true): return 1
        default: return try order(a, b, .untyped, .untyped, model)
        }
    }

    static func arithmetic(_ op: BinaryOperator, _ a: OracleValue, _ b: OracleValue) throws -> OracleValue {
        switch (a, b) {
        case (.dateTimeOffset(let d), .duration(let x)) where op == .add || op == .sub:
            // 5.1.1.2.1–2: a duration moves the date-time, which keeps its offset.
            let localSeconds = Int64(d.date.daysSinceEpoch) * 86_400
                + Int64(d.time.hour * 3600 + d.time.minute * 60 + d.time.second)
            let start = (seconds: localSeconds, picoseconds: d.time.picosecondsSinceMidnight % 1_000_000_000_000)
            let length = x.totalPicoseconds
            let sign: Int64 = op == .add ? 1 : -1
            var picos = start.picoseconds + sign * length.picos
            var seconds = start.seconds + sign * length.whole
            seconds += picos >= 0 ? picos / 1_000_000_000_000 : -((-picos + 999_999_999_999) / 1_000_000_000_000)
            picos -= (picos >= 0 ? picos / 1_000_000_000_000 : -((-picos + 999_999_999_999) / 1_000_000_000_000))
                * 1_000_000_000_000
            var moved = utc(seconds: seconds, picoseconds: picos)
            moved.offsetMinutes = d.offsetMinutes
            moved.usesZ = d.usesZ
            return .dateTimeOffset(moved)
        case (.date(let day), .duration(let x)) where op == .add || op == .sub:
            let length = x.totalPicoseconds
            guard length.picos == 0, length.whole % 86_400 == 0 else {
                throw OracleUnsupported("a date moved by part of a day")
            }
            let days = Int(length.whole / 86_400)
            return .date(op == .add ? day + days : day - days)
        case (.integer(let x), .integer(let y)):
            let result: (partialValue: Int64, overflow: Bool)
            switch op {
            case .add: result = x.addingReportingOverflow(y)
            case .sub: result = x.subtractingReportingOverflow(y)
            case .mul: result = x.multipliedReportingOverflow(by: y)
            case .div:
                guard y != 0 else { throw OracleUnsupported("integer division by zero") }
                result = x.dividedReportingOverflow(by: y)
            case .mod:
                guard y != 0 else { throw OracleUnsupported("integer mod by zero") }
                result = x.remainderReportingOverflow(dividingBy: y)
            default:
                return .double(Double(x) / Double(y))
            }
            guard !result.overflow else { throw OracleUnsupported("integer overflow") }
            return .integer(result.partialValue)
        case (.double, _), (_, .double):
            guard let x = double(a), let y = double(b) else { throw OracleUnsupported("\(op) on \(a), \(b)") }
            switch op {
            case .add: return .double(x + y)
            case .sub: return .double(x - y)
            case .mul: return .double(x * y)
            case .div, .divby: return .double(x / y)
            default: return .double(x.truncatingRemainder(dividingBy: y))
            }
        case (.decimal, _), (_, .decimal):
            guard let x = decimal(a), let y = decimal(b) else { throw OracleUnsupported("\(op) on \(a), \(b)") }
            switch op {
            case .add: return .decimal(x + y)
            case .sub: return .decimal(x - y)
            case .mul: return .decimal(x * y)
            case .mod:
                guard !y.isZero else { throw OracleUnsupported("decimal mod by zero") }
                // The remainder of the quotient truncated towards zero (sign of the left side).
                var quotient = x / y, whole = Decimal()
                NSDecimalRound(&whole, &quotient, 0, quotient < 0 ? .up : .down)
                return .decimal(x - y * whole)
            default: throw OracleUnsupported("decimal division")
            }
        default:
            throw OracleUnsupported("\(op) on \(a) and \(b)")
        }
    }

    /// The local date-time of `seconds` since 1970-01-01T00:00, as a DateTimeOffset at UTC.
    static func utc(seconds: Int64, picoseconds: Int64) -> DateTimeOffsetValue {
        let days = seconds >= 0 ? seconds / 86_400 : -((-seconds + 86_399) / 86_400)
        let second = Int(seconds - days * 86_400)
        var fraction = picoseconds == 0 ? "" : String(picoseconds)
        if !fraction.isEmpty {
            fraction = String(repeating: "0", count: 12 - fraction.count) + fraction
            while fraction.hasSuffix("0") { fraction.removeLast() }
        }
        return DateTimeOffsetValue(
            date: DateValue(daysSinceEpoch: Int(days)),
            time: TimeOfDayValue(
                hour: second / 3600, minute: second / 60 % 60, second: second % 60, fraction: fraction),
            offsetMinutes: 0)
    }

    /// The Double nearest to a decimal, read from its text (correctly rounded;
    /// `NSDecimalNumber.doubleValue` is not: the oracle first used it and differed from the store
    /// for 12345678901234567890.123).
    static func nearestDouble(_ d: Decimal) -> Double {
        Double(d.description) ?? .nan
    }

    static func double(_ value: OracleValue) -> Double? {
        switch value {
        case .integer(let i): Double(i)
        case .double(let d): d
        case .decimal(let d): Self.nearestDouble(d)
        default: nil
        }
    }

    static func decimal(_ value: OracleValue) -> Decimal? {
        switch value {
        case .integer(let i): Decimal(i)
        case .decimal(let d): d
        default: nil
        }
    }
}
