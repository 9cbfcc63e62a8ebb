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
        var bytes: [UInt8] = []
        bytes.reserveCapacity(10)
        append(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
    /// Appends the ISO form (`YYYY-MM-DD`, a minus sign before negative years) as UTF-8.
    package func append(to bytes: inout [UInt8]) {
        if year < 0 { bytes.append(UInt8(ascii: "-")) }
        Digits.append(year.magnitude, width: 4, to: &bytes)
        bytes.append(UInt8(ascii: "-"))
        Digits.append(month, width: 2, to: &bytes)
        bytes.append(UInt8(ascii: "-"))
        Digits.append(day, width: 2, to: &bytes)
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
    /// The number of days of `month` (1–12) in `year` of the proleptic Gregorian calendar, in
    /// which year 0 is a leap year.
    public static func daysInMonth(_ month: Int, year: Int) -> Int {
        switch month {
        case 2:
            let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
            return leap ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }
    /// Nil when this day exists, else a sentence that says why not ("February 2023 has 28 days").
    public var calendarProblem: String? {
        guard (1...12).contains(month) else { return "\(month) is not a month (1 to 12)" }
        let days = Self.daysInMonth(month, year: year)
        guard (1...days).contains(day) else {
            if day < 1 { return "\(day) is not a day of the month" }
            return "\(Self.monthNames[month - 1]) \(year) has \(days) days"
        }
        return nil
    }
    private static let monthNames = ["January", "February", "March", "April", "May", "June", "July", "August",
                                     "September", "October", "November", "December"]
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
        var bytes: [UInt8] = []
        bytes.reserveCapacity(12 + fraction.utf8.count)
        append(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
    /// Appends the ISO form (`HH:MM[:SS[.fff]]`) as UTF-8.
    package func append(to bytes: inout [UInt8]) {
        Digits.append(hour, width: 2, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        Digits.append(minute, width: 2, to: &bytes)
        if hasSeconds {
            bytes.append(UInt8(ascii: ":"))
            Digits.append(second, width: 2, to: &bytes)
            if !fraction.isEmpty {
                bytes.append(UInt8(ascii: "."))
                bytes.append(contentsOf: fraction.utf8)
            }
        }
    }
    /// Picoseconds since midnight (exact for 12 fractional digits).
    public var picosecondsSinceMidnight: Int64 {
        let whole = Int64(hour * 3600 + minute * 60 + second) * 1_000_000_000_000
        return whole + Digits.picoseconds(fraction)
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
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        append(to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
    /// Appends the ISO form (`date` `T` `time`, then `Z` or `±HH:MM` when there is an offset).
    package func append(to bytes: inout [UInt8]) {
        date.append(to: &bytes)
        bytes.append(UInt8(ascii: "T"))
        time.append(to: &bytes)
        Digits.appendOffset(offsetMinutes, usesZ: usesZ, to: &bytes)
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
        let picos = Digits.picoseconds(fraction)
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
    var bytes: [UInt8] = []
    Digits.append(value, width: width, to: &bytes)
    return String(decoding: bytes, as: UTF8.self)
}

/// Decimal digits written and read without going through `String`: the temporal values' text
/// forms are on the hot path of every payload and every stored row.
package enum Digits {
    /// Appends `value` in decimal, zero-padded on the left to at least `width` digits (a negative
    /// value is written as `-` then its padded magnitude minus one digit, as `String` padding did).
    package static func append(_ value: Int, width: Int, to bytes: inout [UInt8]) {
        append(magnitude: value.magnitude, negative: value < 0, width: width, to: &bytes)
    }

    /// Appends `value` in decimal, zero-padded on the left to at least `width` digits.
    package static func append(_ value: UInt, width: Int, to bytes: inout [UInt8]) {
        append(magnitude: value, negative: false, width: width, to: &bytes)
    }

    private static func append(magnitude: UInt, negative: Bool, width: Int, to bytes: inout [UInt8]) {
        // A sign, 20 digits of magnitude at most, or the padding.
        let capacity = max(width, 0) + 21
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buffer in
            guard let base = buffer.baseAddress else { return }
            var slot = ByteSlot(base: base, capacity: capacity)
            write(magnitude: magnitude, negative: negative, width: width, to: &slot)
            bytes.append(contentsOf: slot.bytes)
        }
    }

    /// Writes `value` as ``append(_:width:to:)-(Int,_,_)`` appends it; when it does not fit,
    /// nothing and the slot is marked overflowed.
    package static func write(_ value: Int, width: Int, to slot: inout ByteSlot) {
        write(magnitude: value.magnitude, negative: value < 0, width: width, to: &slot)
    }

    private static func write(magnitude: UInt, negative: Bool, width: Int, to slot: inout ByteSlot) {
        var digits = 1
        var limit: UInt = 10
        while digits < 20, magnitude >= limit {
            digits += 1
            let (next, overflow) = limit.multipliedReportingOverflow(by: 10)
            if overflow { break }
            limit = next
        }
        let sign = negative ? 1 : 0
        let total = sign + max(digits, width - sign)
        guard slot.capacity - slot.count >= total else {
            slot.overflowed = true
            return
        }
        let start = slot.base + slot.count
        start.initialize(repeating: UInt8(ascii: "0"), count: total)
        if negative { start.pointee = UInt8(ascii: "-") }
        var rest = magnitude
        var index = total - 1
        while rest > 0 {
            start[index] = UInt8(ascii: "0") + UInt8(rest % 10)
            rest /= 10
            index -= 1
        }
        slot.count += total
    }

    /// Appends a `Z`, `+HH:MM` or `-HH:MM` offset; nothing when `minutes` is nil.
    package static func appendOffset<Sink: ByteSink>(_ minutes: Int?, usesZ: Bool, to bytes: inout Sink) {
        guard let minutes else { return }
        if minutes == 0 && usesZ {
            bytes.append(UInt8(ascii: "Z"))
            return
        }
        bytes.append(minutes < 0 ? UInt8(ascii: "-") : UInt8(ascii: "+"))
        bytes.appendDigits(abs(minutes) / 60, width: 2)
        bytes.append(UInt8(ascii: ":"))
        bytes.appendDigits(abs(minutes) % 60, width: 2)
    }

    /// The first 12 fractional-second digits as picoseconds (fewer digits are padded on the
    /// right); 0 when one of them is not a digit.
    package static func picoseconds(_ fraction: String) -> Int64 {
        var value: Int64 = 0
        var count = 0
        for byte in fraction.utf8 {
            guard count < 12 else { break }
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return 0 }
            value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            count += 1
        }
        while count < 12 {
            value *= 10
            count += 1
        }
        return value
    }
}
