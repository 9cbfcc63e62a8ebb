public import Foundation

/// A GUID, kept as 16 bytes and printed in lowercase.
public struct GuidValue: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var uuid: UUID
    /// Creates a value from its parts.
    public init(_ uuid: UUID) { self.uuid = uuid }
    /// Parses `8-4-4-4-12` hex digits; nil otherwise.
    public init?(_ text: String) {
        var text = text
        guard let parsed = text.withUTF8({ GuidValue(utf8: $0) }) else { return nil }
        self = parsed
    }
    /// Parses `8-4-4-4-12` hex digits given as UTF-8; nil otherwise.
    public init?(utf8 bytes: UnsafeBufferPointer<UInt8>) {
        guard bytes.count == 36 else { return nil }
        var raw: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let complete = withUnsafeMutableBytes(of: &raw) { out -> Bool in
            var index = 0
            var k = 0
            while index < 36 {
                if index == 8 || index == 13 || index == 18 || index == 23 {
                    guard bytes[index] == UInt8(ascii: "-") else { return false }
                    index += 1
                    continue
                }
                guard let high = Literal.hexValue(bytes[index]), let low = Literal.hexValue(bytes[index + 1]) else { return false }
                out[k] = high << 4 | low
                k += 1
                index += 2
            }
            return true
        }
        guard complete else { return nil }
        self.uuid = UUID(uuid: raw)
    }
    /// A random (version 4) GUID from the system's random source.
    public static func random() -> GuidValue {
        var generator = SystemRandomNumberGenerator()
        var raw: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        withUnsafeMutableBytes(of: &raw) { bytes in
            bytes.storeBytes(of: generator.next() as UInt64, toByteOffset: 0, as: UInt64.self)
            bytes.storeBytes(of: generator.next() as UInt64, toByteOffset: 8, as: UInt64.self)
            bytes[6] = bytes[6] & 0x0F | 0x40
            bytes[8] = bytes[8] & 0x3F | 0x80
        }
        return GuidValue(UUID(uuid: raw))
    }
    public var description: String {
        var text: [UInt8] = []
        text.reserveCapacity(36)
        appendText(to: &text)
        return String(decoding: text, as: UTF8.self)
    }
    /// Appends the lowercase `8-4-4-4-12` text (``description``) to `bytes`.
    public func appendText(to bytes: inout [UInt8]) {
        withUnsafeBytes(of: uuid.uuid) { raw in
            for k in 0..<16 {
                if k == 4 || k == 6 || k == 8 || k == 10 { bytes.append(UInt8(ascii: "-")) }
                let high = raw[k] >> 4, low = raw[k] & 0x0F
                bytes.append(high < 10 ? UInt8(ascii: "0") + high : UInt8(ascii: "a") - 10 + high)
                bytes.append(low < 10 ? UInt8(ascii: "0") + low : UInt8(ascii: "a") - 10 + low)
            }
        }
    }
    public static func < (a: GuidValue, b: GuidValue) -> Bool { a.description < b.description }
}

/// A geographic or geometric value. Points are modelled; other kinds keep their
/// well-known text.
public struct SpatialValue: Sendable, Hashable, Codable, CustomStringConvertible {
    /// `Point`, `LineString`, `Polygon`, `MultiPoint`, `MultiLineString`, `MultiPolygon` or
    /// `Collection`.
    public var kind: String
    public var isGeography: Bool
    public var srid: Int?
    /// The point's coordinates (x/longitude, y/latitude, optional z, m) for `Point`.
    public var point: Point?
    /// The well-known text after `SRID=…;`, e.g. `Point(1 2)` or `LineString(1 2,3 4)`.
    public var wellKnownText: String

    /// One position.
    public struct Point: Sendable, Hashable, Codable {
        public var x: Double
        public var y: Double
        public var z: Double?
        public var m: Double?
        /// Creates a value from its parts.
        public init(x: Double, y: Double, z: Double? = nil, m: Double? = nil) {
            self.x = x
            self.y = y
            self.z = z
            self.m = m
        }
    }

    /// Creates a value from its parts.
    public init(kind: String, isGeography: Bool, srid: Int?, point: Point?, wellKnownText: String) {
        self.kind = kind
        self.isGeography = isGeography
        self.srid = srid
        self.point = point
        self.wellKnownText = wellKnownText
    }

