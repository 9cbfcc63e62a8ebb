/// The `cast` function of `$filter` and `$orderby` on primitive values (OData 4.01 URL
/// Conventions §5.1.1.11.1), computed exactly in one place for the store and the server:
/// - null casts to null, and a value to its own type is itself;
/// - any value casts to `Edm.String` as its payload literal (`Literal/payloadText(_:)`):
///   `1.50` is `"1.50"`, `2024-02-29` is `"2024-02-29"`;
/// - a string casts to another type when it is a valid payload literal of that type, and to
///   null otherwise (`cast('12x',Edm.Int32)` is null, not 0);
/// - numbers cast to each other: an integer type takes the integer part (truncated towards
///   zero) when it fits and is null otherwise; `Edm.Double` and `Edm.Single` take the nearest
///   value (a finite value that overflows `Edm.Single` is null); `Edm.Decimal` takes the
///   shortest decimal that reads back as the same floating-point value;
/// - `Edm.DateTime` and `Edm.DateTimeOffset` (V2 and V4), and `Edm.Time` and `Edm.Duration`,
///   cast to each other;
/// - every other pair fails, which is null (Boolean to a number, a date to a time).
/// Spatial and stream values are not cast (``isComputed(from:to:)``): the store and the
/// server refuse such a cast (501).
public enum PrimitiveCast {
    /// Whether a cast between these types is computed; the others are refused, not guessed.
    public static func isComputed(from source: PrimitiveType, to target: PrimitiveType) -> Bool {
        !(source.isSpatial || target.isSpatial || source == .stream || target == .stream)
    }

    /// `value` cast to `target`; nil when the cast fails (the function's result is then null).
    /// `legacy`: for a V2 request, whose Edm.DateTime stands for V4's Edm.Date and Edm.Time
    /// for Edm.TimeOfDay, so that a string is what the V2 payload says
    /// (`2015-01-01T00:00:00`, `PT13H20M`).
    public static func cast(_ value: PrimitiveValue, to target: PrimitiveType, legacy: Bool = false) -> PrimitiveValue?
    {
        if value.type == target { return value }
        if target == .string { return .string(Literal.payloadText(legacy ? v2Form(value) : value)) }
        if case .string(let text) = value { return try? Literal.parsePayloadValue(text, as: target) }
        switch (value, target) {
        case (.dateTime(let d), .dateTimeOffset): return .dateTimeOffset(d)
        case (.dateTimeOffset(let d), .dateTime): return .dateTime(d)
        case (.time(let d), .duration): return .duration(d)
        case (.duration(let d), .time): return .time(d)
        default: break
        }
        guard value.type.isNumeric, target.isNumeric else { return nil }
        return number(value, to: target)
    }

    /// How V2 holds a V4 value: a date as a date-time at midnight, a time of day as a duration.
    static func v2Form(_ value: PrimitiveValue) -> PrimitiveValue {
        switch value {
        case .date(let d):
            return .dateTime(
                DateTimeOffsetValue(date: d, time: TimeOfDayValue(hour: 0, minute: 0, second: 0), offsetMinutes: nil))
        case .timeOfDay(let t):
            return .time(DurationValue(hours: t.hour, minutes: t.minute, seconds: t.second, fraction: t.fraction))
        default: return value
        }
    }

    private static func number(_ value: PrimitiveValue, to target: PrimitiveType) -> PrimitiveValue? {
        switch value {
        case .double(let v): return floating(v, to: target)
        case .single(let v): return floating(Double(v), to: target, single: v)
        default: break
        }
        // Integers and decimals: exact decimal text first.
        let decimal: DecimalValue
        switch value {
        case .byte(let v): decimal = DecimalValue(Int64(v))
        case .sbyte(let v): decimal = DecimalValue(Int64(v))
        case .int16(let v): decimal = DecimalValue(Int64(v))
        case .int32(let v): decimal = DecimalValue(Int64(v))
        case .int64(let v): decimal = DecimalValue(v)
        case .decimal(let d): decimal = d
        default: return nil
        }
        switch target {
        case .decimal: return .decimal(decimal)
        case .double: return Double(decimal.description).map { .double($0) }
        case .single:
            guard let single = Float(decimal.description), single.isFinite else { return nil }
            return .single(single)
        default:
            let text = decimal.description
            let whole = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            return integer(String(whole == "-0" ? "0" : whole), to: target)
        }
    }

    private static func floating(_ v: Double, to target: PrimitiveType, single: Float? = nil) -> PrimitiveValue? {
        guard v.isFinite else {
            // NaN and the infinities are values of Double and Single only.
            switch target {
            case .double: return .double(v)
            case .single: return .single(Float(v))
            default: return nil
            }
        }
        switch target {
        case .double: return .double(v)
        case .single:
            let narrowed = Float(v)
            return narrowed.isFinite ? .single(narrowed) : nil
        case .decimal:
            // The shortest text that reads back as the same value (a Single's own shortest).
            return DecimalValue(single.map { "\($0)" } ?? "\(v)").map { .decimal($0) }
        default:
            guard let whole = Int64(exactly: v.rounded(.towardZero)) else { return nil }
            return integer(String(whole), to: target)
        }
    }

    private static func integer(_ text: String, to target: PrimitiveType) -> PrimitiveValue? {
        switch target {
        case .byte: return UInt8(text).map { .byte($0) }
        case .sbyte: return Int8(text).map { .sbyte($0) }
        case .int16: return Int16(text).map { .int16($0) }
        case .int32: return Int32(text).map { .int32($0) }
        case .int64: return Int64(text).map { .int64($0) }
        default: return nil
        }
    }
}
