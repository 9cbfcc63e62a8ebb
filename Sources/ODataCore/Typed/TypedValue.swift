public import Foundation

/// A value of generated code that could not be read from, or written as, an OData value: a
/// property the payload lacks, a value of another type, an enum member the type does not know.
///
/// `path` names where: the structured type and the property (`Sales.Customer/Country`).
public struct TypedValueError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What went wrong.
    public enum Code: String, Sendable, Hashable {
        /// A non-nullable property is not in the payload (not selected, or the backend left it out).
        case missingProperty
        /// The payload's value has another type than the property.
        case typeMismatch
        /// An enum value names a member the generated enum does not have.
        case unknownEnumMember
        /// The answer is not of the kind the call expects (an entity, a collection, a value).
        case unexpectedResult
    }

    /// What went wrong.
    public var code: Code
    /// What was expected and what was found.
    public var message: String
    /// The type and property where it happened, when known.
    public var path: String?

    /// Creates a value from its parts.
    public init(_ code: Code, _ message: String, path: String? = nil) {
        self.code = code
        self.message = message
        self.path = path
    }

    public var description: String {
        "\(code.rawValue): \(path.map { "\($0): " } ?? "")\(message)"
    }

    /// The same error with `path` set to `prefix` (or `prefix/path` when one is set already).
    @usableFromInline func at(_ prefix: String) -> TypedValueError {
        var copy = self
        copy.path = path.map { "\(prefix)/\($0)" } ?? prefix
        return copy
    }

    @usableFromInline static func mismatch(_ expected: String, _ found: Value) -> TypedValueError {
        TypedValueError(.typeMismatch, "expected \(expected), found \(found.kindDescription)")
    }
}

extension Value {
    /// A short name of the kind of value, for error messages (never the value itself).
    var kindDescription: String {
        switch self {
        case .null: "null"
        case .primitive(let p): p.type.rawValue
        case .enumeration(let e): "enum value of \(e.typeName ?? "an unnamed type")"
        case .complex(let s): "complex value of \(s.typeName ?? "an unnamed type")"
        case .collection: "a collection"
        case .entity(let s): "entity of \(s.typeName ?? "an unnamed type")"
        }
    }
}

/// A Swift type that stands for an OData value: the primitive types, `Optional` (null),
/// `Array` (collections), and the enum, complex and entity types that `oodata generate` writes.
public protocol ODataValueConvertible: Sendable, Hashable {
    /// Reads the value from its OData form.
    init(odataValue: Value) throws(TypedValueError)
    /// The OData form of the value. `type` is the declared Edm type where one Swift type
    /// stands for two (V2 `Edm.DateTime` and `Edm.Time` beside `Edm.DateTimeOffset` and
    /// `Edm.Duration`); nil takes the V4 type.
    func odataValue(as type: PrimitiveType?) -> Value
}

/// A primitive Swift type with one matching `PrimitiveValue` case.
@usableFromInline protocol PrimitiveConvertible: ODataValueConvertible {
    static var edmName: String { get }
    static var primitiveType: PrimitiveType { get }
    init?(primitive: PrimitiveValue)
    var primitive: PrimitiveValue { get }
}

extension PrimitiveConvertible {
    @inlinable public init(odataValue: Value) throws(TypedValueError) {
        guard case .primitive(let p) = odataValue else { throw .mismatch(Self.edmName, odataValue) }
        if let value = Self(primitive: p) {
            self = value
            return
        }
        // Another numeric type or a string form of the same type (Int64 as a V2 string).
        if case .primitive(let converted)? = Literal.convert(odataValue, to: Self.primitiveType),
            let value = Self(primitive: converted)
        {
            self = value
            return
        }
        throw .mismatch(Self.edmName, odataValue)
    }

    @inlinable public func odataValue(as type: PrimitiveType?) -> Value { .primitive(primitive) }
}

extension Bool: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.Boolean" }
    @usableFromInline static var primitiveType: PrimitiveType { .boolean }
    @inlinable init?(primitive: PrimitiveValue) {
        guard case .boolean(let v) = primitive else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .boolean(self) }
}