    /// The literal text without prefix: `SRID=4326;Point(1 2)`.
    public var description: String {
        (srid.map { "SRID=\($0);" } ?? "") + wellKnownText
    }

    /// The primitive type this value belongs to.
    public var primitiveType: PrimitiveType {
        let name = (isGeography ? "Edm.Geography" : "Edm.Geometry") + kind
        return PrimitiveType(rawValue: name) ?? (isGeography ? .geography : .geometry)
    }
}

/// A primitive value of any Edm type.
public enum PrimitiveValue: Sendable, Hashable {
    case binary(Data)
    case boolean(Bool)
    case byte(UInt8)
    case sbyte(Int8)
    case int16(Int16)
    case int32(Int32)
    case int64(Int64)
    case single(Float)
    case double(Double)
    case decimal(DecimalValue)
    case string(String)
    case guid(GuidValue)
    case date(DateValue)
    case timeOfDay(TimeOfDayValue)
    case dateTimeOffset(DateTimeOffsetValue)
    case duration(DurationValue)
    /// V2 `Edm.DateTime` (no offset).
    case dateTime(DateTimeOffsetValue)
    /// V2 `Edm.Time`.
    case time(DurationValue)
    case spatial(SpatialValue)

    /// The Edm type of this value.
    public var type: PrimitiveType {
        switch self {
        case .binary: .binary
        case .boolean: .boolean
        case .byte: .byte
        case .sbyte: .sbyte
        case .int16: .int16
        case .int32: .int32
        case .int64: .int64
        case .single: .single
        case .double: .double
        case .decimal: .decimal
        case .string: .string
        case .guid: .guid
        case .date: .date
        case .timeOfDay: .timeOfDay
        case .dateTimeOffset: .dateTimeOffset
        case .duration: .duration
        case .dateTime: .dateTime
        case .time: .time
        case .spatial(let value): value.primitiveType
        }
    }

    /// The value as an exact decimal if it is an integer or decimal.
    public var decimalValue: DecimalValue? {
        switch self {
        case .byte(let v): DecimalValue(Int64(v))
        case .sbyte(let v): DecimalValue(Int64(v))
        case .int16(let v): DecimalValue(Int64(v))
        case .int32(let v): DecimalValue(Int64(v))
        case .int64(let v): DecimalValue(v)
        case .decimal(let v): v
        default: nil
        }
    }

    /// The value as a `Double` if it is numeric.
    public var doubleValue: Double? {
        switch self {
        case .single(let v): Double(v)
        case .double(let v): v
        default: decimalValue?.doubleValue
        }
    }
}

/// An enum value: its type and the member names (several for flags).
public struct EnumValue: Sendable, Hashable {
    /// Qualified enum type name; nil when the literal did not say (`'Red'` in a payload).
    public var typeName: String?
    /// Member names or numeric values as written, in order.
    public var members: [String]
    /// Creates a value from its parts.
    public init(typeName: String?, members: [String]) {
        self.typeName = typeName
        self.members = members
    }
}

/// A named value inside a structured value.
public struct NamedValue: Sendable, Hashable {
    public var name: String
    public var value: Value
    /// Creates a value from its parts.
    public init(name: String, value: Value) {
        self.name = name
        self.value = value
    }
}

/// A complex or entity value: its type and its properties in order.
public struct StructuredValue: Sendable, Hashable {
    public var typeName: String?
    public var properties: [NamedValue]
    /// Creates a value from its parts.
    public init(typeName: String? = nil, properties: [NamedValue] = []) {
        self.typeName = typeName
        self.properties = properties
    }
    /// The value of a property, or nil when absent.
    public subscript(name: String) -> Value? {
        get { properties.first { $0.name == name }?.value }
        set {
            if let index = properties.firstIndex(where: { $0.name == name }) {
                if let newValue {
                    properties[index].value = newValue
                } else {
                    properties.remove(at: index)
                }
            } else if let newValue {
                properties.append(NamedValue(name: name, value: newValue))
            }
        }
    }
}

/// Any OData value: null, primitive, enum, complex, collection or entity.
public enum Value: Sendable, Hashable {
    case null
    case primitive(PrimitiveValue)
    case enumeration(EnumValue)
    indirect case complex(StructuredValue)
    indirect case collection([Value])
    indirect case entity(StructuredValue)
}
