/// `add` and `sub` of a duration to a date-time or a date (OData 4.01 URL Conventions
/// §5.1.1.2.1–2), computed exactly in one place for the store and the server.
public enum DateArithmetic {
    static let picosPerSecond: Int64 = 1_000_000_000_000

    /// `value` moved by `seconds` and `picoseconds` (both of one sign, as a duration gives them):
    /// a DateTimeOffset or DateTime in its own offset, a Date by whole days only. Nil for other
    /// types, a date moved by part of a day, or a result outside the years 1–9999.
    public static func shifted(_ value: PrimitiveValue, seconds: Int64, picoseconds: Int64) -> PrimitiveValue? {
        switch value {
        case .date(let date):
            guard picoseconds == 0, seconds % 86_400 == 0 else { return nil }
            let moved = DateValue(daysSinceEpoch: date.daysSinceEpoch + Int(seconds / 86_400))
            return (1...9999).contains(moved.year) ? .date(moved) : nil
        case .dateTimeOffset(let d):
            return shifted(d, seconds: seconds, picoseconds: picoseconds).map { .dateTimeOffset($0) }
        case .dateTime(let d):
            return shifted(d, seconds: seconds, picoseconds: picoseconds).map { .dateTime($0) }
        default:
            return nil
        }
    }

    static func shifted(_ d: DateTimeOffsetValue, seconds: Int64, picoseconds: Int64) -> DateTimeOffsetValue? {
        let local =
            Int64(d.date.daysSinceEpoch) * 86_400 + Int64(d.time.hour * 3600 + d.time.minute * 60 + d.time.second)
        var picos = d.time.picosecondsSinceMidnight % picosPerSecond + picoseconds
        var total = local + seconds
        // Floor division keeps the fraction in 0 ..< 1 s.
        let carry = picos >= 0 ? picos / picosPerSecond : -((-picos + picosPerSecond - 1) / picosPerSecond)
        total += carry
        picos -= carry * picosPerSecond
        let days = total >= 0 ? total / 86_400 : -((-total + 86_399) / 86_400)
        let second = Int(total - days * 86_400)
        let date = DateValue(daysSinceEpoch: Int(days))
        guard (1...9999).contains(date.year) else { return nil }
        var fraction = picos == 0 ? "" : String(picos)
        if !fraction.isEmpty {
            fraction = String(repeating: "0", count: 12 - fraction.count) + fraction
            while fraction.hasSuffix("0") { fraction.removeLast() }
        }
        let time = TimeOfDayValue(
            hour: second / 3600, minute: second / 60 % 60, second: second % 60, fraction: fraction)
        return DateTimeOffsetValue(date: date, time: time, offsetMinutes: d.offsetMinutes, usesZ: d.usesZ)
    }
}
