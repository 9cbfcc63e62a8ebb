/// HTTP dates in the preferred form of RFC 9110 §5.6.7 (IMF-fixdate, `Sun, 06 Nov 1994
/// 08:49:37 GMT`), the form of `Repeatability-First-Sent`, written and read without Foundation's
/// formatters: a `DateFormatter` costs its creation and loads ICU's locale and calendar data,
/// which an upload paid for every batch and the gateway for every request it received.
package enum HTTPDate {
    private static let dayNames = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]
    private static let fullDayNames = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    private static let monthNames = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// The IMF-fixdate of `seconds` since 1970-01-01 00:00:00 UTC (fractions are not written).
    /// The form has four digits for the year: give an instant in the years 1 to 9999.
    package static func format(secondsSince1970 seconds: Int64) -> String {
        let (quotient, remainder) = seconds.quotientAndRemainder(dividingBy: 86_400)
        let days = Int(remainder < 0 ? quotient - 1 : quotient)
        let second = Int(remainder < 0 ? remainder + 86_400 : remainder)
        let date = DateValue(daysSinceEpoch: days)
        // 1970-01-01 was a Thursday.
        let weekday = ((days % 7) + 7) % 7
        var bytes: [UInt8] = []
        bytes.reserveCapacity(29)
        bytes.append(contentsOf: dayNames[weekday].utf8)
        bytes.append(contentsOf: ", ".utf8)
        Digits.append(date.day, width: 2, to: &bytes)
        bytes.append(UInt8(ascii: " "))
        bytes.append(contentsOf: monthNames[date.month - 1].utf8)
        bytes.append(UInt8(ascii: " "))
        Digits.append(date.year, width: 4, to: &bytes)
        bytes.append(UInt8(ascii: " "))
        Digits.append(second / 3600, width: 2, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        Digits.append(second / 60 % 60, width: 2, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        Digits.append(second % 60, width: 2, to: &bytes)
        bytes.append(contentsOf: " GMT".utf8)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Seconds since 1970-01-01 00:00:00 UTC of an HTTP date in any of RFC 9110's three forms:
    /// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), which senders must use, and the obsolete
    /// RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6 08:49:37 1994`)
    /// forms, which recipients must read. A two-digit year is the latest year with those digits
    /// that is not more than 50 years after `now` (seconds since 1970). Nil when `text` is none
    /// of them: a wrong length or separator, an unknown day or month name, a day the month
    /// lacks, a time out of range, or a zone other than `GMT` (`UTC` is also read, as some
    /// senders write it). The day name is not checked against the date (RFC 9110 makes it
    /// redundant); a leap second (`:60`) is read as the next second's start.
    package static func parse(_ text: String, now: Int64) -> Int64? {
        let bytes = Array(text.utf8)
        func byte(_ index: Int, is character: Unicode.Scalar) -> Bool { bytes[index] == UInt8(ascii: character) }
        func word(_ start: Int, _ length: Int) -> String {
            String(decoding: bytes[start..<start + length], as: UTF8.self)
        }
        func number(_ start: Int, _ length: Int, padded: Bool = false) -> Int? {
            var value = 0
            for (offset, byte) in bytes[start..<start + length].enumerated() {
                if padded, offset == 0, byte == UInt8(ascii: " ") { continue }
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        // The time of day at `start` (`HH:MM:SS`), in seconds.
        func time(_ start: Int) -> Int? {
            guard byte(start + 2, is: ":"), byte(start + 5, is: ":"), let hour = number(start, 2),
                let minute = number(start + 3, 2), let second = number(start + 6, 2), hour < 24, minute < 60,
                second < 61
            else { return nil }
            return hour * 3600 + minute * 60 + second
        }
        func zone(_ start: Int) -> Bool { ["GMT", "UTC"].contains(word(start, 3)) }
        let year: Int, month: Int, day: Int, seconds: Int
        if bytes.count == 29, byte(3, is: ","), byte(4, is: " "), byte(7, is: " "), byte(11, is: " "),
            byte(16, is: " "), byte(25, is: " "), dayNames.contains(word(0, 3)), zone(26),
            let index = monthNames.firstIndex(of: word(8, 3)), let d = number(5, 2), let y = number(12, 4),
            let t = time(17)
        {
            (year, month, day, seconds) = (y, index + 1, d, t)
        } else if bytes.count == 24, byte(3, is: " "), byte(7, is: " "), byte(10, is: " "), byte(19, is: " "),
            dayNames.contains(word(0, 3)), let index = monthNames.firstIndex(of: word(4, 3)),
            let d = number(8, 2, padded: true), let t = time(11), let y = number(20, 4)
        {
            (year, month, day, seconds) = (y, index + 1, d, t)
        } else if let comma = bytes.firstIndex(of: UInt8(ascii: ",")), bytes.count == comma + 24,
            fullDayNames.contains(word(0, comma)), byte(comma + 1, is: " "), byte(comma + 4, is: "-"),
            byte(comma + 8, is: "-"), byte(comma + 11, is: " "), byte(comma + 20, is: " "), zone(comma + 21),
            let index = monthNames.firstIndex(of: word(comma + 5, 3)), let d = number(comma + 2, 2),
            let twoDigits = number(comma + 9, 2), let t = time(comma + 12)
        {
            // The latest year ending in these digits that is at most 50 years after now's.
            let current = DateValue(daysSinceEpoch: Int(now.quotientAndRemainder(dividingBy: 86_400).quotient)).year
            let limit = current + 50
            (year, month, day, seconds) = (limit - (limit - twoDigits) % 100, index + 1, d, t)
        } else {
            return nil
        }
        let date = DateValue(year: year, month: month, day: day)
        guard date.calendarProblem == nil else { return nil }
        return Int64(date.daysSinceEpoch) * 86_400 + Int64(seconds)
    }
}