extension UInt8: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.Byte" }
    @usableFromInline static var primitiveType: PrimitiveType { .byte }
    @inlinable init?(primitive: PrimitiveValue) {
        guard case .byte(let v) = primitive else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .byte(self) }
}

extension Int8: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.SByte" }
    @usableFromInline static var primitiveType: PrimitiveType { .sbyte }
    @inlinable init?(primitive: PrimitiveValue) {
        guard case .sbyte(let v) = primitive else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .sbyte(self) }
}

extension Int16: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.Int16" }
    @usableFromInline static var primitiveType: PrimitiveType { .int16 }
    @inlinable init?(primitive: PrimitiveValue) {
        guard case .int16(let v) = primitive else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .int16(self) }
}

extension Int32: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.Int32" }
    @usableFromInline static var primitiveType: PrimitiveType { .int32 }
    @inlinable init?(primitive: PrimitiveValue) {
        guard case .int32(let v) = primitive else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .int32(self) }
}

extension Int64: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.Int64" }
    @usableFromInline static var primitiveType: PrimitiveType { .int64 }
    @inlinable init?(primitive: PrimitiveValue) {
        guard case .int64(let v) = primitive else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .int64(self) }
}

extension Float: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.Single" }
    @usableFromInline static var primitiveType: PrimitiveType { .single }
    @inlinable init?(primitive: PrimitiveValue) {
        guard case .single(let v) = primitive else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .single(self) }
}

extension Double: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.Double" }
    @usableFromInline static var primitiveType: PrimitiveType { .double }
    @inlinable init?(primitive: PrimitiveValue) {
        guard case .double(let v) = primitive else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .double(self) }
}

extension DecimalValue: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.Decimal" }
    @usableFromInline static var primitiveType: PrimitiveType { .decimal }
    @inlinable init?(primitive: PrimitiveValue) {
        guard let v = primitive.decimalValue else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .decimal(self) }
}

extension String: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.String" }
    @usableFromInline static var primitiveType: PrimitiveType { .string }
    @inlinable init?(primitive: PrimitiveValue) {
        guard case .string(let v) = primitive else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .string(self) }
}

extension GuidValue: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.Guid" }
    @usableFromInline static var primitiveType: PrimitiveType { .guid }
    @inlinable init?(primitive: PrimitiveValue) {
        guard case .guid(let v) = primitive else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .guid(self) }
}

extension DateValue: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.Date" }
    @usableFromInline static var primitiveType: PrimitiveType { .date }
    @inlinable init?(primitive: PrimitiveValue) {
        guard case .date(let v) = primitive else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .date(self) }
}

extension TimeOfDayValue: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.TimeOfDay" }
    @usableFromInline static var primitiveType: PrimitiveType { .timeOfDay }
    @inlinable init?(primitive: PrimitiveValue) {
        guard case .timeOfDay(let v) = primitive else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .timeOfDay(self) }
}

extension Data: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.Binary" }
    @usableFromInline static var primitiveType: PrimitiveType { .binary }
    @inlinable init?(primitive: PrimitiveValue) {
        guard case .binary(let v) = primitive else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .binary(self) }
}

extension SpatialValue: PrimitiveConvertible {
    @usableFromInline static var edmName: String { "Edm.Geography or Edm.Geometry" }
    @usableFromInline static var primitiveType: PrimitiveType { .geography }
    @inlinable init?(primitive: PrimitiveValue) {
        guard case .spatial(let v) = primitive else { return nil }
        self = v
    }
    @inlinable var primitive: PrimitiveValue { .spatial(self) }
}

/// `Edm.DateTimeOffset`, and V2's `Edm.DateTime` (a date and time without offset).
extension DateTimeOffsetValue: ODataValueConvertible {
    @inlinable public init(odataValue: Value) throws(TypedValueError) {
        switch odataValue {
        case .primitive(.dateTimeOffset(let v)), .primitive(.dateTime(let v)): self = v
        case .primitive(.date(let d)):
            self = DateTimeOffsetValue(date: d, time: TimeOfDayValue(hour: 0, minute: 0), offsetMinutes: nil)
        default:
            if case .primitive(.dateTimeOffset(let v))? = Literal.convert(odataValue, to: .dateTimeOffset) {
                self = v
                return
            }
            throw .mismatch("Edm.DateTimeOffset", odataValue)
        }
    }

