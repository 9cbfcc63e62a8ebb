public import Foundation
public import ODataCore

/// A value as the oracle computes with it: one case per kind of OData value, in the units the
/// specification compares them in (instants, picoseconds, code points), independent of how
/// the store keeps them.
public indirect enum OracleValue: Sendable, Equatable, CustomStringConvertible {
    case null
    case boolean(Bool)
    /// Every integral type (Byte … Int64).
    case integer(Int64)
    /// Edm.Decimal, exactly.
    case decimal(Decimal)
    /// Edm.Single and Edm.Double (a Single widened exactly).
    case double(Double)
    case string(String)
    /// Edm.Date as days since 1970-01-01.
    case date(Int)
    /// Edm.DateTimeOffset: its instant, and the value to read its local parts from.
    case dateTimeOffset(DateTimeOffsetValue)
    /// Edm.TimeOfDay in picoseconds since midnight.
    case timeOfDay(Int64)
    case duration(DurationValue)
    case guid(String)
    case binary(Data)
    /// An enum value: its type and its number.
    case enumeration(String, Int64)
    case complex(StructuredValue)
    case entity(Entity)
    case collection([OracleValue])

    public var description: String {
        switch self {
        case .null: "null"
        case .boolean(let b): "\(b)"
        case .integer(let i): "\(i)"
        case .decimal(let d): "\(d)M"
        case .double(let d): "\(d)d"
        case .string(let s): "'\(s)'"
        case .date(let d): DateValue(daysSinceEpoch: d).description
        case .dateTimeOffset(let d): d.description
        case .timeOfDay(let t): "time(\(t)ps)"
        case .duration(let d): d.description
        case .guid(let g): g
        case .binary(let b): "binary(\(b.count))"
        case .enumeration(let t, let n): "\(t)'\(n)'"
        case .complex(let s): "complex(\(s.properties.count))"
        case .entity(let e): "entity(\(e.properties.first.map { "\($0.value)" } ?? ""))"
        case .collection(let items): "[\(items.map(\.description).joined(separator: ","))]"
        }
    }

    var isNull: Bool { self == .null }
}

/// Why the oracle could not evaluate an expression: a construct it does not model. A case
/// that hits one is reported, never counted as agreement.
public struct OracleUnsupported: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

extension OracleValue {
    /// The oracle's form of a value read from a payload, typed by the model.
    public static func from(_ value: Value, model: Model, declared: String? = nil) throws -> OracleValue {
        switch value {
        case .null: return .null
        case .primitive(let p): return try from(p)
        case .enumeration(let e):
            let typeName = e.typeName ?? declared ?? ""
            guard let type = model.enumType(typeName) else { throw OracleUnsupported("an enum value of unknown type") }
            return .enumeration(typeName, try number(e.members, of: type))
        case .complex(let s): return .complex(s)
        case .entity(let s): return .complex(s)
        case .collection(let items): return .collection(try items.map { try from($0, model: model, declared: declared) })
        }
    }

    public static func from(_ p: PrimitiveValue) throws -> OracleValue {
        switch p {
        case .boolean(let b): return .boolean(b)
        case .byte(let v): return .integer(Int64(v))
        case .sbyte(let v): return .integer(Int64(v))
        case .int16(let v): return .integer(Int64(v))
        case .int32(let v): return .integer(Int64(v))
        case .int64(let v): return .integer(v)
        case .single(let v): return .double(Double(v))
        case .double(let v): return .double(v)
        case .decimal(let d):
            guard let decimal = Decimal(string: d.description, locale: Locale(identifier: "en_US_POSIX")) else {
                throw OracleUnsupported("the decimal \(d)")
            }
            return .decimal(decimal)
        case .string(let s): return .string(s)
        case .guid(let g): return .guid(g.description.lowercased())
        case .date(let d): return .date(d.daysSinceEpoch)
        case .timeOfDay(let t): return .timeOfDay(t.picosecondsSinceMidnight)
        case .dateTimeOffset(let d), .dateTime(let d): return .dateTimeOffset(d)
        case .duration(let d), .time(let d): return .duration(d)
        case .binary(let b): return .binary(b)
        case .spatial: throw OracleUnsupported("spatial values")
        }
    }

    /// The number of an enum value given by member names or numbers (flags combine).
    static func number(_ members: [String], of type: EnumType) throws -> Int64 {
        var total: Int64 = 0
        for member in members {
            let name = member.trimmingCharacters(in: .whitespaces)
            if let value = Int64(name) {
                total |= value
            } else if let found = type.member(named: name) {
                total |= found.value
            } else {
                throw OracleUnsupported("\(name) is no member of \(type.qualifiedName)")
            }
        }
        return total
    }
}
