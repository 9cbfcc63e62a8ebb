/// The OData primitive types, V4 plus V2's `DateTime` and `Time`.
public enum PrimitiveType: String, Sendable, Hashable, Codable, CaseIterable {
    case binary = "Edm.Binary"
    case boolean = "Edm.Boolean"
    case byte = "Edm.Byte"
    case sbyte = "Edm.SByte"
    case int16 = "Edm.Int16"
    case int32 = "Edm.Int32"
    case int64 = "Edm.Int64"
    case single = "Edm.Single"
    case double = "Edm.Double"
    case decimal = "Edm.Decimal"
    case string = "Edm.String"
    case guid = "Edm.Guid"
    case date = "Edm.Date"
    case timeOfDay = "Edm.TimeOfDay"
    case dateTimeOffset = "Edm.DateTimeOffset"
    case duration = "Edm.Duration"
    case stream = "Edm.Stream"
    /// V2/V3 date and time without offset.
    case dateTime = "Edm.DateTime"
    /// V2/V3 time as a duration (`PT13H20M`).
    case time = "Edm.Time"
    case geography = "Edm.Geography"
    case geographyPoint = "Edm.GeographyPoint"
    case geographyLineString = "Edm.GeographyLineString"
    case geographyPolygon = "Edm.GeographyPolygon"
    case geographyMultiPoint = "Edm.GeographyMultiPoint"
    case geographyMultiLineString = "Edm.GeographyMultiLineString"
    case geographyMultiPolygon = "Edm.GeographyMultiPolygon"
    case geographyCollection = "Edm.GeographyCollection"
    case geometry = "Edm.Geometry"
    case geometryPoint = "Edm.GeometryPoint"
    case geometryLineString = "Edm.GeometryLineString"
    case geometryPolygon = "Edm.GeometryPolygon"
    case geometryMultiPoint = "Edm.GeometryMultiPoint"
    case geometryMultiLineString = "Edm.GeometryMultiLineString"
    case geometryMultiPolygon = "Edm.GeometryMultiPolygon"
    case geometryCollection = "Edm.GeometryCollection"

    /// The type named `Edm.X` (or `X` without the namespace), if it is primitive.
    public init?(qualifiedName: String) {
        if let value = PrimitiveType(rawValue: qualifiedName) {
            self = value
        } else {
            return nil
        }
    }

    /// The name without the `Edm.` namespace.
    public var shortName: String { String(rawValue.dropFirst(4)) }

    public var isIntegral: Bool {
        switch self {
        case .byte, .sbyte, .int16, .int32, .int64: true
        default: false
        }
    }

    /// The values an integer type holds; nil for the other types.
    public var integralRange: ClosedRange<Int64>? {
        switch self {
        case .byte: 0...255
        case .sbyte: -128...127
        case .int16: Int64(Int16.min)...Int64(Int16.max)
        case .int32: Int64(Int32.min)...Int64(Int32.max)
        case .int64: Int64.min...Int64.max
        default: nil
        }
    }

    public var isNumeric: Bool {
        isIntegral || self == .single || self == .double || self == .decimal
    }

    public var isSpatial: Bool { isGeography || isGeometry }
    public var isGeography: Bool { rawValue.hasPrefix("Edm.Geography") }
    public var isGeometry: Bool { rawValue.hasPrefix("Edm.Geometry") }

    /// True for types with a date or time component.
    public var isTemporal: Bool {
        switch self {
        case .date, .timeOfDay, .dateTimeOffset, .dateTime, .duration, .time: true
        default: false
        }
    }

    /// The rank used for numeric type promotion (OData Part 2 §5.1.1.3 "numeric promotion").
    var numericRank: Int? {
        switch self {
        case .byte: 1
        case .sbyte: 1
        case .int16: 2
        case .int32: 3
        case .int64: 4
        case .decimal: 5
        case .single: 6
        case .double: 7
        default: nil
        }
    }

    /// The smallest type both numeric types promote to, or nil if either is not numeric.
    public static func promoted(_ lhs: PrimitiveType, _ rhs: PrimitiveType) -> PrimitiveType? {
        guard let left = lhs.numericRank, let right = rhs.numericRank else { return nil }
        if lhs == rhs { return lhs }
        if (lhs == .byte && rhs == .sbyte) || (lhs == .sbyte && rhs == .byte) { return .int16 }
        // Decimal combined with a floating type yields Decimal? The spec promotes to Double only
        // when both are floating; Decimal with Single/Double stays Decimal to keep exactness.
        if (lhs == .decimal && (rhs == .single || rhs == .double)) || (rhs == .decimal && (lhs == .single || lhs == .double)) {
            return .decimal
        }
        return left >= right ? lhs : rhs
    }
}