    public func odataValue(as type: PrimitiveType?) -> Value {
        type == .dateTime ? .primitive(.dateTime(utcWithoutOffset)) : .primitive(.dateTimeOffset(self))
    }

    /// The same instant as a date and time in UTC with no offset: V2's `Edm.DateTime` has none.
    var utcWithoutOffset: DateTimeOffsetValue {
        guard let offset = offsetMinutes else { return self }
        var minutes = Int64(date.daysSinceEpoch) * 1440 + Int64(time.hour * 60 + time.minute) - Int64(offset)
        var days = minutes / 1440
        minutes -= days * 1440
        if minutes < 0 {
            minutes += 1440
            days -= 1
        }
        let shifted = TimeOfDayValue(
            hour: Int(minutes / 60), minute: Int(minutes % 60), second: time.second, fraction: time.fraction,
            hasSeconds: time.hasSeconds)
        return DateTimeOffsetValue(date: DateValue(daysSinceEpoch: Int(days)), time: shifted, offsetMinutes: nil)
    }
}

/// `Edm.Duration`, and V2's `Edm.Time` (a time of day written as a duration).
extension DurationValue: ODataValueConvertible {
    @inlinable public init(odataValue: Value) throws(TypedValueError) {
        switch odataValue {
        case .primitive(.duration(let v)), .primitive(.time(let v)): self = v
        default:
            if case .primitive(.duration(let v))? = Literal.convert(odataValue, to: .duration) {
                self = v
                return
            }
            throw .mismatch("Edm.Duration", odataValue)
        }
    }

    public func odataValue(as type: PrimitiveType?) -> Value {
        type == .time ? .primitive(.time(self)) : .primitive(.duration(self))
    }
}

/// `Edm.Untyped` and anything generated code has no better type for: the value as it is.
extension Value: ODataValueConvertible {
    public init(odataValue: Value) throws(TypedValueError) { self = odataValue }
    public func odataValue(as type: PrimitiveType?) -> Value { self }
}

/// Null is `nil`; a missing nullable property reads as `nil` too.
extension Optional: ODataValueConvertible where Wrapped: ODataValueConvertible {
    @inlinable public init(odataValue: Value) throws(TypedValueError) {
        if case .null = odataValue {
            self = nil
        } else {
            self = try Wrapped(odataValue: odataValue)
        }
    }

    @inlinable public func odataValue(as type: PrimitiveType?) -> Value {
        switch self {
        case .none: .null
        case .some(let wrapped): wrapped.odataValue(as: type)
        }
    }
}

/// `Collection(T)`.
extension Array: ODataValueConvertible where Element: ODataValueConvertible {
    public init(odataValue: Value) throws(TypedValueError) {
        guard case .collection(let items) = odataValue else {
            // A null collection (some V2 services) reads as empty.
            if case .null = odataValue {
                self = []
                return
            }
            throw .mismatch("a collection", odataValue)
        }
        var result: [Element] = []
        result.reserveCapacity(items.count)
        for (index, item) in items.enumerated() {
            do {
                result.append(try Element(odataValue: item))
            } catch {
                throw error.at("[\(index)]")
            }
        }
        self = result
    }

    public func odataValue(as type: PrimitiveType?) -> Value {
        .collection(map { $0.odataValue(as: type) })
    }
}

extension DecimalValue: ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral {
    /// An integer literal: `let price: DecimalValue = 100`.
    public init(integerLiteral value: Int64) { self.init(value) }
    /// A floating-point literal, taken at its shortest decimal text: `19.99` is exactly 19.99.
    public init(floatLiteral value: Double) {
        self = DecimalValue("\(value)") ?? DecimalValue(0)
    }
}
