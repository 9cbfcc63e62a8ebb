public import Foundation

extension DateTimeOffsetValue {
    /// The instant `date`, in UTC (`Z`), to the millisecond.
    public init(_ date: Date) {
        let milliseconds = (date.timeIntervalSince1970 * 1000).rounded()
        let (days, remainder) = Int(milliseconds).quotientAndRemainder(dividingBy: 86_400_000)
        let dayNumber = remainder < 0 ? days - 1 : days
        var rest = remainder < 0 ? remainder + 86_400_000 : remainder
        let hour = rest / 3_600_000
        rest %= 3_600_000
        let minute = rest / 60_000
        rest %= 60_000
        let second = rest / 1000
        let millisecond = rest % 1000
        let fraction = millisecond == 0 ? "" : String(String(millisecond + 1000).dropFirst())
        self.init(
            date: DateValue(daysSinceEpoch: dayNumber),
            time: TimeOfDayValue(hour: hour, minute: minute, second: second, fraction: fraction),
            offsetMinutes: 0)
    }

    /// The instant as a Foundation `Date` (sub-microsecond digits are dropped; a value without
    /// offset, V2's `Edm.DateTime`, is taken as UTC).
    public var foundationDate: Date {
        let (seconds, picoseconds) = instant
        return Date(timeIntervalSince1970: Double(seconds) + Double(picoseconds) / 1e12)
    }
}

extension DecimalValue {
    /// The exact value of a Foundation `Decimal`.
    public init(_ decimal: Decimal) {
        self = DecimalValue(NSDecimalNumber(decimal: decimal).stringValue) ?? DecimalValue(0)
    }

    /// The value as a Foundation `Decimal` (up to its 38 significant digits).
    public var foundationDecimal: Decimal {
        Decimal(string: description, locale: Locale(identifier: "en_US_POSIX")) ?? .nan
    }
}
