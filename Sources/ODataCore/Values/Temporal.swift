/// An `Edm.Date`: year (may be zero or negative), month and day.
public struct DateValue: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var year: Int
    public var month: Int
    public var day: Int
    /// Creates a value from its parts.
    public init(year: Int, month: Int, day: Int) {
        self.year = year
        self.month = month
        self.day = day
    }
    public var description: String {
        let sign = year < 0 ? "-" : ""
        return sign + pad(abs(year), 4) + "-" + pad(month, 2) + "-" + pad(day, 2)
    }
    public static func < (a: DateValue, b: DateValue) -> Bool {
        (a.year, a.month, a.day) < (b.year, b.month, b.day)
    }
    /// Days since 1970-01-01 in the proleptic Gregorian calendar.
    public var daysSinceEpoch: Int {
        // Howard Hinnant's days_from_civil.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
    /// The date `days` days after 1970-01-01.
    public init(daysSinceEpoch days: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        self.init(year: yoe + era * 400 + (m <= 2 ? 1 : 0), month: m, day: d)
    }
}

/// An `Edm.TimeOfDay`, with fractional seconds kept digit for digit.
public struct TimeOfDayValue: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var hour: Int
    public var minute: Int
    public var second: Int
    /// Fractional-second digits as written (up to 12), e.g. `"5"` for `.5`.
    public var fraction: String
    /// Whether the seconds were written at all (`13:52` vs `13:52:00`).
    public var hasSeconds: Bool
    /// Creates a value from its parts.
    public init(hour: Int, minute: Int, second: Int = 0, fraction: String = "", hasSeconds: Bool = true) {
        self.hour = hour
        self.minute = minute
        self.second = second
        self.fraction = fraction
        self.hasSeconds = hasSeconds || second != 0 || !fraction.isEmpty
    }
    public var description: String {
        var text = pad(hour, 2) + ":" + pad(minute, 2)
        if hasSeconds {
            text += ":" + pad(second, 2)
            if !fraction.isEmpty { text += "." + fraction }
        }
        return text
    }
    /// Picoseconds since midnight (exact for 12 fractional digits).
    public var picosecondsSinceMidnight: Int64 {
        let whole = Int64(hour * 3600 + minute * 60 + second) * 1_000_000_000_000
        let digits = String(fraction.prefix(12)).padding(toLength: 12, withPad: "0", startingAt: 0)
        return whole + (Int64(digits) ?? 0)
    }
    public static func < (a: TimeOfDayValue, b: TimeOfDayValue) -> Bool {
        a.picosecondsSinceMidnight < b.picosecondsSinceMidnight
    }
    public static func == (a: TimeOfDayValue, b: TimeOfDayValue) -> Bool {
        a.picosecondsSinceMidnight == b.picosecondsSinceMidnight
    }
    public func hash(into hasher: inout Hasher) { hasher.combine(picosecondsSinceMidnight) }
}

/// An `Edm.DateTimeOffset` (or a V2 `Edm.DateTime` when `offsetMinutes` is nil), keeping its
/// offset; compared by instant.
public struct DateTimeOffsetValue: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var date: DateValue
    public var time: TimeOfDayValue
    /// Offset from UTC in minutes; `nil` means no offset was given (V2 `DateTime`).
    public var offsetMinutes: Int?
    /// Whether UTC was written as `Z` (true) or `+00:00` (false).
    public var usesZ: Bool
    /// Creates a value from its parts.
    public init(date: DateValue, time: TimeOfDayValue, offsetMinutes: Int?, usesZ: Bool = true) {
        self.date = date
        self.time = time
        self.offsetMinutes = offsetMinutes
        self.usesZ = usesZ
    }
    public var description: String {
        var text = date.description + "T" + time.description
        if let offset = offsetMinutes {
            if offset == 0 && usesZ {
                text += "Z"
            } else {
                text += (offset < 0 ? "-" : "+") + pad(abs(offset) / 60, 2) + ":" + pad(abs(offset) % 60, 2)
            }
        }
        return text
    }
    /// The instant as (seconds since the epoch in UTC, picoseconds within the second).
    public var instant: (seconds: Int64, picoseconds: Int64) {
        let localSeconds = Int64(date.daysSinceEpoch) * 86_400
            + Int64(time.hour * 3600 + time.minute * 60 + time.second)
        let picos = time.picosecondsSinceMidnight % 1_000_000_000_000
        return (localSeconds - Int64((offsetMinutes ?? 0) * 60), picos)
    }
    public static func < (a: DateTimeOffsetValue, b: DateTimeOffsetValue) -> Bool {
        let x = a.instant, y = b.instant
        return (x.seconds, x.picoseconds) < (y.seconds, y.picoseconds)
    }
    /// Equal when they denote the same instant (the offset is not compared).
    public static func == (a: DateTimeOffsetValue, b: DateTimeOffsetValue) -> Bool {
        let x = a.instant, y = b.instant
        return x.seconds == y.seconds && x.picoseconds == y.picoseconds && (a.offsetMinutes == nil) == (b.offsetMinutes == nil)
    }
    public func hash(into hasher: inout Hasher) {
        let x = instant
        hasher.combine(x.seconds)
        hasher.combine(x.picoseconds)
    }
}

/// An `Edm.Duration` (also V2 `Edm.Time`): days, hours, minutes and seconds with exact
/// fractional seconds.
public struct DurationValue: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var negative: Bool
    public var days: Int
    public var hours: Int
    public var minutes: Int
    public var seconds: Int
    public var fraction: String
    /// Creates a value from its parts.
    public init(negative: Bool = false, days: Int = 0, hours: Int = 0, minutes: Int = 0, seconds: Int = 0, fraction: String = "") {
        self.negative = negative
        self.days = days
        self.hours = hours
        self.minutes = minutes
        self.seconds = seconds
        self.fraction = fraction
    }
    public var description: String {
        var text = negative ? "-P" : "P"
        if days != 0 { text += "\(days)D" }
        var timePart = ""
        if hours != 0 { timePart += "\(hours)H" }
        if minutes != 0 { timePart += "\(minutes)M" }
        if seconds != 0 || !fraction.isEmpty {
            timePart += "\(seconds)" + (fraction.isEmpty ? "" : "." + fraction) + "S"
        }
        if !timePart.isEmpty {
            text += "T" + timePart
        } else if days == 0 {
            text += "T0S"
        }
        return text
    }
    /// Total length in picoseconds (signed); saturates beyond ±106 days·10^6.
    public var totalPicoseconds: (whole: Int64, picos: Int64) {
        let whole = Int64(days) * 86_400 + Int64(hours) * 3600 + Int64(minutes) * 60 + Int64(seconds)
        let digits = String(fraction.prefix(12)).padding(toLength: 12, withPad: "0", startingAt: 0)
        let picos = Int64(digits) ?? 0
        return negative ? (-whole, -picos) : (whole, picos)
    }
    public static func < (a: DurationValue, b: DurationValue) -> Bool {
        let x = a.totalPicoseconds, y = b.totalPicoseconds
        return (x.whole, x.picos) < (y.whole, y.picos)
    }
    public static func == (a: DurationValue, b: DurationValue) -> Bool {
        let x = a.totalPicoseconds, y = b.totalPicoseconds
        return x.whole == y.whole && x.picos == y.picos
    }
    public func hash(into hasher: inout Hasher) {
        let x = totalPicoseconds
        hasher.combine(x.whole)
        hasher.combine(x.picos)
    }
}

func pad(_ value: Int, _ width: Int) -> String {
    let text = String(value)
    return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
}
